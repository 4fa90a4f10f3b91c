//! The agent's config controller: follows the `VigilConfig` objects and its
//! own Node's labels, and the ConfigMaps their policies' `configFrom` name
//! (one watch each: `ObjectWatches`); hands what applies to the node to
//! the config state (`Assignment`), and carries out what it decides — new settings to the
//! eviction loop and new call limits to the registry (no policy is
//! recompiled), the checkpoint saved, the `VigilConfigOK` condition, a
//! Warning Event on each transition to a failed state, and metrics.
//!
//! A change of what applies waits for this node's turn (`Spread`): a
//! `VigilConfig` edit seen by a whole fleet at once is applied, and its
//! condition, Event and status writes made, over `--config-spread`
//! rather than in the same second.

use crate::base::rate::Backoff;
use crate::base::report::Chain;
use crate::cluster::object_watches::{Lookup, ObjectKey, ObjectWatches};
use crate::cluster::publisher::node_recorder;
use crate::cluster::watches::{Progress, Reflected};
use crate::config::assignment::{
    Assignment, CheckpointLoad, ConfigView, InTrial, Reason, Status, Update,
};
use crate::config::checkpoint::{Checkpoint, CheckpointFile};
use crate::config::crd::ConfigLayer;
use crate::config::references::Unresolved;
use crate::config::{ConfigError, VigilConfig, layers, references};
use crate::controllers::shadow::Merged;
use crate::eviction::EvictionSettings;
use crate::metrics::Metrics;
use crate::model::Layer;
use crate::policy::Registry;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder};
pub use spread::turn;
use spread::{Spread, fingerprint};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

mod spread;

/// Merges waiting for the shadow controller before more go unjudged.
const MERGES_WAITING: usize = 8;

/// Merges of the agent's own layers tried at start-up before it gives up.
const START_MERGES: u32 = 6;

/// How often a trial's policy faults are counted.
const FAULT_CHECK: Duration = Duration::from_secs(5);
/// How often an uninterrupted config watch confirms what it holds (the
/// checkpoint's fetch time is refreshed; nothing is requested).
const CONFIRM_EVERY: Duration = Duration::from_secs(300);

/// What the controller is told at start-up.
#[derive(Debug, Clone)]
pub struct ConfigOptions {
    /// Layers under every cluster layer (`--config`).
    pub base: Vec<Layer>,
    /// `base` merged over the built-in defaults ([`defaults`]): what runs
    /// when no cluster layer applies or can.
    pub defaults: VigilConfig,
    /// How old a checkpoint may be and still run without the API server.
    pub grace: Duration,
    /// Without a fresh checkpoint, run the defaults rather than the last-known-good.
    pub start_on_defaults: bool,
    /// Decide and report, evict nothing, whatever the config says.
    pub dry_run: bool,
    /// The window over which a fleet applies one config change.
    pub spread: Duration,
    /// vigil's own namespace: the only one `configFrom` ConfigMaps are read
    /// in (the agent's Role allows no other).
    pub namespace: String,
}

/// Follows the cluster's config for this node and carries out what it decides.
pub struct ConfigController {
    assignment: Assignment,
    registry: Arc<Registry>,
    options: ConfigOptions,
    file: CheckpointFile,
    saved: Option<Checkpoint>,
    metrics: Arc<Metrics>,
    settings: watch::Sender<EvictionSettings>,
    status: watch::Sender<Status>,
    report: watch::Sender<ConfigView>,
    /// Faults of each policy (by digest) when the trial under way began.
    faults_at_trial: BTreeMap<String, (String, u64)>,
    /// The node's accepted evictions so far, for the config's trial.
    evictions: watch::Receiver<u64>,
    /// When the trial under way began, and the node's accepted evictions then.
    evictions_at_trial: Option<(Timestamp, u64)>,
    /// Where each merge goes to be compared with the merger in shadow.
    merges: Option<mpsc::Sender<Merged>>,
    /// The selection last resolved (the merger's digest, each layer's
    /// source and JSON) and the references its merge names: an unchanged
    /// selection is not merged again on every pass to find them.
    references: Option<(ReferencesKey, Vec<(String, references::ConfigRef)>)>,
    /// When a changed selection is applied.
    spread: Spread,
}

type ReferencesKey = (Option<String>, Vec<(String, String)>);

impl ConfigController {
    /// Reads the checkpoint under `state_dir` and decides what runs before
    /// the API server answers; puts it in force on `registry`. `evictions`
    /// counts the node's accepted evictions, for the config's trial.
    pub fn start(
        registry: Arc<Registry>,
        state_dir: &Path,
        options: ConfigOptions,
        metrics: Arc<Metrics>,
        evictions: watch::Receiver<u64>,
    ) -> Self {
        let file = CheckpointFile::new(state_dir);
        let now = Timestamp::now();
        let (saved, load) = match file.load() {
            Ok(saved) => {
                let load = CheckpointLoad::of(saved.as_ref(), options.grace, now);
                (saved, load)
            }
            Err(error) => {
                tracing::error!(error = %Chain(&error), "config checkpoint not used; set aside as checkpoint.json.damaged");
                file.set_aside();
                (None, CheckpointLoad::Corrupt)
            }
        };
        metrics
            .config_checkpoint_loads
            .get_or_create(&crate::metrics::CheckpointLabels {
                status: load.as_str().into(),
            })
            .inc();
        let assignment = Assignment::resume(
            saved.clone(),
            load,
            options.grace,
            options.start_on_defaults,
            now,
            options.defaults.clone(),
            &merger(&registry, &options.base, &BTreeMap::new(), &None),
        );
        tracing::info!(reason = %assignment.status().reason, "{}", assignment.status().message);
        let (settings, _) = watch::channel(settings_of(assignment.config(), &options));
        let (status, _) = watch::channel(assignment.status().clone());
        let (report, _) = watch::channel(assignment.report());
        let mut this = Self {
            assignment,
            registry,
            options,
            file,
            saved,
            metrics,
            settings,
            status,
            report,
            faults_at_trial: BTreeMap::new(),
            evictions,
            evictions_at_trial: None,
            merges: None,
            references: None,
            spread: Spread::default(),
        };
        this.registry.set_limits(this.assignment.config().limits());
        this.metrics
            .config_reason(this.assignment.status().reason.as_str());
        this.save();
        this
    }

    /// The settings in force, and every change of them.
    pub fn settings(&self) -> watch::Receiver<EvictionSettings> {
        self.settings.subscribe()
    }

    /// What runs and why, and every change of it.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// The node status object's account of the config, and every change of it.
    pub fn report(&self) -> watch::Receiver<ConfigView> {
        self.report.subscribe()
    }

    /// Every merge of the cluster's layers from now on, the layers (the
    /// agent's own under them) with what the serving merger made of them:
    /// for the shadow controller. A merge the receiver has no room for is
    /// not sent.
    pub(crate) fn merges(&mut self) -> mpsc::Receiver<Merged> {
        let (sender, merges) = mpsc::channel(MERGES_WAITING);
        self.merges = Some(sender);
        merges
    }

    /// Follows the cluster until `stop`: `configs` and `node` (this Node)
    /// are the watches, `objects` watches the ConfigMaps referenced; events
    /// go through `client`.
    pub async fn run(
        mut self,
        configs: &Reflected<ConfigLayer>,
        node: &Reflected<Node>,
        objects: &ObjectWatches,
        node_name: &str,
        client: kube::Client,
        stop: CancellationToken,
    ) {
        let events = node_recorder(client, node_name);
        self.spread.offset = turn(node_name, self.options.spread);
        let mut config_progress = configs.progress.clone();
        let mut node_progress = node.progress.clone();
        let mut object_changes = objects.changes();
        // Interruptions of the config watch as of its last event: more since
        // means what it holds may be stale, so its age must not be refreshed.
        let mut seen = Progress::default();
        loop {
            let progress = *config_progress.borrow_and_update();
            node_progress.borrow_and_update();
            object_changes.borrow_and_update();
            if progress.events != seen.events {
                seen = progress;
            }
            let current = progress.events > 0 && progress.errors == seen.errors;
            let now = Timestamp::now();
            let mut next_expiry = None;
            let mut next_turn = None;
            if current && let Some(labels) = node_labels(node) {
                let listed = configs.store.state();
                let selection =
                    layers::select(listed.iter().map(AsRef::as_ref), node_name, &labels, now);
                for (source, why) in &selection.skipped {
                    tracing::warn!(layer = %source, %why, "VigilConfig skipped");
                }
                next_expiry = selection.next_expiry;
                // While a referenced ConfigMap is not listed yet, its watch wakes this.
                if let Some((layers, problems)) = self.resolve(selection.layers, objects) {
                    let selected = fingerprint(&layers, &problems);
                    next_turn = self.spread.wait(selected, tokio::time::Instant::now());
                    if next_turn.is_none() {
                        self.assign(layers, &problems, now, &events).await;
                    }
                }
            }
            let evicted = *self.evictions.borrow_and_update();
            self.tick(&events, evicted).await;
            let wake_at = [next_expiry, self.assignment.trial_end()]
                .into_iter()
                .flatten()
                .min()
                .map(|at| tokio::time::Instant::now() + now.duration_until(at).unsigned_abs())
                .into_iter()
                .chain(next_turn)
                .min();
            let check = if self.assignment.trial_end().is_some() || self.assignment.retrying() {
                FAULT_CHECK
            } else {
                CONFIRM_EVERY
            };
            tokio::select! {
                () = stop.cancelled() => return,
                changed = config_progress.changed() => if changed.is_err() { return },
                changed = node_progress.changed() => if changed.is_err() { return },
                changed = object_changes.changed() => if changed.is_err() { return },
                changed = self.evictions.changed(), if self.assignment.trial_since().is_some() => {
                    if changed.is_err() { return }
                }
                () = sleep_until(wake_at) => {}
                () = tokio::time::sleep(check) => {}
            }
        }
    }

    /// `layers` with, under them, a layer for each ConfigMap key their
    /// policies' `configFrom` names, and why any could not be read; `None`
    /// while a referenced ConfigMap's watch has not listed it yet. The
    /// referenced objects become the ones watched.
    fn resolve(
        &mut self,
        layers: Vec<Layer>,
        objects: &ObjectWatches,
    ) -> Option<(Vec<Layer>, BTreeMap<String, Unresolved>)> {
        let merger = self
            .registry
            .get(crate::base::policy_name::DEFAULT_MERGER)
            .map(|p| p.digest().hex());
        let selected = layers.iter().map(|l| (l.source.clone(), l.json.clone()));
        let key = (merger, selected.collect());
        let wanted = match &self.references {
            Some((known, wanted)) if *known == key => wanted.clone(),
            _ => {
                let wanted = merged(&self.registry, &self.options.base, &layers)
                    .map(|config| references::wanted(&config))
                    .unwrap_or_default();
                self.references = Some((key, wanted.clone()));
                wanted
            }
        };
        let key = |r: &references::ConfigRef| ObjectKey {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        };
        let ours = |r: &references::ConfigRef| r.namespace == self.options.namespace;
        objects.follow(wanted.iter().filter(|(_, r)| ours(r)).map(|(_, r)| key(r)));
        let mut resolved = Vec::new();
        let mut problems = BTreeMap::new();
        for (policy, reference) in &wanted {
            if !ours(reference) {
                let why = format!(
                    "ConfigMaps are read only in vigil's namespace, {}",
                    self.options.namespace
                );
                problems.insert(
                    references::source(policy, reference),
                    Unresolved::lasting(why),
                );
                continue;
            }
            let problem = match objects.get(&key(reference))? {
                Lookup::Pending => return None,
                Lookup::Unavailable(why) => Unresolved {
                    why: format!("cannot be read: {why}"),
                    transient: true,
                },
                Lookup::Missing => Unresolved::lasting("the ConfigMap does not exist"),
                Lookup::Found(object) => {
                    let value = object.data.as_ref().and_then(|d| d.get(&reference.key));
                    match value.map(|v| references::layer(policy, reference, v)) {
                        None => Unresolved::lasting("the ConfigMap has no such key"),
                        Some(Err(why)) => Unresolved::lasting(why),
                        Some(Ok(layer)) => {
                            resolved.push(layer);
                            continue;
                        }
                    }
                }
            };
            problems.insert(references::source(policy, reference), problem);
        }
        resolved.extend(layers);
        Some((resolved, problems))
    }

    async fn assign(
        &mut self,
        layers: Vec<Layer>,
        problems: &BTreeMap<String, Unresolved>,
        now: Timestamp,
        events: &Events,
    ) {
        let before = self.snapshot();
        let update = {
            let merge = merger(&self.registry, &self.options.base, problems, &self.merges);
            self.assignment.assign(layers, now, &merge)
        };
        if update != Update::Unchanged {
            self.metrics.config_updated(update.as_str());
            tracing::info!(update = update.as_str(), reason = %self.assignment.status().reason, "{}", self.assignment.status().message);
        }
        self.publish(before, events).await;
    }

    /// Moves the trial on; `evicted` is the node's accepted evictions so far.
    async fn tick(&mut self, events: &Events, evicted: u64) {
        let before = self.snapshot();
        let done = InTrial {
            faults: self.faults_in_trial(),
            evictions: self.evictions_in_trial(evicted),
        };
        {
            let none = BTreeMap::new();
            let merge = merger(&self.registry, &self.options.base, &none, &self.merges);
            self.assignment.tick(Timestamp::now(), done, &merge);
        }
        let after = self.assignment.status().reason;
        if after != before.1.reason {
            let result = match after {
                Reason::Active => "graduated",
                Reason::RolledBack => "rolled-back",
                _ => "changed",
            };
            self.metrics.config_updated(result);
            tracing::info!(reason = %after, "{}", self.assignment.status().message);
        }
        self.publish(before, events).await;
    }

    /// What is compared to tell a transition: the running layers and the status.
    fn snapshot(&self) -> (Option<String>, Status) {
        (
            self.assignment.running_hash().map(str::to_owned),
            self.assignment.status().clone(),
        )
    }

    /// Saves the checkpoint, then puts the new state in force and tells
    /// it: whatever a reader sees has been saved.
    async fn publish(&mut self, before: (Option<String>, Status), events: &Events) {
        self.save();
        let status = self.assignment.status().clone();
        if self.assignment.running_hash().map(str::to_owned) != before.0 {
            let config = self.assignment.config();
            self.registry.set_limits(config.limits());
            self.settings
                .send_replace(settings_of(config, &self.options));
        }
        if status != before.1 {
            self.metrics.config_reason(status.reason.as_str());
            // A fleet's config change is one condition and one status write
            // per node; only a node that needs a look adds an Event.
            if status.reason != before.1.reason && !status.reason.ok() {
                record(events, &status).await;
            }
            self.status.send_replace(status);
        }
        let report = self.assignment.report();
        self.report.send_if_modified(|current| {
            let changed = *current != report;
            if changed {
                *current = report;
            }
            changed
        });
    }

    /// Policy faults since the trial under way began (a policy replaced
    /// meanwhile counts all of its faults).
    fn faults_in_trial(&mut self) -> u64 {
        if self.assignment.trial_since().is_none() {
            self.faults_at_trial.clear();
            return 0;
        }
        let now: BTreeMap<String, (String, u64)> = self
            .registry
            .status()
            .into_iter()
            .filter_map(|s| self.registry.get(&s.name))
            .map(|p| (p.name().to_owned(), (p.digest().hex(), p.faults())))
            .collect();
        if self.faults_at_trial.is_empty() {
            self.faults_at_trial = now.clone();
        }
        now.iter()
            .map(
                |(name, (digest, faults))| match self.faults_at_trial.get(name) {
                    Some((then, base)) if then == digest => faults.saturating_sub(*base),
                    _ => *faults,
                },
            )
            .sum()
    }

    /// Evictions since the trial under way began, of `evicted` so far.
    fn evictions_in_trial(&mut self, evicted: u64) -> u64 {
        let Some(since) = self.assignment.trial_since() else {
            self.evictions_at_trial = None;
            return 0;
        };
        let base = match self.evictions_at_trial {
            Some((then, base)) if then == since => base,
            _ => {
                self.evictions_at_trial = Some((since, evicted));
                evicted
            }
        };
        evicted.saturating_sub(base)
    }

    /// Saves the checkpoint if it changed; a newer fetch time alone is
    /// saved at most every [`CONFIRM_EVERY`] (not at every wake of a trial).
    fn save(&mut self) {
        let current = self.assignment.checkpoint();
        if let Some(saved) = &self.saved {
            let mut probe = current.clone();
            if let (Some(now), Some(then)) = (&mut probe.assigned, &saved.assigned)
                && now
                    .fetched_at
                    .duration_since(then.fetched_at)
                    .unsigned_abs()
                    < CONFIRM_EVERY
            {
                now.fetched_at = then.fetched_at;
            }
            if probe == *saved {
                return;
            }
        }
        match self.file.save(current) {
            Ok(()) => self.saved = Some(current.clone()),
            Err(error) => {
                tracing::error!(error = %Chain(&error), "config checkpoint not saved");
            }
        }
    }
}

type Events = (Recorder, ObjectReference);

async fn record((recorder, node): &Events, status: &Status) {
    let event = Event {
        type_: EventType::Warning,
        reason: format!("Config{}", status.reason),
        note: Some(crate::base::text::bounded(&status.message, 1024)),
        action: "Configure".into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, node).await {
        tracing::warn!(error = %Chain(&error), "config event not recorded");
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// This node's labels, once the Node is known.
fn node_labels(node: &Reflected<Node>) -> Option<BTreeMap<String, String>> {
    let nodes = node.store.state();
    let node = nodes.first()?;
    Some(node.metadata.labels.clone().unwrap_or_default())
}

/// Merges `layers` over `base` with `registry`'s merger.
fn merged(
    registry: &Registry,
    base: &[Layer],
    layers: &[Layer],
) -> Result<VigilConfig, ConfigError> {
    let all: Vec<Layer> = base.iter().chain(layers).cloned().collect();
    VigilConfig::merge(registry, all)
}

/// Merges as [`merged`] and refuses a config whose `configFrom` references
/// the layers do not resolve (`problems` says why, by layer source). Each
/// merge goes to `merges`, if any, for a merger in shadow.
fn merger<'a>(
    registry: &'a Registry,
    base: &'a [Layer],
    problems: &'a BTreeMap<String, Unresolved>,
    merges: &'a Option<mpsc::Sender<Merged>>,
) -> impl Fn(&[Layer]) -> Result<VigilConfig, ConfigError> + 'a {
    move |layers| {
        let config = merged(registry, base, layers);
        if let Some(merges) = merges {
            let serving = config.as_ref().map_err(|why| Chain(why).to_string());
            let layers = base.iter().chain(layers).cloned().collect();
            // Full: the shadow controller is behind, this merge goes unjudged.
            let _ = merges.try_send(Merged {
                layers,
                serving: serving.cloned(),
            });
        }
        let config = config?;
        references::check(&config, layers, problems)?;
        Ok(config)
    }
}

/// The config `base` (the agent's own `--config` layers) makes over the
/// built-in defaults, merged by the merger policy. A fault is not the
/// layer's doing (a CPU starved at start-up can push the merger past its
/// deadline): it is tried again after 1, 2, 4, 8 and 16 s, so a slow start
/// does not become a crash loop. A layer that does not merge fails at once.
///
/// # Errors
/// The layer does not merge, or the merger faulted `START_MERGES` times.
pub async fn defaults(registry: &Registry, base: &[Layer]) -> Result<VigilConfig, ConfigError> {
    retried_at_start(|| merged(registry, base, &[])).await
}

/// Calls `merge` until it succeeds, fails for a reason of the layers, or
/// has faulted [`START_MERGES`] times, waiting twice as long after each fault.
async fn retried_at_start(
    merge: impl Fn() -> Result<VigilConfig, ConfigError>,
) -> Result<VigilConfig, ConfigError> {
    let backoff = Backoff::new(Duration::from_secs(1), Duration::MAX);
    let mut attempt = 1;
    loop {
        match merge() {
            Err(error) if error.is_transient() && attempt < START_MERGES => {
                let wait = backoff.wait(attempt);
                tracing::warn!(error = %Chain(&error), attempt, retry_in = ?wait, "the agent's own config did not merge; trying again");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// The eviction manager's settings for `config`.
fn settings_of(config: &VigilConfig, options: &ConfigOptions) -> EvictionSettings {
    let mut settings = EvictionSettings::from(config);
    settings.dry_run |= options.dry_run;
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use tokio::time::Instant;

    fn deadline() -> ConfigError {
        ConfigError::MergerFault(crate::policy::Fault::Deadline { deadline_ms: 100 })
    }

    #[tokio::test(start_paused = true)]
    async fn a_merger_fault_at_start_up_is_tried_again_with_backoff() {
        let start = Instant::now();
        let calls = Cell::new(0);
        let merged = retried_at_start(|| {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err(deadline())
            } else {
                Ok(VigilConfig {
                    eviction_burst: 7,
                    ..VigilConfig::default()
                })
            }
        })
        .await
        .expect("the third merge succeeds");
        assert_eq!((merged.eviction_burst, calls.get()), (7, 3));
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2), "1 s, then 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_merger_that_faults_every_time_fails_start_up_after_a_bounded_wait() {
        let start = Instant::now();
        let calls = Cell::new(0);
        let result = retried_at_start(|| {
            calls.set(calls.get() + 1);
            Err(deadline())
        })
        .await;
        assert!(
            matches!(result, Err(ConfigError::MergerFault(_))),
            "{result:?}"
        );
        assert_eq!(calls.get(), START_MERGES);
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2 + 4 + 8 + 16));
    }

    #[tokio::test(start_paused = true)]
    async fn a_layer_that_does_not_merge_fails_start_up_at_once() {
        let start = Instant::now();
        let calls = Cell::new(0);
        let result = retried_at_start(|| {
            calls.set(calls.get() + 1);
            Err(ConfigError::Rejected(crate::model::Rejections(Vec::new())))
        })
        .await;
        assert!(
            matches!(result, Err(ConfigError::Rejected(_))),
            "{result:?}"
        );
        assert_eq!((calls.get(), start.elapsed()), (1, Duration::ZERO));
    }
}
