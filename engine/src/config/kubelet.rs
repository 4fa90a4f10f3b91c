//! The kubelet that runs beside vigil on a node, as vigil's config states
//! it: its eviction thresholds (`evictionHard`, `evictionSoft`) and image
//! garbage collection (`imageGCHighThresholdPercent`), written with the
//! kubelet's own names and values so they can be copied from its config
//! file. Unset, they are the kubelet's defaults on Linux.
//!
//! The config states them rather than the agent reading the kubelet's
//! config file: that file's place differs between distributions, flags
//! override it, and mounting it (or `/var/lib/kubelet`) into the agent is
//! the access the DaemonSet leaves out on purpose. A `VigilConfig` with a
//! `target` states them per node pool.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A threshold as the kubelet writes it: a quantity (`100Mi`, `5000`) or a
/// percentage of the signal's capacity (`10%`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct KubeletAmount(
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(%|[KMGTPE]i|[kMGTPE])?$"))] pub String,
);

impl KubeletAmount {
    fn new(text: &str) -> Self {
        Self(text.to_owned())
    }

    /// The amount in the signal's units, given its capacity; `None` for a
    /// percentage of a signal without one, or text that is no amount.
    pub fn resolve(&self, capacity: Option<f64>) -> Option<f64> {
        match self.0.strip_suffix('%') {
            Some(percent) => Some(percent.parse::<f64>().ok()? / 100.0 * capacity?),
            None => crate::base::quantity::parse(&self.0),
        }
    }
}

/// The kubelet's eviction signals, by the kubelet's names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubeletSignals {
    /// On `memory.available`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(rename = "memory.available", skip_serializing_if = "Option::is_none")]
    pub memory_available: Option<KubeletAmount>,
    /// On `allocatableMemory.available`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(
        rename = "allocatableMemory.available",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocatable_memory_available: Option<KubeletAmount>,
    /// On `nodefs.available`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(rename = "nodefs.available", skip_serializing_if = "Option::is_none")]
    pub nodefs_available: Option<KubeletAmount>,
    /// On `nodefs.inodesFree`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(rename = "nodefs.inodesFree", skip_serializing_if = "Option::is_none")]
    pub nodefs_inodes_free: Option<KubeletAmount>,
    /// On `imagefs.available`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(rename = "imagefs.available", skip_serializing_if = "Option::is_none")]
    pub imagefs_available: Option<KubeletAmount>,
    /// On `imagefs.inodesFree`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(rename = "imagefs.inodesFree", skip_serializing_if = "Option::is_none")]
    pub imagefs_inodes_free: Option<KubeletAmount>,
    /// On `pid.available`: a quantity (`100Mi`) or a share of capacity (`10%`).
    #[serde(rename = "pid.available", skip_serializing_if = "Option::is_none")]
    pub pid_available: Option<KubeletAmount>,
}

impl KubeletSignals {
    /// Each threshold that is set, by vigil's name of its signal.
    pub fn by_signal(&self) -> Vec<(&'static str, &KubeletAmount)> {
        [
            ("memory.available", &self.memory_available),
            (
                "allocatable.memory.available",
                &self.allocatable_memory_available,
            ),
            ("nodefs.available", &self.nodefs_available),
            ("nodefs.inodesFree", &self.nodefs_inodes_free),
            ("imagefs.available", &self.imagefs_available),
            ("imagefs.inodesFree", &self.imagefs_inodes_free),
            ("pid.available", &self.pid_available),
        ]
        .into_iter()
        .filter_map(|(signal, amount)| Some((signal, amount.as_ref()?)))
        .collect()
    }
}

/// The kubelet on the node: what vigil's thresholds are held against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletConfig {
    /// The kubelet's `evictionHard` (unset: its Linux defaults,
    /// `memory.available` 100Mi, `nodefs.available` 10%, `nodefs.inodesFree`
    /// 5%, `imagefs.available` 15%, `imagefs.inodesFree` 5%).
    pub eviction_hard: KubeletSignals,
    /// The kubelet's `evictionSoft` (unset: none).
    pub eviction_soft: KubeletSignals,
    /// The kubelet's `imageGCHighThresholdPercent`: disk use above which it
    /// deletes unused images (unset: 85).
    #[serde(rename = "imageGCHighThresholdPercent")]
    #[schemars(range(max = 100))]
    pub image_gc_high_threshold_percent: u8,
}

impl Default for KubeletConfig {
    /// The kubelet's defaults on Linux.
    fn default() -> Self {
        Self {
            eviction_hard: KubeletSignals {
                memory_available: Some(KubeletAmount::new("100Mi")),
                nodefs_available: Some(KubeletAmount::new("10%")),
                nodefs_inodes_free: Some(KubeletAmount::new("5%")),
                imagefs_available: Some(KubeletAmount::new("15%")),
                imagefs_inodes_free: Some(KubeletAmount::new("5%")),
                ..KubeletSignals::default()
            },
            eviction_soft: KubeletSignals::default(),
            image_gc_high_threshold_percent: 85,
        }
    }
}

impl KubeletConfig {
    /// The kubelet's first line on each signal it watches, by vigil's name
    /// of the signal: its soft threshold where one is set and is the earlier,
    /// else its hard one, resolved with `capacity` (the signal's, if any).
    /// Every signal here is an "available" one: the kubelet acts below it.
    pub fn first_line(&self, signal: &str, capacity: Option<f64>) -> Option<f64> {
        let find = |signals: &KubeletSignals| {
            signals
                .by_signal()
                .into_iter()
                .find(|(name, _)| *name == signal)
                .and_then(|(_, amount)| amount.resolve(capacity))
        };
        match (find(&self.eviction_hard), find(&self.eviction_soft)) {
            (Some(hard), Some(soft)) => Some(hard.max(soft)),
            (hard, soft) => hard.or(soft),
        }
    }

    /// Free space below which the kubelet's image garbage collection runs,
    /// for a filesystem of `capacity` bytes.
    pub fn image_gc_line(&self, capacity: f64) -> f64 {
        (100.0 - f64::from(self.image_gc_high_threshold_percent)) / 100.0 * capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_lines_resolve_by_capacity_and_soft_comes_first() {
        let kubelet = KubeletConfig::default();
        let gib = f64::from(1u32 << 30);
        assert_eq!(
            kubelet.first_line("memory.available", Some(8.0 * gib)),
            Some(100.0 * f64::from(1u32 << 20))
        );
        assert_eq!(
            kubelet.first_line("nodefs.available", Some(100.0)),
            Some(10.0)
        );
        assert_eq!(kubelet.first_line("nodefs.available", None), None);
        assert_eq!(kubelet.first_line("pid.available", Some(100.0)), None);
        assert_eq!(kubelet.image_gc_line(200.0), 30.0);
        let written: KubeletConfig = serde_json::from_value(serde_json::json!({
            "evictionHard": {"memory.available": "200Mi"},
            "evictionSoft": {"memory.available": "1Gi", "pid.available": "10%"},
        }))
        .unwrap();
        assert_eq!(written.first_line("memory.available", None), Some(gib));
        assert_eq!(written.first_line("pid.available", Some(50.0)), Some(5.0));
        assert_eq!(written.first_line("nodefs.available", Some(100.0)), None);
    }

    #[test]
    fn a_signal_the_kubelet_does_not_have_is_refused() {
        let error = serde_json::from_value::<KubeletSignals>(
            serde_json::json!({"memory.avialable": "100Mi"}),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("unknown field `memory.avialable`"),
            "{error}"
        );
    }
}
