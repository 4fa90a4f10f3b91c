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

use crate::ranking;
use crate::{
    Condition, Decision, Eviction, Interest, MetLevel, Pod, PodFact, Signal, StrategyInterest,
    Threshold,
};
use policy_kit::katalyst::{self, QosLevel};
use serde_json::{Value, json};

/// The strategy's name as vigil ships it.
pub const NAME: &str = "rootfs-pressure";

/// Its one threshold's scope.
pub const SCOPE: &str = "rootfs";

/// katalyst ignores a metric older than this.
const STALE_MS: u64 = 60_000;

/// A threshold as katalyst writes one: a quantity or a share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Line {
    /// An amount (bytes or inodes).
    Quantity(u64),
    /// A share of the filesystem's size or inodes, 0 to 1.
    Share(f64),
}

impl Line {
    /// Parses `10%`, `2Gi` or a plain count.
    ///
    /// # Errors
    /// Neither a percentage nor a quantity.
    pub fn parse(value: &Value, field: &str) -> Result<Self, String> {
        let bad =
            || format!("{field} must be a percentage (\"10%\") or a quantity (\"2Gi\", 20000)");
        match value {
            Value::Number(n) => n.as_u64().map(Self::Quantity).ok_or_else(bad),
            Value::String(text) => match text.strip_suffix('%') {
                Some(percent) => (percent.trim().parse::<f64>().ok())
                    .filter(|p| (0.0..=100.0).contains(p))
                    .map(|p| Self::Share(p / 100.0))
                    .ok_or_else(bad),
                None => policy_kit::parse_quantity(text)
                    .map(Self::Quantity)
                    .map_err(|_| bad()),
            },
            _ => Err(bad()),
        }
    }

    /// Whether `amount` of `capacity` is under the line.
    fn under(&self, amount: f64, capacity: f64) -> bool {
        match self {
            Self::Quantity(q) => amount < *q as f64,
            Self::Share(share) => amount / capacity < *share,
        }
    }

    /// Whether `amount` of `capacity` is over the line.
    fn over(&self, amount: f64, capacity: f64) -> bool {
        match self {
            Self::Quantity(q) => amount > *q as f64,
            Self::Share(share) => amount / capacity > *share,
        }
    }
}

/// The config, katalyst's knobs under vigil's names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// `MinimumImageFsFreeThreshold`.
    pub minimum_free: Option<Line>,
    /// `MinimumImageFsInodesFreeThreshold`.
    pub minimum_inodes_free: Option<Line>,
    /// `PodMinimumUsedThreshold`.
    pub pod_minimum_used: Option<Line>,
    /// `PodMinimumInodesUsedThreshold`.
    pub pod_minimum_inodes_used: Option<Line>,
    /// `ReclaimedQoSPodUsedPriorityThreshold`.
    pub reclaimed_priority_used: Option<Line>,
    /// `ReclaimedQoSPodInodesUsedPriorityThreshold`.
    pub reclaimed_priority_inodes_used: Option<Line>,
    /// `MinimumImageFsDiskCapacityThreshold`, in bytes: a smaller image
    /// filesystem is never judged by its free bytes.
    pub minimum_disk_capacity: Option<u64>,
    /// `GracePeriod` (none: the pod's own).
    pub grace_period_seconds: Option<u64>,
}

const FIELDS: &str = "minimumFree, minimumInodesFree, podMinimumUsed, podMinimumInodesUsed, \
                      reclaimedPriorityUsed, reclaimedPriorityInodesUsed, minimumDiskCapacity, \
                      gracePeriodSeconds";

impl Config {
    /// Parses the strategy's config (empty: katalyst's defaults, every
    /// threshold unset: nothing is judged).
    ///
    /// # Errors
    /// It is not a JSON object of the fields above.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config = Self::default();
        if text.trim().is_empty() {
            return Ok(config);
        }
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("config is not JSON: {e}"))?;
        let fields = value.as_object().ok_or("config is not a JSON object")?;
        for (key, field) in fields {
            let line = || Line::parse(field, key).map(Some);
            match key.as_str() {
                "minimumFree" => config.minimum_free = line()?,
                "minimumInodesFree" => config.minimum_inodes_free = line()?,
                "podMinimumUsed" => config.pod_minimum_used = line()?,
                "podMinimumInodesUsed" => config.pod_minimum_inodes_used = line()?,
                "reclaimedPriorityUsed" => config.reclaimed_priority_used = line()?,
                "reclaimedPriorityInodesUsed" => config.reclaimed_priority_inodes_used = line()?,
                "minimumDiskCapacity" => {
                    config.minimum_disk_capacity = match Line::parse(field, key)? {
                        Line::Quantity(q) => Some(q),
                        Line::Share(_) => {
                            return Err("minimumDiskCapacity must be a quantity".into());
                        }
                    };
                }
                "gracePeriodSeconds" => {
                    config.grace_period_seconds = match field {
                        Value::Null => None,
                        field => Some(field.as_u64().filter(|g| *g > 0).ok_or(
                            "gracePeriodSeconds must be a positive number of seconds, or null",
                        )?),
                    };
                }
                other => return Err(format!("unknown field {other:?}: {FIELDS}")),
            }
        }
        Ok(config)
    }
}

/// What the strategy reads: the filesystems' signals (every strategy has
/// them), each pod's katalyst QoS level and, for ranking, its writable
/// layers.
pub fn interest(_config: &str) -> StrategyInterest {
    StrategyInterest {
        keys: Interest {
            labels: vec![],
            annotations: vec![katalyst::QOS_LEVEL.into()],
            facts: vec![PodFact::WritableLayers],
        },
        pods_in_evaluate: false,
        signals: vec![],
    }
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
    let line = |line: &Line, capacity: f64| match line {
        Line::Quantity(q) => *q as f64,
        Line::Share(share) => share * capacity,
    };
    if let Some(minimum) = &config.minimum_free
        && let Some((free, capacity)) = filesystem(signals, "available")
        && capacity > 0.0
        && free <= capacity
        && config
            .minimum_disk_capacity
            .is_none_or(|c| capacity >= c as f64)
        && minimum.under(free, capacity)
    {
        return Some((Short::Bytes, "available", free, line(minimum, capacity)));
    }
    if let Some(minimum) = &config.minimum_inodes_free
        && let Some((free, inodes)) = filesystem(signals, "inodesFree")
        && inodes > 0.0
        && free <= inodes
        && minimum.under(free, inodes)
    {
        return Some((Short::Inodes, "inodesFree", free, line(minimum, inodes)));
    }
    None
}

/// One cycle: the threshold, and what ran short kept for `top-victims`.
///
/// # Errors
/// The config is invalid: nothing is judged.
pub fn evaluate(signals: &[Signal], config: &str) -> Result<Decision, String> {
    let config = Config::parse(config)?;
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
        force_evictions: vec![],
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
    let state: Value = match kept.is_empty() {
        true => Value::Null,
        false => {
            serde_json::from_slice(kept).map_err(|e| format!("kept state is not JSON: {e}"))?
        }
    };
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
        let first = reclaimed && priority_line.is_some_and(|l| l.over(used as f64, capacity));
        if !first && minimum.is_some_and(|l| l.under(used as f64, capacity)) {
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
