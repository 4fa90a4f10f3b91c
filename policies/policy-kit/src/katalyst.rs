//! katalyst's pod annotations, read as its plugins read them: a pod's QoS
//! level, its memory enhancement (a JSON object of strings) and the NUMA
//! nodes it was bound to. A policy declares the annotation keys below in its
//! interest to be given them.

use std::collections::BTreeMap;

/// The annotation naming a pod's katalyst QoS level.
pub const QOS_LEVEL: &str = "katalyst.kubewharf.io/qos_level";
/// The annotation holding a pod's memory enhancement, a JSON object.
pub const MEMORY_ENHANCEMENT: &str = "katalyst.kubewharf.io/memory_enhancement";
/// The annotation naming the NUMA nodes a pod was bound to.
pub const NUMA_BIND_RESULT: &str = "katalyst.kubewharf.io/numa_bind_result";

/// katalyst's QoS levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosLevel {
    /// `dedicated_cores`.
    DedicatedCores,
    /// `shared_cores` (katalyst's level for a pod that names none).
    SharedCores,
    /// `reclaimed_cores`: runs on what the others leave.
    ReclaimedCores,
    /// `system_cores`: katalyst never evicts these.
    SystemCores,
}

impl QosLevel {
    /// The level an annotation value names; `None` for any other value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "dedicated_cores" => Some(Self::DedicatedCores),
            "shared_cores" => Some(Self::SharedCores),
            "reclaimed_cores" => Some(Self::ReclaimedCores),
            "system_cores" => Some(Self::SystemCores),
            _ => None,
        }
    }

    /// The level of a pod whose `qos_level` annotation is `value` (none:
    /// `shared_cores`, as katalyst defaults it); `None` for a value
    /// katalyst does not know.
    pub fn of(value: Option<&str>) -> Option<Self> {
        value.map_or(Some(Self::SharedCores), Self::parse)
    }
}

/// A memory enhancement annotation's fields.
///
/// # Errors
/// The value is not a JSON object of strings.
pub fn memory_enhancement(value: &str) -> Result<BTreeMap<String, String>, String> {
    serde_json::from_str(value)
        .map_err(|e| format!("{MEMORY_ENHANCEMENT} is not a JSON object of strings: {e}"))
}

/// Whether a memory enhancement binds the pod to NUMA nodes (`numa_binding: "true"`).
pub fn numa_binding(enhancement: &BTreeMap<String, String>) -> bool {
    enhancement.get("numa_binding").is_some_and(|v| v == "true")
}

/// A memory enhancement's `rss_overuse_threshold` (RSS over request × this
/// ratio is overuse): `None` when it sets none.
///
/// # Errors
/// It is set but not a positive number.
pub fn rss_overuse_threshold(
    enhancement: &BTreeMap<String, String>,
) -> Option<Result<f64, String>> {
    let text = enhancement.get("rss_overuse_threshold")?;
    Some(match text.trim().parse::<f64>() {
        Ok(ratio) if ratio.is_finite() && ratio > 0.0 => Ok(ratio),
        _ => Err(format!(
            "rss_overuse_threshold {text:?} is not a positive number"
        )),
    })
}

/// The NUMA nodes a `numa_bind_result` value names (`0`, or `0,1`).
///
/// # Errors
/// A part is not a node number.
pub fn numa_nodes(value: &str) -> Result<Vec<u32>, String> {
    value
        .split(',')
        .map(|part| {
            part.trim()
                .parse()
                .map_err(|_| format!("{NUMA_BIND_RESULT} part {part:?} is not a NUMA node"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_levels_default_to_shared_cores_and_refuse_the_unknown() {
        assert_eq!(QosLevel::of(None), Some(QosLevel::SharedCores));
        assert_eq!(
            QosLevel::of(Some("system_cores")),
            Some(QosLevel::SystemCores)
        );
        assert_eq!(
            QosLevel::of(Some("reclaimed_cores")),
            Some(QosLevel::ReclaimedCores)
        );
        assert_eq!(QosLevel::of(Some("gold")), None);
    }

    #[test]
    fn memory_enhancements_and_bind_results_parse_as_katalyst_writes_them() {
        let enhancement =
            memory_enhancement(r#"{"numa_binding": "true", "rss_overuse_threshold": "1.5"}"#)
                .unwrap();
        assert!(numa_binding(&enhancement));
        assert_eq!(rss_overuse_threshold(&enhancement), Some(Ok(1.5)));
        let none = memory_enhancement("{}").unwrap();
        assert!(!numa_binding(&none) && rss_overuse_threshold(&none).is_none());
        let bad = memory_enhancement(r#"{"rss_overuse_threshold": "-1"}"#).unwrap();
        assert!(rss_overuse_threshold(&bad).unwrap().is_err());
        assert!(memory_enhancement(r#"{"numa_binding": true}"#).is_err());
        assert_eq!(numa_nodes("0"), Ok(vec![0]));
        assert_eq!(numa_nodes("0, 1"), Ok(vec![0, 1]));
        assert!(numa_nodes("x").is_err());
    }
}
