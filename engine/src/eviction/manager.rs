//! One eviction cycle: snapshot → every strategy → thresholds, conditions and
//! candidates → victims validated by the sorter → the kill queue → the killer.
//!
//! Differences from katalyst's loop, on purpose:
//! - victims being evicted are remembered and count as reclaim in progress,
//!   so a threshold gets no second victim while its first is terminating;
//! - the queue is not wiped each cycle, and hard evictions go first, so a
//!   slow soft eviction never blocks a hard one;
//! - at most `burst` evictions start per cycle;
//! - a strategy that faults is skipped for that cycle, the others still act;
//!   a faulting sorter makes soft evictions wait, while hard ones are
//!   validated by the built-in sorter.

use super::killer::Killer;
use super::queue::{KillQueue, Urgency};
use super::settings::EvictionSettings;
use super::tracker::{ActiveCondition, MetThreshold, Tracker};
use crate::policy::bindings::{
    Candidate, Eviction, MetLevel, Pod, Signal, Snapshot, Sorted, Threshold,
};
use crate::policy::{Policy, Registry, World};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

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
}

/// What the node looks like this cycle.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Node signals; one that could not be read is absent.
    pub signals: Vec<Signal>,
    /// The pods running on the node.
    pub pods: Vec<Pod>,
}

/// A victim chosen this cycle.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The victim.
    pub victim: Victim,
    /// Chosen by a dry-run strategy (or in global dry-run): logged, not carried out.
    pub dry_run: bool,
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
    /// Evictions started this cycle.
    pub started: Vec<Victim>,
    /// Victims left waiting, and why.
    pub deferred: Vec<(Victim, String)>,
    /// Evicted pods that are now gone.
    pub gone: Vec<Victim>,
    /// Things not done this cycle, and why (a strategy faulted, reclaim in progress...).
    pub skipped: Vec<String>,
}

/// What strategies answered this cycle.
#[derive(Default)]
struct Answers {
    thresholds: Vec<(String, Threshold)>,
    force: Vec<(String, Eviction)>,
    soft: Vec<(String, Eviction)>,
}

/// The eviction loop's state between cycles.
pub struct EvictionManager {
    registry: Arc<Registry>,
    settings: EvictionSettings,
    killer: Arc<dyn Killer>,
    tracker: Tracker,
    queue: KillQueue,
    last_met: HashMap<String, MetLevel>,
}

impl std::fmt::Debug for EvictionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionManager")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EvictionManager {
    /// A manager deciding with `registry`'s policies and evicting through `killer`.
    pub fn new(
        registry: Arc<Registry>,
        settings: EvictionSettings,
        killer: Arc<dyn Killer>,
    ) -> Self {
        Self {
            registry,
            settings,
            killer,
            tracker: Tracker::default(),
            queue: KillQueue::default(),
            last_met: HashMap::new(),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &EvictionSettings {
        &self.settings
    }

    /// The node conditions to report at `now`.
    pub fn conditions(&self, now: SystemTime) -> Vec<ActiveCondition> {
        self.tracker
            .conditions(now, self.settings.condition_transition)
    }

    /// Runs one cycle at `now` on `node`.
    pub fn cycle(&mut self, now: SystemTime, node: &NodeState) -> CycleReport {
        let mut report = CycleReport::default();
        let present: HashSet<&str> = node.pods.iter().map(|p| p.uid.as_str()).collect();
        report.gone = self
            .queue
            .settle(now, &present, self.settings.in_flight_timeout);
        let mut snapshot = Snapshot {
            now_ms: now
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            signals: node.signals.clone(),
            pods: node
                .pods
                .iter()
                .filter(|p| !self.queue.in_flight(&p.uid))
                .cloned()
                .collect(),
            last_met: MetLevel::NotMet,
            config: String::new(),
        };
        let strategies: BTreeMap<String, Arc<Policy>> = self
            .registry
            .of_world(World::EvictionStrategy)
            .into_iter()
            .filter(|p| self.settings.policy(p.name()).enabled)
            .map(|p| (p.name().to_owned(), p))
            .collect();
        let answers = self.ask_strategies(&strategies, &mut snapshot, &mut report);
        let met = self.tracker.observe(now, &answers.thresholds);
        report.reported = answers.thresholds.clone();
        report.conditions = self
            .tracker
            .conditions(now, self.settings.condition_transition);

        // Queued at once, so a later threshold that picks the same pod shares it.
        for threshold in met.iter().filter(|m| m.past_grace) {
            let chosen = self.threshold_victim(threshold, &strategies, &mut snapshot, &mut report);
            self.enqueue(chosen.into_iter().collect(), &mut report);
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

        self.enqueue(chosen, &mut report);
        self.drop_unwanted(&report.thresholds, &answers);
        let started = self
            .queue
            .start(now, self.settings.burst, self.killer.as_ref());
        for (victim, error) in &started.failed {
            report
                .skipped
                .push(format!("eviction of {} failed: {error}", victim.pod.name));
        }
        report.started = started.started;
        report.deferred = started.deferred;
        report
    }

    /// Calls `evaluate` on every strategy; one that faults or declines is skipped.
    fn ask_strategies(
        &mut self,
        strategies: &BTreeMap<String, Arc<Policy>>,
        snapshot: &mut Snapshot,
        report: &mut CycleReport,
    ) -> Answers {
        let mut answers = Answers::default();
        for (name, strategy) in strategies {
            self.prepare_snapshot(name, snapshot);
            match self.registry.call(strategy, |p| p.evaluate(snapshot)) {
                Err(fault) => report
                    .skipped
                    .push(format!("strategy {name} skipped: {fault}")),
                Ok(Err(reason)) => report
                    .skipped
                    .push(format!("strategy {name} declined: {reason}")),
                Ok(Ok(decision)) => {
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
    /// victim chosen for it earlier is still waiting or terminating.
    fn threshold_victim(
        &mut self,
        met: &MetThreshold,
        strategies: &BTreeMap<String, Arc<Policy>>,
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
        let strategy = strategies.get(name)?;
        self.prepare_snapshot(name, snapshot);
        let n = u32::try_from(snapshot.pods.len()).unwrap_or(u32::MAX);
        let victims = match self
            .registry
            .call(strategy, |p| p.top_victims(snapshot, scope, n))
        {
            Ok(Ok(victims)) => victims,
            Err(fault) => {
                report
                    .skipped
                    .push(format!("strategy {name} top victims skipped: {fault}"));
                return None;
            }
            Ok(Err(reason)) => {
                report
                    .skipped
                    .push(format!("strategy {name} gave no victims: {reason}"));
                return None;
            }
        };
        let candidates = to_candidates(name, &victims, &snapshot.pods);
        let sorted = self.sort(&candidates, urgency == Urgency::Hard, report)?;
        let rejected: HashSet<u32> = sorted.rejected.iter().map(|r| r.index).collect();
        // The strategy's order decides; the sorter only vetoes.
        let index = (0..candidates.len()).find(|i| !rejected.contains(&(*i as u32)))?;
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
        Some(victim(candidate, eviction, urgency, Some(scope.clone())))
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
            let candidates = to_candidates(name, &group, pods);
            let Some(sorted) = self.sort(&candidates, true, report) else {
                continue;
            };
            for index in sorted.order {
                victims.push(victim(
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
        let candidates: Vec<Candidate> = open
            .iter()
            .filter_map(|(name, e)| {
                by_uid
                    .get(e.uid.as_str())
                    .map(|pod| candidate(name, e, pod))
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let sorted = self.sort(&candidates, false, report)?;
        let first = *sorted.order.first()? as usize;
        Some(victim(
            &candidates[first],
            &open[first].1,
            Urgency::Soft,
            None,
        ))
    }

    /// Validates and orders `candidates` with the configured sorter; if it
    /// fails and `fallback` is set, with the built-in sorter instead.
    fn sort(
        &self,
        candidates: &[Candidate],
        fallback: bool,
        report: &mut CycleReport,
    ) -> Option<Sorted> {
        let name = &self.settings.sorter;
        let config = self.settings.policy(name).config;
        let answer = match self.registry.get(name) {
            Some(sorter) => match self.registry.call(&sorter, |p| p.sort(candidates, &config)) {
                Ok(Ok(sorted)) => return Some(sorted),
                Ok(Err(reason)) => format!("sorter {name} declined: {reason}"),
                Err(fault) => format!("sorter {name} {fault}"),
            },
            None => format!("sorter {name} is not loaded"),
        };
        if !fallback {
            report
                .skipped
                .push(format!("{answer}; soft evictions wait"));
            return None;
        }
        report
            .skipped
            .push(format!("{answer}; using the built-in {FALLBACK_SORTER}"));
        let builtin = self.registry.builtin(FALLBACK_SORTER)?;
        let fallback_config = self.settings.policy(FALLBACK_SORTER).config;
        match self
            .registry
            .call(&builtin, |p| p.sort(candidates, &fallback_config))
        {
            Ok(Ok(sorted)) => Some(sorted),
            _ => None,
        }
    }

    /// Queues the chosen victims, or records them only, for dry-run strategies.
    fn enqueue(&mut self, chosen: Vec<Victim>, report: &mut CycleReport) {
        for victim in chosen {
            let dry_run = self.settings.dry_run || self.settings.policy(&victim.strategy).dry_run;
            if dry_run {
                tracing::info!(pod = %victim.pod.name, strategy = %victim.strategy, reason = %victim.reason, "dry run: would evict");
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

fn candidate(strategy: &str, eviction: &Eviction, pod: &Pod) -> Candidate {
    Candidate {
        pod: pod.clone(),
        strategy: strategy.to_owned(),
        reason: eviction.reason.clone(),
    }
}

/// The candidates for `evictions`. Every UID is in `pods`: answers naming a
/// pod that was not offered are rejected as faults before they get here.
fn to_candidates(strategy: &str, evictions: &[Eviction], pods: &[Pod]) -> Vec<Candidate> {
    let by_uid: HashMap<&str, &Pod> = pods.iter().map(|p| (p.uid.as_str(), p)).collect();
    evictions
        .iter()
        .map(|e| candidate(strategy, e, by_uid[e.uid.as_str()]))
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
    candidate: &Candidate,
    eviction: &Eviction,
    urgency: Urgency,
    scope: Option<String>,
) -> Victim {
    Victim {
        pod: candidate.pod.clone(),
        strategy: candidate.strategy.clone(),
        reason: eviction.reason.clone(),
        urgency,
        scope,
        grace_period_seconds: eviction.grace_period_seconds,
    }
}
