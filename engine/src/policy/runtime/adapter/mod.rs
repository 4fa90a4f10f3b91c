//! Contract skew: components built for earlier contracts served by this
//! host through the current one, `vigil:policy@0.3.0`.
//!
//! Each world's pre-instantiated component and instance speaks one of three
//! contracts; the typed handles ([`crate::policy::runtime::handle`]) call
//! them through the methods here and only ever see the current records.
//! Each earlier contract is one step from the next, and a step is one file:
//! [`v0_2`] adapts 0.2.0 to 0.3.0, [`v0_1`] adapts 0.1.0 to 0.2.0; a 0.1.0
//! component takes both steps, so it gets exactly what a 0.2.0 host would
//! have made of a 0.1.0 agent's records.
//!
//! Adapting costs a copy of the records passed (the pods included) per step
//! and call; current components are passed the host's records in place.

mod v0_1;
mod v0_2;

use crate::model::bindings::{
    Candidate, Decision, Eviction, Layer, MergeRejection, Snapshot, Sorted, merger, sorter,
    strategy,
};
use crate::model::{v0_1 as old1, v0_2 as old2};
use crate::policy::runtime::interest::Declared;
use crate::policy::runtime::sandbox::Sandbox;
use wasmtime::Store;

/// A pre-instantiated eviction strategy, of any contract served.
pub(crate) enum StrategyPre {
    Current(strategy::EvictionStrategyPre<Sandbox>),
    V0_2(old2::strategy::EvictionStrategyPre<Sandbox>),
    V0_1(old1::strategy::EvictionStrategyPre<Sandbox>),
}

/// An instance of an eviction strategy, for one call.
pub(crate) enum StrategyInstance {
    Current(strategy::EvictionStrategy),
    V0_2(old2::strategy::EvictionStrategy),
    V0_1(old1::strategy::EvictionStrategy),
}

/// A pre-instantiated candidate sorter, of any contract served.
pub(crate) enum SorterPre {
    Current(sorter::CandidateSorterPre<Sandbox>),
    V0_2(old2::sorter::CandidateSorterPre<Sandbox>),
    V0_1(old1::sorter::CandidateSorterPre<Sandbox>),
}

/// An instance of a candidate sorter, for one call.
pub(crate) enum SorterInstance {
    Current(sorter::CandidateSorter),
    V0_2(old2::sorter::CandidateSorter),
    V0_1(old1::sorter::CandidateSorter),
}

/// A pre-instantiated config merger, of any contract served.
pub(crate) enum MergerPre {
    Current(merger::ConfigMergerPre<Sandbox>),
    V0_2(old2::merger::ConfigMergerPre<Sandbox>),
    V0_1(old1::merger::ConfigMergerPre<Sandbox>),
}

/// An instance of a config merger, for one call.
pub(crate) enum MergerInstance {
    Current(merger::ConfigMerger),
    V0_2(old2::merger::ConfigMerger),
    V0_1(old1::merger::ConfigMerger),
}

impl StrategyPre {
    pub(crate) fn instantiate(
        &self,
        store: &mut Store<Sandbox>,
    ) -> wasmtime::Result<StrategyInstance> {
        Ok(match self {
            Self::Current(pre) => StrategyInstance::Current(pre.instantiate(store)?),
            Self::V0_2(pre) => StrategyInstance::V0_2(pre.instantiate(store)?),
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
        Ok(match self {
            Self::Current(i) => i
                .vigil_policy_strategy()
                .call_declare_interest(store, config)?
                .into(),
            Self::V0_2(i) => v0_2::strategy_interest(
                i.vigil_policy_strategy()
                    .call_declare_interest(store, config)?,
            )
            .into(),
            Self::V0_1(_) => v0_2::strategy_interest(v0_1::strategy_interest()).into(),
        })
    }

    pub(crate) fn evaluate(
        &self,
        store: &mut Store<Sandbox>,
        snapshot: &Snapshot,
    ) -> wasmtime::Result<Result<Decision, String>> {
        match self {
            Self::Current(i) => i.vigil_policy_strategy().call_evaluate(store, snapshot),
            Self::V0_2(i) => Ok(i
                .vigil_policy_strategy()
                .call_evaluate(store, &v0_2::snapshot(snapshot))?
                .map(v0_2::decision)),
            Self::V0_1(i) => Ok(i
                .vigil_policy_strategy()
                .call_evaluate(store, &v0_1::snapshot(&v0_2::snapshot(snapshot)))?
                .map(|d| v0_2::decision(v0_1::decision(d)))),
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
            Self::V0_2(i) => Ok(i
                .vigil_policy_strategy()
                .call_top_victims(store, &v0_2::snapshot(snapshot), scope, n)?
                .map(|victims| victims.into_iter().map(v0_2::eviction).collect())),
            Self::V0_1(i) => Ok(i
                .vigil_policy_strategy()
                .call_top_victims(store, &v0_1::snapshot(&v0_2::snapshot(snapshot)), scope, n)?
                .map(|victims| {
                    (victims.into_iter())
                        .map(|e| v0_2::eviction(v0_1::eviction(e)))
                        .collect()
                })),
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
            Self::V0_2(pre) => SorterInstance::V0_2(pre.instantiate(store)?),
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
        Ok(match self {
            Self::Current(i) => i
                .vigil_policy_sorter()
                .call_declare_interest(store, config)?
                .into(),
            Self::V0_2(i) => v0_2::interest(
                i.vigil_policy_sorter()
                    .call_declare_interest(store, config)?,
            )
            .into(),
            Self::V0_1(_) => v0_2::interest(v0_1::everything()).into(),
        })
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
            Self::V0_2(i) => {
                let old = v0_2::candidates(candidates);
                Ok(i.vigil_policy_sorter()
                    .call_sort(store, strategies, &old, config)?
                    .map(v0_2::sorted))
            }
            Self::V0_1(i) => {
                let old = v0_1::candidates(strategies, &v0_2::candidates(candidates));
                let hard = v0_1::any_hard(candidates.iter().map(|c| c.urgency));
                Ok(i.vigil_policy_sorter()
                    .call_sort(store, &old, config)?
                    .map(|answer| v0_2::sorted(v0_1::sorted(answer, hard))))
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
            Self::V0_2(pre) => MergerInstance::V0_2(pre.instantiate(store)?),
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
            Self::V0_2(i) => Ok(i
                .vigil_policy_merger()
                .call_merge(store, &v0_2::layers(layers))?
                .map_err(v0_2::merge_rejections)),
            Self::V0_1(i) => Ok(i
                .vigil_policy_merger()
                .call_merge(store, &v0_1::layers(&v0_2::layers(layers)))?
                .map_err(|r| v0_2::merge_rejections(v0_1::merge_rejections(r)))),
        }
    }
}
