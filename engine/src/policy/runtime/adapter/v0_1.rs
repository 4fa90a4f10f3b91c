//! One step of contract skew: `vigil:policy@0.1.0` records to and from
//! 0.2.0's (the step after it, [`super::v0_2`], reaches the current ones).
//! A 0.1.0 component gets what a 0.1.0 agent gave it:
//! - it declares no interest, so it reads every label and annotation (the
//!   host's own bound, values up to 256 bytes, as in 0.1.0), and a
//!   strategy's `evaluate` always gets the pods;
//! - an owner's kind is its Kubernetes name (`ReplicaSet`, or a custom
//!   controller's kind);
//! - a sorter's candidate names its strategy and a reason (the host no
//!   longer carries the strategy's reason text to the sorter: the reason
//!   says why the candidate is proposed — see [`reason`]); and, as a 0.1.0
//!   agent did, a hard threshold keeps its strategy's ranking and takes
//!   only the sorter's refusals, while soft candidates and force evictions
//!   follow the sorter's order. (A 0.1.0 agent kept the ranking for a soft
//!   threshold's victim too; a `soft` candidate does not say which it is,
//!   so there the sorter's order counts.)

use crate::model::bindings::Level;
use crate::model::{v0_1, v0_2};
use crate::policy::runtime::sandbox::Sandbox;

use v0_1::merger::exports::vigil::policy::merger as old_merger;
use v0_1::sorter::exports::vigil::policy::sorter as old_sorter;
use v0_1::strategy::exports::vigil::policy::strategy as old_strategy;
use v0_1::strategy::vigil::policy::{log as old_log, types as old_types};
use v0_2::merger::exports::vigil::policy::merger::{Layer, Rejection as MergeRejection};
use v0_2::sorter::exports::vigil::policy::sorter::{
    Candidate, Rejection as SortRejection, Sorted, Urgency,
};
use v0_2::strategy::exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, MetLevel, Signal, Snapshot, StrategyInterest, Threshold,
};
use v0_2::strategy::vigil::policy::types::{
    Interest, KeyValue, OwnerKind, Pod, QosClass, Resources,
};

/// What a 0.1.0 policy reads: every label and annotation the host passes.
pub(super) fn everything() -> Interest {
    Interest {
        labels: vec!["*".into()],
        annotations: vec!["*".into()],
    }
}

/// A 0.1.0 strategy's interest: everything, and the pods in `evaluate`.
pub(super) fn strategy_interest() -> StrategyInterest {
    StrategyInterest {
        keys: everything(),
        pods_in_evaluate: true,
    }
}

/// A 0.1.0 sorter's candidates: each names its strategy and why it is proposed.
pub(super) fn candidates(
    strategies: &[String],
    candidates: &[Candidate],
) -> Vec<old_sorter::Candidate> {
    candidates
        .iter()
        .map(|c| old_sorter::Candidate {
            pod: old_pod(&c.pod),
            strategy: strategies
                .get(c.strategy as usize)
                .cloned()
                .unwrap_or_default(),
            reason: reason(c.urgency).to_owned(),
        })
        .collect()
}

/// Whether a hard threshold proposed any of the candidates (urgencies of
/// the current contract, which a 0.1.0 sorter's answer is kept to).
pub(super) fn any_hard(
    mut urgencies: impl Iterator<Item = crate::model::bindings::Urgency>,
) -> bool {
    urgencies.any(|u| u == crate::model::bindings::Urgency::Hard)
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

/// The reason a 0.1.0 sorter is given for a candidate: why it is proposed.
pub(super) fn reason(urgency: Urgency) -> &'static str {
    match urgency {
        Urgency::Hard => "hard threshold met",
        Urgency::Force => "forced by its strategy",
        Urgency::Soft => "soft candidate",
    }
}

/// A 0.1.0 sorter's answer. Under a hard threshold a 0.1.0 agent kept the
/// strategy's ranking and took only the refusals: so does this.
pub(super) fn sorted(answer: old_sorter::Sorted, hard: bool) -> Sorted {
    let mut order = answer.order;
    if hard {
        order.sort_unstable();
    }
    Sorted {
        order,
        rejected: answer
            .rejected
            .into_iter()
            .map(|r| SortRejection {
                index: r.index,
                reason: r.reason,
            })
            .collect(),
    }
}

/// The name a 0.1.0 policy is given for an owner's kind.
fn owner_kind(kind: &OwnerKind) -> String {
    match kind {
        OwnerKind::ReplicaSet => "ReplicaSet".into(),
        OwnerKind::DaemonSet => "DaemonSet".into(),
        OwnerKind::StatefulSet => "StatefulSet".into(),
        OwnerKind::Job => "Job".into(),
        OwnerKind::Node => "Node".into(),
        OwnerKind::Other(kind) => kind.clone(),
    }
}

fn old_pod(pod: &Pod) -> old_types::Pod {
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
            memory_working_set_bytes: pod.usage.memory_working_set_bytes,
            memory_rss_bytes: pod.usage.memory_rss_bytes,
            cpu_millis: pod.usage.cpu_millis,
            ephemeral_storage_bytes: pod.usage.ephemeral_storage_bytes,
            pids: pod.usage.pids,
        },
        start_time_ms: pod.start_time_ms,
        owner_kind: pod.owner_kind.as_ref().map(owner_kind),
        is_static: pod.is_static,
        is_mirror: pod.is_mirror,
        is_critical: pod.is_critical,
        pdb_disruptions_allowed: pod.pdb_disruptions_allowed,
    }
}

fn old_met(met: MetLevel) -> old_strategy::MetLevel {
    match met {
        MetLevel::NotMet => old_strategy::MetLevel::NotMet,
        MetLevel::Soft => old_strategy::MetLevel::Soft,
        MetLevel::Hard => old_strategy::MetLevel::Hard,
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
        pods: snapshot.pods.iter().map(old_pod).collect(),
        last_met: old_met(snapshot.last_met),
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
        threshold: Threshold {
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
        },
        soft_candidates: old.soft_candidates.into_iter().map(eviction).collect(),
        force_evictions: old.force_evictions.into_iter().map(eviction).collect(),
    }
}

/// A 0.1.0 policy's log lines, as a current one's.
impl old_log::Host for Sandbox {
    fn log(&mut self, level: old_log::Level, message: String) {
        self.emit(self::level(level), None, &message);
    }
}

/// A 0.1.0 policy's log level.
fn level(old: old_log::Level) -> Level {
    match old {
        old_log::Level::Trace => Level::Trace,
        old_log::Level::Debug => Level::Debug,
        old_log::Level::Info => Level::Info,
        old_log::Level::Warn => Level::Warn,
        old_log::Level::Error => Level::Error,
    }
}
