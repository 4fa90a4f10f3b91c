//! Typed handles, one per world: a [`Strategy`] can only be asked to
//! evaluate and name victims, a [`Sorter`] to sort, a [`Merger`] to merge, so
//! calling a policy for an export of another world does not compile. Get one
//! from a [`Policy`] with `as_strategy`, `as_sorter` or `as_merger`.
//!
//! Each call runs in a fresh, bounded store (see [`Policy`]) and its answer
//! is checked against the contract before anyone sees it. A handle got from
//! the [`crate::policy::Registry`] is supervised: it tells the registry of every
//! fault itself (logged; a version on trial is rolled back), so no caller
//! has to remember to. Strategies and
//! sorters see pods narrowed to the labels, annotations and pod facts they
//! declared an interest in, and strategies the signals they declared beside
//! the kubelet's ([`crate::policy::runtime::interest`]); the caller's pods
//! and signals are left as they were.

// A deliberate cycle with `component`: a `Policy` hands out these typed
// handles (`as_strategy`…), and each handle calls back into its `Policy`.
use crate::model::bindings::{
    Candidate, Decision, Eviction, Layer, MergeRejection, Snapshot, Sorted,
};
use crate::policy::runtime::adapter::{MergerPre, SorterPre, StrategyPre};
use crate::policy::runtime::component::Outcome;
use crate::policy::runtime::interest::{Declared, narrow, narrow_signals, restore};
use crate::policy::runtime::validate;
use crate::policy::{Fault, Policy};
use std::sync::Arc;

/// An eviction strategy.
#[derive(Clone, Copy)]
pub struct Strategy<'a> {
    policy: &'a Policy,
    pre: &'a StrategyPre,
    supervisor: Option<&'a dyn Supervisor>,
}

/// A candidate sorter.
#[derive(Clone, Copy)]
pub struct Sorter<'a> {
    policy: &'a Policy,
    pre: &'a SorterPre,
    supervisor: Option<&'a dyn Supervisor>,
}

/// A config merger.
#[derive(Clone, Copy)]
pub struct Merger<'a> {
    policy: &'a Policy,
    pre: &'a MergerPre,
    supervisor: Option<&'a dyn Supervisor>,
}

/// Who is told of a supervised handle's faults.
pub trait Supervisor: Send + Sync {
    /// `policy`'s call raised `fault`.
    fn fault(&self, policy: &Policy, fault: &Fault);
}

/// Runs `call` and tells `supervisor`, if any, of its fault.
fn supervise<T>(
    supervisor: Option<&dyn Supervisor>,
    policy: &Policy,
    call: impl FnOnce() -> Result<T, Fault>,
) -> Result<T, Fault> {
    let outcome = call();
    if let (Err(fault), Some(supervisor)) = (&outcome, supervisor) {
        supervisor.fault(policy, fault);
    }
    outcome
}

impl<'a> Strategy<'a> {
    pub(in crate::policy) fn new(policy: &'a Policy, pre: &'a StrategyPre) -> Self {
        Self {
            policy,
            pre,
            supervisor: None,
        }
    }

    /// The same handle, telling `supervisor` of each fault of its calls.
    pub fn supervised_by(self, supervisor: &'a dyn Supervisor) -> Self {
        Self {
            supervisor: Some(supervisor),
            ..self
        }
    }

    /// What the strategy reads under `config` (asked once per config); a
    /// fault is told to the supervisor, as any call's.
    ///
    /// # Errors
    /// A [`crate::policy::Fault`], or an interest out of bounds.
    pub fn interest(&self, config: &str) -> Result<Arc<Declared>, Fault> {
        supervise(self.supervisor, self.policy, || self.declared(config))
    }

    /// [`Self::interest`] without telling the supervisor (the calls that
    /// ask it tell of their own fault).
    fn declared(&self, config: &str) -> Result<Arc<Declared>, Fault> {
        self.policy.interest(
            config,
            |store| self.pre.instantiate(store),
            |instance, store| instance.declare_interest(store, config),
        )
    }

    /// Asks the strategy to judge `snapshot`: its pods narrowed to the
    /// strategy's interest for the call, or none if it does not read them
    /// in `evaluate`. The answer is checked against what was offered.
    ///
    /// # Errors
    /// A [`crate::policy::Fault`]: trap, deadline, memory limit, or an answer naming
    /// a pod not in the snapshot.
    pub fn evaluate(&self, snapshot: &mut Snapshot) -> Outcome<Decision, String> {
        supervise(self.supervisor, self.policy, || {
            let declared = self.declared(&snapshot.config)?;
            let withheld = (!declared.pods_in_evaluate).then(|| std::mem::take(&mut snapshot.pods));
            let aside = narrow(snapshot.pods.iter_mut(), &declared.keys);
            let signals = narrow_signals(&mut snapshot.signals, &declared);
            let outcome = self.policy.call(
                |store| self.pre.instantiate(store),
                |instance, store| instance.evaluate(store, snapshot),
            );
            let answer = self
                .policy
                .checked(outcome, |decision| validate::decision(snapshot, decision));
            restore(snapshot.pods.iter_mut(), aside);
            if let Some(signals) = signals {
                snapshot.signals = signals;
            }
            if let Some(pods) = withheld {
                snapshot.pods = pods;
            }
            answer
        })
    }

    /// Asks the strategy for at most `n` victims for `scope`, as
    /// [`Strategy::evaluate`] asks its judgement.
    ///
    /// # Errors
    /// As [`Strategy::evaluate`], and more than `n` victims or a repeated one.
    pub fn top_victims(
        &self,
        snapshot: &mut Snapshot,
        scope: &str,
        n: u32,
    ) -> Outcome<Vec<Eviction>, String> {
        supervise(self.supervisor, self.policy, || {
            let declared = self.declared(&snapshot.config)?;
            let aside = narrow(snapshot.pods.iter_mut(), &declared.keys);
            let signals = narrow_signals(&mut snapshot.signals, &declared);
            let outcome = self.policy.call(
                |store| self.pre.instantiate(store),
                |instance, store| instance.top_victims(store, snapshot, scope, n),
            );
            restore(snapshot.pods.iter_mut(), aside);
            if let Some(signals) = signals {
                snapshot.signals = signals;
            }
            self.policy
                .checked(outcome, |victims| validate::victims(snapshot, n, victims))
        })
    }
}

impl<'a> Sorter<'a> {
    pub(in crate::policy) fn new(policy: &'a Policy, pre: &'a SorterPre) -> Self {
        Self {
            policy,
            pre,
            supervisor: None,
        }
    }

    /// The same handle, telling `supervisor` of each fault of its calls.
    pub fn supervised_by(self, supervisor: &'a dyn Supervisor) -> Self {
        Self {
            supervisor: Some(supervisor),
            ..self
        }
    }

    /// The labels and annotations the sorter reads under `config` (asked
    /// once per config); a fault is told to the supervisor, as any call's.
    ///
    /// # Errors
    /// A [`crate::policy::Fault`], or an interest out of bounds.
    pub fn interest(&self, config: &str) -> Result<Arc<Declared>, Fault> {
        supervise(self.supervisor, self.policy, || self.declared(config))
    }

    /// [`Self::interest`] without telling the supervisor (the calls that
    /// ask it tell of their own fault).
    fn declared(&self, config: &str) -> Result<Arc<Declared>, Fault> {
        self.policy.interest(
            config,
            |store| self.pre.instantiate(store),
            |instance, store| instance.declare_interest(store, config),
        )
    }

    /// Asks the sorter to validate and order `candidates`, proposed by the
    /// strategies named in `strategies` (each candidate's `strategy` is an
    /// index into it); their pods are narrowed to the sorter's interest for
    /// the call.
    ///
    /// # Errors
    /// A [`crate::policy::Fault`]; an answer that does not place every candidate
    /// exactly once is one.
    pub fn sort(
        &self,
        strategies: &[String],
        candidates: &mut [Candidate],
        config: &str,
    ) -> Outcome<Sorted, String> {
        supervise(self.supervisor, self.policy, || {
            let declared = self.declared(config)?;
            let aside = narrow(candidates.iter_mut().map(|c| &mut c.pod), &declared.keys);
            let outcome = self.policy.call(
                |store| self.pre.instantiate(store),
                |instance, store| instance.sort(store, strategies, candidates, config),
            );
            restore(candidates.iter_mut().map(|c| &mut c.pod), aside);
            self.policy
                .checked(outcome, |sorted| validate::sorted(candidates.len(), sorted))
        })
    }
}

impl<'a> Merger<'a> {
    pub(in crate::policy) fn new(policy: &'a Policy, pre: &'a MergerPre) -> Self {
        Self {
            policy,
            pre,
            supervisor: None,
        }
    }

    /// The same handle, telling `supervisor` of each fault of its calls.
    pub fn supervised_by(self, supervisor: &'a dyn Supervisor) -> Self {
        Self {
            supervisor: Some(supervisor),
            ..self
        }
    }

    /// Asks the merger to merge `layers` into one JSON object.
    ///
    /// # Errors
    /// A [`crate::policy::Fault`]; a merge result that is not a JSON object is one.
    pub fn merge(
        &self,
        layers: &[Layer],
    ) -> Outcome<serde_json::Map<String, serde_json::Value>, Vec<MergeRejection>> {
        supervise(self.supervisor, self.policy, || {
            let answer = self.policy.checked(
                self.policy.call(
                    |store| self.pre.instantiate(store),
                    |instance, store| instance.merge(store, layers),
                ),
                |_: &mut String| Ok(()),
            )?;
            match answer {
                Ok(json) => Ok(Ok(self.policy.counted(validate::merged(&json))?)),
                Err(rejections) => Ok(Err(rejections)),
            }
        })
    }
}
