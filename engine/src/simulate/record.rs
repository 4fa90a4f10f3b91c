//! What a simulation produced, as data: printed as a timeline, written as
//! JSON (`--output json`), or drawn (`--plot`).

use super::scenario::Scenario;
use crate::config::names::unknown_policies;
use crate::eviction::{Decision, EvictionSettings, Refusal, Victim};
use crate::model::QosClass;
use crate::model::SnapshotData;
use crate::policy::{Origin, PolicyStatus};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How hard a threshold is met, as the records write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Met {
    /// The threshold does not hold.
    NotMet,
    /// Met, to be reported only (its condition; nobody evicted).
    Report,
    /// Met at the soft level.
    Soft,
    /// Met at the hard level.
    Hard,
}

impl From<crate::model::MetLevel> for Met {
    fn from(level: crate::model::MetLevel) -> Self {
        use crate::model::MetLevel;
        match level {
            MetLevel::NotMet => Self::NotMet,
            MetLevel::Report => Self::Report,
            MetLevel::Soft => Self::Soft,
            MetLevel::Hard => Self::Hard,
        }
    }
}

impl std::fmt::Display for Met {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotMet => "not-met",
            Self::Report => "report",
            Self::Soft => "soft",
            Self::Hard => "hard",
        })
    }
}

/// A threshold as one strategy reported it in one cycle.
#[derive(Debug, Clone, Serialize)]
pub struct ThresholdRecord {
    /// The strategy that reported it.
    pub strategy: String,
    /// What it is about (one strategy may report several scopes).
    pub scope: String,
    /// How hard it is met.
    pub met: Met,
    /// The signal compared.
    pub signal: String,
    /// Its value.
    pub observed: f64,
    /// The value the signal was compared with.
    pub threshold: f64,
    /// Whether it has held for its grace period.
    pub past_grace: bool,
    /// The node condition it reports while met.
    pub condition: Option<String>,
}

/// What one pod used in one cycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PodUsage {
    /// Memory working set, in bytes.
    pub memory_bytes: u64,
    /// Ephemeral storage written, in bytes.
    pub ephemeral_storage_bytes: u64,
    /// Processes.
    pub pids: u64,
}

impl PodUsage {
    /// What the pod takes away from `signal`, for the signals the simulation
    /// computes as capacity minus what is used.
    pub fn taken_from(&self, signal: &str) -> Option<u64> {
        match signal {
            "memory.available" => Some(self.memory_bytes),
            "nodefs.available" => Some(self.ephemeral_storage_bytes),
            "pid.available" => Some(self.pids),
            _ => None,
        }
    }
}

/// A victim chosen in one cycle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// `namespace/name`.
    pub pod: String,
    /// The strategy that chose it.
    pub strategy: String,
    /// `hard`, `force` or `soft`.
    pub urgency: &'static str,
    /// Why.
    pub reason: String,
    /// Chosen in dry-run: not evicted.
    pub dry_run: bool,
}

impl DecisionRecord {
    pub(super) fn new(decision: &Decision) -> Self {
        let v = &decision.victim;
        Self {
            pod: format!("{}/{}", v.pod.namespace, v.pod.name),
            strategy: v.strategy.clone(),
            urgency: v.urgency.as_str(),
            reason: v.reason.clone(),
            dry_run: decision.dry_run,
        }
    }
}

/// One cycle.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Seconds from the start.
    pub t: f64,
    /// The node's signals.
    pub signals: BTreeMap<String, f64>,
    /// What each pod on the node used, by `namespace/name`.
    pub usage: BTreeMap<String, PodUsage>,
    /// Thresholds reported.
    pub thresholds: Vec<ThresholdRecord>,
    /// Node conditions reported.
    pub conditions: Vec<String>,
    /// What the kubelet beside vigil would do on these signals (its
    /// eviction and image GC lines, from the config's `kubelet`).
    pub kubelet: Vec<String>,
    /// Thresholds out of their place beside the kubelet.
    pub misplaced: Vec<String>,
    /// Victims chosen.
    pub decisions: Vec<DecisionRecord>,
    /// Evictions started (`namespace/name`).
    pub started: Vec<String>,
    /// Evicted pods now gone.
    pub gone: Vec<String>,
    /// What was not done, and why: strategies that faulted or declined,
    /// reclaim in progress.
    pub skipped: Vec<String>,
    /// Of those, what the policies did not answer (faults, declines,
    /// refused taint effects) and rollbacks of a version on trial: what the
    /// chart marks.
    #[serde(skip)]
    pub unanswered: Vec<String>,
    /// Candidates the sorter refused, with its reasons.
    pub refusals: Vec<Refusal>,
    /// Config changes that came due this cycle, applied or refused.
    pub config: Vec<String>,
    /// Where a version in shadow decided otherwise this cycle, or faulted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<String>,
    /// The node as the strategies saw it, if asked for (`--snapshots`): the
    /// input `vigil policy test` takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotData>,
}

/// One eviction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvictionRecord {
    /// `namespace/name`.
    pub pod: String,
    /// QoS class.
    pub qos: String,
    /// The strategy that chose it.
    pub strategy: String,
    /// `hard`, `force` or `soft`.
    pub urgency: &'static str,
    /// Why.
    pub reason: String,
    /// When the eviction started, in seconds.
    pub at: f64,
    /// When the pod was gone, in seconds.
    pub gone_at: f64,
    /// Memory it was using, in bytes.
    pub freed_memory_bytes: u64,
}

impl EvictionRecord {
    pub(super) fn new(victim: &Victim, at: Duration, gone_at: Duration) -> Self {
        Self {
            pod: format!("{}/{}", victim.pod.namespace, victim.pod.name),
            qos: match victim.pod.qos {
                QosClass::BestEffort => "BestEffort",
                QosClass::Burstable => "Burstable",
                QosClass::Guaranteed => "Guaranteed",
            }
            .into(),
            strategy: victim.strategy.clone(),
            urgency: victim.urgency.as_str(),
            reason: victim.reason.clone(),
            at: at.as_secs_f64(),
            gone_at: gone_at.as_secs_f64(),
            freed_memory_bytes: victim.pod.usage.memory_working_set_bytes.unwrap_or(0),
        }
    }
}

/// A policy that served during the simulation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyRecord {
    /// Its name.
    pub name: String,
    /// Its world, e.g. `candidate-sorter`.
    pub world: &'static str,
    /// The sha256 of its component.
    pub digest: String,
    /// The file it was loaded from; none if built in.
    pub file: Option<PathBuf>,
}

impl PolicyRecord {
    pub(super) fn new(status: PolicyStatus) -> Self {
        Self {
            name: status.name,
            world: status.world.name(),
            digest: status.digest.hex(),
            file: match status.source {
                Origin::File(path) | Origin::LastKnownGood(path) => Some(path),
                Origin::Builtin => None,
            },
        }
    }
}

/// A version that ran in shadow, and how it compared with the serving one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShadowRecord {
    /// The policy it shadowed.
    pub policy: String,
    /// Its file.
    pub file: PathBuf,
    /// The sha256 of its component.
    pub digest: String,
    /// Calls of the serving version it was asked too, and answered or faulted.
    pub comparisons: u64,
    /// Of those, the ones it answered as the serving version did.
    pub agreements: u64,
    /// The ones it answered otherwise.
    pub divergences: u64,
    /// The ones it faulted on.
    pub faults: u64,
}

impl ShadowRecord {
    pub(super) fn new(policy: &str, file: &std::path::Path, digest: String) -> Self {
        Self {
            policy: policy.to_owned(),
            file: file.to_owned(),
            digest,
            comparisons: 0,
            agreements: 0,
            divergences: 0,
            faults: 0,
        }
    }
}

/// A whole simulation.
#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    /// Scenario name.
    pub scenario: String,
    /// What it shows.
    pub description: String,
    /// The policies that served, by name.
    pub policies: Vec<PolicyRecord>,
    /// What in the scenario is likely a mistake, e.g. config for a policy
    /// that is not loaded.
    pub warnings: Vec<String>,
    /// Seconds between cycles.
    pub period: f64,
    /// The capacity of each signal that has one, e.g. the node's memory for
    /// `memory.available`.
    pub capacities: BTreeMap<String, f64>,
    /// Every cycle.
    pub steps: Vec<Step>,
    /// Every eviction, in order.
    pub evictions: Vec<EvictionRecord>,
    /// The versions that ran in shadow (`--shadow`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<ShadowRecord>,
}

impl Simulation {
    /// Records `warning`, once (the output shows it; it is not logged too).
    pub(super) fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    /// Warns of config in `settings` for a policy not among `loaded`.
    pub(super) fn warn_unknown(&mut self, settings: &EvictionSettings, loaded: &[String]) {
        let loaded: Vec<&str> = loaded.iter().map(String::as_str).collect();
        for unknown in unknown_policies(settings.policies.keys(), &settings.sorter, &loaded) {
            self.warn(unknown.to_string());
        }
    }

    pub(super) fn new(scenario: &Scenario, period: Duration) -> Self {
        Self {
            scenario: scenario.name.clone(),
            description: scenario.description.trim().to_owned(),
            policies: Vec::new(),
            warnings: Vec::new(),
            period: period.as_secs_f64(),
            capacities: BTreeMap::new(),
            steps: Vec::new(),
            evictions: Vec::new(),
            shadows: Vec::new(),
        }
    }
}
