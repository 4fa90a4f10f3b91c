//! One eviction cycle: snapshot → every strategy → thresholds, conditions and
//! candidates → victims validated by the sorter → the kill queue → the killer.
//!
//! Differences from katalyst's loop, on purpose:
//! - victims being evicted are remembered and count as reclaim in progress,
//!   so a threshold gets no second victim while its first is terminating;
//! - the queue is not wiped each cycle, and hard evictions go first, so a
//!   slow soft eviction never blocks a hard one;
//! - at most `burst` eviction calls run at once, and their outcomes come
//!   back to the queue: a victim refused by a PodDisruptionBudget is passed
//!   over and the next candidate tried at once; when every candidate of a
//!   hard threshold is refused for `pdb_override_after`, the top one is
//!   deleted as the kubelet would;
//! - a strategy that faults is skipped for that cycle, the others still act;
//!   a faulting sorter makes soft evictions wait, while hard ones are
//!   validated by the built-in sorter.

use super::killer::{KillError, Killer};
use super::policies::{Policies, Unanswered};
use super::queue::{KillQueue, Settled, Urgency};
use super::settings::EvictionSettings;
use super::tracker::{ActiveCondition, MetThreshold, Tracker};
use crate::model::{Candidate, Eviction, MetLevel, Pod, Signal, Snapshot, Sorted, Threshold};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Most decision rounds [`EvictionManager::cycle_through`] runs at one
/// instant while evictions are refused (each round tries the next candidate).
const MAX_ROUNDS: usize = 16;

/// The built-in sorter that validates hard victims when the configured one fails.
const FALLBACK_SORTER: &str = "default-sorter";

/// A pod chosen for eviction, and why.
#[derive(Debug, Clone)]
pub struct Victim {
    /// The pod.
    pub pod: Pod,
    /// The strategy that chose it.
    pub strategy: String,
    /// The strategy's reason.
    pub reason: String,
    /// How urgent the eviction is.
    pub urgency: Urgency,
    /// The threshold scope it was chosen for (none for force and soft candidates).
    pub scope: Option<String>,
    /// Termination grace period the strategy asked for.
    pub grace_period_seconds: Option<u64>,
    /// Decided in dry-run: the killer only asks whether the eviction would be allowed.
    pub dry_run: bool,
    /// Every candidate's eviction was refused for longer than
    /// `pdb_override_after` under a hard threshold: delete the pod instead of
    /// evicting it, as the kubelet would.
    pub override_pdb: bool,
}

/// What the node looks like this cycle.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Node signals; one that could not be read is absent.
    pub signals: Vec<Signal>,
    /// The pods running on the node, candidates for eviction.
    pub pods: Vec<Pod>,
    /// Pods being deleted (they have a `deletionTimestamp`): not candidates,
    /// but reclaim in progress until their grace period ends.
    pub terminating: Vec<Terminating>,
}

/// A pod being deleted.
#[derive(Debug, Clone)]
pub struct Terminating {
    /// The pod's UID.
    pub uid: String,
    /// `namespace/name`.
    pub name: String,
    /// When its grace period ends (its `deletionTimestamp`).
    pub until: SystemTime,
}

/// A victim chosen this cycle.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The victim.
    pub victim: Victim,
    /// Chosen by a dry-run strategy (or in global dry-run): logged, not carried out.
    pub dry_run: bool,
}

/// A candidate the sorter refused to evict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    /// `namespace/name`.
    pub pod: String,
    /// The strategy that proposed it.
    pub strategy: String,
    /// The sorter that refused it.
    pub sorter: String,
    /// The sorter's reason.
    pub reason: String,
}

/// Everything one cycle saw and did.
#[derive(Debug, Default)]
pub struct CycleReport {
    /// Every threshold the strategies reported, met or not, by strategy.
    pub reported: Vec<(String, Threshold)>,
    /// Thresholds reported met, hard first.
    pub thresholds: Vec<MetThreshold>,
    /// Node conditions currently reported.
    pub conditions: Vec<ActiveCondition>,
    /// Victims chosen this cycle.
    pub decisions: Vec<Decision>,
    /// Victims handed to the killer this cycle (dry-run ones included).
    pub requested: Vec<Victim>,
    /// Evictions the killer accepted (filled by
    /// [`EvictionManager::cycle_through`]; the live runner reports outcomes
    /// as they arrive).
    pub started: Vec<Victim>,
    /// Victims left waiting or refused, and why.
    pub deferred: Vec<(Victim, String)>,
    /// Evicted pods that are now gone.
    pub gone: Vec<Victim>,
    /// Victims being evicted at the end of the cycle (calls running, pods terminating).
    pub in_flight: usize,
    /// Things not done this cycle, and why (a strategy faulted, reclaim in progress...).
    pub skipped: Vec<String>,
    /// Candidates the sorter refused this cycle.
    pub refusals: Vec<Refusal>,
}

/// What strategies answered this cycle.
#[derive(Default)]
struct Answers {
    thresholds: Vec<(String, Threshold)>,
    force: Vec<(String, Eviction)>,
    soft: Vec<(String, Eviction)>,
}

impl CycleReport {
    /// Adds a later decision round at the same instant: its view of
    /// thresholds and conditions replaces this one's, its actions add up.
    fn absorb(&mut self, later: CycleReport) {
        self.reported = later.reported;
        self.thresholds = later.thresholds;
        self.conditions = later.conditions;
        self.decisions.extend(later.decisions);
        self.requested.extend(later.requested);
        self.started.extend(later.started);
        self.deferred.extend(later.deferred);
        self.gone.extend(later.gone);
        self.skipped.extend(later.skipped);
        self.refusals.extend(later.refusals);
        self.in_flight = later.in_flight;
    }

    /// Records what became of an eviction call.
    fn record(&mut self, settled: Settled) {
        match settled {
            // A dry-run eviction starts nothing.
            Settled::Accepted(victim) if victim.dry_run => {}
            Settled::Accepted(victim) => self.started.push(victim),
            Settled::Refused(victim, why) => {
                self.deferred.push((victim, format!("refused: {why}")))
            }
            Settled::Waiting(victim, why) => self.deferred.push((victim, why)),
            Settled::Gone(victim) => self.gone.push(victim),
        }
    }
}

/// The eviction loop's state between cycles.
pub struct EvictionManager {
    policies: Arc<dyn Policies>,
    settings: EvictionSettings,
    tracker: Tracker,
    queue: KillQueue,
    last_met: HashMap<String, MetLevel>,
    /// Dry-run victims already asked about, until when they are not asked again.
    dry_runs: HashMap<String, SystemTime>,
    /// Hard thresholds (strategy, scope) whose every candidate is refused, since when.
    blocked: HashMap<(String, String), SystemTime>,
}

impl std::fmt::Debug for EvictionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionManager")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EvictionManager {
    /// A manager deciding with `policies`.
    pub fn new(policies: Arc<dyn Policies>, settings: EvictionSettings) -> Self {
        Self {
            policies,
            settings,
            tracker: Tracker::default(),
            queue: KillQueue::default(),
            last_met: HashMap::new(),
            dry_runs: HashMap::new(),
            blocked: HashMap::new(),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &EvictionSettings {
        &self.settings
    }

    /// Puts new settings in force from the next cycle on (what is being
    /// evicted and the conditions observed carry over).
    pub fn set_settings(&mut self, settings: EvictionSettings) {
        self.settings = settings;
    }

    /// The node conditions to report at `now`.
    pub fn conditions(&self, now: SystemTime) -> Vec<ActiveCondition> {
        self.tracker
            .conditions(now, self.settings.condition_transition)
    }

    /// Runs one cycle at `now` on `node`: decides, and hands the victims
    /// to evict now to the caller in [`CycleReport::requested`]. Each
    /// request's result must come back through [`EvictionManager::outcome`].
    /// `node` is consumed: its pods become the strategies' snapshot as they
    /// are, without a copy.
    pub fn cycle(&mut self, now: SystemTime, node: NodeState) -> CycleReport {
        let mut report = CycleReport::default();
        let present: HashSet<&str> = node
            .pods
            .iter()
            .map(|p| p.uid.as_str())
            .chain(node.terminating.iter().map(|t| t.uid.as_str()))
            .collect();
        report.gone = self
            .queue
            .settle(now, &present, self.settings.in_flight_timeout);
        self.dry_runs.retain(|_, until| *until > now);
        let terminating = foreign_terminating(now, &node.terminating, &self.queue);
        let mut pods = node.pods;
        pods.retain(|p| !self.queue.in_flight(&p.uid));
        let mut snapshot = Snapshot {
            now_ms: now
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            signals: node.signals,
            pods,
            last_met: MetLevel::NotMet,
            config: String::new(),
        };
        let mut strategies = self.policies.strategies();
        strategies.retain(|name| self.settings.policy(name).enabled);
        strategies.sort();
        let answers = self.ask_strategies(&strategies, &mut snapshot, &mut report);
        let met = self.tracker.observe(now, &answers.thresholds);
        report.reported = answers.thresholds.clone();
        report.conditions = self
            .tracker
            .conditions(now, self.settings.condition_transition);
        self.blocked.retain(|(strategy, scope), _| {
            met.iter()
                .any(|m| &m.strategy == strategy && &m.threshold.scope == scope)
        });

        // Queued at once, so a later threshold that picks the same pod shares it.
        for threshold in met.iter().filter(|m| m.past_grace) {
            if let Some(pod) = &terminating {
                report.skipped.push(format!(
                    "{}/{}: reclaim in progress, {pod} is terminating",
                    threshold.strategy, threshold.threshold.scope
                ));
                continue;
            }
            let chosen = self.threshold_victim(now, threshold, &mut snapshot, &mut report);
            self.enqueue(now, chosen.into_iter().collect(), &mut report);
        }
        let mut chosen = self.force_victims(&answers.force, &snapshot.pods, &mut report);
        let forced: HashSet<&str> = answers.force.iter().map(|(_, e)| e.uid.as_str()).collect();
        let soft: Vec<_> = answers
            .soft
            .iter()
            .filter(|(_, e)| !forced.contains(e.uid.as_str()))
            .cloned()
            .collect();
        chosen.extend(self.best_soft_candidate(&soft, &snapshot.pods, &mut report));
        report.thresholds = met;

        self.enqueue(now, chosen, &mut report);
        self.drop_unwanted(&report.thresholds, &answers);
        let started = self.queue.start(now, self.settings.burst);
        report.requested.extend(started.requested);
        report.deferred = started.deferred;
        report.in_flight = self.queue.in_flight_count();
        report
    }

    /// Records the result of the eviction call for `victim`: accepted, the
    /// pod is terminating; refused, it is passed over for a period and the
    /// next cycle tries the next candidate; not asked, it waits again.
    pub fn outcome(
        &mut self,
        now: SystemTime,
        victim: &Victim,
        result: Result<(), KillError>,
    ) -> Option<Settled> {
        if victim.dry_run {
            return Some(match result {
                Ok(()) => Settled::Accepted(victim.clone()),
                Err(KillError::Refused(why)) => Settled::Refused(victim.clone(), why),
                Err(KillError::Unavailable(why)) => Settled::Waiting(victim.clone(), why),
                Err(KillError::Gone(_)) => Settled::Gone(victim.clone()),
            });
        }
        if result.is_ok()
            && let Some(scope) = &victim.scope
        {
            // The threshold got a victim: its wait for a PDB override is over.
            self.blocked
                .remove(&(victim.strategy.clone(), scope.clone()));
        }
        self.queue
            .outcome(now, &victim.pod.uid, result, self.settings.period)
    }

    /// Runs a cycle at `now` and carries out its requests through `killer`,
    /// one after another, recording each outcome; while evictions are refused,
    /// decides again at the same instant so the next candidate gets its turn
    /// (at most [`MAX_ROUNDS`] times). What the live runner does as outcomes
    /// arrive, in one call: for simulations and tests.
    pub async fn cycle_through(
        &mut self,
        now: SystemTime,
        node: &NodeState,
        killer: &dyn Killer,
    ) -> CycleReport {
        let mut report = self.cycle(now, node.clone());
        let mut pending = report.requested.clone();
        for _ in 0..MAX_ROUNDS {
            let mut refused = false;
            for victim in std::mem::take(&mut pending) {
                let result = killer.evict(&victim).await;
                refused |= !victim.dry_run && matches!(result, Err(KillError::Refused(_)));
                if let Some(settled) = self.outcome(now, &victim, result) {
                    report.record(settled);
                }
            }
            if !refused {
                break;
            }
            let next = self.cycle(now, node.clone());
            pending = next.requested.clone();
            report.absorb(next);
        }
        report
    }

    /// Calls `evaluate` on every strategy; one that faults or declines is skipped.
    fn ask_strategies(
        &mut self,
        strategies: &[String],
        snapshot: &mut Snapshot,
        report: &mut CycleReport,
    ) -> Answers {
        let mut answers = Answers::default();
        for name in strategies {
            self.prepare_snapshot(name, snapshot);
            match self.policies.evaluate(name, snapshot) {
                Err(why @ Unanswered::Declined(_)) => {
                    report.skipped.push(format!("strategy {name} {why}"))
                }
                Err(why) => report
                    .skipped
                    .push(format!("strategy {name} skipped: {why}")),
                Ok(decision) => {
                    self.last_met.insert(name.clone(), decision.threshold.met);
                    answers.thresholds.push((name.clone(), decision.threshold));
                    answers.force.extend(
                        decision
                            .force_evictions
                            .into_iter()
                            .map(|e| (name.clone(), e)),
                    );
                    answers.soft.extend(
                        decision
                            .soft_candidates
                            .into_iter()
                            .map(|e| (name.clone(), e)),
                    );
                }
            }
        }
        answers
    }

    fn prepare_snapshot(&self, strategy: &str, snapshot: &mut Snapshot) {
        snapshot.last_met = self
            .last_met
            .get(strategy)
            .copied()
            .unwrap_or(MetLevel::NotMet);
        snapshot.config = self.settings.policy(strategy).config;
    }

    /// The top valid victim for a threshold past its grace period, unless a
    /// victim chosen for it earlier is still waiting or terminating. Pods
    /// whose eviction was refused lately are passed over; when all are, a
    /// hard threshold deletes its top victim after `pdb_override_after`.
    fn threshold_victim(
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
            report.skipped.push(format!(
                "{name}/{scope}: reclaim in progress, no new victim"
            ));
            return None;
        }
        self.prepare_snapshot(name, snapshot);
        let n = u32::try_from(snapshot.pods.len()).unwrap_or(u32::MAX);
        let victims = match self.policies.top_victims(name, snapshot, scope, n) {
            Ok(victims) => victims,
            Err(why @ Unanswered::Declined(_)) => {
                report
                    .skipped
                    .push(format!("strategy {name} gave no victims: {why}"));
                return None;
            }
            Err(why) => {
                report
                    .skipped
                    .push(format!("strategy {name} top victims skipped: {why}"));
                return None;
            }
        };
        let mut candidates = to_candidates(&victims, urgency, &snapshot.pods);
        let sorted = self.sort(
            std::slice::from_ref(name),
            &mut candidates,
            urgency == Urgency::Hard,
            report,
        )?;
        let rejected: HashSet<u32> = sorted.rejected.iter().map(|r| r.index).collect();
        // The strategy's order decides; the sorter only vetoes.
        let valid: Vec<usize> = (0..candidates.len())
            .filter(|i| !rejected.contains(&(*i as u32)))
            .collect();
        let open = valid
            .iter()
            .copied()
            .find(|&i| !self.queue.refused(&candidates[i].pod.uid));
        let key = (name.clone(), scope.clone());
        let (index, override_pdb) = match (open, valid.first()) {
            (Some(index), _) => (index, false),
            (None, None) => return None,
            (None, Some(&top)) => {
                let since = *self.blocked.entry(key).or_insert(now);
                let due = self.settings.pdb_override_after.filter(|after| {
                    urgency == Urgency::Hard
                        && now.duration_since(since).unwrap_or_default() >= *after
                });
                if due.is_none() {
                    report.skipped.push(format!(
                        "{name}/{scope}: every candidate's eviction was refused; waiting"
                    ));
                    return None;
                }
                (top, true)
            }
        };
        let (candidate, eviction) = (&candidates[index], &victims[index]);
        if self.queue.holds(&candidate.pod.uid) {
            // Another threshold already evicts this pod: count on it, pick no other.
            self.queue.share(&candidate.pod.uid, name, scope, urgency);
            report.skipped.push(format!(
                "{name}/{scope}: reclaim in progress, {} is already being evicted",
                candidate.pod.name
            ));
            return None;
        }
        let mut chosen = victim(name, candidate, eviction, urgency, Some(scope.clone()));
        if override_pdb {
            tracing::warn!(pod = %chosen.pod.name, strategy = %name, "every candidate's eviction was refused under hard pressure; deleting the top victim despite its PodDisruptionBudget");
            chosen.override_pdb = true;
        }
        Some(chosen)
    }

    /// Every force eviction the sorter accepts.
    fn force_victims(
        &self,
        force: &[(String, Eviction)],
        pods: &[Pod],
        report: &mut CycleReport,
    ) -> Vec<Victim> {
        let mut victims = Vec::new();
        for (name, group) in group_by_strategy(force) {
            let mut candidates = to_candidates(&group, Urgency::Force, pods);
            let name = name.to_owned();
            let Some(sorted) =
                self.sort(std::slice::from_ref(&name), &mut candidates, true, report)
            else {
                continue;
            };
            for index in sorted.order {
                victims.push(victim(
                    &name,
                    &candidates[index as usize],
                    &group[index as usize],
                    Urgency::Force,
                    None,
                ));
            }
        }
        victims
    }

    /// The soft candidate the sorter puts first; none if the sorter fails.
    fn best_soft_candidate(
        &self,
        soft: &[(String, Eviction)],
        pods: &[Pod],
        report: &mut CycleReport,
    ) -> Option<Victim> {
        let by_uid: HashMap<&str, &Pod> = pods.iter().map(|p| (p.uid.as_str(), p)).collect();
        let open: Vec<&(String, Eviction)> = soft
            .iter()
            .filter(|(_, e)| !self.queue.holds(&e.uid))
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
        let sorted = self.sort(&strategies, &mut candidates, false, report)?;
        let first = *sorted.order.first()? as usize;
        let (name, eviction) = open[first];
        Some(victim(
            name,
            &candidates[first],
            eviction,
            Urgency::Soft,
            None,
        ))
    }

    /// Validates and orders `candidates` with the configured sorter; if it
    /// fails and `fallback` is set, with the built-in sorter instead.
    fn sort(
        &self,
        strategies: &[String],
        candidates: &mut [Candidate],
        fallback: bool,
        report: &mut CycleReport,
    ) -> Option<Sorted> {
        let name = &self.settings.sorter;
        let config = self.settings.policy(name).config;
        let why = match self
            .policies
            .sort(name, false, strategies, candidates, &config)
        {
            Ok(sorted) => {
                record_refusals(name, strategies, candidates, &sorted, report);
                return Some(sorted);
            }
            Err(why) => why,
        };
        if !fallback {
            report
                .skipped
                .push(format!("sorter {name} {why}; soft evictions wait"));
            return None;
        }
        report.skipped.push(format!(
            "sorter {name} {why}; using the built-in {FALLBACK_SORTER}"
        ));
        let fallback_config = self.settings.policy(FALLBACK_SORTER).config;
        let sorted = self
            .policies
            .sort(
                FALLBACK_SORTER,
                true,
                strategies,
                candidates,
                &fallback_config,
            )
            .ok()?;
        record_refusals(FALLBACK_SORTER, strategies, candidates, &sorted, report);
        Some(sorted)
    }

    /// Queues the chosen victims; a dry-run victim is handed to the killer
    /// (as a dry-run request) once per in-flight timeout, never queued.
    fn enqueue(&mut self, now: SystemTime, chosen: Vec<Victim>, report: &mut CycleReport) {
        for mut victim in chosen {
            let dry_run = self.settings.dry_run || self.settings.policy(&victim.strategy).dry_run;
            if dry_run {
                tracing::info!(pod = %victim.pod.name, strategy = %victim.strategy, reason = %victim.reason, "dry run: would evict");
                victim.dry_run = true;
                if !self.dry_runs.contains_key(&victim.pod.uid) {
                    let until = now + self.settings.in_flight_timeout;
                    self.dry_runs.insert(victim.pod.uid.clone(), until);
                    report.requested.push(victim.clone());
                }
            } else if !self.queue.push(victim.clone()) {
                continue;
            }
            report.decisions.push(Decision { victim, dry_run });
        }
    }

    /// Drops waiting victims whose reason no longer holds this cycle.
    fn drop_unwanted(&mut self, met: &[MetThreshold], answers: &Answers) {
        let thresholds: HashSet<(&str, &str, Urgency)> = met
            .iter()
            .filter(|m| m.past_grace)
            .map(|m| {
                let urgency = if m.threshold.met == MetLevel::Hard {
                    Urgency::Hard
                } else {
                    Urgency::Soft
                };
                (m.strategy.as_str(), m.threshold.scope.as_str(), urgency)
            })
            .collect();
        let listed: HashSet<(&str, &str)> = answers
            .force
            .iter()
            .chain(&answers.soft)
            .map(|(s, e)| (s.as_str(), e.uid.as_str()))
            .collect();
        self.queue.retain_waiting(|v| match &v.scope {
            Some(scope) => thresholds.contains(&(v.strategy.as_str(), scope.as_str(), v.urgency)),
            None => listed.contains(&(v.strategy.as_str(), v.pod.uid.as_str())),
        });
    }
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
fn candidate(strategy: usize, urgency: Urgency, pod: &Pod) -> Candidate {
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

fn victim(
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
    }
}

/// A pod terminating for another reason than one of our evictions, still
/// within its grace period: reclaim in progress.
fn foreign_terminating(
    now: SystemTime,
    terminating: &[Terminating],
    queue: &KillQueue,
) -> Option<String> {
    terminating
        .iter()
        .find(|t| t.until > now && !queue.holds(&t.uid))
        .map(|t| t.name.clone())
}

#[cfg(test)]
mod tests {
    //! The manager alone, with an in-memory fake of its policies: one hard
    //! strategy whose victims are the test's, a sorter that refuses what the
    //! test says.

    use super::*;
    use crate::model::{
        CandidateUrgency, Decision as Answer, QosClass, Resources, Signal, SortRejection, Usage,
    };
    use std::sync::Mutex;
    use std::time::Duration;

    /// Every strategy is calm but `fake`.
    #[derive(Default)]
    struct Fake {
        met: Mutex<Option<MetLevel>>,
        victims: Vec<String>,
        /// (strategy, UID): soft candidates, from strategies besides `fake`.
        soft: Vec<(String, String)>,
        refused_by_sorter: Vec<String>,
        sorter_faults: bool,
        /// What each sort was given: the strategies, and each candidate's
        /// strategy index and urgency.
        sorted: Mutex<Vec<SortInput>>,
    }

    /// The strategies a sort was given, and its candidates' strategy index and urgency.
    type SortInput = (Vec<String>, Vec<(u32, CandidateUrgency)>);

    impl Policies for Fake {
        fn strategies(&self) -> Vec<String> {
            let mut names = vec!["fake".to_owned()];
            names.extend(self.soft.iter().map(|(name, _)| name.clone()));
            names
        }

        fn evaluate(&self, name: &str, _: &mut Snapshot) -> Result<Answer, Unanswered> {
            let met = match name {
                "fake" => self.met.lock().unwrap().unwrap_or(MetLevel::NotMet),
                _ => MetLevel::NotMet,
            };
            let soft_candidates = self
                .soft
                .iter()
                .filter(|(strategy, _)| strategy == name)
                .map(|(_, uid)| Eviction {
                    uid: uid.clone(),
                    reason: "fake".into(),
                    grace_period_seconds: None,
                })
                .collect();
            Ok(Answer {
                threshold: crate::model::memory_threshold(met),
                soft_candidates,
                force_evictions: vec![],
            })
        }

        fn top_victims(
            &self,
            _: &str,
            snapshot: &mut Snapshot,
            _: &str,
            _: u32,
        ) -> Result<Vec<Eviction>, Unanswered> {
            Ok(self
                .victims
                .iter()
                .filter(|uid| snapshot.pods.iter().any(|p| &&p.uid == uid))
                .map(|uid| Eviction {
                    uid: uid.clone(),
                    reason: "fake".into(),
                    grace_period_seconds: None,
                })
                .collect())
        }

        fn sort(
            &self,
            _: &str,
            builtin: bool,
            strategies: &[String],
            candidates: &mut [Candidate],
            _: &str,
        ) -> Result<Sorted, Unanswered> {
            let given = candidates.iter().map(|c| (c.strategy, c.urgency)).collect();
            self.sorted
                .lock()
                .unwrap()
                .push((strategies.to_vec(), given));
            if self.sorter_faults && !builtin {
                return Err(Unanswered::Fault("trapped".into()));
            }
            let (mut order, mut rejected) = (vec![], vec![]);
            for (i, c) in candidates.iter().enumerate() {
                if self.refused_by_sorter.contains(&c.pod.uid) {
                    rejected.push(SortRejection {
                        index: i as u32,
                        reason: "refused".into(),
                    });
                } else {
                    order.push(i as u32);
                }
            }
            Ok(Sorted { order, rejected })
        }
    }

    fn pod(uid: &str) -> Pod {
        Pod {
            uid: uid.into(),
            namespace: "default".into(),
            name: uid.into(),
            qos: QosClass::BestEffort,
            priority: 0,
            labels: vec![],
            annotations: vec![],
            requests: Resources {
                memory_bytes: 0,
                cpu_millis: 0,
            },
            limits: Resources {
                memory_bytes: 0,
                cpu_millis: 0,
            },
            usage: Usage {
                memory_working_set_bytes: 0,
                memory_rss_bytes: 0,
                cpu_millis: 0,
                ephemeral_storage_bytes: 0,
                pids: 0,
            },
            start_time_ms: 0,
            owner_kind: None,
            is_static: false,
            is_mirror: false,
            is_critical: false,
            pdb_disruptions_allowed: None,
        }
    }

    fn node(uids: &[&str]) -> NodeState {
        NodeState {
            signals: vec![Signal {
                name: "memory.available".into(),
                value: 1.0,
                capacity: None,
            }],
            pods: uids.iter().map(|u| pod(u)).collect(),
            terminating: vec![],
        }
    }

    fn manager(fake: Fake) -> (EvictionManager, Arc<Fake>) {
        let fake = Arc::new(fake);
        let settings = EvictionSettings {
            pdb_override_after: Some(Duration::from_secs(10)),
            ..EvictionSettings::default()
        };
        (EvictionManager::new(fake.clone(), settings), fake)
    }

    fn hard(fake: &Fake) {
        *fake.met.lock().unwrap() = Some(MetLevel::Hard);
    }

    fn uids(victims: &[Victim]) -> Vec<&str> {
        victims.iter().map(|v| v.pod.uid.as_str()).collect()
    }

    const T0: SystemTime = UNIX_EPOCH;

    #[test]
    fn a_hard_threshold_requests_its_top_victim_the_sorter_allows() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            refused_by_sorter: vec!["a".into()],
            ..Fake::default()
        });
        assert!(m.cycle(T0, node(&["a", "b"])).requested.is_empty(), "calm");
        hard(&fake);
        let report = m.cycle(T0, node(&["a", "b"]));
        assert_eq!(uids(&report.requested), ["b"]);
        assert_eq!(report.conditions[0].name, "MemoryPressure");
    }

    #[test]
    fn the_sorter_is_told_which_strategy_proposed_each_candidate_and_how_urgently() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into()],
            soft: vec![("zeta".into(), "c".into()), ("alpha".into(), "b".into())],
            ..Fake::default()
        });
        hard(&fake);
        m.cycle(T0, node(&["a", "b", "c"]));
        let sorted = fake.sorted.lock().unwrap();
        let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            *sorted,
            [
                (names(&["fake"]), vec![(0, CandidateUrgency::Hard)]),
                (
                    names(&["alpha", "zeta"]),
                    vec![(0, CandidateUrgency::Soft), (1, CandidateUrgency::Soft)]
                ),
            ]
        );
    }

    #[test]
    fn a_requested_victim_is_reclaim_in_progress_until_its_pod_is_gone() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let first = m.cycle(T0, node(&["a", "b"])).requested;
        assert_eq!(uids(&first), ["a"]);
        // The call is still running: no second victim.
        assert!(m.cycle(T0, node(&["a", "b"])).requested.is_empty());
        assert!(matches!(
            m.outcome(T0, &first[0], Ok(())),
            Some(Settled::Accepted(_))
        ));
        assert!(m.cycle(T0, node(&["a", "b"])).requested.is_empty());
        // The pod is gone: the next one is picked.
        let report = m.cycle(T0, node(&["b"]));
        assert_eq!(uids(&report.gone), ["a"]);
        assert_eq!(uids(&report.requested), ["b"]);
    }

    #[test]
    fn a_refusal_passes_the_turn_and_the_refused_pod_comes_back_after_a_period() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let all = node(&["a", "b"]);
        let first = m.cycle(T0, all.clone()).requested;
        let refused = m.outcome(T0, &first[0], Err(KillError::Refused("pdb".into())));
        assert!(matches!(refused, Some(Settled::Refused(..))));
        assert_eq!(uids(&m.cycle(T0, all.clone()).requested), ["b"]);
        let second = m.cycle(T0, all.clone());
        assert!(second.requested.is_empty(), "b's call runs");
        let later = T0 + m.settings().period;
        m.outcome(later, &first[0], Ok(()));
        let b = Victim {
            pod: pod("b"),
            ..first[0].clone()
        };
        m.outcome(later, &b, Err(KillError::Refused("pdb".into())));
        assert_eq!(
            uids(&m.cycle(later, all.clone()).requested),
            ["a"],
            "a's refusal is over"
        );
    }

    #[test]
    fn an_unanswered_call_keeps_the_victim_waiting_and_a_gone_pod_needs_no_eviction() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let all = node(&["a", "b"]);
        let first = m.cycle(T0, all.clone()).requested;
        m.outcome(T0, &first[0], Err(KillError::Unavailable("503".into())));
        let again = m.cycle(T0, all.clone()).requested;
        assert_eq!(uids(&again), ["a"], "the same victim, not the next one");
        let gone = m.outcome(T0, &again[0], Err(KillError::Gone("404".into())));
        assert!(matches!(gone, Some(Settled::Gone(_))));
        assert_eq!(uids(&m.cycle(T0, node(&["b"])).requested), ["b"]);
    }

    #[test]
    fn every_candidate_refused_under_hard_pressure_deletes_the_top_one_after_the_delay() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let all = node(&["a", "b"]);
        let mut now = T0;
        // Each candidate is asked and refused; then the manager waits.
        let refuse_all = |m: &mut EvictionManager, now: SystemTime| {
            for _ in 0..2 {
                let requested = m.cycle(now, all.clone()).requested;
                assert!(!requested[0].override_pdb);
                m.outcome(now, &requested[0], Err(KillError::Refused("pdb".into())));
            }
            m.cycle(now, all.clone())
        };
        let waiting = refuse_all(&mut m, now);
        assert!(waiting.requested.is_empty(), "{waiting:?}");
        now += Duration::from_secs(5);
        // Refusals last a period: every candidate is asked again first.
        assert!(
            refuse_all(&mut m, now).requested.is_empty(),
            "5 s: still waiting"
        );
        now += Duration::from_secs(5);
        // 10 s after every candidate was first refused: the top one is deleted.
        let report = refuse_all(&mut m, now);
        assert_eq!(uids(&report.requested), ["a"]);
        assert!(report.requested[0].override_pdb);
    }

    #[test]
    fn a_faulting_sorter_makes_hard_victims_use_the_builtin_one() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into()],
            sorter_faults: true,
            ..Fake::default()
        });
        hard(&fake);
        let report = m.cycle(T0, node(&["a"]));
        assert_eq!(uids(&report.requested), ["a"]);
        assert!(
            report
                .skipped
                .iter()
                .any(|s| s.contains("using the built-in")),
            "{:?}",
            report.skipped
        );
    }

    #[test]
    fn a_pod_terminating_for_another_reason_is_reclaim_in_progress_within_its_grace() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into()],
            ..Fake::default()
        });
        hard(&fake);
        let mut state = node(&["a"]);
        state.terminating.push(Terminating {
            uid: "x".into(),
            name: "default/x".into(),
            until: T0 + Duration::from_secs(30),
        });
        let report = m.cycle(T0, state.clone());
        assert!(report.requested.is_empty());
        assert!(
            report
                .skipped
                .iter()
                .any(|s| s.contains("default/x is terminating"))
        );
        let later = T0 + Duration::from_secs(30);
        assert_eq!(uids(&m.cycle(later, state.clone()).requested), ["a"]);
    }
}
