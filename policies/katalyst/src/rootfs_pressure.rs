//! Rootfs pressure (katalyst's `rootfs/rootfs_pressure.go`): the image
//! filesystem's free bytes and free inodes against minimums (a quantity or
//! a share of the filesystem), and victims by what their containers wrote
//! to their writable layers (the `writable-layers` fact, from the
//! kubelet's statistics). The image filesystem is `imagefs.*` where the
//! agent is told of one, the node's (`nodefs.*`) otherwise, as the kubelet
//! reports it when images live on the root filesystem.
//!
//! One hard threshold, scope `rootfs`, reporting `SystemRootfs` with a
//! `NoSchedule` taint. Free bytes under their minimum rank pods by bytes
//! written; otherwise free inodes under theirs rank them by inodes. A pod
//! under the per-pod minimum is left alone, unless it is a
//! `reclaimed_cores` pod over the reclaimed priority line, which goes
//! first whatever others write. A pod whose layers were not measured in
//! the last 60 s is left out, as katalyst leaves out a stale metric.
//!
//! With `overuse` (katalyst's `rootfs_overuse.go`, configured beside the
//! pressure in katalyst too), a pod at a judged QoS level whose writable
//! layers exceed its level's line is evicted whatever the filesystem's
//! state, the largest first, at most `count` a cycle: force evictions, on a
//! calm node too. A line under 20 GiB (or 10 %) is raised to it, as katalyst
//! does, so a typo cannot evict every pod.

use crate::knobs;
use crate::ranking;
use crate::{
    Condition, Decision, Eviction, Interest, MetLevel, Pod, PodFact, Signal, StrategyInterest,
    Threshold,
};
use policy_kit::Amount;
use policy_kit::katalyst::{self, QosLevel};
use serde_json::{Value, json};

/// The strategy's name as vigil ships it.
pub const NAME: &str = "rootfs-pressure";

/// Its one threshold's scope.
pub const SCOPE: &str = "rootfs";

/// katalyst ignores a metric older than this.
const STALE_MS: u64 = 60_000;

/// A line as katalyst writes one (`"10%"`, `"2Gi"`, `20000`): policy-kit's
/// [`Amount`].
///
/// # Errors
/// Neither a percentage nor a quantity.
fn line(value: &Value, field: &str) -> Result<Amount, String> {
    let bad = || format!("{field} must be a percentage (\"10%\") or a quantity (\"2Gi\", 20000)");
    match value {
        Value::Number(n) => n.as_u64().map(Amount::Absolute).ok_or_else(bad),
        Value::String(text) => Amount::parse(text).map_err(|e| format!("{}: {e}", bad())),
        _ => Err(bad()),
    }
}

/// `line` against `capacity`, in the capacity's unit.
fn level(line: &Amount, capacity: f64) -> f64 {
    line.resolve(Some(capacity)).unwrap_or(0.0)
}

/// The config, katalyst's knobs under vigil's names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// `MinimumImageFsFreeThreshold`.
    pub minimum_free: Option<Amount>,
    /// `MinimumImageFsInodesFreeThreshold`.
    pub minimum_inodes_free: Option<Amount>,
    /// `PodMinimumUsedThreshold`.
    pub pod_minimum_used: Option<Amount>,
    /// `PodMinimumInodesUsedThreshold`.
    pub pod_minimum_inodes_used: Option<Amount>,
    /// `ReclaimedQoSPodUsedPriorityThreshold`.
    pub reclaimed_priority_used: Option<Amount>,
    /// `ReclaimedQoSPodInodesUsedPriorityThreshold`.
    pub reclaimed_priority_inodes_used: Option<Amount>,
    /// `MinimumImageFsDiskCapacityThreshold`, in bytes: a smaller image
    /// filesystem is never judged by its free bytes.
    pub minimum_disk_capacity: Option<u64>,
    /// `GracePeriod` (none: the pod's own).
    pub grace_period_seconds: Option<u64>,
    /// The overuse rule (`EnableRootfsOveruseEviction` and its knobs);
    /// none: off.
    pub overuse: Option<Overuse>,
}

/// katalyst's rootfs overuse rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Overuse {
    /// `RootfsOveruseEvictionSupportedQoSLevels`.
    pub qos_levels: Vec<QosLevel>,
    /// `SharedQoSRootfsOveruseThreshold`.
    pub shared: Option<Amount>,
    /// `ReclaimedQoSRootfsOveruseThreshold`.
    pub reclaimed: Option<Amount>,
    /// `SharedQoSNamespaceFilter`: the namespaces whose `shared_cores` pods are judged.
    pub shared_namespaces: Vec<String>,
    /// `RootfsOveruseEvictionCount`: at most this many a cycle.
    pub count: usize,
}

impl Default for Overuse {
    /// katalyst's defaults.
    fn default() -> Self {
        Self {
            qos_levels: vec![QosLevel::SharedCores],
            shared: None,
            reclaimed: None,
            shared_namespaces: vec!["default".into()],
            count: 1,
        }
    }
}

/// katalyst's floor under an overuse line: 20 GiB, or 10 %.
const OVERUSE_FLOOR_BYTES: u64 = 20 << 30;
const OVERUSE_FLOOR_PERCENT: f64 = 10.0;

impl Overuse {
    fn parse(value: &Value) -> Result<Option<Self>, String> {
        if value.is_null() {
            return Ok(None);
        }
        let fields = value.as_object().ok_or(
            "overuse must be an object (qosLevels, sharedThreshold, reclaimedThreshold, sharedNamespaces, count) or null",
        )?;
        let mut overuse = Self::default();
        for (key, field) in fields {
            let strings = || -> Result<Vec<String>, String> {
                let list = field
                    .as_array()
                    .ok_or(format!("overuse.{key} must be a list"))?;
                list.iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .ok_or(format!("overuse.{key} must list strings"))
                    })
                    .collect()
            };
            match key.as_str() {
                "qosLevels" => {
                    overuse.qos_levels = (strings()?.iter())
                        .map(|level| {
                            QosLevel::parse(level).ok_or(format!(
                                "overuse.qosLevels: {level:?} is no katalyst QoS level"
                            ))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "sharedThreshold" => overuse.shared = Some(line(field, "overuse.sharedThreshold")?),
                "reclaimedThreshold" => {
                    overuse.reclaimed = Some(line(field, "overuse.reclaimedThreshold")?)
                }
                "sharedNamespaces" => overuse.shared_namespaces = strings()?,
                "count" => {
                    overuse.count = field
                        .as_u64()
                        .ok_or("overuse.count must be a whole number")?
                        as usize;
                }
                other => {
                    return Err(format!(
                        "unknown field overuse.{other}: qosLevels, sharedThreshold, reclaimedThreshold, sharedNamespaces, count"
                    ));
                }
            }
        }
        Ok(Some(overuse))
    }

    /// The line `pod` is held to, in its unit, raised to katalyst's floor;
    /// none: not judged.
    fn line(&self, pod: &Pod, capacity: f64) -> Option<f64> {
        let level = ranking::qos_level(pod)?;
        if !self.qos_levels.contains(&level) {
            return None;
        }
        let line = match level {
            QosLevel::SharedCores if self.shared_namespaces.contains(&pod.namespace) => {
                self.shared?
            }
            QosLevel::ReclaimedCores => self.reclaimed?,
            _ => return None,
        };
        match line {
            Amount::Absolute(q) => Some(q.max(OVERUSE_FLOOR_BYTES) as f64),
            Amount::Percent(p) if p > 0.0 && p < 100.0 => {
                Some((capacity * p.max(OVERUSE_FLOOR_PERCENT) / 100.0).floor())
            }
            Amount::Percent(_) => None,
        }
    }
}

const FIELDS: &str = "minimumFree, minimumInodesFree, podMinimumUsed, podMinimumInodesUsed, \
                      reclaimedPriorityUsed, reclaimedPriorityInodesUsed, minimumDiskCapacity, \
                      gracePeriodSeconds, overuse";

impl Config {
    /// Parses the strategy's config (empty: katalyst's defaults, every
    /// threshold unset: nothing is judged).
    ///
    /// # Errors
    /// It is not a JSON object of the fields above.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config = Self::default();
        let Some(fields) = knobs::fields(text)? else {
            return Ok(config);
        };
        for (key, field) in &fields {
            let amount = || line(field, key).map(Some);
            match key.as_str() {
                "minimumFree" => config.minimum_free = amount()?,
                "minimumInodesFree" => config.minimum_inodes_free = amount()?,
                "podMinimumUsed" => config.pod_minimum_used = amount()?,
                "podMinimumInodesUsed" => config.pod_minimum_inodes_used = amount()?,
                "reclaimedPriorityUsed" => config.reclaimed_priority_used = amount()?,
                "reclaimedPriorityInodesUsed" => config.reclaimed_priority_inodes_used = amount()?,
                "minimumDiskCapacity" => {
                    config.minimum_disk_capacity = match line(field, key)? {
                        Amount::Absolute(q) => Some(q),
                        Amount::Percent(_) => {
                            return Err("minimumDiskCapacity must be a quantity".into());
                        }
                    };
                }
                "overuse" => config.overuse = Overuse::parse(field)?,
                "gracePeriodSeconds" => config.grace_period_seconds = knobs::grace(field, key)?,
                other => return Err(format!("unknown field {other:?}: {FIELDS}")),
            }
        }
        Ok(config)
    }
}

/// What the strategy reads: the filesystems' signals (every strategy has
/// them), each pod's katalyst QoS level and its writable layers, for
/// ranking, and in `evaluate` with the overuse rule.
pub fn interest(config: &str) -> StrategyInterest {
    let overuse = Config::parse(config).is_ok_and(|c| c.overuse.is_some());
    StrategyInterest {
        keys: Interest {
            labels: vec![],
            annotations: vec![katalyst::QOS_LEVEL.into()],
            facts: vec![PodFact::WritableLayers],
        },
        pods_in_evaluate: overuse,
        signals: vec![],
    }
}

/// The overuse rule's force evictions: the pods over their line, largest
/// first, at most `count`.
fn overusing(config: &Config, signals: &[Signal], pods: &[Pod]) -> Vec<Eviction> {
    let (Some(overuse), Some((_, capacity))) = (&config.overuse, filesystem(signals, "available"))
    else {
        return vec![];
    };
    let mut over: Vec<(&Pod, u64, f64)> = (pods.iter())
        .filter_map(|pod| {
            let layers = pod
                .writable_layers
                .as_ref()
                .filter(|l| l.age_ms <= STALE_MS)?;
            let line = overuse.line(pod, capacity)?;
            (layers.bytes as f64 > line).then_some((pod, layers.bytes, line))
        })
        .collect();
    over.sort_by_key(|item| std::cmp::Reverse(item.1));
    over.truncate(overuse.count);
    over.into_iter()
        .map(|(pod, used, line)| Eviction {
            uid: pod.uid.clone(),
            reason: format!(
                "its writable layers hold {used} bytes, over its QoS level's line of {line} bytes"
            ),
            grace_period_seconds: config.grace_period_seconds,
        })
        .collect()
}

/// Which of the filesystem's resources ran short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// Free bytes (ranked by bytes written).
    Bytes,
    /// Free inodes (ranked by inodes used).
    Inodes,
}

/// The image filesystem's `(free, capacity)` of `what`.
fn filesystem(signals: &[Signal], what: &str) -> Option<(f64, f64)> {
    let of = |fs: &str| {
        let signal = signals.iter().find(|s| s.name == format!("{fs}.{what}"))?;
        Some((signal.value, signal.capacity?))
    };
    of("imagefs").or_else(|| of("nodefs"))
}

/// What runs short, with the signal, its value and the line in its unit.
fn short(config: &Config, signals: &[Signal]) -> Option<(Short, &'static str, f64, f64)> {
    if let Some(minimum) = &config.minimum_free
        && let Some((free, capacity)) = filesystem(signals, "available")
        && capacity > 0.0
        && free <= capacity
        && config
            .minimum_disk_capacity
            .is_none_or(|c| capacity >= c as f64)
        && free < level(minimum, capacity)
    {
        return Some((Short::Bytes, "available", free, level(minimum, capacity)));
    }
    if let Some(minimum) = &config.minimum_inodes_free
        && let Some((free, inodes)) = filesystem(signals, "inodesFree")
        && inodes > 0.0
        && free <= inodes
        && free < level(minimum, inodes)
    {
        return Some((Short::Inodes, "inodesFree", free, level(minimum, inodes)));
    }
    None
}

/// One cycle: the threshold, what ran short kept for `top-victims`, and
/// the overuse rule's force evictions (`pods` is empty without it).
///
/// # Errors
/// The config is invalid: nothing is judged.
pub fn evaluate(signals: &[Signal], pods: &[Pod], config: &str) -> Result<Decision, String> {
    let config = Config::parse(config)?;
    let force_evictions = overusing(&config, signals, pods);
    let found = short(&config, signals);
    let fs = if signals.iter().any(|s| s.name.starts_with("imagefs.")) {
        "imagefs"
    } else {
        "nodefs"
    };
    let thresholds = found
        .map(|(_, what, observed, threshold)| Threshold {
            met: MetLevel::Hard,
            scope: SCOPE.into(),
            signal: format!("{fs}.{what}"),
            observed,
            threshold,
            grace_period_seconds: 0,
            condition: Some(Condition {
                name: "SystemRootfs".into(),
                effects: vec!["NoSchedule".into()],
            }),
        })
        .into_iter()
        .collect();
    let kept = found.map(|(short, ..)| match short {
        Short::Bytes => "bytes",
        Short::Inodes => "inodes",
    });
    Ok(Decision {
        thresholds,
        soft_candidates: vec![],
        force_evictions,
        state: Some(json!({ "short": kept }).to_string().into_bytes()),
    })
}

/// The pods to evict, most urgent first.
///
/// # Errors
/// The config, the kept state or the scope is invalid.
pub fn top_victims(
    signals: &[Signal],
    pods: &[Pod],
    config: &str,
    kept: &[u8],
    scope: &str,
) -> Result<Vec<Eviction>, String> {
    if scope != SCOPE {
        return Err(format!(
            "{NAME} has no scope {scope:?}: its scope is {SCOPE}"
        ));
    }
    let config = Config::parse(config)?;
    let state = knobs::kept(kept)?.unwrap_or_default();
    let (short, minimum, priority_line, what) = match state["short"].as_str() {
        Some("bytes") => (
            Short::Bytes,
            config.pod_minimum_used,
            config.reclaimed_priority_used,
            "available",
        ),
        Some("inodes") => (
            Short::Inodes,
            config.pod_minimum_inodes_used,
            config.reclaimed_priority_inodes_used,
            "inodesFree",
        ),
        _ => return Ok(vec![]),
    };
    let Some((_, capacity)) = filesystem(signals, what) else {
        return Ok(vec![]);
    };
    // (pod, what it wrote, whether it goes first)
    let mut items: Vec<(&Pod, u64, bool)> = Vec::new();
    for pod in pods {
        let Some(layers) = pod
            .writable_layers
            .as_ref()
            .filter(|l| l.age_ms <= STALE_MS)
        else {
            continue;
        };
        let used = match short {
            Short::Bytes => layers.bytes,
            Short::Inodes => layers.inodes,
        };
        let reclaimed = ranking::qos_level(pod) == Some(QosLevel::ReclaimedCores);
        let first = reclaimed && priority_line.is_some_and(|l| used as f64 > level(&l, capacity));
        if !first && minimum.is_some_and(|l| (used as f64) < level(&l, capacity)) {
            continue;
        }
        items.push((pod, used, first));
    }
    items.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)));
    let unit = match short {
        Short::Bytes => "bytes",
        Short::Inodes => "inodes",
    };
    Ok(items
        .into_iter()
        .map(|(pod, used, first)| Eviction {
            uid: pod.uid.clone(),
            reason: format!(
                "the image filesystem is short of free {unit}; the pod's writable layers hold {used} {unit}{}",
                if first { " (reclaimed_cores, over its priority line)" } else { "" }
            ),
            grace_period_seconds: config.grace_period_seconds,
        })
        .collect())
}

#[cfg(test)]
mod tests;
