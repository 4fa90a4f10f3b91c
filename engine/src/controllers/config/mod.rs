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
//! rather than in the same second. A pausing layer is the exception: it
//! stops the node's evictions and taints the moment the watch shows it.

use crate::base::report::Chain;
use crate::cluster::object_watches::{Lookup, ObjectKey, ObjectWatches};
use crate::cluster::publisher::node_recorder;
use crate::cluster::watches::{Progress, Reflected};
use crate::config::assignment::CONFIRM_EVERY;
use crate::config::assignment::trial::TrialCounts;
use crate::config::assignment::{Assignment, CheckpointLoad, ConfigView, Reason, Status};
use crate::config::checkpoint::{Checkpoint, CheckpointFile};
use crate::config::crd::ConfigLayer;
use crate::config::references::{Read, Unresolved};
use crate::config::{VigilConfig, layers, references};
use crate::controllers::shadow::Merged;
use crate::eviction::EvictionSettings;
use crate::metrics::{ConfigChange, Metrics};
use crate::model::Layer;
use crate::policy::Registry;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder};
pub use merging::defaults;
use merging::{merged, merger};
pub use spread::turn;
use spread::{Spread, fingerprint};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

mod merging;
mod spread;

/// Merges waiting for the shadow controller before more go unjudged.
const MERGES_WAITING: usize = 8;

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
    /// The node's accepted evictions so far, for the config's trial.
    evictions: watch::Receiver<u64>,
    /// The counters when the trial under way began.
    trial: TrialCounts,
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
        let (settings, _) = watch::channel(settings_of(&assignment, &options));
        let (status, _) = watch::channel(assignment.status().clone());
        let (report, _) = watch::channel(assignment.report(options.dry_run));
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
            evictions,
            trial: TrialCounts::default(),
            merges: None,
            references: None,
            spread: Spread::default(),
        };
        this.registry.set_limits(this.assignment.config().limits());
        this.metrics
            .config_reason(this.assignment.status().reason.as_str());
        show_mode(&this.metrics, &this.report.borrow());
        if !this.assignment.paused_by().is_empty() {
            let by = this.assignment.paused_by();
            tracing::warn!(
                ?by,
                "paused when last seen: nothing is evicted or tainted until the cluster says otherwise"
            );
        }
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
                self.pause(selection.paused_by, &events).await;
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
            let look_again = self.assignment.look_again_in(now, next_expiry);
            let look_at = tokio::time::Instant::now() + look_again;
            let wake_at = next_turn.map_or(look_at, |turn| turn.min(look_at));
            tokio::select! {
                () = stop.cancelled() => return,
                changed = config_progress.changed() => if changed.is_err() { return },
                changed = node_progress.changed() => if changed.is_err() { return },
                changed = object_changes.changed() => if changed.is_err() { return },
                changed = self.evictions.changed(), if self.assignment.trial_since().is_some() => {
                    if changed.is_err() { return }
                }
                () = tokio::time::sleep_until(wake_at) => {}
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
        let namespace = self.options.namespace.as_str();
        let ours = wanted.iter().filter(|(_, r)| r.namespace == namespace);
        objects.follow(ours.map(|(_, r)| key(r)));
        let lookups: BTreeMap<_, _> = (wanted.iter())
            .filter_map(|(_, r)| Some((key(r), objects.get(&key(r))?)))
            .collect();
        let read = |r: &references::ConfigRef| match lookups.get(&key(r)) {
            None | Some(Lookup::Pending) => Read::Pending,
            Some(Lookup::Unavailable(why)) => Read::Unavailable(why),
            Some(Lookup::Missing) => Read::Missing,
            Some(Lookup::Found(object)) => Read::Found(
                object
                    .data
                    .as_ref()
                    .and_then(|d| d.get(&r.key))
                    .map(String::as_str),
            ),
        };
        let (mut resolved, problems) = references::resolve(&wanted, namespace, read)?;
        resolved.extend(layers);
        Some((resolved, problems))
    }

    /// Pauses the node while `paused_by` names a layer, resumes it when
    /// none: at once, whatever the spread, the trial or the running config.
    async fn pause(&mut self, paused_by: Vec<String>, events: &Events) {
        let before = self.snapshot();
        if !self.assignment.pause(paused_by) {
            return;
        }
        let by = self.assignment.paused_by();
        if by.is_empty() {
            tracing::info!("resumed: no layer pauses this node");
        } else {
            tracing::warn!(?by, "paused: nothing is evicted or tainted");
        }
        self.settings
            .send_replace(settings_of(&self.assignment, &self.options));
        self.publish(before, events).await;
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
        if let Some(change) = ConfigChange::of(update) {
            self.metrics.config_updated(change);
            tracing::info!(update = update.as_str(), reason = %self.assignment.status().reason, "{}", self.assignment.status().message);
        }
        self.publish(before, events).await;
    }

    /// Moves the trial on; `evicted` is the node's accepted evictions so far.
    async fn tick(&mut self, events: &Events, evicted: u64) {
        let before = self.snapshot();
        let faults = (self.registry.status().into_iter())
            .filter_map(|s| self.registry.get(&s.name))
            .map(|p| (p.name().to_owned(), (p.digest().hex(), p.faults())))
            .collect();
        let since = self.assignment.trial_since();
        let done = self.trial.in_trial(since, faults, evicted);
        {
            let none = BTreeMap::new();
            let merge = merger(&self.registry, &self.options.base, &none, &self.merges);
            self.assignment.tick(Timestamp::now(), done, &merge);
        }
        let after = self.assignment.status().reason;
        if after != before.1.reason {
            let result = match after {
                Reason::Active => ConfigChange::Graduated,
                Reason::RolledBack => ConfigChange::RolledBack,
                _ => ConfigChange::Changed,
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
            self.registry.set_limits(self.assignment.config().limits());
            self.settings
                .send_replace(settings_of(&self.assignment, &self.options));
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
        let report = self.assignment.report(self.options.dry_run);
        show_mode(&self.metrics, &report);
        self.report.send_if_modified(|current| {
            let changed = *current != report;
            if changed {
                *current = report;
            }
            changed
        });
    }

    /// Saves the checkpoint if it is worth it
    /// ([`Checkpoint::worth_saving`]: a newer fetch time alone at most every
    /// [`CONFIRM_EVERY`], not at every wake of a trial).
    fn save(&mut self) {
        let current = self.assignment.checkpoint();
        if !current.worth_saving(self.saved.as_ref(), CONFIRM_EVERY) {
            return;
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

/// This node's labels, once the Node is known.
fn node_labels(node: &Reflected<Node>) -> Option<BTreeMap<String, String>> {
    let nodes = node.store.state();
    let node = nodes.first()?;
    Some(node.metadata.labels.clone().unwrap_or_default())
}

/// The eviction manager's settings for the config `assignment` runs: dry
/// runs only while the agent was told so or a layer pauses the node.
fn settings_of(assignment: &Assignment, options: &ConfigOptions) -> EvictionSettings {
    let mut settings = EvictionSettings::from(assignment.config());
    settings.dry_run |= options.dry_run || !assignment.paused_by().is_empty();
    settings
}

/// The mode gauges of `report`.
fn show_mode(metrics: &Metrics, report: &ConfigView) {
    metrics.observing.set(i64::from(report.observing));
    metrics.paused.set(i64::from(!report.paused_by.is_empty()));
}
