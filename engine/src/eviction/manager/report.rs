//! What one cycle takes and gives: the node as the loop sees it
//! ([`NodeState`], with host-only [`PodFacts`]), the victims it chooses
//! ([`Victim`]) and the account of everything it saw and did
//! ([`CycleReport`]).

use crate::eviction::kubelet::Misplaced;
use crate::eviction::limits::Cap;
use crate::eviction::policies::Unanswered;
use crate::eviction::queue::{Deferral, Deferred, Settled, Urgency};
use crate::eviction::tracker::{ActiveCondition, MetThreshold};
use crate::model::{Pod, Signal, Threshold};
use crate::signals::catalogue::Resource;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A pod chosen for eviction, and why.
#[derive(Debug, Clone)]
pub struct Victim {
    /// The pod to evict.
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
    /// Why this pod: the versions that decided, the threshold, its rank.
    pub why: Why,
}

/// Why a victim was chosen, for whoever asks afterwards ("why was this pod
/// evicted?"): what decided, in which version, on what evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Why {
    /// The strategy's version (its component digest's first 12 digits).
    pub strategy_version: Option<String>,
    /// The signal and threshold that held, e.g. `memory.available 50 < 500
    /// (hard)` (threshold victims only).
    pub threshold: Option<String>,
    /// The sorter that validated and ordered the candidates.
    pub sorter: Option<String>,
    /// Its version.
    pub sorter_version: Option<String>,
    /// The pod's place in the sorter's order (1 is first), and how many it
    /// ordered.
    pub rank: Option<(u32, u32)>,
}

impl Why {
    /// In words, for `strategy`: `chosen by memory-pressure@0123456789ab
    /// (memory.available 50 < 500 (hard)), rank 1 of 3 by
    /// default-sorter@ba9876543210`.
    pub fn words(&self, strategy: &str) -> String {
        let at =
            |version: &Option<String>| version.as_ref().map_or(String::new(), |v| format!("@{v}"));
        let mut words = format!("chosen by {strategy}{}", at(&self.strategy_version));
        if let Some(threshold) = &self.threshold {
            words.push_str(&format!(" ({threshold})"));
        }
        if let (Some(sorter), Some((rank, of))) = (&self.sorter, self.rank) {
            words.push_str(&format!(
                ", rank {rank} of {of} by {sorter}{}",
                at(&self.sorter_version)
            ));
        }
        words
    }
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
    /// `FOREIGN_TERMINATING_WAIT` for pods vigil did not evict).
    pub terminating: Vec<Terminating>,
    /// Pods the kubelet evicted or is evicting: not candidates, reclaim in
    /// progress for their resource until released (at most
    /// `FOREIGN_TERMINATING_WAIT`).
    pub kubelet_evictions: Vec<KubeletEviction>,
    /// Facts about pods, by UID; a pod without an entry has none known.
    pub facts: HashMap<String, PodFacts>,
    /// Reads the pod facts that only ranking needs ([`Wanted::ranking_facts`])
    /// into the snapshot's pods, once, in a cycle that ranks pods (none:
    /// no such fact is wanted, or the pods carry them already).
    pub ranking: Option<Arc<dyn RankingFacts>>,
}

/// Reads pod facts into pods when a cycle is about to rank them.
pub trait RankingFacts: Send + Sync + fmt::Debug {
    /// Sets the facts it reads on each of `pods` (one it cannot read stays
    /// absent).
    fn read(&self, pods: &mut [Pod]);
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

/// A pod the kubelet evicted or is evicting.
#[derive(Debug, Clone)]
pub struct KubeletEviction {
    /// The pod's UID.
    pub uid: String,
    /// `namespace/name`.
    pub name: String,
    /// What the kubelet reclaims; `None`: it did not say, every pressure waits.
    pub resource: Option<Resource>,
    /// Whether what it held is released (its cgroup is gone).
    pub released: bool,
}

/// A victim chosen this cycle.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Whom, by which strategy and why.
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
    /// Reported thresholds out of their place beside the kubelet.
    pub misplaced: Vec<Misplaced>,
    /// Thresholds reported met, hard first.
    pub thresholds: Vec<MetThreshold>,
    /// Node conditions currently reported.
    pub conditions: Vec<ActiveCondition>,
    /// Conditions that ended (past their transition period) and whose
    /// strategy still runs: reported as not holding. A condition neither
    /// here nor in `conditions` is no longer reported at all.
    pub ended_conditions: Vec<String>,
    /// Victims chosen this cycle.
    pub decisions: Vec<Decision>,
    /// Victims handed to the killer this cycle (dry-run ones included).
    pub requested: Vec<Victim>,
    /// Evictions the killer accepted (filled by
    /// `EvictionManager::cycle_through`; the live runner reports outcomes
    /// as they arrive).
    pub started: Vec<Victim>,
    /// Victims left waiting or refused, and why.
    pub deferred: Vec<Deferred>,
    /// Evicted pods that are now gone.
    pub gone: Vec<Victim>,
    /// Victims being evicted at the end of the cycle (calls running, pods terminating).
    pub in_flight: usize,
    /// Things not done this cycle, and why (a strategy faulted, reclaim in progress...).
    pub skipped: Vec<Skipped>,
    /// Candidates the sorter refused this cycle.
    pub refusals: Vec<Refusal>,
}

impl CycleReport {
    /// Adds a later decision round at the same instant: its view of
    /// thresholds and conditions replaces this one's, its actions add up.
    pub(super) fn absorb(&mut self, later: CycleReport) {
        self.reported = later.reported;
        self.thresholds = later.thresholds;
        self.conditions = later.conditions;
        self.ended_conditions = later.ended_conditions;
        self.decisions.extend(later.decisions);
        self.requested.extend(later.requested);
        self.started.extend(later.started);
        self.deferred.extend(later.deferred);
        self.gone.extend(later.gone);
        self.skipped.extend(later.skipped);
        self.refusals.extend(later.refusals);
        self.in_flight = later.in_flight;
    }

    fn defer(&mut self, victim: Victim, why: Deferral) {
        self.deferred.push(Deferred { victim, why });
    }

    /// Records what became of an eviction call.
    pub(super) fn record(&mut self, settled: Settled) {
        match settled {
            // A dry-run eviction starts nothing.
            Settled::Accepted(victim) if victim.dry_run => {}
            Settled::Accepted(victim) => self.started.push(victim),
            Settled::Refused(victim, why) => self.defer(victim, Deferral::Refused(why)),
            Settled::NotEvictable(victim, why) => {
                self.defer(victim, Deferral::NotEvictable(why));
            }
            Settled::Waiting(victim, why) | Settled::Throttled(victim, why) => {
                self.defer(victim, Deferral::Unanswered(why));
            }
            Settled::Gone(victim) => self.gone.push(victim),
        }
    }
}

/// Something a cycle did not do, and why; words only when shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// A threshold picks no new victim: reclaim for it is in progress.
    Reclaiming {
        /// The strategy that reported the threshold.
        strategy: String,
        /// The threshold's scope.
        scope: String,
        /// What reclaims.
        by: Reclaim,
    },
    /// A victim held back by a cap on volume.
    Capped {
        /// The strategy that chose it.
        strategy: String,
        /// `namespace/name`.
        pod: String,
        /// Which cap.
        cap: Cap,
    },
    /// A threshold waits: no candidate can be evicted now.
    Waiting {
        /// The strategy that reported the threshold.
        strategy: String,
        /// The threshold's scope.
        scope: String,
        /// Why; `None` when no candidate is one the API server will evict.
        withheld: Option<Withheld>,
    },
    /// A strategy gave no answer.
    Strategy {
        /// The strategy.
        name: String,
        /// What it was asked.
        call: Call,
        /// Why it gave none.
        why: Unanswered,
    },
    /// The sorter gave no answer: hard victims are validated by `fallback`
    /// (the built-in sorter), or, without one, soft evictions wait.
    Sorter {
        /// The sorter.
        name: String,
        /// Why it gave none.
        why: Unanswered,
        /// The sorter used instead, if any.
        fallback: Option<String>,
    },
    /// A taint effect the host does not allow: never sent.
    TaintEffect {
        /// The strategy that asked for it.
        strategy: String,
        /// The effect asked for, as the strategy wrote it.
        effect: String,
    },
}

/// What reclaims for a threshold that picks no new victim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Its own victim is waiting or being evicted.
    Own,
    /// A pod vigil did not evict is terminating (`namespace/name`).
    Terminating(String),
    /// The kubelet evicted a pod for this pressure (`namespace/name`) and
    /// what it held is not released yet.
    Kubelet(String),
    /// Another threshold's victim, which this one counts on too (its name).
    Shared(String),
}

impl Reclaim {
    /// Whose reclaim it is, in a word: `own`, `terminating`, `kubelet`, `shared`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Own => "own",
            Self::Terminating(_) => "terminating",
            Self::Kubelet(_) => "kubelet",
            Self::Shared(_) => "shared",
        }
    }
}

/// Why every candidate's refusal does not lead to a PDB override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withheld {
    /// `pdbOverrideAfterSeconds` is not set.
    Off,
    /// A soft threshold never overrides a budget.
    Soft,
    /// The threshold is on a stall signal.
    Stall(String),
    /// The strategy does not allow it.
    NotAllowed(String),
    /// Dry run deletes nothing.
    DryRun,
    /// Not refused for long enough yet.
    TooSoon {
        /// The override delay.
        after: Duration,
        /// How long every candidate has been refused.
        refused_for: Duration,
    },
    /// The budget was overridden within the window.
    Recent {
        /// The budget overridden last, `namespace/name`.
        budget: String,
        /// The shortest time between two overrides of it.
        window: Duration,
    },
}

/// What a strategy was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `evaluate`.
    Evaluate,
    /// `top-victims`.
    TopVictims,
}

impl CycleReport {
    /// The taint effects strategies asked for that the host refused
    /// (strategy, effect): invalid answers, never sent.
    pub fn refused_effects(&self) -> impl Iterator<Item = (&str, &str)> {
        self.skipped.iter().filter_map(|s| match s {
            Skipped::TaintEffect { strategy, effect } => Some((strategy.as_str(), effect.as_str())),
            _ => None,
        })
    }
}

impl Skipped {
    /// Whether a policy did not answer (a strategy or the sorter declined or
    /// faulted, or asked for what the host refuses), rather than the loop
    /// waiting on its own.
    pub fn is_policys(&self) -> bool {
        matches!(
            self,
            Self::Strategy { .. } | Self::Sorter { .. } | Self::TaintEffect { .. }
        )
    }
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reclaiming {
                strategy,
                scope,
                by,
            } => {
                write!(f, "{strategy}/{scope}: reclaim in progress, ")?;
                match by {
                    Reclaim::Own => f.write_str("no new victim"),
                    Reclaim::Terminating(pod) => write!(f, "{pod} is terminating"),
                    Reclaim::Kubelet(pod) => write!(f, "the kubelet is evicting {pod}"),
                    Reclaim::Shared(pod) => write!(f, "{pod} is already being evicted"),
                }
            }
            Self::Capped { strategy, pod, cap } => write!(
                f,
                "{strategy}: {pod} held back: the {cap} has had its most evictions in the window"
            ),
            Self::Waiting {
                strategy,
                scope,
                withheld: None,
            } => write!(
                f,
                "{strategy}/{scope}: no candidate the API server will evict now; waiting"
            ),
            Self::Waiting {
                strategy,
                scope,
                withheld: Some(why),
            } => write!(
                f,
                "{strategy}/{scope}: every candidate's eviction was refused; waiting ({why})"
            ),
            Self::Strategy { name, call, why } => match (call, why) {
                (Call::Evaluate, Unanswered::Declined(_)) => write!(f, "strategy {name} {why}"),
                (Call::Evaluate, _) => write!(f, "strategy {name} skipped: {why}"),
                (Call::TopVictims, Unanswered::Declined(_)) => {
                    write!(f, "strategy {name} gave no victims: {why}")
                }
                (Call::TopVictims, _) => write!(f, "strategy {name} top victims skipped: {why}"),
            },
            Self::Sorter {
                name,
                why,
                fallback: Some(fallback),
            } => write!(f, "sorter {name} {why}; using the built-in {fallback}"),
            Self::Sorter {
                name,
                why,
                fallback: None,
            } => write!(f, "sorter {name} {why}; soft evictions wait"),
            Self::TaintEffect { strategy, effect } => write!(
                f,
                "strategy {strategy} asked for taint effect {effect:?}, which is not allowed; not sent"
            ),
        }
    }
}

impl fmt::Display for Withheld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("the PDB override is off"),
            Self::Soft => f.write_str("a soft threshold never overrides a budget"),
            Self::Stall(signal) => write!(f, "{signal} is a stall signal: never overridden"),
            Self::NotAllowed(strategy) => {
                write!(f, "strategy {strategy} does not allow the PDB override")
            }
            Self::DryRun => f.write_str("dry run deletes nothing"),
            Self::TooSoon { after, refused_for } => {
                write!(f, "override after {after:?}, refused for {refused_for:?}")
            }
            Self::Recent { budget, window } => {
                write!(
                    f,
                    "budget {budget} was overridden within the last {window:?}"
                )
            }
        }
    }
}

/// What the policies read beyond what every cycle reads: told to the node
/// source before it observes, so it opens only those files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Node signals beyond the kubelet's: names, or prefixes ending in `*`.
    pub signals: Vec<String>,
    /// Pod facts read with every observation: those a strategy reads in
    /// `evaluate`, and those that are rates between cycles.
    pub facts: Vec<crate::model::PodFact>,
    /// Pod facts only ranking reads (`top-victims` of a strategy that judges
    /// signals alone, the sorter): read in a cycle that ranks pods, through
    /// [`NodeState::ranking`], and in no calm one.
    pub ranking_facts: Vec<crate::model::PodFact>,
}
