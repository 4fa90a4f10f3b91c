//! One step of contract skew: `vigil:policy@0.2.0` records to and from the
//! current ones (0.3.0). A 0.2.0 component gets what a 0.2.0 agent gave it:
//! - a usage value the host could not read is 0, as 0.2.0 had it (0.3.0
//!   says absent), and the 0.3.0 pod facts (page cache, NUMA, throttling,
//!   pressure, writable layers, extended requests) are not passed: a 0.2.0
//!   policy declares none;
//! - it declares no signals beyond the kubelet's, so it gets those only;
//! - its one threshold is its decision's only threshold, and `last-met` is
//!   how that scope was met (a 0.2.0 strategy never answers `report`);
//! - it keeps no state between calls.

use crate::model::bindings::{
    Candidate, Condition, Decision, Eviction, Interest, KeyValue, Layer, Level, MergeRejection,
    MetLevel, OwnerKind, Pod, QosClass, Resources, Signal, Snapshot, SortRejection, Sorted,
    StrategyInterest, Threshold, Urgency,
};
use crate::model::v0_2;
use crate::policy::runtime::sandbox::Sandbox;

use v0_2::merger::exports::vigil::policy::merger as old_merger;
use v0_2::sorter::exports::vigil::policy::sorter as old_sorter;
use v0_2::strategy::exports::vigil::policy::strategy as old_strategy;
use v0_2::strategy::vigil::policy::{log as old_log, types as old_types};

/// A 0.2.0 interest: no pod facts.
pub(super) fn interest(old: old_types::Interest) -> Interest {
    Interest {
        labels: old.labels,
        annotations: old.annotations,
        facts: Vec::new(),
    }
}

/// A 0.2.0 strategy's interest: no signals beyond the kubelet's.
pub(super) fn strategy_interest(old: old_strategy::StrategyInterest) -> StrategyInterest {
    StrategyInterest {
        keys: interest(old.keys),
        pods_in_evaluate: old.pods_in_evaluate,
        signals: Vec::new(),
    }
}

pub(super) fn pod(pod: &Pod) -> old_types::Pod {
    let pairs = |pairs: &[KeyValue]| {
        pairs
            .iter()
            .map(|kv| old_types::KeyValue {
                key: kv.key.clone(),
                value: kv.value.clone(),
            })
            .collect()
    };
    let resources = |r: &Resources| old_types::Resources {
        memory_bytes: r.memory_bytes,
        cpu_millis: r.cpu_millis,
    };
    let usage = &pod.usage;
    old_types::Pod {
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        qos: match pod.qos {
            QosClass::BestEffort => old_types::QosClass::BestEffort,
            QosClass::Burstable => old_types::QosClass::Burstable,
            QosClass::Guaranteed => old_types::QosClass::Guaranteed,
        },
        priority: pod.priority,
        labels: pairs(&pod.labels),
        annotations: pairs(&pod.annotations),
        requests: resources(&pod.requests),
        limits: resources(&pod.limits),
        usage: old_types::Usage {
            memory_working_set_bytes: usage.memory_working_set_bytes.unwrap_or(0),
            memory_rss_bytes: usage.memory_rss_bytes.unwrap_or(0),
            cpu_millis: usage.cpu_millis.unwrap_or(0),
            ephemeral_storage_bytes: usage.ephemeral_storage_bytes.unwrap_or(0),
            pids: usage.pids.unwrap_or(0),
        },
        start_time_ms: pod.start_time_ms,
        owner_kind: pod.owner_kind.as_ref().map(|kind| match kind {
            OwnerKind::ReplicaSet => old_types::OwnerKind::ReplicaSet,
            OwnerKind::DaemonSet => old_types::OwnerKind::DaemonSet,
            OwnerKind::StatefulSet => old_types::OwnerKind::StatefulSet,
            OwnerKind::Job => old_types::OwnerKind::Job,
            OwnerKind::Node => old_types::OwnerKind::Node,
            OwnerKind::Other(kind) => old_types::OwnerKind::Other(kind.clone()),
        }),
        is_static: pod.is_static,
        is_mirror: pod.is_mirror,
        is_critical: pod.is_critical,
        pdb_disruptions_allowed: pod.pdb_disruptions_allowed,
    }
}

/// How a 0.2.0 strategy's one threshold was met last cycle: the first scope
/// it answered (it answers one).
fn last_met(snapshot: &Snapshot) -> old_strategy::MetLevel {
    match snapshot.last_met.first().map(|m| m.met) {
        Some(MetLevel::Hard) => old_strategy::MetLevel::Hard,
        Some(MetLevel::Soft) => old_strategy::MetLevel::Soft,
        Some(MetLevel::NotMet | MetLevel::Report) | None => old_strategy::MetLevel::NotMet,
    }
}

pub(super) fn snapshot(snapshot: &Snapshot) -> old_strategy::Snapshot {
    old_strategy::Snapshot {
        now_ms: snapshot.now_ms,
        signals: snapshot
            .signals
            .iter()
            .map(|s: &Signal| old_strategy::Signal {
                name: s.name.clone(),
                value: s.value,
                capacity: s.capacity,
            })
            .collect(),
        pods: snapshot.pods.iter().map(pod).collect(),
        last_met: last_met(snapshot),
        config: snapshot.config.clone(),
    }
}

pub(super) fn eviction(old: old_strategy::Eviction) -> Eviction {
    Eviction {
        uid: old.uid,
        reason: old.reason,
        grace_period_seconds: old.grace_period_seconds,
    }
}

pub(super) fn decision(old: old_strategy::Decision) -> Decision {
    let threshold = old.threshold;
    Decision {
        thresholds: vec![Threshold {
            met: match threshold.met {
                old_strategy::MetLevel::NotMet => MetLevel::NotMet,
                old_strategy::MetLevel::Soft => MetLevel::Soft,
                old_strategy::MetLevel::Hard => MetLevel::Hard,
            },
            scope: threshold.scope,
            signal: threshold.signal,
            observed: threshold.observed,
            threshold: threshold.threshold,
            grace_period_seconds: threshold.grace_period_seconds,
            condition: threshold.condition.map(|c| Condition {
                name: c.name,
                effects: c.effects,
            }),
        }],
        soft_candidates: old.soft_candidates.into_iter().map(eviction).collect(),
        force_evictions: old.force_evictions.into_iter().map(eviction).collect(),
        state: None,
    }
}

pub(super) fn candidates(candidates: &[Candidate]) -> Vec<old_sorter::Candidate> {
    candidates
        .iter()
        .map(|c| old_sorter::Candidate {
            pod: pod(&c.pod),
            strategy: c.strategy,
            urgency: match c.urgency {
                Urgency::Hard => old_sorter::Urgency::Hard,
                Urgency::Force => old_sorter::Urgency::Force,
                Urgency::Soft => old_sorter::Urgency::Soft,
            },
        })
        .collect()
}

pub(super) fn sorted(old: old_sorter::Sorted) -> Sorted {
    Sorted {
        order: old.order,
        rejected: (old.rejected.into_iter())
            .map(|r| SortRejection {
                index: r.index,
                reason: r.reason,
            })
            .collect(),
    }
}

pub(super) fn layers(layers: &[Layer]) -> Vec<old_merger::Layer> {
    layers
        .iter()
        .map(|l| old_merger::Layer {
            source: l.source.clone(),
            json: l.json.clone(),
        })
        .collect()
}

pub(super) fn merge_rejections(old: Vec<old_merger::Rejection>) -> Vec<MergeRejection> {
    old.into_iter()
        .map(|r| MergeRejection {
            source: r.source,
            field: r.field,
            reason: r.reason,
        })
        .collect()
}

/// A 0.2.0 policy's log lines, as a current one's.
impl old_log::Host for Sandbox {
    fn log(&mut self, level: old_log::Level, message: String) {
        let level = match level {
            old_log::Level::Trace => Level::Trace,
            old_log::Level::Debug => Level::Debug,
            old_log::Level::Info => Level::Info,
            old_log::Level::Warn => Level::Warn,
            old_log::Level::Error => Level::Error,
        };
        self.emit(level, None, &message);
    }
}
