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
//!   get `hard_grace_period`, others at most `max_pod_grace_period`),
//!   static, mirror and system-critical pods are never evicted whatever the
//!   sorter says, taint effects are `NoSchedule` and `PreferNoSchedule`
//!   (`NoExecute` only when allowed), and a dry-run strategy taints nothing;
//! - a pod terminating for another reason holds thresholds back for at
//!   most [`FOREIGN_TERMINATING_WAIT`], not its whole grace period;
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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most decision rounds [`EvictionManager::cycle_through`] runs at one
/// instant while evictions are refused (each round tries the next candidate).
const MAX_ROUNDS: usize = 16;

/// The built-in sorter that validates hard victims when the configured one fails.
const FALLBACK_SORTER: &str = "default-sorter";

/// The name under which the host's own refusals are reported.
pub const HOST: &str = "vigil";

/// The longest a pod terminating for another reason than vigil's eviction
/// counts as reclaim in progress (the kubelet's pod cleanup waits as long).
pub const FOREIGN_TERMINATING_WAIT: Duration = Duration::from_secs(30);

/// Taint effects a strategy may ask for; `NoExecute` only when allowed.
const TAINT_EFFECTS: [&str; 2] = ["NoSchedule", "PreferNoSchedule"];

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

/// What the host knows of a pod beyond the contract's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// Its own termination grace period, if known.
    pub grace_period_seconds: Option<u64>,
    /// The PodDisruptionBudgets that select it (`namespace/name`), as far as
    /// they are known.
    pub budgets: Vec<String>,
}

/// What the node looks like this cycle.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Node signals; one that could not be read is absent.
    pub signals: Vec<Signal>,
    /// The pods running on the node, candidates for eviction.
    pub pods: Vec<Pod>,
    /// Pods being deleted (they have a `deletionTimestamp`): not candidates,
    /// but reclaim in progress until their grace period ends (at most
    /// [`FOREIGN_TERMINATING_WAIT`] for pods vigil did not evict).
    pub terminating: Vec<Terminating>,
    /// Facts about pods, by UID; a pod without an entry has none known.
    pub facts: HashMap<String, PodFacts>,
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
#[derive(Debug, Default, Clone)]
pub struct CycleReport {
    /// Every threshold the strategies reported, met or not, by strategy.
    pub reported: Vec<(String, Threshold)>,
    /// Thresholds reported met, hard first.
    pub thresholds: Vec<MetThreshold>,
    /// Node conditions currently reported.
    pub conditions: Vec<ActiveCondition>,
    /// Conditions that ended (past their transition period) and whose
    /// strategy still runs: reported as not holding. A condition neither
    /// here nor in `conditions` is no longer reported at all.
    pub ended_conditions: Vec<String>,
    /// Taint effects strategies asked for that the host refused (strategy,
    /// effect): invalid answers, never sent.
    pub refused_effects: Vec<(String, String)>,
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
        self.ended_conditions = later.ended_conditions;
        self.refused_effects.extend(later.refused_effects);
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
            Settled::NotEvictable(victim, why) => self
                .deferred
                .push((victim, format!("not evictable: {why}"))),
            Settled::Waiting(victim, why) | Settled::Throttled(victim, why) => {
                self.deferred.push((victim, why))
            }
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
    /// When each PodDisruptionBudget was last overridden.
    overridden: HashMap<String, SystemTime>,
    /// Pods terminating for another reason, since when they were first seen.
    foreign: HashMap<String, SystemTime>,
    /// This cycle's facts about pods.
    facts: HashMap<String, PodFacts>,
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
            overridden: HashMap::new(),
            foreign: HashMap::new(),
            facts: HashMap::new(),
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
        let window = self.settings.pdb_override_window;
        self.overridden
            .retain(|_, at| now.duration_since(*at).unwrap_or_default() < window);
        self.facts = node.facts;
        let terminating = self.foreign_terminating(now, &node.terminating);
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
        self.tracker.forget_unless(&strategies);
        report.reported = answers.thresholds.clone();
        report.conditions = self
            .tracker
            .conditions(now, self.settings.condition_transition);
        report.ended_conditions = self.tracker.ended(now, self.settings.condition_transition);
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
            let victim = victim.clone();
            return Some(match result {
                Ok(()) => Settled::Accepted(victim),
                Err(KillError::Refused(why)) => Settled::Refused(victim, why),
                Err(KillError::NotEvictable(why)) => Settled::NotEvictable(victim, why),
                Err(error @ KillError::Throttled { .. }) => {
                    Settled::Throttled(victim, error.to_string())
                }
                Err(KillError::Unavailable(why)) => Settled::Waiting(victim, why),
                Err(KillError::Gone(_)) => Settled::Gone(victim),
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
                Ok(mut decision) => {
                    self.last_met.insert(name.clone(), decision.threshold.met);
                    if let Some(condition) = &mut decision.threshold.condition {
                        self.check_effects(name, &mut condition.effects, report);
                    }
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
            report.skipped.push(format!(
                "strategy {strategy} asked for taint effect {effect:?}, which is not allowed; not sent"
            ));
            report
                .refused_effects
                .push((strategy.to_owned(), effect.clone()));
            false
        });
        if self.settings.dry_run || self.settings.policy(strategy).dry_run {
            effects.clear();
        }
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
        // Only a budget's refusal counts towards the override: a pod the API
        // server will not evict at all is never deleted around it.
        let top_budget = valid
            .iter()
            .copied()
            .find(|&i| self.queue.refused_by_budget(&candidates[i].pod.uid));
        let (index, override_pdb) = match (open, top_budget) {
            (Some(index), _) => (index, false),
            (None, None) => {
                report.skipped.push(format!(
                    "{name}/{scope}: no candidate the API server will evict now; waiting"
                ));
                return None;
            }
            (None, Some(top)) => {
                let since = *self.blocked.entry(key).or_insert(now);
                let blocked_for = now.duration_since(since).unwrap_or_default();
                match self.may_override(met, &candidates[top].pod, blocked_for) {
                    Ok(()) => (top, true),
                    Err(why) => {
                        report.skipped.push(format!(
                            "{name}/{scope}: every candidate's eviction was refused; waiting ({why})"
                        ));
                        return None;
                    }
                }
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
            for budget in self.budgets_of(&chosen.pod) {
                self.overridden.insert(budget, now);
            }
        }
        Some(chosen)
    }

    /// Whether the top victim `uid` of `met`, whose every candidate has been
    /// refused by budgets for `blocked_for`, may be deleted anyway; if not, why.
    fn may_override(
        &self,
        met: &MetThreshold,
        pod: &Pod,
        blocked_for: Duration,
    ) -> Result<(), String> {
        let Some(after) = self.settings.pdb_override_after else {
            return Err("the PDB override is off".into());
        };
        if met.threshold.met != MetLevel::Hard {
            return Err("a soft threshold never overrides a budget".into());
        }
        if crate::signals::catalogue::is_stall(&met.threshold.signal) {
            return Err(format!(
                "{} is a stall signal: never overridden",
                met.threshold.signal
            ));
        }
        let settings = self.settings.policy(&met.strategy);
        if !settings.pdb_override {
            return Err(format!(
                "strategy {} does not allow the PDB override",
                met.strategy
            ));
        }
        if self.settings.dry_run || settings.dry_run {
            return Err("dry run deletes nothing".into());
        }
        if blocked_for < after {
            return Err(format!(
                "override after {after:?}, refused for {blocked_for:?}"
            ));
        }
        let budgets = self.budgets_of(pod);
        if let Some(recent) = budgets.iter().find(|b| self.overridden.contains_key(*b)) {
            return Err(format!(
                "budget {recent} was overridden within the last {:?}",
                self.settings.pdb_override_window
            ));
        }
        Ok(())
    }

    /// The budgets a pod's override is counted against: the ones known to
    /// select it, else its namespace's unknown budget.
    fn budgets_of(&self, pod: &Pod) -> Vec<String> {
        match self.facts.get(&pod.uid).map(|f| &f.budgets) {
            Some(budgets) if !budgets.is_empty() => budgets.clone(),
            _ => vec![format!("{}/*", pod.namespace)],
        }
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

    /// Every force eviction the sorter accepts.
    fn force_victims(
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
            Ok(mut sorted) => {
                record_refusals(name, strategies, candidates, &sorted, report);
                protect(strategies, candidates, &mut sorted, report);
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
        let mut sorted = self
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
        protect(strategies, candidates, &mut sorted, report);
        Some(sorted)
    }

    /// Queues the chosen victims; a dry-run victim is handed to the killer
    /// (as a dry-run request) once per in-flight timeout, never queued.
    fn enqueue(&mut self, now: SystemTime, chosen: Vec<Victim>, report: &mut CycleReport) {
        for mut victim in chosen {
            victim.grace_period_seconds = self.grace(&victim);
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

    /// The grace period `victim` gets, whatever its strategy asked: a hard
    /// threshold's is `hard_grace_period`; any other is the strategy's (else
    /// the pod's own) capped at `max_pod_grace_period`.
    fn grace(&self, victim: &Victim) -> Option<u64> {
        if victim.urgency == Urgency::Hard {
            return Some(self.settings.hard_grace_period.as_secs());
        }
        let max = self.settings.max_pod_grace_period.as_secs();
        let own = self
            .facts
            .get(&victim.pod.uid)
            .and_then(|f| f.grace_period_seconds);
        match (victim.grace_period_seconds, own) {
            (Some(asked), _) => Some(asked.min(max)),
            (None, Some(own)) if own > max => Some(max),
            (None, _) => None,
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

/// Whether an eviction call's result gives the next candidate its turn at
/// once: the pod was refused (a budget) or is not evictable. Throttling is
/// not: nobody is asked while the API server says wait.
pub fn passes_the_turn(result: &Result<(), KillError>) -> bool {
    matches!(
        result,
        Err(KillError::Refused(_) | KillError::NotEvictable(_))
    )
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

#[cfg(test)]
mod tests {
    //! The manager alone, with an in-memory fake of its policies: one hard
    //! strategy whose victims are the test's, a sorter that refuses what the
    //! test says.

    use super::*;
    use crate::eviction::PolicySettings;
    use crate::model::{CandidateUrgency, Decision as Answer, Signal, SortRejection};
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
        /// The hard threshold watches a stall signal.
        stall: bool,
        /// Taint effects the threshold's condition asks for (`NoSchedule` if none).
        effects: Vec<String>,
        /// (strategy, UID): force evictions, from strategies besides `fake`.
        force: Vec<(String, String)>,
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
            names.extend(self.force.iter().map(|(name, _)| name.clone()));
            names
        }

        fn evaluate(&self, name: &str, _: &mut Snapshot) -> Result<Answer, Unanswered> {
            let met = match name {
                "fake" => self.met.lock().unwrap().unwrap_or(MetLevel::NotMet),
                _ => MetLevel::NotMet,
            };
            let proposed = |list: &[(String, String)]| {
                list.iter()
                    .filter(|(strategy, _)| strategy == name)
                    .map(|(_, uid)| Eviction {
                        uid: uid.clone(),
                        reason: "fake".into(),
                        grace_period_seconds: Some(900),
                    })
                    .collect()
            };
            let mut threshold = crate::model::memory_threshold(met);
            if self.stall {
                threshold.signal = "psi.memory.some.avg10".into();
            }
            if let Some(condition) = threshold
                .condition
                .as_mut()
                .filter(|_| !self.effects.is_empty())
            {
                condition.effects = self.effects.clone();
            }
            Ok(Answer {
                threshold,
                soft_candidates: proposed(&self.soft),
                force_evictions: proposed(&self.force),
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
                    grace_period_seconds: Some(600),
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

    /// A pod whose UID and name are `uid`.
    fn pod(uid: &str) -> Pod {
        crate::model::fixture::pod(uid).uid(uid).build()
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
            facts: HashMap::new(),
        }
    }

    fn manager(fake: Fake) -> (EvictionManager, Arc<Fake>) {
        let fake = Arc::new(fake);
        let allowed = PolicySettings {
            pdb_override: true,
            ..PolicySettings::default()
        };
        let settings = EvictionSettings {
            pdb_override_after: Some(Duration::from_secs(10)),
            policies: [("fake".to_owned(), allowed)].into(),
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

    #[test]
    fn a_pod_terminating_for_another_reason_holds_thresholds_back_for_thirty_seconds_at_most() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into()],
            ..Fake::default()
        });
        let mut state = node(&["a"]);
        state.terminating.push(Terminating {
            uid: "x".into(),
            name: "default/x".into(),
            until: T0 + Duration::from_secs(3600),
        });
        assert!(m.cycle(T0, state.clone()).requested.is_empty(), "calm");
        hard(&fake);
        let waited = T0 + FOREIGN_TERMINATING_WAIT - Duration::from_secs(1);
        assert!(m.cycle(waited, state.clone()).requested.is_empty());
        let over = T0 + FOREIGN_TERMINATING_WAIT;
        assert_eq!(uids(&m.cycle(over, state.clone()).requested), ["a"]);
    }

    fn refuse(m: &mut EvictionManager, at: SystemTime, victim: &Victim, error: KillError) {
        assert!(m.outcome(at, victim, Err(error)).is_some());
    }

    fn not_evictable() -> KillError {
        KillError::NotEvictable("500: more than one PodDisruptionBudget".into())
    }

    #[test]
    fn a_pod_the_api_server_will_not_evict_passes_the_turn_and_waits_longer_each_time() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let mut settings = m.settings().clone();
        settings.pdb_override_after = None;
        m.set_settings(settings);
        let all = node(&["a", "b"]);
        let period = m.settings().period;
        let first = m.cycle(T0, all.clone()).requested;
        refuse(&mut m, T0, &first[0], not_evictable());
        let next = m.cycle(T0, all.clone()).requested;
        assert_eq!(uids(&next), ["b"], "the next candidate at once");
        refuse(&mut m, T0, &next[0], KillError::Refused("pdb".into()));
        // Both passed over: a waits one period, then is asked again.
        assert!(m.cycle(T0, all.clone()).requested.is_empty());
        let again = m.cycle(T0 + period, all.clone()).requested;
        assert_eq!(uids(&again), ["a"]);
        refuse(&mut m, T0 + period, &again[0], not_evictable());
        // The second refusal doubles a's backoff; b's one period is over.
        let later = T0 + period * 2;
        let report = m.cycle(later, all.clone());
        assert_eq!(uids(&report.requested), ["b"]);
        refuse(
            &mut m,
            later,
            &report.requested[0],
            KillError::Refused("pdb".into()),
        );
        assert!(m.cycle(T0 + period * 2, all.clone()).requested.is_empty());
        assert_eq!(
            uids(&m.cycle(T0 + period * 3, all.clone()).requested),
            ["a"]
        );
    }

    #[test]
    fn throttling_holds_every_call_back_and_passes_nobody_over() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let all = node(&["a", "b"]);
        let first = m.cycle(T0, all.clone()).requested;
        let throttled = KillError::Throttled {
            retry_after: Duration::from_secs(3),
            message: "too many requests".into(),
        };
        let settled = m.outcome(T0, &first[0], Err(throttled));
        assert!(
            matches!(settled, Some(Settled::Throttled(..))),
            "{settled:?}"
        );
        assert_eq!(m.throttled_until(), Some(T0 + Duration::from_secs(3)));
        for at in [T0, T0 + Duration::from_secs(2)] {
            let report = m.cycle(at, all.clone());
            assert!(report.requested.is_empty(), "{report:?}");
            assert_eq!(
                uids(
                    &report
                        .deferred
                        .iter()
                        .map(|d| d.0.clone())
                        .collect::<Vec<_>>()
                ),
                ["a"]
            );
        }
        let after = T0 + Duration::from_secs(3);
        assert_eq!(
            uids(&m.cycle(after, all.clone()).requested),
            ["a"],
            "the same victim"
        );
    }

    #[test]
    fn a_refused_force_or_soft_candidate_is_not_proposed_again_until_its_backoff_ends() {
        let (mut m, _) = manager(Fake {
            soft: vec![("soft".into(), "s".into())],
            force: vec![("force".into(), "f".into())],
            ..Fake::default()
        });
        let all = node(&["s", "f"]);
        let first = m.cycle(T0, all.clone()).requested;
        assert_eq!(uids(&first), ["f", "s"]);
        for victim in &first {
            refuse(&mut m, T0, victim, KillError::Refused("pdb".into()));
        }
        let report = m.cycle(T0, all.clone());
        assert!(
            report.requested.is_empty() && report.decisions.is_empty(),
            "{report:?}"
        );
        let later = T0 + m.settings().period;
        assert_eq!(uids(&m.cycle(later, all.clone()).requested), ["f", "s"]);
    }

    #[test]
    fn hard_evictions_get_the_hard_grace_and_the_others_are_capped() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into()],
            soft: vec![("soft".into(), "s".into()), ("soft".into(), "own".into())],
            ..Fake::default()
        });
        let mut state = node(&["a", "s"]);
        let own = PodFacts {
            grace_period_seconds: Some(1200),
            budgets: vec![],
        };
        state.facts.insert("own".into(), own);
        let first = m.cycle(T0, state.clone()).requested;
        assert_eq!(uids(&first), ["s"]);
        assert_eq!(
            first[0].grace_period_seconds,
            Some(300),
            "900 asked, capped"
        );
        hard(&fake);
        let hard_victim = m.cycle(T0, state.clone()).requested;
        assert_eq!(uids(&hard_victim), ["a"]);
        assert_eq!(hard_victim[0].grace_period_seconds, Some(0), "600 asked");
        // A pod's own grace period is capped too when the strategy names none.
        let victim = Victim {
            grace_period_seconds: None,
            urgency: Urgency::Soft,
            ..victim(
                "soft",
                &candidate(0, Urgency::Soft, &pod("own")),
                &Eviction {
                    uid: "own".into(),
                    reason: String::new(),
                    grace_period_seconds: None,
                },
                Urgency::Soft,
                None,
            )
        };
        m.facts = state.facts.clone();
        assert_eq!(m.grace(&victim), Some(300));
        m.facts.clear();
        assert_eq!(m.grace(&victim), None, "unknown: the pod's own");
    }

    #[test]
    fn static_mirror_and_critical_pods_are_refused_by_the_host_whatever_the_sorter_says() {
        let (mut m, fake) = manager(Fake {
            victims: vec![
                "static".into(),
                "mirror".into(),
                "critical".into(),
                "plain".into(),
            ],
            ..Fake::default()
        });
        hard(&fake);
        let mut state = node(&["static", "mirror", "critical", "plain"]);
        state.pods[0].is_static = true;
        state.pods[1].is_mirror = true;
        state.pods[2].is_critical = true;
        let report = m.cycle(T0, state);
        assert_eq!(uids(&report.requested), ["plain"]);
        let refused: Vec<(&str, &str)> = report
            .refusals
            .iter()
            .map(|r| (r.pod.as_str(), r.sorter.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                ("default/static", HOST),
                ("default/mirror", HOST),
                ("default/critical", HOST)
            ]
        );
    }

    #[test]
    fn taint_effects_are_checked_by_the_host_and_a_dry_run_strategy_taints_nothing() {
        let (mut m, fake) = manager(Fake {
            effects: vec!["NoSchedule".into(), "NoExecute".into(), "NoSchedul".into()],
            ..Fake::default()
        });
        hard(&fake);
        let report = m.cycle(T0, node(&[]));
        assert_eq!(report.conditions[0].effects, ["NoSchedule"]);
        assert_eq!(
            report.refused_effects,
            [
                ("fake".to_owned(), "NoExecute".to_owned()),
                ("fake".to_owned(), "NoSchedul".to_owned())
            ]
        );
        let mut settings = m.settings().clone();
        settings.allow_no_execute = true;
        m.set_settings(settings.clone());
        let report = m.cycle(T0, node(&[]));
        assert_eq!(report.conditions[0].effects, ["NoSchedule", "NoExecute"]);
        settings.dry_run = true;
        m.set_settings(settings);
        let report = m.cycle(T0, node(&[]));
        assert_eq!(report.conditions[0].name, "MemoryPressure");
        assert!(report.conditions[0].effects.is_empty(), "dry run: no taint");
    }

    /// Refuses every candidate of `all` once by a budget, then cycles.
    fn refuse_all(m: &mut EvictionManager, now: SystemTime, all: &NodeState) -> CycleReport {
        for _ in 0..all.pods.len() {
            let requested = m.cycle(now, all.clone()).requested;
            if let Some(victim) = requested.first() {
                assert!(!victim.override_pdb);
                refuse(m, now, victim, KillError::Refused("pdb".into()));
            }
        }
        m.cycle(now, all.clone())
    }

    fn skipped_with(report: &CycleReport, text: &str) -> bool {
        report.skipped.iter().any(|s| s.contains(text))
    }

    #[test]
    fn the_pdb_override_needs_the_strategys_consent_and_never_acts_on_a_stall() {
        for (fake, why) in [
            (
                Fake {
                    victims: vec!["a".into()],
                    stall: true,
                    ..Fake::default()
                },
                "is a stall signal",
            ),
            (
                Fake {
                    victims: vec!["a".into()],
                    ..Fake::default()
                },
                "does not allow",
            ),
        ] {
            let (mut m, fake) = manager(fake);
            if why == "does not allow" {
                let mut settings = m.settings().clone();
                settings.policies.clear();
                m.set_settings(settings);
            }
            hard(&fake);
            let all = node(&["a"]);
            refuse_all(&mut m, T0, &all);
            let later = T0 + Duration::from_secs(60);
            let report = refuse_all(&mut m, later, &all);
            assert!(report.requested.is_empty(), "{report:?}");
            assert!(skipped_with(&report, why), "{:?}", report.skipped);
        }
    }

    #[test]
    fn a_pod_the_api_server_will_not_evict_never_counts_towards_the_override() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into()],
            ..Fake::default()
        });
        hard(&fake);
        let all = node(&["a"]);
        let mut now = T0;
        for _ in 0..8 {
            let report = m.cycle(now, all.clone());
            if let Some(victim) = report.requested.first() {
                assert!(!victim.override_pdb, "{victim:?}");
                refuse(&mut m, now, victim, not_evictable());
            }
            now += Duration::from_secs(60);
        }
    }

    #[test]
    fn a_budget_is_overridden_at_most_once_per_window() {
        let (mut m, fake) = manager(Fake {
            victims: vec!["a".into(), "b".into()],
            ..Fake::default()
        });
        hard(&fake);
        let mut all = node(&["a", "b"]);
        for uid in ["a", "b"] {
            let facts = PodFacts {
                grace_period_seconds: None,
                budgets: vec!["default/web".into()],
            };
            all.facts.insert(uid.into(), facts);
        }
        refuse_all(&mut m, T0, &all);
        let due = T0 + Duration::from_secs(10);
        let report = refuse_all(&mut m, due, &all);
        assert_eq!(uids(&report.requested), ["a"]);
        assert!(report.requested[0].override_pdb);
        assert_eq!(report.requested[0].grace_period_seconds, Some(0));
        m.outcome(due, &report.requested[0], Ok(()));
        // a is gone; b is under the same budget: no second override in the window.
        let rest = node(&["b"]);
        let mut rest_facts = rest.clone();
        rest_facts.facts.insert("b".into(), all.facts["b"].clone());
        let mut now = due + Duration::from_secs(20);
        let report = refuse_all(&mut m, now, &rest_facts);
        assert!(report.requested.is_empty());
        now += Duration::from_secs(60);
        let report = refuse_all(&mut m, now, &rest_facts);
        assert!(
            skipped_with(&report, "was overridden within"),
            "{:?}",
            report.skipped
        );
        let window = due + m.settings().pdb_override_window;
        let report = refuse_all(&mut m, window, &rest_facts);
        assert_eq!(uids(&report.requested), ["b"]);
        assert!(report.requested[0].override_pdb);
    }
}
