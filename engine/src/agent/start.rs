//! What [`super::run`] starts, one function a subsystem: each takes what it
//! needs from the [`Agent`] being assembled, spawns its tasks on the
//! agent's tracker (stopped by the agent's token) and hands back what the
//! later ones need.

use super::http::{self, Health};
use super::{AgentConfig, MetricsAuth};
use crate::base::build::BUILD;
use crate::base::clock::Clock;
use crate::cluster::budgets::Budgets;
use crate::cluster::client::Clients;
use crate::cluster::events;
use crate::cluster::evict::EvictionApi;
use crate::cluster::katalyst_cnr::CnrWatch;
use crate::cluster::kubelet_stats::{self, LayerCache};
use crate::cluster::latest::write_latest;
use crate::cluster::node_status::{ConfigCondition, NodeStatus};
use crate::cluster::object_watches::{ApiSource, ObjectWatches};
use crate::cluster::publisher::{Publisher, node_recorder, node_reference};
use crate::cluster::source::ClusterSource;
use crate::cluster::watches::{self, Reflected};
use crate::config::VigilConfig;
use crate::config::crd::ConfigLayer;
use crate::controllers::config::{ConfigController, ConfigOptions};
use crate::controllers::pulls::{PullOptions, Pulls, ShadowPull};
use crate::controllers::shadow::{Merged, ShadowController};
use crate::controllers::trial::TrialBounds;
use crate::distribution::crd::VigilPolicy;
use crate::eviction::runner::{Heartbeat, LoopReport, REPORT_BACKLOG, Runner};
use crate::eviction::shadow::Shadowed;
use crate::eviction::{EvictionManager, EvictionSettings};
use crate::fleet::activity::{self, Activity};
use crate::fleet::kinds::PullView;
use crate::fleet::reconcile::{Inputs, Reconciler};
use crate::metrics::Metrics;
use crate::model::Layer;
use crate::policy::artifacts::engine::Baseline;
use crate::policy::lifecycle::reload::Reloader;
use crate::policy::{Host, LimitsTable, Registry};
use crate::signals::wake::Wakes;
use crate::signals::{CpuRates, SignalFiles};
use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The policy host (its compile mode, its child compiler) and the registry
/// of loaded policies, last-known-good under the state directory.
pub(super) fn policy_host(
    config: &AgentConfig,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<(Arc<Host>, Registry)> {
    let mut host =
        Host::new(Some(config.state_dir.join("cache")))?.compile_mode(config.compile_mode);
    if let Some(compiler) = &config.compiler {
        host = host.compiling_in(compiler.clone())?;
    }
    tracing::info!(
        engine_key = %host.engine_key(),
        cpu_baseline = %Baseline::host(),
        build = BUILD,
        compile = config.compile_mode.name(),
        native_code_key = config.native_code_key.is_some(),
        "policy engine"
    );
    let host = Arc::new(host);
    let registry = Registry::new(
        Arc::clone(&host),
        Arc::clone(clock),
        LimitsTable::default(),
        Some(config.state_dir.clone()),
    )?;
    Ok((host, registry))
}

/// The config controller, on the checkpoint until the cluster answers.
pub(super) fn config_controller(
    config: &AgentConfig,
    registry: &Arc<Registry>,
    metrics: &Arc<Metrics>,
    base: Vec<Layer>,
    defaults: VigilConfig,
    evictions: watch::Receiver<u64>,
) -> ConfigController {
    let options = ConfigOptions {
        base,
        defaults,
        grace: config.config_grace,
        start_on_defaults: config.config_start_on_defaults,
        dry_run: config.dry_run,
        spread: config.config_spread,
        namespace: config.namespace.clone(),
    };
    ConfigController::start(
        Arc::clone(registry),
        &config.state_dir,
        options,
        Arc::clone(metrics),
        evictions,
    )
}

/// The agent being assembled: what every subsystem shares.
pub(super) struct Agent<'a> {
    pub(super) config: &'a AgentConfig,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) registry: Arc<Registry>,
    /// The registry's policies, with versions in shadow beside some.
    pub(super) shadowed: Arc<Shadowed>,
    pub(super) host: Arc<Host>,
    pub(super) clients: Clients,
    /// Cancelled on shutdown.
    pub(super) stop: CancellationToken,
    /// Every task started, waited for on shutdown.
    pub(super) tasks: TaskTracker,
}

/// The watches of the agent: kept until shutdown, when dropping them ends them.
pub(super) struct Watches {
    pods: Reflected<Pod>,
    node: Reflected<Node>,
    budgets: Arc<Budgets>,
    configs: Reflected<ConfigLayer>,
    policies: Reflected<VigilPolicy>,
    objects: Arc<ObjectWatches>,
}

impl Watches {
    /// This node's pods and Node, PDBs per namespace as needed, the
    /// `VigilConfig` and `VigilPolicy` objects, and the ConfigMaps they
    /// reference (whose idle watches are recycled until shutdown).
    pub(super) fn start(agent: &Agent<'_>) -> Arc<Self> {
        let (api, node_name) = (&agent.clients.api, &agent.config.node_name);
        let restarts = || {
            let metrics = Arc::clone(&agent.metrics);
            move |watch: &str| metrics.watch_restarted(watch)
        };
        let objects = Arc::new(ObjectWatches::new(ApiSource(api.clone())));
        let recycle = {
            let (objects, stop) = (Arc::clone(&objects), agent.stop.clone());
            async move { objects.recycle(stop).await }
        };
        agent.tasks.spawn(recycle);
        Arc::new(Self {
            pods: watches::pods(agent.clients.pods.clone(), node_name, restarts()),
            node: watches::node(api.clone(), node_name, restarts()),
            budgets: Arc::new(Budgets::new(api.clone(), restarts())),
            configs: watches::vigil_configs(api.clone(), restarts()),
            policies: watches::vigil_policies(api.clone(), restarts()),
            objects,
        })
    }
}

impl Agent<'_> {
    /// Serves `/metrics`, `/healthz` and `/readyz`; answers the health the
    /// eviction loop reports to.
    pub(super) async fn http(
        &self,
        eviction: &EvictionSettings,
        heartbeat: &Heartbeat,
    ) -> anyhow::Result<Health> {
        let addr = self.config.metrics_addr;
        let listener = http::listen(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        // The bound address, a port `:0` asked for included.
        let bound = listener.local_addr().unwrap_or(addr);
        tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
        let health = Health::new(eviction.period, heartbeat.clone());
        let access = match self.config.metrics_auth {
            MetricsAuth::None => http::Access::Open,
            MetricsAuth::Kubernetes => {
                let tls = http::self_signed(&self.config.node_name)?;
                let now = tokio::time::Instant::now();
                let reviewer = http::Reviewer::new(self.clients.api.clone(), now);
                tracing::info!(
                    "/metrics answers over TLS, to bearer tokens the API server says may get it"
                );
                http::Access::Reviewed(tls, Box::new(reviewer))
            }
        };
        self.tasks.spawn(http::serve(
            listener,
            Arc::clone(&self.metrics),
            Arc::clone(&self.registry),
            health.clone(),
            access,
            self.stop.clone().cancelled_owned(),
        ));
        Ok(health)
    }

    /// The pull controller (components from registries, linked beside the
    /// policies directory), the reloader serving both, and the warning of
    /// policies the config names that none of them loads. Answers how the
    /// pulls fare, for the fleet view, and the versions linked for shadow.
    pub(super) fn policies(
        &self,
        watches: &Watches,
        controller: &ConfigController,
    ) -> anyhow::Result<Pulled> {
        let config = self.config;
        let pulls = self.pulls()?;
        let pulled = Pulled {
            reports: pulls.reports(),
            shadows: pulls.shadows(),
        };
        let reloader = Reloader::new(Arc::clone(&self.registry), config.policies_dir.clone())
            .with_pulled(pulls.links().to_owned())
            .max_file_bytes(config.max_policy_bytes)
            .collecting_garbage();
        self.tasks.spawn(pulls.run(
            watches.policies.store.clone(),
            watches.policies.progress.clone(),
            watches.node.store.clone(),
            watches.node.progress.clone(),
            self.stop.clone(),
        ));
        let (scans_tx, scans) = mpsc::unbounded_channel();
        self.tasks.spawn(crate::controllers::unknown::warn(
            Arc::clone(&self.registry),
            Arc::clone(&self.metrics),
            scans,
            controller.settings(),
        ));
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            if let Err(error) = reloader.run(stop.cancelled_owned(), Some(scans_tx)).await {
                tracing::error!(error = %crate::base::report::Chain(&error), "the policy reloader stopped; serving the loaded policies");
            }
        });
        Ok(pulled)
    }

    /// The pull controller, configured from the agent's flags.
    fn pulls(&self) -> anyhow::Result<Pulls> {
        let config = self.config;
        let options = PullOptions {
            cap: config.max_policy_bytes,
            secrets: Some(kube::Api::namespaced(
                self.clients.api.clone(),
                &config.namespace,
            )),
            ca: config.registry_ca.clone(),
            key: config.verification_key.clone(),
            // The cache under the state directory is this agent's alone.
            native: Some((Arc::clone(&self.host), config.native_code_key.clone())),
        };
        let metrics = Arc::clone(&self.metrics);
        Pulls::new(
            &config.state_dir,
            &config.node_name,
            options,
            metrics,
            Arc::clone(&self.clock),
        )
        .context("cannot keep pulled policies in the state directory")
    }

    /// The config controller following the cluster, and the writer of the
    /// node's `VigilConfigOK` condition; answers its task, which ends after
    /// `stop`, and its merges, for the shadow controller.
    pub(super) fn config_controller(
        &self,
        watches: &Arc<Watches>,
        mut controller: ConfigController,
    ) -> (JoinHandle<()>, mpsc::Receiver<Merged>) {
        let (api, node_name) = (self.clients.api.clone(), self.config.node_name.clone());
        self.tasks.spawn(write_latest(
            ConfigCondition::new(api.clone(), &node_name),
            controller.status(),
            "the node's VigilConfigOK condition",
        ));
        let merges = controller.merges();
        let (watches, stop) = (Arc::clone(watches), self.stop.clone());
        let task = tokio::spawn(async move {
            let (configs, node, objects) = (&watches.configs, &watches.node, &watches.objects);
            controller
                .run(configs, node, objects, &node_name, api, stop)
                .await;
        });
        (task, merges)
    }

    /// What the eviction loop reports goes to: the node's conditions and
    /// taints, Events and metrics (the publisher), the shadow controller,
    /// the trial bounds, and the fleet view's status objects. Answers the sender the loop
    /// reports to.
    pub(super) fn reporting(
        &self,
        watches: &Watches,
        config: watch::Receiver<crate::config::assignment::ConfigView>,
        pulled: Pulled,
        ties: ConfigTies,
    ) -> broadcast::Sender<Arc<LoopReport>> {
        let (api, node_name) = (&self.clients.api, &self.config.node_name);
        let (conditions_tx, conditions_rx) = watch::channel(None);
        let status =
            NodeStatus::new(api.clone(), node_name).with_heartbeat(self.config.condition_heartbeat);
        let what = "the node's conditions and taints";
        self.tasks.spawn(write_latest(status, conditions_rx, what));
        // The runner's reports, to each subscriber: the publisher and the fleet view.
        let (reports, _) = broadcast::channel(REPORT_BACKLOG);
        let (recorder, _) = node_recorder(api.clone(), node_name);
        let (events, event_writer) = events::queue(recorder, Arc::clone(&self.metrics));
        self.tasks.spawn(event_writer.run());
        let (views, shadows) = watch::channel(BTreeMap::new());
        let shadow = ShadowController {
            registry: Arc::clone(&self.registry),
            shadowed: Arc::clone(&self.shadowed),
            metrics: Arc::clone(&self.metrics),
            events: events.clone(),
            node: node_reference(node_name),
            clock: Arc::clone(&self.clock),
            views,
        };
        let shadow = shadow.run(
            pulled.shadows,
            reports.subscribe(),
            ties.merges,
            self.stop.clone(),
        );
        self.tasks.spawn(shadow);
        let bounds = TrialBounds::new(
            Arc::clone(&self.registry),
            watches.policies.store.clone(),
            ties.evictions,
        );
        self.tasks
            .spawn(bounds.run(reports.subscribe(), self.stop.clone()));
        let publisher = Publisher::new(events, node_name, Arc::clone(&self.metrics), conditions_tx);
        self.tasks.spawn(publisher.run(reports.subscribe()));
        let (activity_tx, activity) = watch::channel(Activity::default());
        let clock = Arc::clone(&self.clock);
        self.tasks
            .spawn(activity::follow(reports.subscribe(), activity_tx, clock));
        let inputs = Inputs {
            registry: Arc::clone(&self.registry),
            config,
            activity,
            node: watches.node.store.clone(),
            node_changes: watches.node.progress.clone(),
            pulls: pulled.reports,
            shadows,
        };
        let interval = self.config.status_interval;
        let fleet = Reconciler::new(api.clone(), node_name, inputs, interval);
        self.tasks.spawn(fleet.run(self.stop.clone()));
        reports
    }

    /// The node's kernel files, as the agent's flags name them.
    fn signal_files(&self) -> SignalFiles {
        let config = self.config;
        SignalFiles {
            proc_root: config.proc_root.clone(),
            cgroup_root: config.cgroup_root.clone(),
            driver: config.cgroup_driver,
            nodefs: config.nodefs.clone(),
            imagefs: config.imagefs.clone(),
            workload_cgroup: config.workload_cgroup.clone(),
            ..SignalFiles::default()
        }
    }

    /// Every source that wakes the eviction loop before its period ends
    /// (`signals::wake`), armed.
    pub(super) fn wakes(&self, eviction: &EvictionSettings) -> Wakes {
        Wakes::arm(&self.signal_files(), eviction.period)
    }

    /// The eviction loop: the node source (signals and pods) → the runner →
    /// the Eviction API killer, deciding once the pods are listed.
    pub(super) fn eviction_loop(&self, parts: Loop, watches: &Watches) -> JoinHandle<()> {
        let config = self.config;
        let layers = self.clients.kubelet.clone().map(|client| {
            let cache = Arc::new(LayerCache::default());
            self.tasks.spawn(kubelet_stats::follow(
                client,
                Arc::clone(&cache),
                Arc::clone(&self.clock),
                self.stop.clone(),
            ));
            cache
        });
        let source = ClusterSource {
            signals: self.signal_files(),
            pods: watches.pods.store.clone(),
            node: watches.node.store.clone(),
            budgets: Arc::clone(&watches.budgets),
            clock: Arc::clone(&self.clock),
            cpu: CpuRates::default(),
            budgets_until: None,
            wanted: Default::default(),
            rates: Default::default(),
            sampled: Default::default(),
            layers,
            cnr: Some(CnrWatch::new(self.clients.api.clone(), &config.node_name)),
        };
        let Wakes {
            receiver,
            line,
            memory_events,
        } = parts.wakes;
        let runner = Runner {
            manager: EvictionManager::new(self.shadowed.clone(), parts.eviction),
            clock: Arc::clone(&self.clock),
            killer: Arc::new(EvictionApi::new(self.clients.pods.clone())),
            wakes: receiver,
            memory_line: Some(line),
            reports: Some(parts.reports),
            heartbeat: parts.heartbeat,
            settings: Some(parts.settings),
        };
        let (stop, pods, health) = (self.stop.clone(), watches.pods.store.clone(), parts.health);
        tokio::spawn(async move {
            // The memory.events watch lives as long as the loop it wakes.
            let _memory_events = memory_events;
            // Decide only once the pods are known: an empty store is not an
            // empty node. This is the store's only waiter (kube-runtime 5.0
            // wakes just the last task that polled its readiness): the
            // health endpoints learn of the list from here.
            tokio::select! {
                () = stop.cancelled() => {}
                ready = pods.wait_until_ready() => if ready.is_ok() {
                    health.listed();
                    runner.run(source, stop.cancelled_owned()).await;
                }
            }
        })
    }
}

/// What the pull controller tells the others.
pub(super) struct Pulled {
    /// How the pulls of the serving versions fare, for the fleet view.
    reports: watch::Receiver<BTreeMap<String, PullView>>,
    /// The versions linked for shadow, for the shadow controller.
    shadows: watch::Receiver<BTreeMap<String, ShadowPull>>,
}

/// What the config controller shares with the controllers of the loop's
/// reports.
pub(super) struct ConfigTies {
    /// Its merges, for a merger in shadow.
    pub(super) merges: mpsc::Receiver<Merged>,
    /// Counts the node's accepted evictions for the config's trial.
    pub(super) evictions: watch::Sender<u64>,
}

/// What the eviction loop is started with, besides the watches.
pub(super) struct Loop {
    /// The settings it starts on.
    pub(super) eviction: EvictionSettings,
    /// The settings as the config controller changes them.
    pub(super) settings: watch::Receiver<EvictionSettings>,
    /// What wakes it before its period ends.
    pub(super) wakes: Wakes,
    /// Where it reports each pass.
    pub(super) reports: broadcast::Sender<Arc<LoopReport>>,
    /// Beaten each pass, read by the health endpoints.
    pub(super) heartbeat: Heartbeat,
    /// Told when the pods are listed.
    pub(super) health: Health,
}
