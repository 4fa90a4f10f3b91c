//! `vigil agent`: the composition root of the DaemonSet process.
//!
//! [`run`] wires, in order: the policy registry; the config controller
//! (checkpoint, then `VigilConfig` layers, trial and last-known-good:
//! [`config`]); the API clients; the watches on this node's pods and Node
//! (and PDBs per namespace), on the `VigilConfig` objects and on each
//! ConfigMap they reference; the `VigilPolicy` objects and the pulls of
//! their components (`pulled`), linked beside the policies directory;
//! the node source (signals + pods) → the eviction runner → the Eviction API
//! killer; the publisher (Events, metrics) and the node status writer; the
//! fleet view's status objects ([`crate::fleet`]); the HTTP endpoints. Every
//! task it starts is owned here and stopped on shutdown: no new eviction
//! starts, calls in flight finish within their timeout, watches stop, and
//! `run` returns.

pub mod config;
mod http;
mod pulled;
mod unknown;

pub use config::{ConfigController, ConfigOptions};

use crate::clock::{Clock, SystemClock};
use crate::cluster::budgets::Budgets;
use crate::cluster::client::{self, ClientOptions};
use crate::cluster::events;
use crate::cluster::evict::EvictionApi;
use crate::cluster::latest::write_latest;
use crate::cluster::node_status::{ConfigCondition, NodeStatus};
use crate::cluster::object_watches::{ApiSource, ObjectWatches};
use crate::cluster::publisher::{Publisher, node_recorder};
use crate::cluster::source::ClusterSource;
use crate::cluster::watches;
use crate::config::VigilConfig;
use crate::distribution::signature::VerificationKey;
use crate::eviction::EvictionManager;
use crate::eviction::runner::{Heartbeat, REPORT_BACKLOG, Runner, forward_wakes};
use crate::fleet::activity::{self, Activity};
use crate::fleet::reconcile::{Inputs, Reconciler};
use crate::metrics::Metrics;
use crate::model::Layer;
use crate::policy::engine::{BUILD, Baseline};
use crate::policy::reload::Reloader;
use crate::policy::{ChildCompiler, CompileMode, Host, LimitsTable, Registry};
use crate::signals::wake::{TriggerSettings, Wake};
use crate::signals::{CpuRates, Driver, Sources};
use anyhow::Context;
use pulled::Pulls;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Everything `vigil agent` is told.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The node this agent protects.
    pub node_name: String,
    /// A kubeconfig file; none: in-cluster, else `$KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// Policy components (`NAME.wasm`), watched for changes.
    pub policies_dir: PathBuf,
    /// Largest policy component read from the policies directory or pulled
    /// from a registry.
    pub max_policy_bytes: u64,
    /// State that survives restarts.
    pub state_dir: PathBuf,
    /// vigil's namespace, where pull Secrets are read.
    pub namespace: String,
    /// Certificates (PEM) trusted for policy registries beside the
    /// system's roots.
    pub registry_ca: Option<Vec<u8>>,
    /// Only registry versions a cosign signature under this key covers run.
    pub verification_key: Option<VerificationKey>,
    /// Whether this node compiles policies (see [`CompileMode`]).
    pub compile_mode: CompileMode,
    /// Precompiled policies are taken only if signed under this key.
    pub native_code_key: Option<VerificationKey>,
    /// A config layer over the built-in defaults (JSON or YAML), if any.
    pub config_file: Option<PathBuf>,
    /// How old the config checkpoint may be and still run without the API server.
    pub config_grace: std::time::Duration,
    /// The window over which a fleet applies one config change.
    pub config_spread: std::time::Duration,
    /// Without a fresh checkpoint, start on the defaults, not the last-known-good.
    pub config_start_on_defaults: bool,
    /// Decide and report, evict nothing (dry-run requests only).
    pub dry_run: bool,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// The host's procfs.
    pub proc_root: PathBuf,
    /// The host's cgroup mount.
    pub cgroup_root: PathBuf,
    /// The kubelet's cgroup driver.
    pub cgroup_driver: Driver,
    /// A directory on the filesystem holding the kubelet's data, for `nodefs.*`.
    pub nodefs: PathBuf,
    /// A directory on the image filesystem, for `imagefs.*` (none: not read).
    pub imagefs: Option<PathBuf>,
    /// The shortest time between two writes of one status object.
    pub status_interval: std::time::Duration,
    /// Rate limit and timeout of the API clients.
    pub api: ClientOptions,
    /// How often a holding node condition is written again.
    pub condition_heartbeat: std::time::Duration,
    /// The child process that compiles policies missing from the artifact
    /// cache; `None` compiles them in this process (`vigil agent` sets one
    /// unless it compiles nothing).
    pub compiler: Option<ChildCompiler>,
}

/// Runs the agent until `shutdown` resolves.
///
/// # Errors
/// Start-up failed: the state directory, the config, the API client or the
/// metrics address. Once running, errors are logged and retried, never fatal.
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
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
        Arc::clone(&clock),
        LimitsTable::default(),
        Some(config.state_dir.clone()),
    )?;
    let (base, defaults) = base_config(&config, &registry).await?;
    let registry = Arc::new(registry);
    let metrics = Arc::new(Metrics::default());
    let controller = ConfigController::start(
        Arc::clone(&registry),
        &config.state_dir,
        ConfigOptions {
            base,
            defaults,
            grace: config.config_grace,
            start_on_defaults: config.config_start_on_defaults,
            dry_run: config.dry_run,
            spread: config.config_spread,
            namespace: config.namespace.clone(),
        },
        Arc::clone(&metrics),
    );
    let settings = controller.settings();
    let config_report = controller.report();
    let eviction = settings.borrow().clone();

    let clients = client::connect(config.kubeconfig.as_deref(), &metrics, config.api).await?;
    let restarts = |metrics: &Arc<Metrics>| {
        let metrics = Arc::clone(metrics);
        move |watch: &str| metrics.watch_restarted(watch)
    };
    let pods = watches::pods(clients.api.clone(), &config.node_name, restarts(&metrics));
    let node = watches::node(clients.api.clone(), &config.node_name, restarts(&metrics));
    let budgets = Arc::new(Budgets::new(clients.api.clone(), restarts(&metrics)));
    let configs = watches::vigil_configs(clients.api.clone(), restarts(&metrics));
    let vigil_policies = watches::vigil_policies(clients.api.clone(), restarts(&metrics));
    let objects = Arc::new(ObjectWatches::new(ApiSource(clients.api.clone())));
    let node_store = node.store.clone();
    let node_changes = node.progress.clone();

    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let listener = http::listen(config.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.metrics_addr))?;
    let heartbeat = Heartbeat::default();
    let health = http::Health::new(eviction.period, heartbeat.clone());
    tasks.spawn(http::serve(
        listener,
        Arc::clone(&metrics),
        Arc::clone(&registry),
        health.clone(),
        stop.clone().cancelled_owned(),
    ));

    let pulls = Pulls::new(
        &config.state_dir,
        &config.node_name,
        config.max_policy_bytes,
        Arc::clone(&metrics),
        Arc::clone(&clock),
    )
    .context("cannot keep pulled policies in the state directory")?
    .with_secrets(kube::Api::namespaced(
        clients.api.clone(),
        &config.namespace,
    ));
    let pulls = match &config.registry_ca {
        Some(pem) => pulls.with_ca(pem.clone()),
        None => pulls,
    };
    let pulls = match &config.verification_key {
        Some(key) => pulls.with_key(key.clone()),
        None => pulls,
    }
    .with_host(Arc::clone(&host), config.native_code_key.clone());
    // The cache under the state directory is this agent's alone.
    let pull_reports = pulls.reports();
    let reloader = Reloader::new(Arc::clone(&registry), config.policies_dir.clone())
        .with_pulled(pulls.links().to_owned())
        .max_file_bytes(config.max_policy_bytes)
        .collecting_garbage();
    tasks.spawn(pulls.run(
        vigil_policies.store.clone(),
        vigil_policies.progress.clone(),
        node_store.clone(),
        node_changes.clone(),
        stop.clone(),
    ));
    let reload_stop = stop.clone();
    let (scans_tx, scans) = mpsc::unbounded_channel();
    tasks.spawn(unknown::warn(
        Arc::clone(&registry),
        Arc::clone(&metrics),
        scans,
        controller.settings(),
    ));
    tasks.spawn(async move {
        if let Err(error) = reloader.run(reload_stop.cancelled_owned(), Some(scans_tx)).await {
            tracing::error!(error = %crate::report::Chain(&error), "the policy reloader stopped; serving the loaded policies");
        }
    });

    tasks.spawn(write_latest(
        ConfigCondition::new(clients.api.clone(), &config.node_name),
        controller.status(),
        "the node's VigilConfigOK condition",
    ));
    let config_stop = stop.clone();
    let (config_client, node_name) = (clients.api.clone(), config.node_name.clone());
    let recycle = {
        let (objects, stop) = (Arc::clone(&objects), stop.clone());
        async move { objects.recycle(stop).await }
    };
    tasks.spawn(recycle);
    let config_task = tokio::spawn(async move {
        controller
            .run(
                &configs,
                &node,
                &objects,
                &node_name,
                config_client,
                config_stop,
            )
            .await;
        (configs, node)
    });

    let (conditions_tx, conditions_rx) = watch::channel(None);
    let status = NodeStatus::new(clients.api.clone(), &config.node_name)
        .with_heartbeat(config.condition_heartbeat);
    tasks.spawn(write_latest(
        status,
        conditions_rx,
        "the node's conditions and taints",
    ));
    // The runner's reports, to each subscriber: the publisher and the fleet view.
    let (reports_tx, _) = broadcast::channel(REPORT_BACKLOG);
    let (recorder, _) = node_recorder(clients.api.clone(), &config.node_name);
    let (events, event_writer) = events::queue(recorder, Arc::clone(&metrics));
    tasks.spawn(event_writer.run());
    let publisher = Publisher::new(
        events,
        &config.node_name,
        Arc::clone(&metrics),
        conditions_tx,
    );
    let (activity_tx, activity) = watch::channel(Activity::default());
    tasks.spawn(activity::follow(
        reports_tx.subscribe(),
        activity_tx,
        Arc::clone(&clock),
    ));
    let inputs = Inputs {
        registry: Arc::clone(&registry),
        config: config_report,
        activity,
        node: node_store.clone(),
        node_changes,
        pulls: pull_reports,
    };
    tasks.spawn(publisher.run(reports_tx.subscribe()));
    let fleet = Reconciler::new(
        clients.api.clone(),
        &config.node_name,
        inputs,
        config.status_interval,
    );
    tasks.spawn(fleet.run(stop.clone()));

    let (wakes_tx, wakes_rx) = mpsc::channel(1);
    let wake = Wake::arm(
        &config.proc_root.join("pressure/memory"),
        &TriggerSettings::default(),
    );
    // The thread ends by itself once the loop (the receiver) is gone.
    forward_wakes(wake, eviction.period, wakes_tx.clone());
    let memory_events = watch_memory_events(&config, wakes_tx);

    let source = ClusterSource {
        signals: Sources {
            proc_root: config.proc_root.clone(),
            cgroup_root: config.cgroup_root.clone(),
            driver: config.cgroup_driver,
            nodefs: config.nodefs.clone(),
            imagefs: config.imagefs.clone(),
            ..Sources::default()
        },
        pods: pods.store.clone(),
        node: node_store,
        budgets: Arc::clone(&budgets),
        clock: Arc::clone(&clock),
        cpu: CpuRates::default(),
        budgets_until: None,
    };
    let runner = Runner {
        manager: EvictionManager::new(registry.clone(), eviction),
        clock,
        killer: Arc::new(EvictionApi::new(clients.evictions)),
        wakes: wakes_rx,
        reports: Some(reports_tx),
        heartbeat,
        settings: Some(settings),
    };
    tracing::info!(node = %config.node_name, policies_dir = %config.policies_dir.display(), dry_run = config.dry_run, "vigil agent started");
    let loop_stop = stop.clone();
    let pods_store = pods.store.clone();
    let listed = health;
    let decide = tokio::spawn(async move {
        // Decide only once the pods are known: an empty store is not an empty
        // node. This is the store's only waiter (kube-runtime 5.0 wakes just
        // the last task that polled its readiness): the health endpoints
        // learn of the list from here.
        tokio::select! {
            () = loop_stop.cancelled() => {}
            ready = pods_store.wait_until_ready() => if ready.is_ok() {
                listed.listed();
                runner.run(source, loop_stop.cancelled_owned()).await;
            }
        }
    });

    shutdown.await;
    tracing::info!("shutting down");
    stop.cancel();
    if let Err(error) = decide.await {
        tracing::error!(%error, "the eviction loop ended abnormally");
    }
    let watches = config_task.await;
    drop((pods, watches, budgets, memory_events, vigil_policies));
    tasks.close();
    tasks.wait().await;
    tracing::info!("vigil agent stopped");
    Ok(())
}

/// The `--config` layer, if any, and the defaults it makes, merged with
/// `registry`'s merger ([`config::defaults`]): a bad file stops the start-up.
async fn base_config(
    config: &AgentConfig,
    registry: &Registry,
) -> anyhow::Result<(Vec<Layer>, VigilConfig)> {
    let Some(path) = &config.config_file else {
        return Ok((Vec::new(), VigilConfig::default()));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config {}", path.display()))?;
    let value: serde_json::Value = serde_norway::from_str(&text)
        .with_context(|| format!("the config {} is not YAML or JSON", path.display()))?;
    let base = vec![Layer {
        source: path.display().to_string(),
        json: value.to_string(),
    }];
    let defaults = config::defaults(registry, &base)
        .await
        .with_context(|| format!("the config {}", path.display()))?;
    Ok((base, defaults))
}

/// Wakes the loop on every change of the kubepods cgroup's `memory.events`
/// (cgroup v2), if it can be watched.
fn watch_memory_events(
    config: &AgentConfig,
    wakes: mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    let sources = Sources {
        cgroup_root: config.cgroup_root.clone(),
        driver: config.cgroup_driver,
        ..Sources::default()
    };
    let cgroups = sources.cgroups();
    let path = cgroups.memory_events(&cgroups.kubepods());
    match crate::signals::wake::watch_memory_events(&path, wakes) {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::info!(path = %path.display(), %error, "memory.events not watched; PSI and the period drive the loop");
            None
        }
    }
}
