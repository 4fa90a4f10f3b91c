//! Which config runs, and why: the config the cluster assigned runs on
//! trial and graduates to last-known-good, or is rejected (the merger or the
//! schema refuses it) or rolled back (policies fault during its trial, or
//! the agent keeps restarting within it) to the last-known-good, and is not
//! tried again until it changes. A config that cannot be computed for a
//! passing reason (the merger faulted, a referenced object could not be read)
//! is deferred instead: the running config stays and it is tried again. While the API server is unreachable at
//! start-up, the checkpoint runs if it is younger than the grace time (its
//! age counts from when it was fetched, not from when it was last reused),
//! else the last-known-good, else the defaults.
//!
//! Pure logic on explicit time: the agent's controller feeds it what the
//! cluster says and carries out what it decides.

pub(crate) mod trial;

use super::checkpoint::{Assigned, Checkpoint, LayerSet, Trial};
use super::{ConfigError, VigilConfig};
use crate::model::Layer;
use jiff::{SignedDuration, Timestamp};
use std::fmt;
use std::time::Duration;

/// How often a trial's policy faults are counted (and a deferred config
/// tried again).
pub(crate) const FAULT_CHECK: Duration = Duration::from_secs(5);
/// How often an uninterrupted config watch confirms what it holds (the
/// checkpoint's fetch time is refreshed; nothing is requested).
pub(crate) const CONFIRM_EVERY: Duration = Duration::from_secs(300);

/// Starts within one trial after which the config counts as a crash loop.
pub(crate) const MAX_STARTS_IN_TRIAL: u32 = 3;
/// Policy faults during a trial that roll the config back.
pub(crate) const MAX_FAULTS_IN_TRIAL: u64 = 3;

/// What happened on the node since the trial under way began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InTrial {
    /// Policy faults.
    pub faults: u64,
    /// Evictions accepted by the API server.
    pub evictions: u64,
}

/// Why the running config runs: the reason of the `VigilConfigOK` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The assigned config passed its trial.
    Active,
    /// The assigned config is on trial.
    Trial,
    /// The assigned config failed its trial; the last-known-good runs.
    RolledBack,
    /// The assigned config was refused; the previous config runs.
    Rejected,
    /// The API server could not be reached; a saved config runs.
    CheckpointInUse,
    /// No layer applies (or nothing else can run): the defaults run.
    Defaults,
}

impl Reason {
    /// Whether the condition is `True`: the config the node should run, runs.
    pub fn ok(self) -> bool {
        !matches!(self, Self::RolledBack | Self::Rejected)
    }

    /// The reason as the condition and metrics show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "Active",
            Self::Trial => "Trial",
            Self::RolledBack => "RolledBack",
            Self::Rejected => "Rejected",
            Self::CheckpointInUse => "CheckpointInUse",
            Self::Defaults => "Defaults",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the node runs and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// Why it runs, as the condition's reason.
    pub reason: Reason,
    /// For people: which config, and why.
    pub message: String,
}

/// What a node's status object says of its config.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigView {
    /// What runs and why.
    pub status: Status,
    /// The hash of the layers the cluster assigned last, if any.
    pub assigned: Option<String>,
    /// The hash of the layers that run (`None`: the defaults).
    pub active: Option<String>,
    /// The hash of the last config that passed its trial.
    pub last_known_good: Option<String>,
    /// When the trial under way ends.
    pub trial_end: Option<Timestamp>,
    /// Why the config refused or rolled back last was (its hash's first 12
    /// digits, then why).
    pub last_error: Option<String>,
    /// Whether every decision is a dry run: the node observes, evicts and
    /// taints nothing (the agent's `--dry-run`, or the running config's
    /// `dryRun`, as `--observe-first` sets it until a layer lifts it).
    pub observing: bool,
    /// The layers that pause the node (`spec.pause`), by source: while
    /// any applies, nothing is evicted or tainted, whatever runs.
    pub paused_by: Vec<String>,
}

/// How the checkpoint was found at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointLoad {
    /// None saved yet.
    Missing,
    /// Saved, younger than the grace time.
    Fresh,
    /// Saved, older than the grace time.
    Expired,
    /// Damaged or unreadable: ignored.
    Corrupt,
}

impl CheckpointLoad {
    /// How a readable checkpoint stands at `now`: fresh while what it
    /// assigns was fetched less than `grace` ago.
    pub(crate) fn of(saved: Option<&Checkpoint>, grace: Duration, now: Timestamp) -> Self {
        let Some(saved) = saved else {
            return Self::Missing;
        };
        let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
        match &saved.assigned {
            Some(assigned) if now.duration_since(assigned.fetched_at) < grace => Self::Fresh,
            _ => Self::Expired,
        }
    }

    /// As metrics label it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Fresh => "fresh",
            Self::Expired => "expired",
            Self::Corrupt => "corrupt",
        }
    }
}

/// How an assignment from the cluster ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Update {
    /// Nothing new.
    Unchanged,
    /// A new config runs (on trial, or as it is the last-known-good or the defaults).
    Applied,
    /// Refused: the previous config keeps running.
    Rejected,
    /// Already rejected before and unchanged since: not tried again.
    Skipped,
    /// Could not be computed now (the merger faulted, a referenced object
    /// could not be read): the running config stays and it is tried again.
    Deferred,
}

impl Update {
    /// As metrics label it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Unchanged => "unchanged",
            Self::Applied => "applied",
            Self::Rejected => "rejected",
            Self::Skipped => "skipped",
            Self::Deferred => "deferred",
        }
    }
}

/// Merges layers (the agent's: its `--config` under them, the merger policy).
pub(crate) type Merge<'a> = &'a dyn Fn(&[Layer]) -> Result<VigilConfig, ConfigError>;

/// The config state of one node.
#[derive(Debug, Clone)]
pub(crate) struct Assignment {
    checkpoint: Checkpoint,
    /// The layers running (`None`: the defaults) and the config they make.
    running: (Option<LayerSet>, VigilConfig),
    status: Status,
    /// The assigned layers could not be computed for a passing reason: try again soon.
    retrying: bool,
    /// The defaults (the agent's `--config` over the built-in ones), merged
    /// at start-up: what runs when no layer set can.
    defaults: VigilConfig,
}

impl Assignment {
    /// The state at start-up, before the API server answers: counts this
    /// start against a trial under way (a crash loop is rolled back), then
    /// runs the checkpoint if `load` found it fresh, else the
    /// last-known-good (unless `start_on_defaults`), else `defaults`.
    pub(crate) fn resume(
        saved: Option<Checkpoint>,
        load: CheckpointLoad,
        grace: Duration,
        start_on_defaults: bool,
        now: Timestamp,
        defaults: VigilConfig,
        merge: Merge<'_>,
    ) -> Self {
        let mut this = Self {
            checkpoint: saved.unwrap_or_default(),
            running: (None, defaults.clone()),
            status: Status {
                reason: Reason::Defaults,
                message: "no config saved on this node; running the defaults".into(),
            },
            retrying: false,
            defaults,
        };
        this.count_start();
        let assigned = this.checkpoint.assigned.clone();
        let age = assigned
            .as_ref()
            .map(|a| now.duration_since(a.fetched_at))
            .unwrap_or_default();
        let fresh = load == CheckpointLoad::Fresh;
        let assigned = assigned.filter(|a| this.checkpoint.rejection(&a.set.hash).is_none());
        let why = match (load, &assigned) {
            (CheckpointLoad::Corrupt, _) => "the checkpoint is damaged".to_owned(),
            (_, Some(_)) if fresh => {
                let set = assigned.expect("matched").set;
                if this.run(&set, merge).is_ok() {
                    this.status = Status {
                        reason: Reason::CheckpointInUse,
                        message: format!(
                            "the API server has not answered yet; running the checkpoint of {}, fetched {} ago",
                            set.describe(),
                            human(age)
                        ),
                    };
                    return this;
                }
                "the checkpoint does not merge".to_owned()
            }
            (_, Some(_)) => format!(
                "the checkpoint was fetched {} ago, past the grace time of {}",
                human(age),
                human(SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX))
            ),
            (_, None) if this.checkpoint.assigned.is_some() => {
                "the checkpoint holds a rejected config".to_owned()
            }
            (_, None) => "no config was saved on this node".to_owned(),
        };
        if !start_on_defaults
            && let Some(good) = this.checkpoint.last_known_good.clone()
            && this.run(&good, merge).is_ok()
        {
            this.status = Status {
                reason: Reason::CheckpointInUse,
                message: format!(
                    "the API server has not answered yet and {why}; running the last-known-good {}",
                    good.describe()
                ),
            };
            return this;
        }
        this.status.message = format!("{why}; running the defaults");
        this
    }

    /// Counts this start against a trial under way: past
    /// [`MAX_STARTS_IN_TRIAL`] it is a crash loop, and its config is rejected.
    fn count_start(&mut self) {
        let Some(trial) = &mut self.checkpoint.trial else {
            return;
        };
        trial.starts += 1;
        if trial.starts > MAX_STARTS_IN_TRIAL {
            let hash = trial.hash.clone();
            let why = format!(
                "the agent started {} times during its trial (a crash loop)",
                trial.starts
            );
            self.checkpoint.trial = None;
            self.checkpoint.reject(&hash, why);
        }
    }

    /// What the cluster assigns now (`layers`, fetched at `now`). A new
    /// config is merged and, if it merges, runs on trial; a refused one is
    /// remembered and the running config stays.
    pub(crate) fn assign(
        &mut self,
        layers: Vec<Layer>,
        now: Timestamp,
        merge: Merge<'_>,
    ) -> Update {
        self.retrying = false;
        let set = LayerSet::new(layers);
        let same = self
            .checkpoint
            .assigned
            .as_ref()
            .is_some_and(|a| a.set == set);
        self.checkpoint.assigned = Some(Assigned {
            set: set.clone(),
            fetched_at: now,
        });
        let running_it = self.running.0.as_ref().is_some_and(|r| r.hash == set.hash)
            || (set.is_empty() && self.running.0.is_none());
        if same && running_it && self.status.reason != Reason::CheckpointInUse {
            return Update::Unchanged;
        }
        if let Some(why) = self.checkpoint.rejection(&set.hash) {
            if same && self.status.reason != Reason::CheckpointInUse {
                return Update::Unchanged;
            }
            self.status = Status {
                reason: Reason::Rejected,
                message: format!(
                    "{} was rejected ({why}) and is not tried again until it changes; {}",
                    set.describe(),
                    self.running_description()
                ),
            };
            return Update::Skipped;
        }
        if set.is_empty() {
            return self.run_defaults(&set, merge);
        }
        if running_it {
            // The checkpoint was running; the API server now confirms it.
            self.status = self.settled_status(&set, now);
            return Update::Applied;
        }
        match self.run(&set, merge) {
            Err(error) if error.is_transient() => self.defer(&set, &error),
            Err(error) => {
                let why = crate::base::report::Chain(&error).to_string();
                self.checkpoint.reject(&set.hash, why.clone());
                self.status = Status {
                    reason: Reason::Rejected,
                    message: format!(
                        "{} was rejected: {why}; {}",
                        set.describe(),
                        self.running_description()
                    ),
                };
                Update::Rejected
            }
            Ok(()) => {
                let is_good = self
                    .checkpoint
                    .last_known_good
                    .as_ref()
                    .is_some_and(|g| g.hash == set.hash);
                self.checkpoint.trial = (!is_good).then(|| Trial {
                    hash: set.hash.clone(),
                    since: now,
                    starts: 1,
                });
                self.status = self.settled_status(&set, now);
                self.tick(now, InTrial::default(), merge);
                Update::Applied
            }
        }
    }

    /// No layer applies: the defaults run, with no trial.
    fn run_defaults(&mut self, set: &LayerSet, merge: Merge<'_>) -> Update {
        match merge(&[]) {
            Ok(config) => self.running = (None, config),
            Err(error) => return self.defer(set, &error),
        }
        self.checkpoint.trial = None;
        self.status = Status {
            reason: Reason::Defaults,
            message: "no VigilConfig applies to this node; running the defaults".into(),
        };
        Update::Applied
    }

    /// Moves a trial on: graduates it when its time is up, or rolls it back
    /// when what happened since it began (`done`) broke a bound: policy
    /// faults reached [`MAX_FAULTS_IN_TRIAL`], or evictions passed the
    /// config's own `configTrialMaxEvictions`.
    pub(crate) fn tick(&mut self, now: Timestamp, done: InTrial, merge: Merge<'_>) {
        let Some(trial) = self.checkpoint.trial.clone() else {
            return;
        };
        let most = self.running.1.config_trial_max_evictions;
        if done.faults >= MAX_FAULTS_IN_TRIAL {
            let why = format!("policies faulted {} times during its trial", done.faults);
            self.roll_back(&trial.hash, why, merge);
        } else if let Some(most) = most.filter(|&most| done.evictions > u64::from(most)) {
            let why = format!(
                "{} evictions during its trial, above its configTrialMaxEvictions {most}",
                done.evictions
            );
            self.roll_back(&trial.hash, why, merge);
        } else if self.trial_end().is_some_and(|end| now >= end) {
            self.checkpoint.trial = None;
            self.checkpoint.last_known_good = self.running.0.clone();
            self.status = Status {
                reason: Reason::Active,
                message: format!(
                    "running {}, which passed its trial",
                    self.running
                        .0
                        .as_ref()
                        .map_or("the defaults".into(), LayerSet::describe)
                ),
            };
        }
    }

    /// When the trial under way ends.
    pub(crate) fn trial_end(&self) -> Option<Timestamp> {
        let trial = self.checkpoint.trial.as_ref()?;
        let length = SignedDuration::try_from(self.running.1.config_trial()).ok()?;
        trial.since.checked_add(length).ok()
    }

    /// When the trial under way began.
    pub(crate) fn trial_since(&self) -> Option<Timestamp> {
        self.checkpoint.trial.as_ref().map(|t| t.since)
    }

    /// The config that runs.
    pub(crate) fn config(&self) -> &VigilConfig {
        &self.running.1
    }

    /// The hash of the layers that run (`None`: the defaults).
    pub(crate) fn running_hash(&self) -> Option<&str> {
        self.running.0.as_ref().map(|s| s.hash.as_str())
    }

    /// What runs and why.
    pub(crate) fn status(&self) -> &Status {
        &self.status
    }

    /// What runs, what was assigned and what went wrong last; `dry_run`:
    /// whether the agent was told to evict nothing, whatever the config says.
    pub(crate) fn report(&self, dry_run: bool) -> ConfigView {
        let checkpoint = &self.checkpoint;
        ConfigView {
            status: self.status.clone(),
            assigned: checkpoint.assigned.as_ref().map(|a| a.set.hash.clone()),
            active: self.running_hash().map(str::to_owned),
            last_known_good: checkpoint.last_known_good.as_ref().map(|s| s.hash.clone()),
            trial_end: self.trial_end(),
            last_error: checkpoint.rejected.last().map(|r| {
                let hash = r.hash.get(..12).unwrap_or(&r.hash);
                format!("{hash}: {}", r.reason)
            }),
            observing: dry_run || self.config().dry_run,
            paused_by: self.checkpoint.paused_by.clone(),
        }
    }

    /// The layers that pause the node, as last seen (saved with the rest).
    pub(crate) fn paused_by(&self) -> &[String] {
        &self.checkpoint.paused_by
    }

    /// Pauses the node while `paused_by` names a layer; resumes it when
    /// none. Answers whether that changed anything.
    pub(crate) fn pause(&mut self, paused_by: Vec<String>) -> bool {
        let changed = self.checkpoint.paused_by != paused_by;
        self.checkpoint.paused_by = paused_by;
        changed
    }

    /// What to save.
    pub(crate) fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Keeps the running config because `set` could not be computed for a
    /// passing reason; it is tried again on the next pass.
    fn defer(&mut self, set: &LayerSet, error: &ConfigError) -> Update {
        self.retrying = true;
        let why = crate::base::report::Chain(error).to_string();
        self.status = Status {
            reason: Reason::Rejected,
            message: format!(
                "{} could not be computed now ({why}); it is tried again, and meanwhile {}",
                set.describe(),
                self.running_description()
            ),
        };
        Update::Deferred
    }

    /// Whether the assigned config could not be computed for a passing
    /// reason and is waiting to be tried again.
    pub(crate) fn retrying(&self) -> bool {
        self.retrying
    }

    /// How long after `now` the controller looks again at the latest:
    /// when `expiry` (the first selected layer to expire) or the trial's
    /// end comes, and — while a trial runs or a deferred config waits to
    /// be tried again — every [`FAULT_CHECK`], else every
    /// [`CONFIRM_EVERY`]. A time already past is now.
    pub(crate) fn look_again_in(&self, now: Timestamp, expiry: Option<Timestamp>) -> Duration {
        let trial_end = self.trial_end();
        let every = if trial_end.is_some() || self.retrying() {
            FAULT_CHECK
        } else {
            CONFIRM_EVERY
        };
        [expiry, trial_end]
            .into_iter()
            .flatten()
            .map(|at| Duration::try_from(now.duration_until(at)).unwrap_or(Duration::ZERO))
            .fold(every, Duration::min)
    }

    fn run(&mut self, set: &LayerSet, merge: Merge<'_>) -> Result<(), ConfigError> {
        let config = merge(&set.layers())?;
        self.running = (Some(set.clone()), config);
        Ok(())
    }

    fn settled_status(&self, set: &LayerSet, now: Timestamp) -> Status {
        match self.trial_end() {
            Some(end) if self.checkpoint.trial.is_some() => Status {
                reason: Reason::Trial,
                message: format!(
                    "running {} on trial until {end} ({} from now)",
                    set.describe(),
                    human(end.duration_since(now))
                ),
            },
            _ => Status {
                reason: Reason::Active,
                message: format!("running {}, the last-known-good", set.describe()),
            },
        }
    }

    fn roll_back(&mut self, hash: &str, why: String, merge: Merge<'_>) {
        self.checkpoint.trial = None;
        self.checkpoint.reject(hash, why.clone());
        let good = self.checkpoint.last_known_good.clone();
        let restored = good.filter(|g| self.run(g, merge).is_ok());
        if restored.is_none() {
            self.running = (None, self.defaults.clone());
        }
        self.status = Status {
            reason: Reason::RolledBack,
            message: format!(
                "rolled back: {why}; {} and it is not tried again until it changes",
                self.running_description()
            ),
        };
    }

    fn running_description(&self) -> String {
        match &self.running.0 {
            Some(set) => format!("running {}", set.describe()),
            None => "running the defaults".into(),
        }
    }
}

/// A duration for people, to the second (`1h 2m 3s`).
fn human(duration: SignedDuration) -> String {
    format!("{:#}", SignedDuration::from_secs(duration.as_secs().max(0)))
}

#[cfg(test)]
mod tests;
