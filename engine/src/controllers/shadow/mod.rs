//! The shadow controller, the shell around [`board`]: loads the versions
//! the pull controller linked for shadow (`rollout.shadow`), puts them in
//! shadow of the serving policies of their names ([`Shadowed`]), and after
//! each cycle of the eviction loop — off its path, on a blocking thread —
//! has them judge the calls kept for them. Each comparison is counted in
//! `vigil_policy_shadow_total`; the first divergence of a pressure episode
//! is an Event on the Node; a version that diverges past its
//! `maxDivergencePercent` is taken out of shadow, with an Event; the fleet
//! view (`status.shadow` of the policy's `VigilPolicyStatus`) is told as
//! [`board::Board::publish`] says.
//!
//! A merger in shadow is asked each merge the config controller makes
//! ([`Merged`]): the same layers, on a blocking thread, its config
//! compared with the serving merger's.
//!
//! A version in shadow never acts: its answers go nowhere but into the
//! comparison, and it is called without the supervisor, so its faults are
//! its own and roll back nothing that serves.

mod board;

use crate::base::clock::Clock;
use crate::base::digest::Digest;
use crate::base::policy_name::DEFAULT_MERGER;
use crate::base::report::Chain;
use crate::cluster::events::Events;
use crate::config::VigilConfig;
use crate::controllers::pulls::ShadowPull;
use crate::controllers::replaced;
use crate::eviction::runner::{LoopReport, next_report};
use crate::eviction::shadow::{CallKind, Comparison, ShadowSet, Shadowed, merge_verdict};
use crate::fleet::kinds::ShadowView;
use crate::metrics::Metrics;
use crate::model::Layer;
use crate::policy::{Origin, Policy, Registry, World};
use board::{Board, Notice};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

/// One merge of the config controller: the layers, the agent's own under
/// the cluster's, and what the serving merger made of them (or why not).
#[derive(Debug)]
pub(crate) struct Merged {
    /// The layers, bottom first (the defaults are put under them by the merge).
    pub layers: Vec<Layer>,
    /// The serving merger's config, or why it refused, in words.
    pub serving: Result<VigilConfig, String>,
}

/// The shadow controller of one node.
pub(crate) struct ShadowController {
    /// The serving policies: the host to load with, their limits and worlds.
    pub registry: Arc<Registry>,
    /// Where the eviction manager asks its policies.
    pub shadowed: Arc<Shadowed>,
    /// Counts comparisons.
    pub metrics: Arc<Metrics>,
    /// Queues the Events, about `node`.
    pub events: Events,
    /// The Node.
    pub node: ObjectReference,
    /// Time for the states and divergences.
    pub clock: Arc<dyn Clock>,
    /// Where the fleet view reads the versions in shadow.
    pub views: watch::Sender<BTreeMap<String, ShadowView>>,
}

impl ShadowController {
    /// Follows the versions linked for shadow (`pulls`), judges after
    /// each cycle the loop `reports` and each of the config's `merges`,
    /// until `stop`.
    pub(crate) async fn run(
        self,
        mut pulls: watch::Receiver<BTreeMap<String, ShadowPull>>,
        mut reports: broadcast::Receiver<Arc<LoopReport>>,
        mut merges: mpsc::Receiver<Merged>,
        stop: CancellationToken,
    ) {
        let mut board = Board::default();
        let mut loaded: BTreeMap<String, Arc<Policy>> = BTreeMap::new();
        let (mut pulls_open, mut merges_open) = (true, true);
        // Whether the last cycle found pressure: a merge judged meanwhile
        // neither ends nor starts a pressure episode.
        let mut pressure = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = pulls.changed(), if pulls_open => {
                    if changed.is_err() {
                        pulls_open = false;
                        continue;
                    }
                    let shadows = pulls.borrow_and_update().clone();
                    self.follow(&mut board, &mut loaded, &shadows).await;
                }
                report = next_report(&mut reports, "the shadow controller") => {
                    let Some(report) = report else { return };
                    let LoopReport::Cycle(cycle, _) = report.as_ref() else {
                        continue;
                    };
                    pressure = !cycle.thresholds.is_empty();
                    if loaded.is_empty() {
                        continue;
                    }
                    self.judge(&mut board, &mut loaded, pressure).await;
                }
                merged = merges.recv(), if merges_open => {
                    let Some(merged) = merged else {
                        merges_open = false;
                        continue;
                    };
                    let Some(merger) = loaded.get(DEFAULT_MERGER).cloned() else {
                        continue;
                    };
                    let comparison = Self::judge_merge(merger, merged).await;
                    self.count(&mut board, &mut loaded, comparison.into_iter().collect(), pressure);
                }
            }
            if let Some(views) = board.publish(self.clock.now()) {
                // Only a change wakes the fleet view: a node without a
                // shadow never tells it anything.
                self.views.send_if_modified(|shown| replaced(shown, views));
            }
        }
    }

    /// Brings the loaded versions in step with `shadows`.
    async fn follow(
        &self,
        board: &mut Board,
        loaded: &mut BTreeMap<String, Arc<Policy>>,
        shadows: &BTreeMap<String, ShadowPull>,
    ) {
        let loads = board.follow(shadows, self.clock.now());
        // Held before they load: the reloader's collection of the cache
        // must not take an artifact compiled for one of them.
        let loading: Vec<(String, PathBuf, Result<Vec<u8>, String>)> = (loads.into_iter())
            .map(|(policy, component)| {
                let bytes = std::fs::read(&component)
                    .map_err(|e| format!("cannot read {}: {e}", component.display()));
                (policy, component, bytes)
            })
            .collect();
        let held = (loaded.values().map(|p| p.digest())).chain(
            loading
                .iter()
                .filter_map(|(_, _, b)| Some(Digest::of(b.as_ref().ok()?))),
        );
        self.registry.hold_for_shadow(held.collect());
        for (policy, component, bytes) in loading {
            let result = match bytes {
                Ok(bytes) => self.load(&policy, bytes, component).await,
                Err(why) => Err(why),
            };
            let outcome = match result {
                Ok(version) => {
                    let digest = version.digest().to_string();
                    tracing::info!(policy, version = digest, "a version runs in shadow");
                    loaded.insert(policy.clone(), version);
                    Ok(digest)
                }
                Err(why) => {
                    tracing::warn!(policy, error = why, "a version in shadow is refused");
                    loaded.remove(&policy);
                    Err(why)
                }
            };
            board.loaded(&policy, outcome, self.clock.now());
        }
        self.put(board, loaded);
    }

    /// Loads `component` as a version of `policy` in shadow, with the
    /// limits the serving version has; refuses one of another world.
    async fn load(
        &self,
        policy: &str,
        bytes: Vec<u8>,
        component: PathBuf,
    ) -> Result<Arc<Policy>, String> {
        let (registry, name) = (Arc::clone(&self.registry), policy.to_owned());
        let origin = Origin::File(component);
        let loading = tokio::task::spawn_blocking(move || {
            let limits = registry.limits().for_policy(&name);
            (registry.host()).load(&name, bytes, origin, limits)
        });
        let version = match loading.await {
            Ok(Ok(version)) => version,
            Ok(Err(error)) => return Err(format!("it does not load: {}", Chain(&error))),
            Err(error) => return Err(format!("its load did not finish: {error}")),
        };
        if let Some(serving) = self.registry.get(policy)
            && serving.world() != version.world()
        {
            return Err(format!(
                "it is of world {}, the serving version of {}",
                version.world().name(),
                serving.world().name()
            ));
        }
        Ok(Arc::new(version))
    }

    /// Puts what `board` compares in shadow, and keeps only their
    /// artifacts for shadow.
    fn put(&self, board: &Board, loaded: &mut BTreeMap<String, Arc<Policy>>) {
        let comparing = board.comparing();
        loaded.retain(|name, _| comparing.contains(name));
        (self.registry).hold_for_shadow(loaded.values().map(|p| p.digest()).collect());
        // A merger is asked by the config's merges, not the eviction loop.
        let asked = (loaded.values()).filter(|p| p.world() != World::ConfigMerger);
        let set = ShadowSet::new(asked.cloned());
        let names = set.names();
        self.shadowed.put(Arc::new(set), names);
    }

    /// Has the versions in shadow judge the calls kept since the last
    /// time, on a blocking thread; counts, tells and rejects.
    async fn judge(
        &self,
        board: &mut Board,
        loaded: &mut BTreeMap<String, Arc<Policy>>,
        pressure: bool,
    ) {
        let shadowed = Arc::clone(&self.shadowed);
        let comparisons = match tokio::task::spawn_blocking(move || shadowed.judge()).await {
            Ok(comparisons) => comparisons,
            Err(error) => {
                tracing::error!(%error, "judging the versions in shadow failed");
                return;
            }
        };
        self.count(board, loaded, comparisons, pressure);
    }

    /// Has `merger`, in shadow, merge the layers of `merged` on a blocking
    /// thread; compares its config with the serving one.
    async fn judge_merge(merger: Arc<Policy>, merged: Merged) -> Option<Comparison> {
        let Merged { layers, serving } = merged;
        let judging = tokio::task::spawn_blocking(move || {
            let shadow = VigilConfig::merge_by(&merger.as_merger()?, layers);
            let serving = serving.as_ref().map_err(String::as_str);
            Some(Comparison {
                policy: merger.name().to_owned(),
                call: CallKind::Merge,
                verdict: merge_verdict(serving, shadow),
            })
        });
        judging.await.unwrap_or_else(|error| {
            tracing::error!(%error, "judging the merger in shadow failed");
            None
        })
    }

    /// Counts `comparisons`, tells and rejects.
    fn count(
        &self,
        board: &mut Board,
        loaded: &mut BTreeMap<String, Arc<Policy>>,
        comparisons: Vec<Comparison>,
        pressure: bool,
    ) {
        let (counted, notices) = board.record(comparisons, pressure, self.clock.now());
        for c in counted {
            (self.metrics).shadow_compared(&c.policy, &c.version, c.result);
        }
        let rejected = notices.iter().any(|n| matches!(n, Notice::Rejected { .. }));
        for notice in notices {
            self.tell(notice);
        }
        if rejected {
            self.put(board, loaded);
        }
    }

    fn tell(&self, notice: Notice) {
        let (type_, reason, note) = match notice {
            Notice::Differs {
                policy,
                version,
                words,
            } => {
                tracing::info!(
                    policy,
                    version,
                    divergence = words,
                    "a version in shadow decides otherwise"
                );
                let note = format!("{policy}@{version} in shadow decides otherwise: {words}");
                (EventType::Normal, "PolicyShadowDiffers", note)
            }
            Notice::Rejected {
                policy,
                version,
                message,
            } => {
                tracing::warn!(policy, version, message, "a version in shadow is rejected");
                let note = format!("{policy}@{version} taken out of shadow: {message}");
                (EventType::Warning, "PolicyShadowRejected", note)
            }
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(crate::base::text::bounded(&note, 1024)),
            action: "Compare".into(),
            secondary: None,
        };
        self.events.send(self.node.clone(), event);
    }
}
