//! `vigil agent`: the DaemonSet's process, from its flags.

use super::args::{GoDuration, read_ca, read_key, shutdown_signal};
use crate::agent::{AgentConfig, MetricsAuth};
use crate::cluster::client::{ClientOptions, PodAccess};
use crate::cluster::kubelet_stats::KubeletEndpoint;
use crate::cluster::node_status::HEARTBEAT;
use crate::distribution::signature::VerificationKey;
use crate::policy::artifacts::files::DEFAULT_MAX_POLICY_BYTES;
use crate::policy::{ChildCompiler, CompileMode};
use crate::signals::Driver;
use anyhow::Context;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub(super) struct AgentArgs {
    /// The node this agent protects (the DaemonSet passes `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Directory of policy components (`NAME.wasm`), watched for changes.
    #[arg(long, default_value = "/etc/vigil/policies")]
    policies_dir: PathBuf,
    /// Largest policy component read from the policies directory or pulled from a registry, in
    /// MiB; larger ones are refused unread.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_POLICY_BYTES >> 20,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_policy_mib: u64,
    /// Directory for state that survives restarts (last-known-good policies, artifact cache,
    /// policies pulled from registries).
    #[arg(long, default_value = "/var/lib/vigil")]
    state_dir: PathBuf,
    /// vigil's own namespace, the only one where `configFrom` ConfigMaps and the pull
    /// Secrets `VigilPolicy` objects name are read (the DaemonSet passes `metadata.namespace`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "vigil-system")]
    namespace: String,
    /// Certificates (PEM) trusted for policy registries beside the system's roots: a
    /// private registry's CA.
    #[arg(long, value_name = "FILE")]
    registry_ca: Option<PathBuf>,
    /// A cosign public key (PEM, `cosign.pub`; mount it from a Secret): then a policy from a
    /// registry runs only if a cosign signature under this key covers its digest. Without a key
    /// (no flag, or no file at this path: the optional Secret is absent), a registry version
    /// runs only if its VigilPolicy says `allowUnsigned: true`.
    #[arg(long, value_name = "FILE")]
    verification_key: Option<PathBuf>,
    /// Whether this node compiles policies: `never` loads only precompiled artifacts signed
    /// by the native-code key (and the built-ins) and never starts a compiler; `fallback`
    /// compiles what has no such artifact, in a child process; `always` compiles everything
    /// itself and ignores artifacts made elsewhere.
    #[arg(long, value_name = "MODE", default_value = "fallback")]
    compile: CompileMode,
    /// A cosign public key (PEM) for precompiled policies, which are native code: an artifact
    /// is deserialised only if a signature under this key covers it. A key of its own, not the
    /// --verification-key; mount it from a Secret, never name it in a VigilPolicy. No file at
    /// this path refuses every precompiled artifact (logged).
    #[arg(long, value_name = "FILE")]
    native_code_key: Option<PathBuf>,
    /// A config layer (YAML or JSON, vigil's config shape) merged over the built-in defaults;
    /// the `VigilConfig` layers that target this node go over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How old a saved config may be and still run when the API server cannot
    /// be reached at start-up (Go-style `24h`, `1h30m`).
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    config_grace: GoDuration,
    /// Without a fresh saved config, start on the defaults rather than the last-known-good.
    #[arg(long)]
    config_start_on_defaults: bool,
    /// The window over which a fleet applies a `VigilConfig` change: each node
    /// waits a stable offset within it (a hash of its name), so the fleet's
    /// writes do not land together. `0s`: at once. The last one given counts.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30s",
        overrides_with = "config_spread"
    )]
    config_spread: GoDuration,
    /// Where to serve /metrics, /healthz and /readyz; `[::]` listens on IPv6 and IPv4
    /// alike (IPv4 only on a node without IPv6).
    #[arg(long, default_value = "[::]:9464")]
    metrics_addr: std::net::SocketAddr,
    /// Who may read /metrics: `none` (whoever reaches the port, plain HTTP) or `kubernetes`
    /// (over TLS with a certificate made at start, a bearer token the API server says may `get`
    /// the non-resource URL /metrics; needs `create` on tokenreviews and subjectaccessreviews,
    /// as deploy/components/metrics-auth grants). /healthz and /readyz
    /// stay open to the kubelet's probes (over TLS too).
    #[arg(long, value_name = "MODE", default_value = "none")]
    metrics_auth: MetricsAuthArg,
    /// Decide and report, evict nothing: evictions are sent as dry-run requests. The hard
    /// override: no config layer lifts it.
    #[arg(long)]
    dry_run: bool,
    /// Observe until told to enforce: a base layer `dryRun: true` under the --config file
    /// and every `VigilConfig`, so nothing is evicted or tainted until a layer sets `dryRun:
    /// false` (`vigil enforce` writes one). The shipped DaemonSet passes it.
    #[arg(long)]
    observe_first: bool,
    /// The host's procfs (the DaemonSet mounts it here).
    #[arg(long, default_value = "/proc")]
    proc_root: PathBuf,
    /// The host's cgroup mount.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    cgroup_root: PathBuf,
    /// The kubelet's cgroup driver.
    #[arg(long, value_enum, default_value = "systemd")]
    cgroup_driver: CgroupDriver,
    /// Who reads and evicts this node's pods: `node`, the node itself (the
    /// agent impersonates the node its pod-bound token names, Kubernetes'
    /// constrained impersonation, on by default from 1.36: the Node
    /// authorizer and NodeRestriction then hold it to this node's pods);
    /// `service-account`, its own service account (clusters before 1.36,
    /// with `deploy/components/pods-cluster-wide`).
    #[arg(long, value_enum, default_value = "node")]
    pod_access: PodAccessArg,
    /// A directory on the filesystem holding the kubelet's data, for
    /// `nodefs.*` signals: only its filesystem's statistics are read, so the
    /// DaemonSet mounts an empty directory made beside the kubelet's, never
    /// the kubelet's own (which holds its keys and every pod's Secrets).
    #[arg(long, default_value = "/var/lib/kubelet")]
    nodefs: PathBuf,
    /// A directory on the container runtime's image filesystem, for
    /// `imagefs.*` signals (none: no `imagefs.*` signal).
    #[arg(long)]
    imagefs: Option<PathBuf>,
    /// The cgroup whose memory pressure strategies read as
    /// `psi.workload.memory.*` (cgroup v2), relative to the cgroup mount,
    /// e.g. `kubepods.slice/kubepods-besteffort.slice`; by default the
    /// kubepods cgroup of the cgroup driver.
    #[arg(long, value_name = "PATH")]
    workload_cgroup: Option<PathBuf>,
    /// The node's address where its kubelet serves (the DaemonSet passes
    /// `status.hostIP`): its statistics summary gives the pods' writable
    /// layers to the policies that ask (the service account needs `get
    /// nodes/stats`); none: never read.
    #[arg(long, env = "KUBELET_ADDRESS", value_name = "ADDRESS")]
    kubelet_address: Option<String>,
    /// The kubelet's port.
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// PEM certificates the kubelet's serving certificate is verified
    /// against (default: the API server's CA, which signs kubelet serving
    /// certificates where the kubelet has `serverTLSBootstrap`).
    #[arg(long, value_name = "FILE", requires = "kubelet_address")]
    kubelet_ca: Option<PathBuf>,
    /// The shortest time between two writes of one status object
    /// (`VigilNodeStatus`, `VigilPolicyStatus`): changes in between are
    /// coalesced into the next write.
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    status_interval: GoDuration,
    /// The memory limit of the child process that compiles a policy, in MiB
    /// (a JavaScript or Python component needs a few hundred); the agent's own
    /// memory never carries a compile.
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(64..=65536))]
    compile_memory_mib: u64,
    /// How long compiling one policy may take before it is stopped and that version refused.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    compile_deadline: GoDuration,
    /// Requests per second each API client sends at most, on average
    /// (one client for evictions, one for everything else).
    #[arg(long, value_name = "QPS", default_value_t = ClientOptions::default().qps)]
    api_qps: f64,
    /// Requests each API client may send at once after a quiet time.
    #[arg(long, value_name = "N", default_value_t = ClientOptions::default().burst,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    api_burst: u32,
    /// The longest an API request that is not a watch may take.
    #[arg(long, value_name = "DURATION", default_value_t = GoDuration(ClientOptions::default().timeout))]
    api_timeout: GoDuration,
    /// How often a node condition that holds is written again, so that a
    /// stale `True` shows as stale.
    #[arg(long, value_name = "DURATION", default_value_t = GoDuration(HEARTBEAT))]
    condition_heartbeat: GoDuration,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum MetricsAuthArg {
    /// Open: plain HTTP.
    None,
    /// TLS, and tokens reviewed by the API server.
    Kubernetes,
}

impl From<MetricsAuthArg> for MetricsAuth {
    fn from(arg: MetricsAuthArg) -> Self {
        match arg {
            MetricsAuthArg::None => Self::None,
            MetricsAuthArg::Kubernetes => Self::Kubernetes,
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PodAccessArg {
    /// As the node (constrained impersonation).
    Node,
    /// As the agent's service account.
    ServiceAccount,
}

impl From<PodAccessArg> for PodAccess {
    fn from(arg: PodAccessArg) -> Self {
        match arg {
            PodAccessArg::Node => Self::Node,
            PodAccessArg::ServiceAccount => Self::ServiceAccount,
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CgroupDriver {
    /// `kubepods.slice/...-pod<uid>.slice`.
    Systemd,
    /// `kubepods/<qos>/pod<uid>`.
    Cgroupfs,
}

impl AgentArgs {
    /// Runs the agent until SIGTERM or SIGINT.
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let config = self.into_config()?;
        crate::agent::run(config, shutdown_signal()?).await
    }

    fn into_config(self) -> anyhow::Result<AgentConfig> {
        let node_name = self
            .node_name
            .filter(|n| !n.is_empty())
            .context("the node name is required: pass --node-name or set $NODE_NAME (the DaemonSet sets it from spec.nodeName)")?;
        let verification_key = match self.verification_key.as_deref() {
            Some(path) => read_verification_key(path)?,
            None => None,
        };
        let native_code_key = match self.native_code_key.as_deref() {
            Some(path) => read_native_code_key(path)?,
            None => None,
        };
        anyhow::ensure!(
            verification_key.is_none() || verification_key != native_code_key,
            "--native-code-key is the --verification-key: native code needs a key of its own, \
             or anyone who may sign a component could run native code in the agent"
        );
        let compiler = match self.compile {
            CompileMode::Never => None,
            CompileMode::Fallback | CompileMode::Always => Some(ChildCompiler {
                program: std::env::current_exe()
                    .context("cannot find this program's path, to run it as the policy compiler")?,
                memory_bytes: self.compile_memory_mib << 20,
                deadline: self.compile_deadline.0,
            }),
        };
        Ok(AgentConfig {
            node_name,
            kubeconfig: self.kubeconfig,
            policies_dir: self.policies_dir,
            max_policy_bytes: self.max_policy_mib << 20,
            state_dir: self.state_dir,
            namespace: self.namespace,
            registry_ca: (self.registry_ca.as_deref())
                .map(|path| read_ca("--registry-ca", path))
                .transpose()?,
            verification_key,
            compile_mode: self.compile,
            native_code_key,
            config_file: self.config,
            config_grace: self.config_grace.0,
            config_spread: self.config_spread.0,
            config_start_on_defaults: self.config_start_on_defaults,
            dry_run: self.dry_run,
            observe_first: self.observe_first,
            metrics_addr: self.metrics_addr,
            metrics_auth: self.metrics_auth.into(),
            proc_root: self.proc_root,
            cgroup_root: self.cgroup_root,
            cgroup_driver: match self.cgroup_driver {
                CgroupDriver::Systemd => Driver::Systemd,
                CgroupDriver::Cgroupfs => Driver::Cgroupfs,
            },
            nodefs: self.nodefs,
            imagefs: self.imagefs,
            workload_cgroup: self.workload_cgroup,
            kubelet: match self.kubelet_address {
                Some(address) => Some(KubeletEndpoint {
                    url: kubelet_url(&address, self.kubelet_port)?,
                    ca: (self.kubelet_ca.as_deref())
                        .map(|path| read_ca("--kubelet-ca", path))
                        .transpose()?,
                }),
                None => None,
            },
            status_interval: self.status_interval.0,
            pod_access: self.pod_access.into(),
            api: ClientOptions {
                qps: self.api_qps.max(0.01),
                burst: self.api_burst,
                timeout: self.api_timeout.0,
            },
            condition_heartbeat: self.condition_heartbeat.0,
            compiler,
        })
    }
}

/// The verification key at `path`; none if no file is there (the
/// DaemonSet mounts it from an optional Secret), which refuses every
/// registry version whose policy does not say `allowUnsigned`.
fn read_verification_key(path: &Path) -> anyhow::Result<Option<VerificationKey>> {
    if !path.exists() {
        tracing::warn!(path = %path.display(), "no verification key there: only VigilPolicies that say allowUnsigned: true are pulled");
        return Ok(None);
    }
    read_key("--verification-key", path).map(Some)
}

/// The native-code key at `path`; none if no file is there (the
/// DaemonSet mounts it from an optional Secret), which refuses every
/// precompiled artifact.
fn read_native_code_key(path: &Path) -> anyhow::Result<Option<VerificationKey>> {
    if !path.exists() {
        tracing::warn!(path = %path.display(), "no native-code key there: every precompiled policy is refused");
        return Ok(None);
    }
    read_key("--native-code-key", path).map(Some)
}

/// `https://ADDRESS:PORT`, an IPv6 address in brackets.
fn kubelet_url(address: &str, port: u16) -> anyhow::Result<http::Uri> {
    let host = match address.parse::<std::net::Ipv6Addr>() {
        Ok(v6) => format!("[{v6}]"),
        Err(_) => address.to_owned(),
    };
    format!("https://{host}:{port}")
        .parse()
        .with_context(|| format!("--kubelet-address {address:?} is not a host"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn either_key_may_be_absent_but_the_native_code_key_is_never_the_component_key() {
        use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("cosign.pub");
        std::fs::write(
            &key,
            VerificationKey::pem_of_point(pair.public_key().as_ref()),
        )
        .unwrap();
        let config = |component: &std::path::Path, native: &std::path::Path| {
            let cli = Cli::try_parse_from([
                "vigil".as_ref(),
                "agent".as_ref(),
                "--node-name=n1".as_ref(),
                "--verification-key".as_ref(),
                component.as_os_str(),
                "--native-code-key".as_ref(),
                native.as_os_str(),
            ])
            .unwrap_or_else(|e| panic!("{e}"));
            let Command::Agent(args) = cli.command else {
                panic!("not the agent");
            };
            args.into_config()
        };
        // An optional Secret is not there: the agent runs, refusing every
        // precompiled artifact, or every unsigned version not allowed.
        let absent = dir.path().join("absent.pub");
        let native_absent = config(&key, &absent).unwrap();
        assert!(native_absent.native_code_key.is_none());
        assert!(native_absent.verification_key.is_some());
        let component_absent = config(&absent, &key).unwrap();
        assert!(component_absent.verification_key.is_none());
        assert!(component_absent.native_code_key.is_some());
        // A key that is there but not a key stops the agent with why.
        let garbage = dir.path().join("garbage.pub");
        std::fs::write(&garbage, "not a key").unwrap();
        let error = config(&garbage, &absent).unwrap_err();
        assert!(
            format!("{error:#}").contains("--verification-key"),
            "{error:#}"
        );
        let error = config(&key, &key).unwrap_err();
        assert!(
            format!("{error:#}").contains("native code needs a key of its own"),
            "{error:#}"
        );
    }

    #[test]
    fn the_kubelet_is_reached_on_the_nodes_address_of_either_family() {
        let url = |address| kubelet_url(address, 10250).map(|u| u.to_string());
        assert_eq!(url("10.0.0.5").unwrap(), "https://10.0.0.5:10250/");
        assert_eq!(url("fd00::5").unwrap(), "https://[fd00::5]:10250/");
        assert_eq!(
            url("node-1.example").unwrap(),
            "https://node-1.example:10250/"
        );
        let error = url("not a host").unwrap_err();
        assert!(
            format!("{error:#}").contains("--kubelet-address"),
            "{error:#}"
        );
    }
}
