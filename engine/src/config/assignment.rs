//! Which config runs, and why: the config the cluster assigned runs on
//! trial and graduates to last-known-good, or is rejected (the merger or the
//! schema refuses it) or rolled back (policies fault during its trial, or
//! the agent keeps restarting within it) to the last-known-good, and is not
//! tried again until it changes. While the API server is unreachable at
//! start-up, the checkpoint runs if it is younger than the grace time (its
//! age counts from when it was fetched, not from when it was last reused),
//! else the last-known-good, else the defaults.
//!
//! Pure logic on explicit time: the agent's controller feeds it what the
//! cluster says and carries out what it decides.

use super::checkpoint::{Assigned, Checkpoint, LayerSet, Trial};
use super::{ConfigError, VigilConfig};
use crate::model::Layer;
use jiff::{SignedDuration, Timestamp};
use std::fmt;
use std::time::Duration;

/// Starts within one trial after which the config counts as a crash loop.
pub const MAX_STARTS_IN_TRIAL: u32 = 3;
/// Policy faults during a trial that roll the config back.
pub const MAX_FAULTS_IN_TRIAL: u64 = 3;

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
    /// The reason.
    pub reason: Reason,
    /// For people: which config, and why.
    pub message: String,
}

/// What a node's status object says of its config.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigReport {
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
}

/// How the checkpoint was found at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointLoad {
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
    pub fn of(saved: Option<&Checkpoint>, grace: Duration, now: Timestamp) -> Self {
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
    pub fn as_str(self) -> &'static str {
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
pub enum Update {
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
    pub fn as_str(self) -> &'static str {
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
pub type Merge<'a> = &'a dyn Fn(&[Layer]) -> Result<VigilConfig, ConfigError>;

/// The config state of one node.
#[derive(Debug, Clone)]
pub struct Assignment {
    checkpoint: Checkpoint,
    /// The layers running (`None`: the defaults) and the config they make.
    running: (Option<LayerSet>, VigilConfig),
    status: Status,
    /// The assigned layers could not be computed for a passing reason: try again soon.
    retrying: bool,
}

impl Assignment {
    /// The state at start-up, before the API server answers: counts this
    /// start against a trial under way (a crash loop is rolled back), then
    /// runs the checkpoint if `load` found it fresh, else the
    /// last-known-good (unless `start_on_defaults`), else the defaults.
    pub fn resume(
        saved: Option<Checkpoint>,
        load: CheckpointLoad,
        grace: Duration,
        start_on_defaults: bool,
        now: Timestamp,
        merge: Merge<'_>,
    ) -> Self {
        let mut this = Self {
            checkpoint: saved.unwrap_or_default(),
            running: (None, defaults(merge)),
            status: Status {
                reason: Reason::Defaults,
                message: "no config saved on this node; running the defaults".into(),
            },
            retrying: false,
        };
        if let Some(trial) = &mut this.checkpoint.trial {
            trial.starts += 1;
            if trial.starts > MAX_STARTS_IN_TRIAL {
                let hash = trial.hash.clone();
                let why = format!(
                    "the agent started {} times during its trial (a crash loop)",
                    trial.starts
                );
                this.checkpoint.trial = None;
                this.checkpoint.reject(&hash, why);
            }
        }
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

    /// What the cluster assigns now (`layers`, fetched at `now`). A new
    /// config is merged and, if it merges, runs on trial; a refused one is
    /// remembered and the running config stays.
    pub fn assign(&mut self, layers: Vec<Layer>, now: Timestamp, merge: Merge<'_>) -> Update {
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
            match merge(&[]) {
                Ok(config) => self.running = (None, config),
                Err(error) => return self.defer(&set, &error),
            }
            self.checkpoint.trial = None;
            self.status = Status {
                reason: Reason::Defaults,
                message: "no VigilConfig applies to this node; running the defaults".into(),
            };
            return Update::Applied;
        }
        if running_it {
            // The checkpoint was running; the API server now confirms it.
            self.status = self.settled_status(&set, now);
            return Update::Applied;
        }
        match self.run(&set, merge) {
            Err(error) if error.is_transient() => self.defer(&set, &error),
            Err(error) => {
                let why = crate::report::Chain(&error).to_string();
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
                self.tick(now, 0, merge);
                Update::Applied
            }
        }
    }

    /// Moves a trial on: graduates it when its time is up, or rolls it back
    /// when `faults` (policy faults since it began) reached the limit.
    pub fn tick(&mut self, now: Timestamp, faults: u64, merge: Merge<'_>) {
        let Some(trial) = self.checkpoint.trial.clone() else {
            return;
        };
        if faults >= MAX_FAULTS_IN_TRIAL {
            self.roll_back(
                &trial.hash,
                format!("policies faulted {faults} times during its trial"),
                merge,
            );
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
    pub fn trial_end(&self) -> Option<Timestamp> {
        let trial = self.checkpoint.trial.as_ref()?;
        let length = SignedDuration::try_from(self.running.1.config_trial()).ok()?;
        trial.since.checked_add(length).ok()
    }

    /// When the trial under way began.
    pub fn trial_since(&self) -> Option<Timestamp> {
        self.checkpoint.trial.as_ref().map(|t| t.since)
    }

    /// The config that runs.
    pub fn config(&self) -> &VigilConfig {
        &self.running.1
    }

    /// The hash of the layers that run (`None`: the defaults).
    pub fn running_hash(&self) -> Option<&str> {
        self.running.0.as_ref().map(|s| s.hash.as_str())
    }

    /// What runs and why.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// What runs, what was assigned and what went wrong last.
    pub fn report(&self) -> ConfigReport {
        let checkpoint = &self.checkpoint;
        ConfigReport {
            status: self.status.clone(),
            assigned: checkpoint.assigned.as_ref().map(|a| a.set.hash.clone()),
            active: self.running_hash().map(str::to_owned),
            last_known_good: checkpoint.last_known_good.as_ref().map(|s| s.hash.clone()),
            trial_end: self.trial_end(),
            last_error: checkpoint.rejected.last().map(|r| {
                let hash = r.hash.get(..12).unwrap_or(&r.hash);
                format!("{hash}: {}", r.reason)
            }),
        }
    }

    /// What to save.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Keeps the running config because `set` could not be computed for a
    /// passing reason; it is tried again on the next pass.
    fn defer(&mut self, set: &LayerSet, error: &ConfigError) -> Update {
        self.retrying = true;
        let why = crate::report::Chain(error).to_string();
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
    pub fn retrying(&self) -> bool {
        self.retrying
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
            self.running = (None, defaults(merge));
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

/// The defaults: no cluster layer (the agent's own `--config` still applies;
/// it merged at start-up, so only a faulting merger falls back further).
fn defaults(merge: Merge<'_>) -> VigilConfig {
    merge(&[]).unwrap_or_default()
}

/// A duration for people, to the second (`1h 2m 3s`).
fn human(duration: SignedDuration) -> String {
    format!("{:#}", SignedDuration::from_secs(duration.as_secs().max(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(name: &str, json: &str) -> Layer {
        Layer {
            source: format!("VigilConfig/{name}@1"),
            json: json.into(),
        }
    }

    /// Merges as the agent does, without a merger policy: each layer over
    /// the defaults, checked against the schema.
    fn merge(layers: &[Layer]) -> Result<VigilConfig, ConfigError> {
        let mut value = serde_json::to_value(VigilConfig::default()).unwrap();
        for layer in layers {
            crate::config::schema::check_layer(layer)?;
            let patch: serde_json::Value = serde_json::from_str(&layer.json).unwrap();
            for (k, v) in patch.as_object().unwrap() {
                value[k] = v.clone();
            }
        }
        serde_json::from_value(value).map_err(ConfigError::Invalid)
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    const DAY: Duration = Duration::from_secs(86_400);

    /// A node that runs `{"evictionBurst": 2}` as its last-known-good.
    fn settled_on_burst_2() -> Assignment {
        let mut state = fresh();
        let good = r#"{"evictionBurst": 2, "configTrialSeconds": 0}"#;
        state.assign(vec![layer("a", good)], at(0), &merge);
        assert_eq!(state.status().reason, Reason::Active);
        state
    }

    fn fresh() -> Assignment {
        Assignment::resume(None, CheckpointLoad::Missing, DAY, false, at(0), &merge)
    }

    #[test]
    fn a_new_config_runs_on_trial_and_graduates() {
        let mut state = fresh();
        assert_eq!(state.status().reason, Reason::Defaults);
        let update = state.assign(
            vec![layer(
                "a",
                r#"{"evictionBurst": 7, "configTrialSeconds": 60}"#,
            )],
            at(10),
            &merge,
        );
        assert_eq!(update, Update::Applied);
        assert_eq!(state.config().eviction_burst, 7);
        assert_eq!(state.status().reason, Reason::Trial);
        assert_eq!(state.trial_end(), Some(at(70)));
        state.tick(at(69), 0, &merge);
        assert_eq!(state.status().reason, Reason::Trial);
        state.tick(at(70), 0, &merge);
        assert_eq!(state.status().reason, Reason::Active);
        assert!(state.checkpoint().last_known_good.is_some());
        assert!(state.checkpoint().trial.is_none());
    }

    #[test]
    fn a_bad_value_is_rejected_with_its_path_and_the_old_config_keeps_running() {
        let mut state = fresh();
        state.assign(
            vec![layer(
                "a",
                r#"{"evictionBurst": 7, "configTrialSeconds": 0}"#,
            )],
            at(0),
            &merge,
        );
        assert_eq!(state.status().reason, Reason::Active);
        let bad = vec![layer("a", r#"{"evictionBurst": 0}"#)];
        assert_eq!(state.assign(bad.clone(), at(5), &merge), Update::Rejected);
        assert_eq!(state.config().eviction_burst, 7);
        let status = state.status();
        assert_eq!(status.reason, Reason::Rejected);
        assert!(
            status
                .message
                .contains("$.evictionBurst: 0 is less than the minimum of 1"),
            "{}",
            status.message
        );
        assert!(
            status.message.contains("VigilConfig/a@1"),
            "{}",
            status.message
        );
        assert_eq!(
            state.assign(bad, at(6), &merge),
            Update::Unchanged,
            "not retried"
        );
    }

    #[test]
    fn a_merger_fault_keeps_the_running_config_and_never_rejects_the_new_one_for_good() {
        let mut state = settled_on_burst_2();
        let faulty = |_: &[Layer]| -> Result<VigilConfig, ConfigError> {
            Err(ConfigError::MergerFault(crate::policy::Fault::Deadline {
                deadline_ms: 100,
            }))
        };
        let next = vec![layer(
            "a",
            r#"{"evictionBurst": 3, "configTrialSeconds": 0}"#,
        )];
        assert_eq!(
            state.assign(next.clone(), at(10), &faulty),
            Update::Deferred
        );
        assert_eq!(state.config().eviction_burst, 2, "the running config stays");
        assert!(state.retrying());
        assert!(
            state.status().message.contains("tried again"),
            "{:?}",
            state.status()
        );
        // No VigilConfig at all: the defaults are not run without the merger either.
        assert_eq!(state.assign(vec![], at(11), &faulty), Update::Deferred);
        assert_eq!(state.config().eviction_burst, 2);
        // Once the merger answers, the same layers apply: nothing was recorded against them.
        assert_eq!(state.assign(next, at(12), &merge), Update::Applied);
        assert_eq!(state.config().eviction_burst, 3);
        assert!(!state.retrying());
    }

    #[test]
    fn faults_during_the_trial_roll_back_to_the_last_known_good() {
        let mut state = settled_on_burst_2();
        let faulty = vec![layer("a", r#"{"evictionBurst": 9}"#)];
        state.assign(faulty.clone(), at(10), &merge);
        assert_eq!(
            (state.status().reason, state.config().eviction_burst),
            (Reason::Trial, 9)
        );
        state.tick(at(20), MAX_FAULTS_IN_TRIAL - 1, &merge);
        assert_eq!(state.status().reason, Reason::Trial);
        state.tick(at(30), MAX_FAULTS_IN_TRIAL, &merge);
        assert_eq!(
            (state.status().reason, state.config().eviction_burst),
            (Reason::RolledBack, 2)
        );
        assert!(!state.status().reason.ok());
        assert_eq!(state.assign(faulty, at(40), &merge), Update::Unchanged);
        let changed = vec![layer("a", r#"{"evictionBurst": 8}"#)];
        assert_eq!(
            state.assign(changed, at(50), &merge),
            Update::Applied,
            "a change is tried"
        );
        assert_eq!(state.status().reason, Reason::Trial);
    }

    #[test]
    fn restarting_again_and_again_within_a_trial_rolls_it_back() {
        let mut state = settled_on_burst_2();
        state.assign(vec![layer("a", r#"{"evictionBurst": 9}"#)], at(10), &merge);
        let mut saved = state.checkpoint().clone();
        for start in 2..=MAX_STARTS_IN_TRIAL + 1 {
            let resumed = Assignment::resume(
                Some(saved),
                CheckpointLoad::Fresh,
                DAY,
                false,
                at(20),
                &merge,
            );
            saved = resumed.checkpoint().clone();
            let burst = resumed.config().eviction_burst;
            if start <= MAX_STARTS_IN_TRIAL {
                assert_eq!(burst, 9, "start {start} still runs the trial");
            } else {
                assert_eq!(burst, 2, "start {start}: the crash loop is rolled back");
                assert!(saved.rejected[0].reason.contains("crash loop"));
            }
        }
    }

    #[test]
    fn without_the_api_server_a_checkpoint_runs_until_its_grace_time_is_over() {
        let mut state = settled_on_burst_2();
        state.assign(
            vec![layer(
                "a",
                r#"{"evictionBurst": 4, "configTrialSeconds": 0}"#,
            )],
            at(0),
            &merge,
        );
        let saved = state.checkpoint().clone();
        let day = DAY.as_secs() as i64;
        let young = Assignment::resume(
            Some(saved.clone()),
            CheckpointLoad::Fresh,
            DAY,
            false,
            at(day - 1),
            &merge,
        );
        assert_eq!(
            (young.status().reason, young.config().eviction_burst),
            (Reason::CheckpointInUse, 4)
        );
        // Reusing the checkpoint does not make it younger.
        let reused = young.checkpoint().clone();
        assert_eq!(reused.assigned, saved.assigned);
        let old = Assignment::resume(
            Some(reused),
            CheckpointLoad::Expired,
            DAY,
            false,
            at(day + 1),
            &merge,
        );
        assert_eq!(old.status().reason, Reason::CheckpointInUse);
        assert!(
            old.status().message.contains("past the grace time"),
            "{}",
            old.status().message
        );
        assert_eq!(
            old.config().eviction_burst,
            4,
            "the last-known-good (the same config here)"
        );
        let defaults = Assignment::resume(
            Some(saved),
            CheckpointLoad::Expired,
            DAY,
            true,
            at(day + 1),
            &merge,
        );
        assert_eq!(
            (defaults.status().reason, defaults.config().eviction_burst),
            (Reason::Defaults, 3)
        );
        let corrupt = Assignment::resume(None, CheckpointLoad::Corrupt, DAY, false, at(0), &merge);
        assert!(corrupt.status().message.contains("damaged"));
    }

    #[test]
    fn when_the_api_server_confirms_the_checkpoint_nothing_is_applied_twice() {
        let mut state = fresh();
        let layers = vec![layer(
            "a",
            r#"{"evictionBurst": 2, "configTrialSeconds": 0}"#,
        )];
        state.assign(layers.clone(), at(0), &merge);
        let mut resumed = Assignment::resume(
            Some(state.checkpoint().clone()),
            CheckpointLoad::Fresh,
            DAY,
            false,
            at(100),
            &merge,
        );
        assert_eq!(resumed.status().reason, Reason::CheckpointInUse);
        assert_eq!(
            resumed.assign(layers.clone(), at(200), &merge),
            Update::Applied
        );
        assert_eq!(resumed.status().reason, Reason::Active);
        assert_eq!(
            resumed.checkpoint().assigned.as_ref().unwrap().fetched_at,
            at(200)
        );
        assert_eq!(resumed.assign(layers, at(300), &merge), Update::Unchanged);
        assert_eq!(resumed.assign(Vec::new(), at(400), &merge), Update::Applied);
        assert_eq!(resumed.status().reason, Reason::Defaults);
    }
}
