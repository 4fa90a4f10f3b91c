//! The trial bounds controller: counts, per version on trial, the
//! evictions it took part in on this node — as the strategy that chose the
//! pod or the sorter that ordered it — and rolls a version back, as a
//! fault would, once it took part in more than its `VigilPolicy`'s
//! `spec.trial.maxEvictions` allows. The bound is checked when an eviction
//! is accepted: the one past it has happened, and the version takes part
//! in no other. It also counts every accepted eviction for the config
//! controller, which holds a config on trial to its own bound.

use crate::distribution::crd::VigilPolicy;
use crate::eviction::runner::{LoopReport, next_report};
use crate::eviction::{Settled, Victim};
use crate::policy::{Phase, Registry};
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// Counts evictions against the trial bounds of one node.
pub(crate) struct TrialBounds {
    registry: Arc<Registry>,
    policies: Store<VigilPolicy>,
    /// Evictions by (policy, version) of the versions on trial.
    counts: BTreeMap<(String, String), u32>,
    /// Every accepted eviction, for the config's trial.
    accepted: watch::Sender<u64>,
}

impl TrialBounds {
    /// Bounds from `policies`, applied to what `registry` serves; each
    /// accepted eviction also counted in `accepted`.
    pub(crate) fn new(
        registry: Arc<Registry>,
        policies: Store<VigilPolicy>,
        accepted: watch::Sender<u64>,
    ) -> Self {
        Self {
            registry,
            policies,
            counts: BTreeMap::new(),
            accepted,
        }
    }

    /// Counts every accepted eviction the loop `reports`, until `stop`.
    pub(crate) async fn run(
        mut self,
        mut reports: broadcast::Receiver<Arc<LoopReport>>,
        stop: CancellationToken,
    ) {
        loop {
            let report = tokio::select! {
                () = stop.cancelled() => return,
                report = next_report(&mut reports, "the trial bounds") => report,
            };
            let Some(report) = report else { return };
            if let LoopReport::Settled { settled, .. } = report.as_ref()
                && let Settled::Accepted(victim) = settled.as_ref()
                && !victim.dry_run
            {
                self.accepted.send_modify(|count| *count += 1);
                self.evicted(victim);
            }
        }
    }

    /// Counts `victim`'s eviction against the versions that chose and
    /// ordered it, if on trial, and rolls back one past its bound.
    fn evicted(&mut self, victim: &Victim) {
        let why = &victim.why;
        let deciders = [
            (Some(&victim.strategy), why.strategy_version.as_ref()),
            (why.sorter.as_ref(), why.sorter_version.as_ref()),
        ];
        // Bounded deciders only: without a bound, no status is read.
        let bounded: Vec<(&String, &String, u32)> = (deciders.into_iter())
            .filter_map(|(name, version)| Some((name?, version?, self.bound(name?)?)))
            .collect();
        if bounded.is_empty() {
            return;
        }
        let statuses = self.registry.status();
        let on_trial = |name: &str, version: &str| {
            (statuses.iter()).find(|s| {
                s.name == name
                    && s.digest.to_string() == version
                    && matches!(s.phase, Phase::Trial { .. })
            })
        };
        // What is no longer on trial needs no count.
        (self.counts).retain(|(name, version), _| on_trial(name, version).is_some());
        for (name, version, max) in bounded {
            let Some(status) = on_trial(name, version) else {
                continue;
            };
            let count = self
                .counts
                .entry((name.clone(), version.clone()))
                .or_default();
            *count += 1;
            if *count > max {
                let reason = format!(
                    "it took part in {count} evictions on trial, above spec.trial.maxEvictions {max}"
                );
                self.registry.fail_trial(name, status.digest, reason);
            }
        }
    }

    /// `name`'s `spec.trial.maxEvictions`, if its `VigilPolicy` sets one.
    fn bound(&self, name: &str) -> Option<u32> {
        let policy = self.policies.get(&ObjectRef::new(name))?;
        policy.spec.trial.as_ref()?.max_evictions
    }
}
