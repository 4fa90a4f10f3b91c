//! vigil's built-in eviction strategies, one per kind of node pressure, with
//! the kubelet's semantics: hard and soft thresholds, soft grace periods and
//! minimum reclaim (see `policy_kit::Thresholds`), and the kubelet's ranking
//! of victims for that resource. Their defaults sit ahead of the kubelet's
//! defaults (`memory.available` 100Mi, `nodefs.available` 10%), which stay
//! the backstop; on disk, behind its image garbage collection (85% used)
//! for one of its periods (5 minutes).
//!
//! | strategy | signal (default threshold) | condition | victims ranked by |
//! |---|---|---|---|
//! | `memory-pressure` | `memory.available` < 300Mi | MemoryPressure | usage above request, priority, usage − request |
//! | `disk-pressure` | `nodefs.available` < 11% (hard), < 13% for 300 s (soft) | DiskPressure | priority, then ephemeral storage used |
//! | `pid-pressure` | `pid.available` < 5% | PIDPressure | priority, then processes |
//! | `psi-pressure` | `psi.memory.some.avg10` > 40 (hard), > 20 for 30 s (soft) | MemoryPressure | as memory |
//!
//! Every field of the thresholds is configurable: `{"signal": ..., "hard": "100Mi",
//! "soft": "300Mi", "softGracePeriodSeconds": 30, "minimumReclaim": "0"}`.
//! The crate builds one component per cargo feature; the logic ([`evaluate`],
//! [`top_victims`]) takes the [`Kind`] so host tests cover all four.

/// Bindings generated from the `eviction-strategy` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "eviction-strategy" });
}

pub use bindings::exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, MetLevel, ScopeMet, Signal, Snapshot, StrategyInterest,
    Threshold,
};
pub use bindings::vigil::policy::types::{Interest, KeyValue, Pod, QosClass, Resources, Usage};
use policy_kit::{Amount, Direction, Level, MemoryFacts, Thresholds, memory_rank};
use std::cmp::Ordering;

/// One kind of node pressure.
#[derive(Clone, Copy)]
pub struct Kind {
    /// The policy name it is built in as.
    pub name: &'static str,
    /// The threshold scope, passed back to `top-victims`.
    pub scope: &'static str,
    /// The node condition reported while a threshold holds.
    pub condition: &'static str,
    /// Default thresholds, before the strategy's config.
    pub defaults: fn() -> Thresholds,
    /// Eviction order: `Less` goes first.
    pub rank: fn(&Pod, &Pod) -> Ordering,
    /// What the pod uses of this resource, for reasons.
    pub usage: fn(&Pod) -> String,
}

fn below(signal: &str, hard: Amount) -> Thresholds {
    Thresholds {
        signal: signal.into(),
        direction: Direction::Below,
        hard: Some(hard),
        soft: None,
        soft_grace_period_seconds: 0,
        minimum_reclaim: Amount::Absolute(0),
    }
}

fn by_memory(a: &Pod, b: &Pod) -> Ordering {
    let facts = |p: &Pod| MemoryFacts {
        usage: p.usage.memory_working_set_bytes.unwrap_or(0),
        request: p.requests.memory_bytes,
        priority: p.priority,
    };
    memory_rank(&facts(a), &facts(b))
}

fn memory_use(p: &Pod) -> String {
    format!(
        "pod uses {} MiB of memory against a request of {} MiB",
        p.usage.memory_working_set_bytes.unwrap_or(0) >> 20,
        p.requests.memory_bytes >> 20
    )
}

/// Memory: the kubelet's `memory.available`, 200Mi ahead of its default
/// hard threshold (100Mi).
pub const MEMORY: Kind = Kind {
    name: "memory-pressure",
    scope: "memory",
    condition: "MemoryPressure",
    defaults: || below("memory.available", Amount::Absolute(300 << 20)),
    rank: by_memory,
    usage: memory_use,
};

/// Disk: the kubelet's `nodefs.available`, ahead of its default hard
/// threshold (10%) and behind its image garbage collection (at 15% free):
/// soft below 13% for one image GC period, hard below 11%.
pub const DISK: Kind = Kind {
    name: "disk-pressure",
    scope: "disk",
    condition: "DiskPressure",
    defaults: || Thresholds {
        soft: Some(Amount::Percent(13.0)),
        soft_grace_period_seconds: 300,
        ..below("nodefs.available", Amount::Percent(11.0))
    },
    rank: |a, b| {
        let used = |p: &Pod| p.usage.ephemeral_storage_bytes.unwrap_or(0);
        a.priority.cmp(&b.priority).then(used(b).cmp(&used(a)))
    },
    usage: |p| {
        format!(
            "pod writes {} MiB to the node's disk",
            p.usage.ephemeral_storage_bytes.unwrap_or(0) >> 20
        )
    },
};

/// Process ids: the kubelet's `pid.available`.
pub const PID: Kind = Kind {
    name: "pid-pressure",
    scope: "pid",
    condition: "PIDPressure",
    defaults: || below("pid.available", Amount::Percent(5.0)),
    rank: |a, b| {
        a.priority
            .cmp(&b.priority)
            .then(b.usage.pids.unwrap_or(0).cmp(&a.usage.pids.unwrap_or(0)))
    },
    usage: |p| format!("pod runs {} processes", p.usage.pids.unwrap_or(0)),
};

/// Memory stalls: PSI `some avg10`, for pressure that free memory hides.
pub const PSI: Kind = Kind {
    name: "psi-pressure",
    scope: "psi-memory",
    condition: "MemoryPressure",
    defaults: || Thresholds {
        signal: "psi.memory.some.avg10".into(),
        direction: Direction::Above,
        hard: Some(Amount::Absolute(40)),
        soft: Some(Amount::Absolute(20)),
        soft_grace_period_seconds: 30,
        minimum_reclaim: Amount::Absolute(5),
    },
    rank: by_memory,
    usage: memory_use,
};

/// How `kind`'s threshold was met last cycle (these strategies never
/// answer `report`).
fn last_level(kind: &Kind, snapshot: &Snapshot) -> Level {
    let last = snapshot.last_met.iter().find(|m| m.scope == kind.scope);
    match last.map(|m| m.met) {
        Some(MetLevel::Hard) => Level::Hard,
        Some(MetLevel::Soft) => Level::Soft,
        Some(MetLevel::NotMet | MetLevel::Report) | None => Level::NotMet,
    }
}

fn met(level: Level) -> MetLevel {
    match level {
        Level::NotMet => MetLevel::NotMet,
        Level::Soft => MetLevel::Soft,
        Level::Hard => MetLevel::Hard,
    }
}

/// The configured thresholds and the signal they watch, or why the strategy cannot judge.
fn observe<'a>(kind: &Kind, snapshot: &'a Snapshot) -> Result<(Thresholds, &'a Signal), String> {
    let thresholds = (kind.defaults)().configure(&snapshot.config)?;
    let signal = snapshot
        .signals
        .iter()
        .find(|s| s.name == thresholds.signal)
        .ok_or_else(|| format!("signal {} is missing from the snapshot", thresholds.signal))?;
    Ok((thresholds, signal))
}

/// Judges one snapshot for `kind`.
///
/// # Errors
/// The config is invalid or the signal is missing; nothing should be evicted.
pub fn evaluate(kind: &Kind, snapshot: &Snapshot) -> Result<Decision, String> {
    let (thresholds, signal) = observe(kind, snapshot)?;
    let judgement = thresholds.judge(signal.value, signal.capacity, last_level(kind, snapshot))?;
    let condition = (judgement.level != Level::NotMet).then(|| Condition {
        name: kind.condition.into(),
        effects: vec!["NoSchedule".into()],
    });
    Ok(Decision {
        thresholds: vec![Threshold {
            met: met(judgement.level),
            scope: kind.scope.into(),
            signal: signal.name.clone(),
            observed: signal.value,
            threshold: judgement.threshold,
            grace_period_seconds: judgement.grace_period_seconds,
            condition,
        }],
        soft_candidates: vec![],
        force_evictions: vec![],
        state: None,
    })
}

/// The `n` pods `kind`'s ranking evicts first.
///
/// # Errors
/// The scope is not `kind`'s, or the config or signal is unusable.
pub fn top_victims(
    kind: &Kind,
    snapshot: &Snapshot,
    scope: &str,
    n: u32,
) -> Result<Vec<Eviction>, String> {
    if scope != kind.scope {
        return Err(format!(
            "unknown scope {scope:?}; {} answers for {:?}",
            kind.name, kind.scope
        ));
    }
    let (_, signal) = observe(kind, snapshot)?;
    let mut ranked: Vec<&Pod> = snapshot.pods.iter().collect();
    ranked.sort_by(|a, b| (kind.rank)(a, b).then_with(|| a.uid.cmp(&b.uid)));
    let observed = if signal.name.starts_with("memory") || signal.name.contains("fs.") {
        format!("{} MiB", (signal.value / f64::from(1 << 20)).round())
    } else {
        format!("{:.1}", signal.value)
    };
    Ok(ranked
        .into_iter()
        .take(n as usize)
        .map(|pod| Eviction {
            uid: pod.uid.clone(),
            reason: format!("{} is {observed}; {}", signal.name, (kind.usage)(pod)),
            grace_period_seconds: None,
        })
        .collect())
}

#[cfg(target_arch = "wasm32")]
mod component {
    use super::{Decision, Eviction, Kind, Snapshot};

    /// The strategy this component exports, chosen by cargo feature.
    const KIND: Kind = if cfg!(feature = "disk") {
        super::DISK
    } else if cfg!(feature = "pid") {
        super::PID
    } else if cfg!(feature = "psi") {
        super::PSI
    } else {
        super::MEMORY
    };

    struct NodePressure;

    impl crate::bindings::exports::vigil::policy::strategy::Guest for NodePressure {
        fn declare_interest(_config: String) -> super::StrategyInterest {
            // Pressure is judged from signals (pods matter only to rank
            // victims) and usage, never from labels.
            super::StrategyInterest {
                keys: super::Interest {
                    labels: Vec::new(),
                    annotations: Vec::new(),
                    facts: Vec::new(),
                },
                pods_in_evaluate: false,
                // The kubelet's signals, which every strategy gets.
                signals: Vec::new(),
            }
        }

        fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
            super::evaluate(&KIND, &snapshot)
        }

        fn top_victims(snapshot: Snapshot, scope: String, n: u32) -> Result<Vec<Eviction>, String> {
            super::top_victims(&KIND, &snapshot, &scope, n)
        }
    }

    crate::bindings::export!(NodePressure with_types_in crate::bindings);
}

#[cfg(test)]
mod tests;
