//! `vigil agent`: the composition root of the DaemonSet process.
//!
//! [`run`] reads as the list of what the agent starts, in order: the policy
//! host and registry; the config controller (checkpoint, then `VigilConfig`
//! layers, trial and last-known-good: [`crate::controllers::config`]); the
//! API clients and the watches on this node's pods and Node (and PDBs per
//! namespace), on the `VigilConfig` and `VigilPolicy` objects and on each
//! ConfigMap they reference; the HTTP endpoints; the policies (the pull
//! controller, `crate::controllers::pulls`, linking beside the policies
//! directory, and the reloader); the reporting (node conditions and taints,
//! Events, metrics, the fleet view's status objects); the eviction loop (the
//! node source → the runner → the Eviction API killer). Every task it
//! starts is owned here and stopped on shutdown: no new eviction starts,
//! calls in flight finish within their timeout, watches stop, and `run`
//! returns.

mod http;
mod start;

use crate::base::clock::{Clock, SystemClock};
use crate::cluster::client::{self, ClientOptions, PodAccess};
use crate::config::VigilConfig;
use crate::controllers::config::defaults;
use crate::distribution::signature::VerificationKey;
use crate::eviction::runner::Heartbeat;
use crate::eviction::shadow::Shadowed;
use crate::metrics::Metrics;
use crate::model::Layer;
use crate::policy::{ChildCompiler, CompileMode, Registry};
use crate::signals::Driver;
use anyhow::Context;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
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
    /// Start from a base layer `dryRun: true`, under `config_file` and the
    /// cluster's layers: observe until a layer says to enforce.
    pub observe_first: bool,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// Who may read `/metrics`.
    pub metrics_auth: MetricsAuth,
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
    /// The cgroup of `psi.workload.memory.*`, relative to the cgroup mount
    /// (none: the kubepods cgroup).
    pub workload_cgroup: Option<PathBuf>,
    /// The kubelet whose statistics give the pods' writable layers (none:
    /// the `writable-layers` fact is never read).
    pub kubelet: Option<crate::cluster::kubelet_stats::KubeletEndpoint>,
    /// The shortest time between two writes of one status object.
    pub status_interval: std::time::Duration,
    /// Rate limit and timeout of the API clients.
    pub api: ClientOptions,
    /// Who reads and evicts this node's pods.
    pub pod_access: PodAccess,
    /// How often a holding node condition is written again.
    pub condition_heartbeat: std::time::Duration,
    /// The child process that compiles policies missing from the artifact
    /// cache; `None` compiles them in this process (`vigil agent` sets one
    /// unless it compiles nothing).
    pub compiler: Option<ChildCompiler>,
}

/// Who may read `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAuth {
    /// Whoever reaches the port (plain HTTP; the NetworkPolicy decides who
    /// does).
    None,
    /// Over TLS, a bearer token the API server says may `get` `/metrics`
    /// (TokenReview and SubjectAccessReview); the health endpoints stay
    /// open to the kubelet's probes.
    Kubernetes,
}

/// Runs the agent until `shutdown` resolves.
///
/// # Errors
/// Start-up failed: the state directory, the config, the API client or the
/// metrics address. Once running, errors are logged and retried, never fatal.
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (host, registry) = start::policy_host(&config, &clock)?;
    let (base, defaults) = base_config(&config, &registry).await?;
    let registry = Arc::new(registry);
    let metrics = Arc::new(Metrics::default());
    let (evictions, counted) = watch::channel(0);
    let controller =
        start::config_controller(&config, &registry, &metrics, base, defaults, counted);
    let (settings, config_report) = (controller.settings(), controller.report());
    let eviction = settings.borrow().clone();
    let clients = client::connect(
        config.kubeconfig.as_deref(),
        config.kubelet.as_ref(),
        &metrics,
        config.api,
        config.pod_access.user(&config.node_name).as_deref(),
    )
    .await?;
    let agent = start::Agent {
        config: &config,
        clock,
        metrics,
        shadowed: Arc::new(Shadowed::alone(registry.clone())),
        registry,
        host,
        clients,
        stop: CancellationToken::new(),
        tasks: TaskTracker::new(),
    };

    let watches = start::Watches::start(&agent);
    let heartbeat = Heartbeat::default();
    let health = agent.http(&eviction, &heartbeat).await?;
    let pulled = agent.policies(&watches, &controller)?;
    let (config_task, merges) = agent.config_controller(&watches, controller);
    let ties = start::ConfigTies { merges, evictions };
    let reports = agent.reporting(&watches, config_report, pulled, ties);
    let wakes = agent.wakes(&eviction);
    let parts = start::Loop {
        eviction,
        settings,
        wakes,
        reports,
        heartbeat,
        health,
    };
    let decide = agent.eviction_loop(parts, &watches);
    tracing::info!(node = %config.node_name, policies_dir = %config.policies_dir.display(), dry_run = config.dry_run, "vigil agent started");

    shutdown.await;
    tracing::info!("shutting down");
    agent.stop.cancel();
    if let Err(error) = decide.await {
        tracing::error!(%error, "the eviction loop ended abnormally");
    }
    if let Err(error) = config_task.await {
        tracing::error!(%error, "the config controller ended abnormally");
    }
    drop(watches);
    agent.tasks.close();
    agent.tasks.wait().await;
    tracing::info!("vigil agent stopped");
    Ok(())
}

/// The base layers — `dryRun: true` under `--observe-first`, then the
/// `--config` file — and the defaults they make, merged with `registry`'s
/// merger ([`config::defaults`]): a bad file stops the start-up.
async fn base_config(
    config: &AgentConfig,
    registry: &Registry,
) -> anyhow::Result<(Vec<Layer>, VigilConfig)> {
    let mut base = Vec::new();
    if config.observe_first {
        base.push(Layer {
            source: "--observe-first".into(),
            json: r#"{"dryRun":true}"#.into(),
        });
    }
    if let Some(path) = &config.config_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the config {}", path.display()))?;
        let value: serde_json::Value = serde_norway::from_str(&text)
            .with_context(|| format!("the config {} is not YAML or JSON", path.display()))?;
        base.push(Layer {
            source: path.display().to_string(),
            json: value.to_string(),
        });
    }
    if base.is_empty() {
        return Ok((base, VigilConfig::default()));
    }
    let defaults = defaults(registry, &base)
        .await
        .context("the agent's base config (--observe-first, --config)")?;
    Ok((base, defaults))
}
