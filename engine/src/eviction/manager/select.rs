//! Choosing victims: a threshold's first candidate in the sorter's order of
//! its strategy's ranking (passing over pods refused lately, and the PDB
//! override when every one is refused by budgets), force evictions, the best
//! soft candidate, and the sorter's validation with the host's protection of
//! static, mirror and critical pods; a threshold waits while reclaim of its
//! resource is under way.

use super::report::{Call, CycleReport, Reclaim, Refusal, Skipped, Victim, Why, Withheld};
use super::{Answers, EvictionManager, FALLBACK_SORTER, HOST, Reclaiming};
use crate::eviction::policies::Which;
use crate::eviction::queue::Urgency;
use crate::eviction::tracker::MetThreshold;
use crate::model::{Candidate, Eviction, MetLevel, Pod, Snapshot, Sorted};
use crate::signals::catalogue;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

impl EvictionManager {
    /// A victim for `threshold`, unless reclaim of its resource is already
    /// under way.
    pub(super) fn evict_for(
        &mut self,
        now: SystemTime,
        threshold: &MetThreshold,
        reclaiming: &Reclaiming,
        snapshot: &mut Snapshot,
        report: &mut CycleReport,
    ) {
        let resource = catalogue::resource(&threshold.threshold.signal);
        let by_kubelet = (reclaiming.kubelet.iter())
            .find(|(r, _)| r.is_none() || *r == resource)
            .map(|(_, pod)| Reclaim::Kubelet(pod.clone()));
        let by_other = reclaiming.terminating.clone().map(Reclaim::Terminating);
        if let Some(by) = by_kubelet.or(by_other) {
            report.skipped.push(Skipped::Reclaiming {
                strategy: threshold.strategy.clone(),
                scope: threshold.threshold.scope.clone(),
                by,
            });
            return;
        }
        let chosen = self.threshold_victim(now, threshold, snapshot, report);
        if chosen.is_some() {
            self.victim_chosen(&threshold.strategy, &threshold.threshold.scope);
        }
        let signal = threshold.threshold.signal.as_str();
        self.enqueue(now, chosen.into_iter().collect(), Some(signal), report);
    }

    /// The force evictions, and the soft candidate the sorter puts first.
    pub(super) fn propose(
        &mut self,
        now: SystemTime,
        answers: &Answers,
        snapshot: &Snapshot,
        report: &mut CycleReport,
    ) {
        let mut chosen = self.force_victims(&answers.force, &snapshot.pods, report);
        let forced: HashSet<&str> = answers.force.iter().map(|(_, e)| e.uid.as_str()).collect();
        let soft: Vec<_> = answers
            .soft
            .iter()
            .filter(|(_, e)| !forced.contains(e.uid.as_str()))
            .cloned()
            .collect();
        chosen.extend(self.best_soft_candidate(&soft, &snapshot.pods, report));
        self.enqueue(now, chosen, None, report);
    }

    /// The victim for a threshold past its grace period, unless a victim
    /// chosen for it earlier is still waiting or terminating: the strategy
    /// ranks every pod (`top-victims`), the sorter refuses and orders them,
    /// and the first in the sorter's order goes. Pods whose eviction was
    /// refused lately are passed over; when all are, a hard threshold deletes
    /// the first after `pdb_override_after`.
    pub(super) fn threshold_victim(
        &mut self,
        now: SystemTime,
        met: &MetThreshold,
        snapshot: &mut Snapshot,
        report: &mut CycleReport,
    ) -> Option<Victim> {
        let (name, scope) = (&met.strategy, &met.threshold.scope);
        let urgency = if met.threshold.met == MetLevel::Hard {
            Urgency::Hard
        } else {
            Urgency::Soft
        };
        if self.queue.reclaiming(name, scope, urgency) {
            report.skipped.push(Skipped::Reclaiming {
                strategy: name.clone(),
                scope: scope.clone(),
                by: Reclaim::Own,
            });
            return None;
        }
        self.prepare_snapshot(name, snapshot);
        let n = u32::try_from(snapshot.pods.len()).unwrap_or(u32::MAX);
        let victims = match self.policies.top_victims(name, snapshot, scope, n) {
            Ok(victims) => victims,
            Err(why) => {
                report.skipped.push(Skipped::Strategy {
                    name: name.clone(),
                    call: Call::TopVictims,
                    why,
                });
                return None;
            }
        };
        let mut candidates = to_candidates(&victims, urgency, &snapshot.pods);
        let on_fault = if urgency == Urgency::Hard {
            OnSorterFault::BuiltIn
        } else {
            OnSorterFault::Skip
        };
        let sorted = self.sort(
            std::slice::from_ref(name),
            &mut candidates,
            on_fault,
            report,
        )?;
        // The sorter's order decides: the strategy ranked the candidates, the
        // sorter refused some and may have reordered the rest.
        let valid: Vec<usize> = sorted.sorted.order.iter().map(|&i| i as usize).collect();
        let (index, override_pdb) = self.pick(now, met, &candidates, &valid, report)?;
        let (candidate, eviction) = (&candidates[index], &victims[index]);
        if self.queue.holds(&candidate.pod.uid) {
            // Another threshold already evicts this pod: count on it, pick no other.
            self.queue.share(&candidate.pod.uid, name, scope, urgency);
            report.skipped.push(Skipped::Reclaiming {
                strategy: name.clone(),
                scope: scope.clone(),
                by: Reclaim::Shared(candidate.pod.name.clone()),
            });
            return None;
        }
        let mut chosen = victim(name, candidate, eviction, urgency, Some(scope.clone()));
        let position = valid.iter().position(|&i| i == index).unwrap_or_default();
        chosen.why = Why {
            threshold: Some(threshold_words(met)),
            ..self.why(name, &sorted, position)
        };
        if override_pdb {
            tracing::warn!(pod = %chosen.pod.name, strategy = %name, "every candidate's eviction was refused under hard pressure; deleting the top victim despite its PodDisruptionBudget");
            chosen.override_pdb = true;
            for budget in self.budgets_of(&chosen.pod) {
                self.overridden.insert(budget, now);
            }
        }
        Some(chosen)
    }

    /// Which of `candidates`, in the sorter's order `valid`, goes for `met`,
    /// and whether around its budget: the first not refused lately, else
    /// (under hard pressure, blocked long enough) the first a budget
    /// refused; `None` when all wait.
    fn pick(
        &mut self,
        now: SystemTime,
        met: &MetThreshold,
        candidates: &[Candidate],
        valid: &[usize],
        report: &mut CycleReport,
    ) -> Option<(usize, bool)> {
        let (name, scope) = (&met.strategy, &met.threshold.scope);
        let open = valid
            .iter()
            .copied()
            .find(|&i| !self.queue.refused(&candidates[i].pod.uid));
        let key = (name.clone(), scope.clone());
        // Only a budget's refusal counts towards the override: a pod the API
        // server will not evict at all is never deleted around it.
        let top_budget = valid
            .iter()
            .copied()
            .find(|&i| self.queue.refused_by_budget(&candidates[i].pod.uid));
        match (open, top_budget) {
            (Some(index), _) => Some((index, false)),
            (None, None) => {
                report.skipped.push(Skipped::Waiting {
                    strategy: name.clone(),
                    scope: scope.clone(),
                    withheld: None,
                });
                None
            }
            (None, Some(top)) => {
                let since = *self.blocked.entry(key).or_insert(now);
                let blocked_for = now.duration_since(since).unwrap_or_default();
                match self.may_override(met, &candidates[top].pod, blocked_for) {
                    Ok(()) => Some((top, true)),
                    Err(why) => {
                        report.skipped.push(Skipped::Waiting {
                            strategy: name.clone(),
                            scope: scope.clone(),
                            withheld: Some(why),
                        });
                        None
                    }
                }
            }
        }
    }

    /// Whether the top victim `uid` of `met`, whose every candidate has been
    /// refused by budgets for `blocked_for`, may be deleted anyway; if not, why.
    fn may_override(
        &self,
        met: &MetThreshold,
        pod: &Pod,
        blocked_for: Duration,
    ) -> Result<(), Withheld> {
        let Some(after) = self.settings.pdb_override_after else {
            return Err(Withheld::Off);
        };
        if met.threshold.met != MetLevel::Hard {
            return Err(Withheld::Soft);
        }
        if crate::signals::catalogue::is_stall(&met.threshold.signal) {
            return Err(Withheld::Stall(met.threshold.signal.clone()));
        }
        let settings = self.settings.policy(&met.strategy);
        if !settings.pdb_override {
            return Err(Withheld::NotAllowed(met.strategy.clone()));
        }
        if self.dry_run(&met.strategy) {
            return Err(Withheld::DryRun);
        }
        if blocked_for < after {
            return Err(Withheld::TooSoon {
                after,
                refused_for: blocked_for,
            });
        }
        let budgets = self.budgets_of(pod);
        if let Some(recent) = budgets.iter().find(|b| self.overridden.contains_key(*b)) {
            return Err(Withheld::Recent {
                budget: recent.clone(),
                window: self.settings.pdb_override_window,
            });
        }
        Ok(())
    }

    /// The budgets a pod's override is counted against: the ones known to
    /// select it, else its namespace's unknown budget.
    pub(super) fn budgets_of(&self, pod: &Pod) -> Vec<String> {
        match self.facts.get(&pod.uid).map(|f| &f.budgets) {
            Some(budgets) if !budgets.is_empty() => budgets.clone(),
            _ => vec![format!("{}/*", pod.namespace)],
        }
    }

    /// Every force eviction the sorter accepts.
    pub(super) fn force_victims(
        &self,
        force: &[(String, Eviction)],
        pods: &[Pod],
        report: &mut CycleReport,
    ) -> Vec<Victim> {
        let mut victims = Vec::new();
        let open: Vec<(String, Eviction)> = force
            .iter()
            .filter(|(_, e)| !self.queue.refused(&e.uid))
            .cloned()
            .collect();
        for (name, group) in group_by_strategy(&open) {
            let mut candidates = to_candidates(&group, Urgency::Force, pods);
            let name = name.to_owned();
            let Some(sorted) = self.sort(
                std::slice::from_ref(&name),
                &mut candidates,
                OnSorterFault::BuiltIn,
                report,
            ) else {
                continue;
            };
            for (position, &index) in sorted.sorted.order.iter().enumerate() {
                let mut chosen = victim(
                    &name,
                    &candidates[index as usize],
                    &group[index as usize],
                    Urgency::Force,
                    None,
                );
                chosen.why = self.why(&name, &sorted, position);
                victims.push(chosen);
            }
        }
        victims
    }

    /// The soft candidate the sorter puts first; none if the sorter fails.
    pub(super) fn best_soft_candidate(
        &self,
        soft: &[(String, Eviction)],
        pods: &[Pod],
        report: &mut CycleReport,
    ) -> Option<Victim> {
        let by_uid: HashMap<&str, &Pod> = pods.iter().map(|p| (p.uid.as_str(), p)).collect();
        let open: Vec<&(String, Eviction)> = soft
            .iter()
            .filter(|(_, e)| !self.queue.holds(&e.uid) && !self.queue.refused(&e.uid))
            .collect();
        let mut strategies: Vec<String> = open.iter().map(|(name, _)| name.clone()).collect();
        strategies.sort();
        strategies.dedup();
        let (open, mut candidates): (Vec<_>, Vec<Candidate>) = open
            .into_iter()
            .filter_map(|(name, e)| {
                let pod = by_uid.get(e.uid.as_str())?;
                let index = strategies.binary_search(name).ok()?;
                Some(((name, e), candidate(index, Urgency::Soft, pod)))
            })
            .unzip();
        if candidates.is_empty() {
            return None;
        }
        let sorted = self.sort(&strategies, &mut candidates, OnSorterFault::Skip, report)?;
        let first = *sorted.sorted.order.first()? as usize;
        let (name, eviction) = open[first];
        let mut chosen = victim(name, &candidates[first], eviction, Urgency::Soft, None);
        chosen.why = self.why(name, &sorted, 0);
        Some(chosen)
    }

    /// Why `strategy`'s candidate at `position` of `sorted`'s order goes.
    fn why(&self, strategy: &str, sorted: &SortedBy, position: usize) -> Why {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Why {
            strategy_version: self.policies.version(strategy, Which::Serving),
            threshold: None,
            sorter: Some(sorted.sorter.to_owned()),
            sorter_version: sorted.version.clone(),
            rank: Some((count(position + 1), count(sorted.sorted.order.len()))),
        }
    }

    /// Validates and orders `candidates` with the configured sorter; if it
    /// fails, as `on_fault` says.
    fn sort(
        &self,
        strategies: &[String],
        candidates: &mut [Candidate],
        on_fault: OnSorterFault,
        report: &mut CycleReport,
    ) -> Option<SortedBy> {
        let fallback = on_fault == OnSorterFault::BuiltIn;
        let name = &self.settings.sorter;
        let config = self.settings.policy(name).config;
        let why = match self
            .policies
            .sort(name, Which::Serving, strategies, candidates, &config)
        {
            Ok(mut sorted) => {
                record_refusals(name, strategies, candidates, &sorted, report);
                protect(strategies, candidates, &mut sorted, report);
                return Some(SortedBy {
                    sorted,
                    sorter: name.clone(),
                    version: self.policies.version(name, Which::Serving),
                });
            }
            Err(why) => why,
        };
        report.skipped.push(Skipped::Sorter {
            name: name.clone(),
            why,
            fallback: fallback.then(|| FALLBACK_SORTER.to_owned()),
        });
        if !fallback {
            return None;
        }
        let fallback_config = self.settings.policy(FALLBACK_SORTER).config;
        let mut sorted = self
            .policies
            .sort(
                FALLBACK_SORTER,
                Which::BuiltIn,
                strategies,
                candidates,
                &fallback_config,
            )
            .ok()?;
        record_refusals(FALLBACK_SORTER, strategies, candidates, &sorted, report);
        protect(strategies, candidates, &mut sorted, report);
        Some(SortedBy {
            sorted,
            sorter: FALLBACK_SORTER.to_owned(),
            version: self.policies.version(FALLBACK_SORTER, Which::BuiltIn),
        })
    }
}

/// A sorter's answer, and which sorter (and version) gave it.
struct SortedBy {
    sorted: Sorted,
    sorter: String,
    version: Option<String>,
}

/// The threshold that held, in words: `memory.available at 52428800,
/// threshold 524288000, met hard`.
fn threshold_words(met: &MetThreshold) -> String {
    let t = &met.threshold;
    let level = match t.met {
        MetLevel::Hard => "hard",
        MetLevel::Soft => "soft",
        MetLevel::Report => "to report",
        MetLevel::NotMet => "not",
    };
    format!(
        "{} at {}, threshold {}, met {level}",
        t.signal, t.observed, t.threshold
    )
}

/// What a choice does when the configured sorter does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnSorterFault {
    /// Sorts with the built-in sorter instead (hard pressure, force evictions).
    BuiltIn,
    /// Takes no victim this cycle (soft pressure).
    Skip,
}

/// Notes every candidate `sorter` refused in `sorted`.
fn record_refusals(
    sorter: &str,
    strategies: &[String],
    candidates: &[Candidate],
    sorted: &Sorted,
    report: &mut CycleReport,
) {
    for rejection in &sorted.rejected {
        let candidate = &candidates[rejection.index as usize];
        report.refusals.push(Refusal {
            pod: format!("{}/{}", candidate.pod.namespace, candidate.pod.name),
            strategy: strategies
                .get(candidate.strategy as usize)
                .cloned()
                .unwrap_or_default(),
            sorter: sorter.to_owned(),
            reason: rejection.reason.clone(),
        });
    }
}

/// A candidate proposed by the strategy at `strategy` in the sorter's list.
pub(super) fn candidate(strategy: usize, urgency: Urgency, pod: &Pod) -> Candidate {
    Candidate {
        pod: pod.clone(),
        strategy: u32::try_from(strategy).unwrap_or(u32::MAX),
        urgency: urgency.into(),
    }
}

/// The candidates for `evictions`, all of one strategy (the sorter's first).
/// Every UID is in `pods`: answers naming a pod that was not offered are
/// rejected as faults before they get here.
fn to_candidates(evictions: &[Eviction], urgency: Urgency, pods: &[Pod]) -> Vec<Candidate> {
    let by_uid: HashMap<&str, &Pod> = pods.iter().map(|p| (p.uid.as_str(), p)).collect();
    evictions
        .iter()
        .map(|e| candidate(0, urgency, by_uid[e.uid.as_str()]))
        .collect()
}

fn group_by_strategy(evictions: &[(String, Eviction)]) -> BTreeMap<&str, Vec<Eviction>> {
    let mut groups: BTreeMap<&str, Vec<Eviction>> = BTreeMap::new();
    for (name, eviction) in evictions {
        groups.entry(name).or_default().push(eviction.clone());
    }
    groups
}

pub(super) fn victim(
    strategy: &str,
    candidate: &Candidate,
    eviction: &Eviction,
    urgency: Urgency,
    scope: Option<String>,
) -> Victim {
    Victim {
        pod: candidate.pod.clone(),
        strategy: strategy.to_owned(),
        reason: eviction.reason.clone(),
        urgency,
        scope,
        grace_period_seconds: eviction.grace_period_seconds,
        dry_run: false,
        override_pdb: false,
        why: Why::default(),
    }
}

/// Why the host never evicts `pod`, whatever a sorter answers, if it never does.
fn protected(pod: &Pod) -> Option<&'static str> {
    if pod.is_static {
        Some("static pod: vigil never evicts it")
    } else if pod.is_mirror {
        Some("mirror pod: vigil never evicts it")
    } else if pod.is_critical {
        Some("system-critical pod: vigil never evicts it")
    } else {
        None
    }
}

/// Moves every protected candidate the sorter placed to its rejections,
/// reported as the host's refusals.
fn protect(
    strategies: &[String],
    candidates: &[Candidate],
    sorted: &mut Sorted,
    report: &mut CycleReport,
) {
    let mut host = Sorted {
        order: Vec::new(),
        rejected: Vec::new(),
    };
    sorted.order.retain(|&index| {
        let Some(reason) = candidates
            .get(index as usize)
            .and_then(|c| protected(&c.pod))
        else {
            return true;
        };
        host.rejected.push(crate::model::SortRejection {
            index,
            reason: reason.to_owned(),
        });
        false
    });
    record_refusals(HOST, strategies, candidates, &host, report);
    sorted.rejected.extend(host.rejected);
}
