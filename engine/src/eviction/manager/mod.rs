//! One eviction cycle: snapshot → every strategy → thresholds, conditions and
//! candidates → victims validated by the sorter → the kill queue → the killer.
//!
//! Differences from katalyst's loop, on purpose:
//! - victims being evicted are remembered and count as reclaim in progress,
//!   so a threshold gets no second victim while its first is terminating;
//! - the queue is not wiped each cycle, and hard evictions go first, so a
//!   slow soft eviction never blocks a hard one;
//! - at most `burst` eviction calls run at once, and their outcomes come
//!   back to the queue: a victim refused by a PodDisruptionBudget, or one
//!   the API server will not evict, is passed over and the next candidate
//!   tried at once (force and soft candidates too); throttling holds every
//!   call back and passes nobody over; when every candidate of a hard
//!   threshold is refused by budgets for `pdb_override_after`, and its
//!   strategy allows it, the top one is deleted as the kubelet would — at
//!   most once per budget per `pdb_override_window`, never on a stall
//!   signal, never in dry run;
//! - the host decides what no policy may: grace periods (hard evictions
//!   get `hard_grace_period`, others at most `max_pod_grace_period`, none
//!   less than a second: 0 would be a force delete),
//!   static, mirror and system-critical pods are never evicted whatever the
//!   sorter says, taint effects are `NoSchedule` and `PreferNoSchedule`
//!   (`NoExecute` only when allowed), and a dry-run strategy taints nothing;
//! - a pod terminating for another reason holds thresholds back for at
//!   most [`FOREIGN_TERMINATING_WAIT`], not its whole grace period;
//! - a pod the kubelet evicted or is evicting holds back the thresholds on
//!   the resource it reclaims (memory, disk, pids) until its cgroup is gone
//!   or [`FOREIGN_TERMINATING_WAIT`] has passed: the kubelet's victim is
//!   reclaim in progress as vigil's own are, so one pressure never costs
//!   two pods, one from each;
//! - what vigil evicts beyond the kubelet (soft and force evictions, hard
//!   thresholds on stalls or a policy's own signals) is capped per node and
//!   per namespace in a window ([`super::limits`]); a hard threshold on a
//!   signal the kubelet also watches never is;
//! - a strategy that faults is skipped for that cycle, the others still act;
//!   a faulting sorter makes soft evictions wait, while hard ones are
//!   validated by the built-in sorter.
//!
//! This file is the cycle itself; [`select`] chooses victims (thresholds,
//! force, soft, the sorter and the host's protection), [`report`] holds
//! what a cycle takes and gives.

mod report;
mod select;
#[cfg(test)]
mod tests;

pub use report::{
    Call, CycleReport, Decision, KubeletEviction, NodeState, PodFacts, RankingFacts, Reclaim,
    Refusal, Skipped, Terminating, Victim, Wanted, Why, Withheld,
};

use super::killer::{KillError, Killer};
use super::kubelet;
use super::limits::Recent;
use super::policies::{Policies, Which};
use super::queue::{KillQueue, Settled, Urgency};
use super::settings::EvictionSettings;
use super::tracker::{ActiveCondition, MetThreshold, Tracker};
use crate::config::MIN_GRACE_PERIOD_SECONDS;
use crate::model::{Eviction, MetLevel, ScopeMet, Snapshot, Threshold};
use crate::signals::catalogue::{self, Resource};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most decision rounds [`EvictionManager::cycle_through`] runs at one
/// instant while evictions are refused (each round tries the next candidate).
const MAX_ROUNDS: usize = 16;

/// The built-in sorter that validates hard victims when the configured one fails.
const FALLBACK_SORTER: &str = crate::base::policy_name::DEFAULT_SORTER;

/// The name under which the host's own refusals are reported.
pub const HOST: &str = "vigil";

/// The longest a pod terminating for another reason than vigil's eviction
/// counts as reclaim in progress (the kubelet's pod cleanup waits as long).
pub const FOREIGN_TERMINATING_WAIT: Duration = Duration::from_secs(30);

/// Taint effects a strategy may ask for; `NoExecute` only when allowed.
const TAINT_EFFECTS: [&str; 2] = ["NoSchedule", "PreferNoSchedule"];

/// What a strategy kept from its last `evaluate`, and what it was kept
/// under: a new version or config of the strategy starts afresh.
#[derive(Debug)]
struct Kept {
    version: Option<String>,
    config: String,
    state: Vec<u8>,
}

/// What strategies answered this cycle.
#[derive(Default)]
struct Answers {
    thresholds: Vec<(String, Threshold)>,
    force: Vec<(String, Eviction)>,
    soft: Vec<(String, Eviction)>,
}

/// Reclaim already under way: a pod terminating for another reason, and
/// the kubelet's evictions by resource.
struct Reclaiming {
    terminating: Option<String>,
    kubelet: Vec<(Option<Resource>, String)>,
}

/// The eviction loop's state between cycles.
pub struct EvictionManager {
    policies: Arc<dyn Policies>,
    settings: EvictionSettings,
    tracker: Tracker,
    queue: KillQueue,
    /// How each strategy's thresholds were met last cycle, by scope.
    last_met: HashMap<String, Vec<ScopeMet>>,
    /// Each strategy's last answered thresholds: one that misses a cycle (a
    /// fault, its deadline) keeps their place beside the kubelet meanwhile.
    last_threshold: BTreeMap<String, Vec<Threshold>>,
    /// What each strategy keeps between calls (reset at a restart, a new
    /// version or a new config of it).
    kept: HashMap<String, Kept>,
    /// Dry-run victims already asked about, until when they are not asked again.
    dry_runs: HashMap<String, SystemTime>,
    /// Hard thresholds (strategy, scope) whose every candidate is refused, since when.
    blocked: HashMap<(String, String), SystemTime>,
    /// When each PodDisruptionBudget was last overridden.
    overridden: HashMap<String, SystemTime>,
    /// Pods terminating for another reason, since when they were first seen.
    foreign: HashMap<String, SystemTime>,
    /// Pods the kubelet evicted, since when they were first seen.
    kubelet: HashMap<String, SystemTime>,
    /// This cycle's facts about pods.
    facts: HashMap<String, PodFacts>,
    /// The capped evictions decided lately.
    recent: Recent,
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
            last_threshold: BTreeMap::new(),
            kept: HashMap::new(),
            dry_runs: HashMap::new(),
            blocked: HashMap::new(),
            overridden: HashMap::new(),
            foreign: HashMap::new(),
            kubelet: HashMap::new(),
            facts: HashMap::new(),
            recent: Recent::default(),
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

    /// Until when the API server asked for no eviction calls, if it did.
    pub fn throttled_until(&self) -> Option<SystemTime> {
        self.queue.throttled_until()
    }

    /// What the strategies enabled now and the sorter read under their
    /// config beyond what every cycle reads: node signals (names or
    /// prefixes) and pod facts, each once — what a node source reads for
    /// the next cycle. A fact that only ranking reads (a strategy's that
    /// sees no pods in `evaluate`, the sorter's) is read only in a cycle
    /// that ranks, unless it is a rate between cycles (cpu throttling).
    pub fn wanted(&self) -> Wanted {
        let mut wanted = Wanted::default();
        let mut names = self.policies.strategies();
        names.retain(|name| self.settings.policy(name).enabled);
        names.push(self.settings.sorter.clone());
        for name in names {
            let config = self.settings.policy(&name).config;
            let Some(declared) = self.policies.declared(&name, &config) else {
                continue;
            };
            for signal in &declared.signals {
                if !wanted.signals.contains(signal) {
                    wanted.signals.push(signal.clone());
                }
            }
            let sorter = name == self.settings.sorter;
            for fact in &declared.keys.facts {
                let every_cycle = (declared.pods_in_evaluate && !sorter)
                    || *fact == crate::model::PodFact::CpuThrottling;
                let into = match every_cycle {
                    true => &mut wanted.facts,
                    false => &mut wanted.ranking_facts,
                };
                if !into.contains(fact) {
                    into.push(*fact);
                }
            }
        }
        let facts = wanted.facts.clone();
        wanted.ranking_facts.retain(|fact| !facts.contains(fact));
        wanted
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
    /// are, without a copy. Its phases: what settled since the last cycle,
    /// the strategies' answers and what they hold, a victim for each
    /// threshold past its grace, then force and soft candidates.
    pub fn cycle(&mut self, now: SystemTime, node: NodeState) -> CycleReport {
        let mut report = CycleReport::default();
        self.settle(now, &node, &mut report);
        self.facts = node.facts;
        let reclaiming = Reclaiming {
            terminating: self.foreign_terminating(now, &node.terminating),
            kubelet: self.kubelet_reclaiming(now, &node.kubelet_evictions),
        };
        let mut pods = node.pods;
        pods.retain(|p| !self.queue.in_flight(&p.uid));
        let mut snapshot = Snapshot {
            now_ms: now
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            signals: node.signals,
            pods,
            last_met: Vec::new(),
            config: String::new(),
            state: Vec::new(),
        };
        let mut strategies = self.policies.strategies();
        strategies.retain(|name| self.settings.policy(name).enabled);
        strategies.sort();
        let answers = self.ask_strategies(&strategies, &mut snapshot, &mut report);
        let met = self.held(now, &strategies, &answers, &snapshot, &mut report);

        // Queued at once, so a later threshold that picks the same pod shares
        // it. A report-only threshold has its condition and nobody evicted.
        let evicting = |m: &&MetThreshold| m.past_grace && m.threshold.met != MetLevel::Report;
        let ranks = met.iter().any(|m| evicting(&m))
            || !answers.force.is_empty()
            || !answers.soft.is_empty();
        if ranks && let Some(ranking) = node.ranking {
            ranking.read(&mut snapshot.pods);
        }
        for threshold in met.iter().filter(evicting) {
            self.evict_for(now, threshold, &reclaiming, &mut snapshot, &mut report);
        }
        self.propose(now, &answers, &snapshot, &mut report);
        report.thresholds = met;
        self.drop_unwanted(&report.thresholds, &answers);
        let started = self.queue.start(now, self.settings.burst);
        report.requested.extend(started.requested);
        report.deferred = started.deferred;
        report.in_flight = self.queue.in_flight_count();
        report
    }

    /// What settled since the last cycle: the calls whose pods are gone,
    /// expired dry runs and PDB overrides.
    fn settle(&mut self, now: SystemTime, node: &NodeState, report: &mut CycleReport) {
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
        let window = self.settings.pdb_override_window;
        self.overridden
            .retain(|_, at| now.duration_since(*at).unwrap_or_default() < window);
    }

    /// What the strategies' thresholds hold at `now` (the tracker's met
    /// thresholds, conditions, and what sits beside the kubelet), what the
    /// strategies no longer enabled kept forgotten.
    fn held(
        &mut self,
        now: SystemTime,
        strategies: &[String],
        answers: &Answers,
        snapshot: &Snapshot,
        report: &mut CycleReport,
    ) -> Vec<MetThreshold> {
        let met = self.tracker.observe(now, &answers.thresholds);
        self.tracker.forget_unless(strategies);
        self.last_threshold
            .retain(|name, _| strategies.contains(name));
        self.kept.retain(|name, _| strategies.contains(name));
        let judged: Vec<(String, Threshold)> = (self.last_threshold.iter())
            .flat_map(|(name, thresholds)| thresholds.iter().map(|t| (name.clone(), t.clone())))
            .collect();
        report.misplaced = kubelet::misplaced(&self.settings.kubelet, &judged, &snapshot.signals);
        report.reported = answers.thresholds.clone();
        report.conditions = self
            .tracker
            .conditions(now, self.settings.condition_transition);
        report.ended_conditions = self.tracker.ended(now, self.settings.condition_transition);
        self.blocked.retain(|(strategy, scope), _| {
            met.iter()
                .any(|m| &m.strategy == strategy && &m.threshold.scope == scope)
        });
        met
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
            // A dry-run request changes nothing the queue keeps.
            return Some(Settled::of(victim.clone(), result));
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
    /// (at most `MAX_ROUNDS` times). What the live runner does as outcomes
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
                refused |= !victim.dry_run && passes_the_turn(&result);
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

    /// Tells `strategy`'s next `evaluate` that its threshold `scope` got a
    /// victim this cycle.
    fn victim_chosen(&mut self, strategy: &str, scope: &str) {
        let met = self.last_met.get_mut(strategy).into_iter().flatten();
        for met in met.filter(|met| met.scope == scope) {
            met.victim = true;
        }
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
                Err(why) => report.skipped.push(Skipped::Strategy {
                    name: name.clone(),
                    call: Call::Evaluate,
                    why,
                }),
                Ok(mut decision) => {
                    let met = (decision.thresholds.iter())
                        .map(|t| ScopeMet {
                            scope: t.scope.clone(),
                            met: t.met,
                            victim: false,
                        })
                        .collect();
                    self.last_met.insert(name.clone(), met);
                    (self.last_threshold).insert(name.clone(), decision.thresholds.clone());
                    if let Some(state) = decision.state.take() {
                        self.keep(name, &snapshot.config, state);
                    }
                    for mut threshold in decision.thresholds {
                        if let Some(condition) = &mut threshold.condition {
                            self.check_effects(name, &mut condition.effects, report);
                        }
                        answers.thresholds.push((name.clone(), threshold));
                    }
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

    /// Keeps the taint effects the host allows; a dry-run strategy taints
    /// nothing (its condition is still reported).
    fn check_effects(&self, strategy: &str, effects: &mut Vec<String>, report: &mut CycleReport) {
        let allowed = |effect: &str| {
            TAINT_EFFECTS.contains(&effect)
                || (effect == "NoExecute" && self.settings.allow_no_execute)
        };
        effects.retain(|effect| {
            if allowed(effect) {
                return true;
            }
            report.skipped.push(Skipped::TaintEffect {
                strategy: strategy.to_owned(),
                effect: effect.clone(),
            });
            false
        });
        if self.dry_run(strategy) {
            effects.clear();
        }
    }

    /// Whether `strategy`'s decisions are dry runs (globally or its own).
    fn dry_run(&self, strategy: &str) -> bool {
        self.settings.dry_run || self.settings.policy(strategy).dry_run
    }

    /// Readies `snapshot` for a call of `strategy`: its config, how its
    /// thresholds were met last cycle, and what it kept (if kept under the
    /// version and config that serve now).
    fn prepare_snapshot(&self, strategy: &str, snapshot: &mut Snapshot) {
        snapshot.last_met = self.last_met.get(strategy).cloned().unwrap_or_default();
        snapshot.config = self.settings.policy(strategy).config;
        let version = self.policies.version(strategy, Which::Serving);
        snapshot.state = match self.kept.get(strategy) {
            Some(kept) if kept.version == version && kept.config == snapshot.config => {
                kept.state.clone()
            }
            _ => Vec::new(),
        };
    }

    /// Keeps `state` for `strategy`'s next call, under the version and
    /// `config` that serve now (the policy host bounds its size).
    fn keep(&mut self, strategy: &str, config: &str, state: Vec<u8>) {
        let kept = Kept {
            version: self.policies.version(strategy, Which::Serving),
            config: config.to_owned(),
            state,
        };
        self.kept.insert(strategy.to_owned(), kept);
    }

    /// A pod terminating for another reason than one of our evictions, first
    /// seen less than [`FOREIGN_TERMINATING_WAIT`] ago and within its grace
    /// period: reclaim in progress.
    fn foreign_terminating(
        &mut self,
        now: SystemTime,
        terminating: &[Terminating],
    ) -> Option<String> {
        self.foreign
            .retain(|uid, _| terminating.iter().any(|t| &t.uid == uid));
        let mut blocking = None;
        for t in terminating.iter().filter(|t| !self.queue.holds(&t.uid)) {
            let seen = *self.foreign.entry(t.uid.clone()).or_insert(now);
            let waited = now.duration_since(seen).unwrap_or_default();
            if t.until > now && waited < FOREIGN_TERMINATING_WAIT && blocking.is_none() {
                blocking = Some(t.name.clone());
            }
        }
        blocking
    }

    /// The pods the kubelet evicted whose resource is not released yet and
    /// that were first seen less than [`FOREIGN_TERMINATING_WAIT`] ago (the
    /// kubelet itself waits as long for an evicted pod's cleanup): reclaim
    /// in progress for their resource (`None`: for every pressure).
    fn kubelet_reclaiming(
        &mut self,
        now: SystemTime,
        evictions: &[KubeletEviction],
    ) -> Vec<(Option<Resource>, String)> {
        self.kubelet
            .retain(|uid, _| evictions.iter().any(|e| &e.uid == uid));
        let mut reclaiming = Vec::new();
        for eviction in evictions {
            let seen = *self.kubelet.entry(eviction.uid.clone()).or_insert(now);
            let waited = now.duration_since(seen).unwrap_or_default();
            if !eviction.released && waited < FOREIGN_TERMINATING_WAIT {
                reclaiming.push((eviction.resource, eviction.name.clone()));
            }
        }
        reclaiming
    }

    /// Queues the chosen victims (those of a threshold on `signal`); a
    /// dry-run victim is handed to the killer (as a dry-run request) once
    /// per in-flight timeout, never queued; a victim over a cap on volume
    /// is held back, unless a hard threshold on a signal the kubelet also
    /// watches chose it.
    fn enqueue(
        &mut self,
        now: SystemTime,
        chosen: Vec<Victim>,
        signal: Option<&str>,
        report: &mut CycleReport,
    ) {
        let uncapped = signal.is_some_and(catalogue::kubelet_watches);
        for mut victim in chosen {
            victim.grace_period_seconds = self.grace(&victim);
            let dry_run = self.dry_run(&victim.strategy);
            let kubelets_own = uncapped && victim.urgency == Urgency::Hard;
            let capped = !(dry_run || kubelets_own);
            let namespace = victim.pod.namespace.clone();
            if capped
                && !self.queue.holds(&victim.pod.uid)
                && let Some(cap) = self.recent.full(now, &namespace, &self.settings.limits)
            {
                report.skipped.push(Skipped::Capped {
                    strategy: victim.strategy.clone(),
                    pod: format!("{namespace}/{}", victim.pod.name),
                    cap,
                });
                continue;
            }
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
            } else if capped {
                self.recent.record(now, &namespace);
            }
            report.decisions.push(Decision { victim, dry_run });
        }
    }

    /// The grace period `victim` gets: what its strategy asked, kept
    /// within the pod's own and `max_pod_grace_period`; if it asked none, a
    /// hard threshold's victim gets `hard_grace_period` and any other the
    /// pod's own (capped likewise); never less than
    /// [`MIN_GRACE_PERIOD_SECONDS`] (0 would be a force delete). `None`: the
    /// pod's own is not known, and the API server applies it.
    fn grace(&self, victim: &Victim) -> Option<u64> {
        let own = self
            .facts
            .get(&victim.pod.uid)
            .and_then(|f| f.grace_period_seconds);
        let max = self.settings.max_pod_grace_period.as_secs();
        let cap = |s: u64| own.map_or(s, |own| s.min(own)).min(max);
        let asked = match victim.grace_period_seconds {
            Some(asked) => Some(cap(asked)),
            None if victim.urgency == Urgency::Hard => {
                Some(self.settings.hard_grace_period.as_secs())
            }
            None => own.map(|s| s.min(max)),
        };
        asked.map(|s| s.max(MIN_GRACE_PERIOD_SECONDS))
    }

    /// Drops waiting victims whose reason no longer holds this cycle.
    fn drop_unwanted(&mut self, met: &[MetThreshold], answers: &Answers) {
        let thresholds: HashSet<(&str, &str, Urgency)> = met
            .iter()
            .filter(|m| m.past_grace && m.threshold.met != MetLevel::Report)
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

/// Whether an eviction call's result gives the next candidate its turn at
/// once: the pod was refused (a budget) or is not evictable. Throttling is
/// not: nobody is asked while the API server says wait.
pub(super) fn passes_the_turn(result: &Result<(), KillError>) -> bool {
    matches!(
        result,
        Err(KillError::Refused(_) | KillError::NotEvictable(_))
    )
}
