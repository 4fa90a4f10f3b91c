//! The metrics kept from what the agent reports: each pass of the eviction
//! loop, each eviction settled, and the policies the registry serves.

use super::labels::{
    CappedLabels, EvictionLabels, MisplacedLabels, NameLabel, PolicyLabels, PolicyStateLabels,
    ThresholdLabels, WaitingLabels,
};
use super::{Counted, Metrics};
use crate::eviction::runner::LoopReport;
use crate::eviction::{CycleReport, Skipped, Victim};
use crate::model::MetLevel;
use crate::policy::{Phase, Registry};
use std::sync::{Arc, Weak};

impl Metrics {
    /// Updates the metrics from one of the runner's reports.
    pub fn record(&self, report: &LoopReport) {
        match report {
            LoopReport::Cycle(cycle, took) => self.cycle(cycle, took.as_secs_f64()),
            LoopReport::Settled { settled, latency } => {
                let (victim, result) = settled.result();
                self.eviction(victim, result);
                if let Some(latency) = latency {
                    self.signal_to_eviction_seconds
                        .observe(latency.as_secs_f64());
                }
            }
        }
    }

    fn eviction(&self, victim: &Victim, result: &str) {
        self.evictions
            .get_or_create(&EvictionLabels {
                strategy: victim.strategy.clone(),
                urgency: victim.urgency.as_str().into(),
                result: result.into(),
            })
            .inc();
    }

    fn cycle(&self, report: &CycleReport, seconds: f64) {
        self.cycle_seconds.observe(seconds);
        self.evictions_in_flight
            .set(i64::try_from(report.in_flight).unwrap_or(i64::MAX));
        self.thresholds_met.clear();
        for met in &report.thresholds {
            let level = match met.threshold.met {
                MetLevel::Hard => "hard",
                MetLevel::Report => "report",
                MetLevel::Soft | MetLevel::NotMet => "soft",
            };
            self.thresholds_met
                .get_or_create(&ThresholdLabels {
                    strategy: met.strategy.clone(),
                    level: level.into(),
                })
                .inc();
        }
        self.thresholds_misplaced.clear();
        for misplaced in &report.misplaced {
            self.thresholds_misplaced
                .get_or_create(&MisplacedLabels {
                    strategy: misplaced.strategy.clone(),
                    signal: misplaced.signal.clone(),
                    place: misplaced.place.reason().into(),
                })
                .set(1);
        }
        self.thresholds_waiting.clear();
        self.evictions_held_back.clear();
        for skipped in &report.skipped {
            match skipped {
                Skipped::Reclaiming { strategy, by, .. } => {
                    self.thresholds_waiting
                        .get_or_create(&WaitingLabels {
                            strategy: strategy.clone(),
                            reclaim: by.kind().into(),
                        })
                        .inc();
                }
                Skipped::Capped { strategy, cap, .. } => {
                    self.evictions_held_back
                        .get_or_create(&CappedLabels {
                            strategy: strategy.clone(),
                            cap: cap.as_str().into(),
                        })
                        .inc();
                }
                _ => {}
            }
        }
        for (strategy, _) in report.refused_effects() {
            self.refused_taint_effects
                .get_or_create(&NameLabel {
                    name: strategy.to_owned(),
                })
                .inc();
        }
        for refusal in &report.refusals {
            self.sorter_refusals
                .get_or_create(&NameLabel {
                    name: refusal.sorter.clone(),
                })
                .inc();
        }
        self.conditions.clear();
        for condition in &report.conditions {
            self.conditions
                .get_or_create(&NameLabel {
                    name: condition.name.clone(),
                })
                .set(1);
        }
    }

    /// Updates the policy metrics from the registry.
    pub fn policies(&self, registry: &Registry) {
        let compiles = registry.host().compiles();
        self.policy_compiles
            .inc_by(compiles.saturating_sub(self.policy_compiles.get()));
        self.policy_state.clear();
        for status in registry.status() {
            let state = match status.phase {
                Phase::Trial { .. } => "trial",
                Phase::Active => "active",
                Phase::RolledBack { .. } => "rolled-back",
            };
            self.policy_state
                .get_or_create(&PolicyStateLabels {
                    policy: status.name.clone(),
                    version: status.digest.to_string(),
                    state: state.into(),
                })
                .set(1);
        }
        let serving = registry.serving();
        let mut counted = self
            .policy_counted
            .lock()
            .expect("policy counts lock poisoned");
        // A version that no longer exists never serves again.
        counted.retain(|seen| seen.version.strong_count() > 0);
        for policy in serving {
            let counts = [policy.calls(), policy.faults(), policy.log_lines_dropped()];
            // A version counts from zero, under its own label: what a new one
            // did is all new; one that serves again (a rollback) only adds
            // what is new since.
            let version = Arc::downgrade(&policy);
            let seen = counted
                .iter_mut()
                .find(|c| Weak::ptr_eq(&c.version, &version));
            let before = seen.as_ref().map_or([0; 3], |seen| seen.counts);
            let name = PolicyLabels {
                name: policy.name().to_owned(),
                version: policy.digest().to_string(),
            };
            let families = [
                &self.policy_calls,
                &self.policy_faults,
                &self.policy_log_lines_dropped,
            ];
            for ((family, now), before) in families.into_iter().zip(counts).zip(before) {
                family
                    .get_or_create(&name)
                    .inc_by(now.saturating_sub(before));
            }
            match seen {
                Some(seen) => seen.counts = counts,
                None => counted.push(Counted { version, counts }),
            }
        }
    }
}
