//! How katalyst's memory strategies order their candidates (its eviction
//! helper's ranking metrics): each metric in turn breaks the ties the ones
//! before it left. `qos.pod` puts `reclaimed_cores` pods first, and before
//! them a pod whose level cannot be read (katalyst's code does, though its
//! comment says the opposite: vigil decides as the code), `priority.pod`
//! the lower priority first, and a usage metric the larger user first, a
//! pod whose usage is unknown before all.

use crate::Pod;
use policy_kit::katalyst::{self, QosLevel};

/// One ranking metric, by katalyst's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `qos.pod`: `reclaimed_cores` first.
    QosLevel,
    /// `priority.pod`: the lower priority first.
    Priority,
    /// `mem.total.numa.container`: the pod's memory on the NUMA node ranked for.
    NumaMemory,
    /// `mem.usage.container`: the pod's memory usage.
    MemoryUsage,
}

impl Metric {
    /// The metric katalyst names `name`.
    ///
    /// # Errors
    /// katalyst has no such ranking metric (or vigil does not read it).
    pub fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "qos.pod" => Self::QosLevel,
            "priority.pod" => Self::Priority,
            "mem.total.numa.container" => Self::NumaMemory,
            "mem.usage.container" => Self::MemoryUsage,
            other => {
                return Err(format!(
                    "unknown ranking metric {other:?}: qos.pod, priority.pod, \
                     mem.total.numa.container, mem.usage.container"
                ));
            }
        })
    }

    /// Parses a JSON list of metric names.
    ///
    /// # Errors
    /// It is not a list of known names.
    pub fn parse_list(value: &serde_json::Value, field: &str) -> Result<Vec<Self>, String> {
        let names = value
            .as_array()
            .ok_or_else(|| format!("{field} must be a list of metric names"))?;
        names
            .iter()
            .map(|name| {
                let name = name
                    .as_str()
                    .ok_or_else(|| format!("{field} must be a list of metric names"))?;
                Self::parse(name)
            })
            .collect()
    }
}

/// A pod's katalyst QoS level as its annotation says (`None`: unreadable).
pub fn qos_level(pod: &Pod) -> Option<QosLevel> {
    let value = (pod.annotations.iter())
        .find(|kv| kv.key == katalyst::QOS_LEVEL)
        .map(|kv| kv.value.as_str());
    QosLevel::of(value)
}

/// What `metric` reads of `pod`, on NUMA node `numa` for a per-node metric.
fn usage(pod: &Pod, metric: Metric, numa: Option<u32>) -> Option<u64> {
    match metric {
        Metric::NumaMemory => {
            let node = numa?;
            (pod.usage.numa_memory.iter())
                .find(|m| m.node == node)
                .map(|m| m.bytes)
        }
        Metric::MemoryUsage => pod.usage.memory_usage_bytes,
        Metric::QosLevel | Metric::Priority => None,
    }
}

/// Orders `pods` most evictable first by `metrics` (on NUMA node `numa`
/// for a per-node metric); the order is stable, so pods every metric ties
/// keep theirs.
pub fn rank<'a>(mut pods: Vec<&'a Pod>, metrics: &[Metric], numa: Option<u32>) -> Vec<&'a Pod> {
    pods.sort_by(|a, b| compare(a, b, metrics, numa));
    pods
}

/// How `metrics` order `a` and `b`: `Less` when `a` is the more evictable.
pub fn compare(a: &Pod, b: &Pod, metrics: &[Metric], numa: Option<u32>) -> std::cmp::Ordering {
    for metric in metrics {
        let order = match metric {
            Metric::QosLevel => {
                let key = |pod: &Pod| match qos_level(pod) {
                    None => 0,
                    Some(QosLevel::ReclaimedCores) => 1,
                    Some(_) => 2,
                };
                key(a).cmp(&key(b))
            }
            Metric::Priority => a.priority.cmp(&b.priority),
            Metric::NumaMemory | Metric::MemoryUsage => {
                match (usage(a, *metric, numa), usage(b, *metric, numa)) {
                    (Some(x), Some(y)) => y.cmp(&x),
                    (None, Some(_)) => std::cmp::Ordering::Less,
                    (Some(_), None) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                }
            }
        };
        if order.is_ne() {
            return order;
        }
    }
    std::cmp::Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KeyValue, NumaMemory, QosClass, Resources, Usage};
    use policy_kit::pod;

    fn pod(name: &str, priority: i32, level: Option<&str>, numa0: Option<u64>) -> Pod {
        let mut pod =
            pod!(name, QosClass::Burstable, priority: priority, usage_mib: 0, request_mib: 0);
        if let Some(level) = level {
            pod.annotations = vec![KeyValue {
                key: katalyst::QOS_LEVEL.into(),
                value: level.into(),
            }];
        }
        pod.usage.numa_memory = numa0
            .map(|bytes| vec![NumaMemory { node: 0, bytes }])
            .unwrap_or_default();
        pod
    }

    #[test]
    fn the_unreadable_level_then_reclaimed_then_lower_priority_then_the_larger_user_unknown_first()
    {
        let pods = [
            pod("shared-big", 10, None, Some(900)),
            pod("reclaimed-high", 100, Some("reclaimed_cores"), Some(10)),
            pod("reclaimed-low", 1, Some("reclaimed_cores"), Some(10)),
            pod("unreadable", 0, Some("gold"), Some(999)),
            pod("shared-unknown", 10, None, None),
        ];
        let metrics = [Metric::QosLevel, Metric::Priority, Metric::NumaMemory];
        let order: Vec<&str> = rank(pods.iter().collect(), &metrics, Some(0))
            .into_iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "unreadable",
                "reclaimed-low",
                "reclaimed-high",
                "shared-unknown",
                "shared-big",
            ]
        );
    }

    #[test]
    fn an_unknown_metric_is_refused_with_the_known_ones() {
        let error = Metric::parse("cpu.usage").unwrap_err();
        assert!(error.contains("mem.total.numa.container"), "{error}");
    }
}
