//! Contract skew: components built for the previous contract,
//! `vigil:policy@0.1.0`, served by this host through the current one.
//!
//! Each world's pre-instantiated component and instance is one of two
//! contracts; the typed handles ([`crate::policy::runtime::handle`]) call them through the
//! methods here and only ever see the current records. A 0.1.0 component
//! gets what a 0.1.0 agent gave it:
//! - it declares no interest, so it reads every label and annotation (the
//!   host's own bound, values up to 256 bytes, as in 0.1.0), and a
//!   strategy's `evaluate` always gets the pods;
//! - an owner's kind is its Kubernetes name (`ReplicaSet`, or a custom
//!   controller's kind);
//! - a sorter's candidate names its strategy and a reason (the current host
//!   no longer carries the strategy's reason text to the sorter: the reason
//!   says why the candidate is proposed — see [`reason`]); and, as a 0.1.0
//!   agent did, a hard threshold keeps its strategy's ranking and takes
//!   only the sorter's refusals, while soft candidates and force evictions
//!   follow the sorter's order. (A 0.1.0 agent kept the ranking for a soft
//!   threshold's victim too; a `soft` candidate does not say which it is,
//!   so there the sorter's order counts.)
//!
//! Adapting costs a copy of the records passed (the pods included) per
//! call; current components are passed the host's records in place.

use crate::model::bindings::{
    Candidate, Condition, Decision, Eviction, Interest, KeyValue, Layer, Level, MergeRejection,
    MetLevel, OwnerKind, Pod, QosClass, Resources, Signal, Snapshot, SortRejection, Sorted,
    StrategyInterest, Threshold, Urgency, merger, sorter, strategy,
};
use crate::model::v0_1;
use crate::policy::runtime::interest::Declared;
use crate::policy::runtime::sandbox::Sandbox;
use wasmtime::Store;

use v0_1::merger::exports::vigil::policy::merger as old_merger;
use v0_1::sorter::exports::vigil::policy::sorter as old_sorter;
use v0_1::strategy::exports::vigil::policy::strategy as old_strategy;
use v0_1::strategy::vigil::policy::{log as old_log, types as old_types};

/// A pre-instantiated eviction strategy, of either contract.
pub(crate) enum StrategyPre {
    Current(strategy::EvictionStrategyPre<Sandbox>),
    V0_1(v0_1::strategy::EvictionStrategyPre<Sandbox>),
}

/// An instance of an eviction strategy, for one call.
pub(crate) enum StrategyInstance {
    Current(strategy::EvictionStrategy),
    V0_1(v0_1::strategy::EvictionStrategy),
}

/// A pre-instantiated candidate sorter, of either contract.
pub(crate) enum SorterPre {
    Current(sorter::CandidateSorterPre<Sandbox>),
    V0_1(v0_1::sorter::CandidateSorterPre<Sandbox>),
}

/// An instance of a candidate sorter, for one call.
pub(crate) enum SorterInstance {
    Current(sorter::CandidateSorter),
    V0_1(v0_1::sorter::CandidateSorter),
}

/// A pre-instantiated config merger, of either contract.
pub(crate) enum MergerPre {
    Current(merger::ConfigMergerPre<Sandbox>),
    V0_1(v0_1::merger::ConfigMergerPre<Sandbox>),
}

/// An instance of a config merger, for one call.
pub(crate) enum MergerInstance {
    Current(merger::ConfigMerger),
    V0_1(v0_1::merger::ConfigMerger),
}

/// What a 0.1.0 policy reads: every label and annotation the host passes.
fn everything() -> Interest {
    Interest {
        labels: vec!["*".into()],
        annotations: vec!["*".into()],
    }
}

impl StrategyPre {
    pub(crate) fn instantiate(
        &self,
        store: &mut Store<Sandbox>,
    ) -> wasmtime::Result<StrategyInstance> {
        Ok(match self {
            Self::Current(pre) => StrategyInstance::Current(pre.instantiate(store)?),
            Self::V0_1(pre) => StrategyInstance::V0_1(pre.instantiate(store)?),
        })
    }
}

impl StrategyInstance {
    pub(crate) fn declare_interest(
        &self,
        store: &mut Store<Sandbox>,
        config: &str,
    ) -> wasmtime::Result<Declared> {
        match self {
            Self::Current(i) => Ok(i
                .vigil_policy_strategy()
                .call_declare_interest(store, config)?
                .into()),
            Self::V0_1(_) => Ok(StrategyInterest {
                keys: everything(),
                pods_in_evaluate: true,
            }
            .into()),
        }
    }

    pub(crate) fn evaluate(
        &self,
        store: &mut Store<Sandbox>,
        snapshot: &Snapshot,
    ) -> wasmtime::Result<Result<Decision, String>> {
        match self {
            Self::Current(i) => i.vigil_policy_strategy().call_evaluate(store, snapshot),
            Self::V0_1(i) => Ok(i
                .vigil_policy_strategy()
                .call_evaluate(store, &old_snapshot(snapshot))?
                .map(decision)),
        }
    }

    pub(crate) fn top_victims(
        &self,
        store: &mut Store<Sandbox>,
        snapshot: &Snapshot,
        scope: &str,
        n: u32,
    ) -> wasmtime::Result<Result<Vec<Eviction>, String>> {
        match self {
            Self::Current(i) => i
                .vigil_policy_strategy()
                .call_top_victims(store, snapshot, scope, n),
            Self::V0_1(i) => Ok(i
                .vigil_policy_strategy()
                .call_top_victims(store, &old_snapshot(snapshot), scope, n)?
                .map(|victims| victims.into_iter().map(eviction).collect())),
        }
    }
}

impl SorterPre {
    pub(crate) fn instantiate(
        &self,
        store: &mut Store<Sandbox>,
    ) -> wasmtime::Result<SorterInstance> {
        Ok(match self {
            Self::Current(pre) => SorterInstance::Current(pre.instantiate(store)?),
            Self::V0_1(pre) => SorterInstance::V0_1(pre.instantiate(store)?),
        })
    }
}

impl SorterInstance {
    pub(crate) fn declare_interest(
        &self,
        store: &mut Store<Sandbox>,
        config: &str,
    ) -> wasmtime::Result<Declared> {
        match self {
            Self::Current(i) => Ok(i
                .vigil_policy_sorter()
                .call_declare_interest(store, config)?
                .into()),
            Self::V0_1(_) => Ok(everything().into()),
        }
    }

    pub(crate) fn sort(
        &self,
        store: &mut Store<Sandbox>,
        strategies: &[String],
        candidates: &[Candidate],
        config: &str,
    ) -> wasmtime::Result<Result<Sorted, String>> {
        match self {
            Self::Current(i) => i
                .vigil_policy_sorter()
                .call_sort(store, strategies, candidates, config),
            Self::V0_1(i) => {
                let old: Vec<old_sorter::Candidate> = candidates
                    .iter()
                    .map(|c| old_sorter::Candidate {
                        pod: old_pod(&c.pod),
                        strategy: strategies
                            .get(c.strategy as usize)
                            .cloned()
                            .unwrap_or_default(),
                        reason: reason(c.urgency).to_owned(),
                    })
                    .collect();
                let hard = candidates.iter().any(|c| c.urgency == Urgency::Hard);
                Ok(i.vigil_policy_sorter()
                    .call_sort(store, &old, config)?
                    .map(|answer| sorted(answer, hard)))
            }
        }
    }
}

impl MergerPre {
    pub(crate) fn instantiate(
        &self,
        store: &mut Store<Sandbox>,
    ) -> wasmtime::Result<MergerInstance> {
        Ok(match self {
            Self::Current(pre) => MergerInstance::Current(pre.instantiate(store)?),
            Self::V0_1(pre) => MergerInstance::V0_1(pre.instantiate(store)?),
        })
    }
}

impl MergerInstance {
    pub(crate) fn merge(
        &self,
        store: &mut Store<Sandbox>,
        layers: &[Layer],
    ) -> wasmtime::Result<Result<String, Vec<MergeRejection>>> {
        match self {
            Self::Current(i) => i.vigil_policy_merger().call_merge(store, layers),
            Self::V0_1(i) => {
                let old: Vec<old_merger::Layer> = layers
                    .iter()
                    .map(|l| old_merger::Layer {
                        source: l.source.clone(),
                        json: l.json.clone(),
                    })
                    .collect();
                Ok(i.vigil_policy_merger()
                    .call_merge(store, &old)?
                    .map_err(|rejections| {
                        rejections
                            .into_iter()
                            .map(|r| MergeRejection {
                                source: r.source,
                                field: r.field,
                                reason: r.reason,
                            })
                            .collect()
                    }))
            }
        }
    }
}

/// The reason a 0.1.0 sorter is given for a candidate: why it is proposed.
pub(crate) fn reason(urgency: Urgency) -> &'static str {
    match urgency {
        Urgency::Hard => "hard threshold met",
        Urgency::Force => "forced by its strategy",
        Urgency::Soft => "soft candidate",
    }
}

/// A 0.1.0 sorter's answer. Under a hard threshold a 0.1.0 agent kept the
/// strategy's ranking and took only the refusals: so does this.
fn sorted(answer: old_sorter::Sorted, hard: bool) -> Sorted {
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

fn old_snapshot(snapshot: &Snapshot) -> old_strategy::Snapshot {
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

fn eviction(old: old_strategy::Eviction) -> Eviction {
    Eviction {
        uid: old.uid,
        reason: old.reason,
        grace_period_seconds: old.grace_period_seconds,
    }
}

fn decision(old: old_strategy::Decision) -> Decision {
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
