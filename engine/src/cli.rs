//! The `vigil` command line. `main.rs` only calls [`run`].

use crate::agent::AgentConfig;
use crate::authoring::check::{check_bytes, check_file, policy_name};
use crate::authoring::replay::{self, Answer, Input};
use crate::authoring::scaffold::{self, Lang};
use crate::cluster::client::ClientOptions;
use crate::config::VigilConfig;
use crate::config::names::unknown_policies;
use crate::distribution::registry::Access;
use crate::distribution::signature::VerificationKey;
use crate::eviction::EvictionSettings;
use crate::policy::builtin::BUILTINS;
use crate::policy::compiler::{INVALID_EXIT, child_input, peak_rss_kib};
use crate::policy::files::{DEFAULT_MAX_POLICY_BYTES, read_policy};
use crate::policy::{Baseline, ChildCompiler, CompileMode, Host, LoadError, Source, World};
use crate::report::Chain;
use crate::signals::Driver;
use crate::simulate::{RunOptions, Scenario, output, plot};
use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// vigil: a node agent that evicts pods under pressure, with decisions made by WebAssembly policies.
#[derive(Debug, Parser)]
#[command(name = "vigil", version)]
pub struct Cli {
    /// How to write logs (to stderr).
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
    /// How much to log when `RUST_LOG` does not say: the agent logs what it
    /// does; `simulate` shows everything in its output, so it logs only
    /// errors; the other commands log warnings.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Agent(_) => "info",
            Command::Simulate(_) => "error",
            _ => "warn",
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node agent: watch this node's pods, decide with the policies
    /// (hot-reloaded), evict through the Eviction API, report on the Node.
    Agent(Box<AgentArgs>),
    /// Run a scenario through the real eviction manager and policies, on virtual time.
    Simulate(SimulateArgs),
    /// Work with policy components.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Remove what vigil leaves behind when it is uninstalled (deploy/cleanup/ runs it).
    #[command(subcommand)]
    Cleanup(CleanupCommand),
    /// Give the state directory, and everything in it, to the agent's user (the
    /// DaemonSet's init container: the only part of vigil that runs as root).
    OwnState {
        /// The agent's state directory.
        #[arg(long, value_name = "DIR", default_value = "/var/lib/vigil")]
        state_dir: PathBuf,
        /// The agent's user and group, as numbers.
        #[arg(long, value_name = "UID:GID", value_parser = user, default_value = "65532:65532")]
        user: (u32, u32),
    },
    /// Print the custom resource definitions vigil reads (YAML), for `kubectl apply -f -`.
    Crd,
    /// Print the JSON Schema of vigil's config, for editors and CI checks of config files.
    ConfigSchema,
    /// Print the JSON Schema of `vigil simulate`'s scenario files, for editors.
    ScenarioSchema,
}

#[derive(Debug, clap::Args)]
struct SimulateArgs {
    /// The scenario file (YAML); see examples/scenarios/.
    scenario: PathBuf,
    /// How to print the result.
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    /// Also draw the signals against their thresholds, with evictions marked, to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Load policies (`NAME.wasm`, overriding the built-in of that name) from this
    /// directory instead of the scenario's `policiesDir`.
    #[arg(long, value_name = "DIR")]
    policies_dir: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
    /// With `--output json`, give every step the node as the strategies saw
    /// it (`snapshot`), the input `vigil policy test` takes.
    #[arg(long)]
    snapshots: bool,
}

/// How the author's commands reach a registry.
#[derive(Debug, clap::Args)]
struct RegistryArgs {
    /// Plain HTTP to the registry (only when set: never a silent downgrade).
    #[arg(long)]
    insecure: bool,
    /// Sign in as this user, with the password in `$VIGIL_REGISTRY_PASSWORD`; anonymous
    /// without it.
    #[arg(long)]
    username: Option<String>,
    /// Certificates (PEM) trusted beside the system's roots: a private registry's CA.
    #[arg(long, value_name = "FILE")]
    registry_ca: Option<PathBuf>,
}

impl RegistryArgs {
    fn access(self) -> anyhow::Result<Access> {
        Ok(Access {
            insecure: self.insecure,
            basic: registry_user(self.username)?,
            ca: self.registry_ca.as_deref().map(read_ca).transpose()?,
        })
    }
}

/// Where `simulate` and `policy check|test` keep compiled components, so an
/// unchanged JavaScript or Python component loads in milliseconds instead of
/// compiling for seconds. One directory for all of them, and for the
/// skeletons' `test.sh`.
#[derive(Debug, clap::Args)]
struct CacheArgs {
    /// Keep compiled components here [default: $XDG_CACHE_HOME/vigil/components,
    /// else ~/.cache/vigil/components].
    #[arg(long, value_name = "DIR", env = "VIGIL_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every component afresh and keep nothing (whatever
    /// `--cache-dir` or `$VIGIL_CACHE_DIR` say).
    #[arg(long)]
    no_cache: bool,
}

impl CacheArgs {
    /// The cache directory to use, if any.
    fn dir(self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        self.cache_dir.or_else(|| {
            let xdg = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .filter(|dir| dir.is_absolute());
            let home = || std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache"));
            Some(xdg.or_else(home)?.join("vigil/components"))
        })
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Output {
    /// A readable timeline and summary.
    Text,
    /// The whole simulation as JSON.
    Json,
}

#[derive(Debug, clap::Args)]
struct AgentArgs {
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
    /// registry runs only if a cosign signature under this key covers its digest.
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
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = duration)]
    config_grace: std::time::Duration,
    /// Without a fresh saved config, start on the defaults rather than the last-known-good.
    #[arg(long)]
    config_start_on_defaults: bool,
    /// The window over which a fleet applies a `VigilConfig` change: each node
    /// waits a stable offset within it (a hash of its name), so the fleet's
    /// writes do not land together. `0s`: at once. The last one given counts.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration,
          overrides_with = "config_spread")]
    config_spread: std::time::Duration,
    /// Where to serve /metrics, /healthz and /readyz; `[::]` listens on IPv6 and IPv4
    /// alike (IPv4 only on a node without IPv6).
    #[arg(long, default_value = "[::]:9464")]
    metrics_addr: std::net::SocketAddr,
    /// Decide and report, evict nothing: evictions are sent as dry-run requests.
    #[arg(long)]
    dry_run: bool,
    /// The host's procfs (the DaemonSet mounts it here).
    #[arg(long, default_value = "/proc")]
    proc_root: PathBuf,
    /// The host's cgroup mount.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    cgroup_root: PathBuf,
    /// The kubelet's cgroup driver.
    #[arg(long, value_enum, default_value = "systemd")]
    cgroup_driver: CgroupDriver,
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
    /// The shortest time between two writes of one status object
    /// (`VigilNodeStatus`, `VigilPolicyStatus`): changes in between are
    /// coalesced into the next write.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = duration)]
    status_interval: std::time::Duration,
    /// The memory limit of the child process that compiles a policy, in MiB
    /// (a JavaScript or Python component needs a few hundred); the agent's own
    /// memory never carries a compile.
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(64..=65536))]
    compile_memory_mib: u64,
    /// How long compiling one policy may take before it is stopped and that version refused.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    compile_deadline: std::time::Duration,
    /// Requests per second each API client sends at most, on average
    /// (one client for evictions, one for everything else).
    #[arg(long, value_name = "QPS", default_value_t = ClientOptions::default().qps)]
    api_qps: f64,
    /// Requests each API client may send at once after a quiet time.
    #[arg(long, value_name = "N", default_value_t = ClientOptions::default().burst,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    api_burst: u32,
    /// The longest an API request that is not a watch may take.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    api_timeout: std::time::Duration,
    /// How often a node condition that holds is written again, so that a
    /// stale `True` shows as stale.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    condition_heartbeat: std::time::Duration,
}

/// A duration as Kubernetes users write it (`90s`, `1h30m`, `24h`).
fn duration(text: &str) -> Result<std::time::Duration, String> {
    let parsed: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("not a duration like 90s or 24h: {e}"))?;
    std::time::Duration::try_from(parsed).map_err(|_| "must not be negative".into())
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CgroupDriver {
    /// `kubepods.slice/...-pod<uid>.slice`.
    Systemd,
    /// `kubepods/<qos>/pod<uid>`.
    Cgroupfs,
}

impl AgentArgs {
    fn into_config(self) -> anyhow::Result<AgentConfig> {
        let node_name = self
            .node_name
            .filter(|n| !n.is_empty())
            .context("the node name is required: pass --node-name or set $NODE_NAME (the DaemonSet sets it from spec.nodeName)")?;
        let verification_key = self
            .verification_key
            .as_deref()
            .map(read_verification_key)
            .transpose()?;
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
                deadline: self.compile_deadline,
            }),
        };
        Ok(AgentConfig {
            node_name,
            kubeconfig: self.kubeconfig,
            policies_dir: self.policies_dir,
            max_policy_bytes: self.max_policy_mib << 20,
            state_dir: self.state_dir,
            namespace: self.namespace,
            registry_ca: self.registry_ca.as_deref().map(read_ca).transpose()?,
            verification_key,
            compile_mode: self.compile,
            native_code_key,
            config_file: self.config,
            config_grace: self.config_grace,
            config_spread: self.config_spread,
            config_start_on_defaults: self.config_start_on_defaults,
            dry_run: self.dry_run,
            metrics_addr: self.metrics_addr,
            proc_root: self.proc_root,
            cgroup_root: self.cgroup_root,
            cgroup_driver: match self.cgroup_driver {
                CgroupDriver::Systemd => Driver::Systemd,
                CgroupDriver::Cgroupfs => Driver::Cgroupfs,
            },
            nodefs: self.nodefs,
            imagefs: self.imagefs,
            status_interval: self.status_interval,
            api: ClientOptions {
                qps: self.api_qps.max(0.01),
                burst: self.api_burst,
                timeout: self.api_timeout,
            },
            condition_heartbeat: self.condition_heartbeat,
            compiler,
        })
    }
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Validate components against the vigil:policy worlds and describe them.
    Check {
        /// Component files to check.
        files: Vec<PathBuf>,
        /// Also check the policies built into this binary.
        #[arg(long)]
        builtin: bool,
        /// A vigil config layer (a YAML or JSON file, or inline JSON starting
        /// with `{`): each canary call gets its policy's `policies.NAME.config`,
        /// and fails if the policy declines with it; config for a policy that
        /// is neither checked nor built in is an error.
        #[arg(long, value_name = "FILE|JSON")]
        config: Option<String>,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Write a working policy skeleton: source, contract (`wit/`), build
    /// script, a scenario that shows it acting, and a test. Then:
    /// `./build.sh && ./test.sh && vigil simulate scenario.yaml`.
    New {
        /// The policy's name (its file is `NAME.wasm`).
        name: String,
        /// What kind of policy.
        #[arg(long, value_enum)]
        world: Kind,
        /// The language to write it in.
        #[arg(long, value_enum)]
        lang: Lang,
        /// Where to write it (`./NAME` if not given); it must not hold files yet.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Call one export of a policy on input given as data and print its
    /// answer as JSON: `{"answer": …}`, `{"declined": …}` or `{"fault": "…"}`
    /// (exit status 1). A strategy's `evaluate` is called on `snapshot`, or
    /// its `top-victims` if `top_victims: {scope, n}` is given too; a
    /// sorter's `sort` on `strategies` and `candidates`; a merger's `merge`
    /// on `layers`. Pods and candidates may be written in part (a `name` is
    /// enough; see the policy guide for the defaults). `vigil simulate
    /// --output json --snapshots` writes a `snapshot` in every step.
    Test {
        /// The component file, or `builtin:NAME`.
        file: String,
        /// The input: a YAML or JSON file.
        #[arg(long)]
        input: PathBuf,
        /// The policy's own config, as JSON (what `policies.NAME.config` holds).
        #[arg(long, default_value = "{}")]
        config: String,
        /// Write the answer to the expected file beside the input
        /// (`NAME.input.json` → `NAME.expected.json`), for review, instead
        /// of printing it.
        #[arg(long)]
        record: bool,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Publish a component to an OCI registry in the CNCF Wasm artifact
    /// layout, after the checks of `policy check`, and print the digest to
    /// pin it by (`registry/repository@sha256:…`).
    Push {
        /// The component file (`NAME.wasm`).
        file: PathBuf,
        /// Where to push: `registry/repository[:tag]`.
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Compile components for the nodes, so that they never compile: native code for an
    /// explicit CPU baseline, bound to this vigil build, which loads it only when signed by
    /// the agents' --native-code-key.
    Precompile {
        /// Component files; the artifact of `NAME.wasm` is written to `NAME.<baseline>.cwasm`
        /// (or published with --push).
        #[arg(
            required_unless_present = "from_cluster",
            conflicts_with = "from_cluster"
        )]
        files: Vec<PathBuf>,
        /// The CPU baseline the nodes have at least: x86-64, x86-64-v2, x86-64-v3, armv8-a or
        /// armv8.1-a. It must be the agents' (x86-64-v2 on x86-64, armv8-a on aarch64).
        #[arg(long, value_name = "BASELINE", default_value_t = Baseline::host())]
        cpu_baseline: Baseline,
        /// Publish each artifact to this `registry/repository[:tag]` instead of writing a file.
        #[arg(long, value_name = "REF", conflicts_with = "from_cluster")]
        push: Option<String>,
        /// Precompile every version the cluster's VigilPolicy objects name (`ref` and
        /// `rollout.previous`), publishing each beside its component.
        #[arg(long)]
        from_cluster: bool,
        /// With --from-cluster: write the artifacts into each object's `spec.precompiled`
        /// (replacing the entries for this engine key, keeping the others).
        #[arg(long, requires = "from_cluster")]
        pin: bool,
        /// A kubeconfig file, for --from-cluster; without it the in-cluster service account,
        /// else `$KUBECONFIG`.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Sign a published artifact (a component or a precompiled one) as `cosign sign --key`
    /// does, with an unencrypted PKCS#8 P-256 key (PEM).
    Sign {
        /// The artifact: `registry/repository[:tag]@sha256:…`.
        reference: String,
        /// The private key (PEM `PRIVATE KEY`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// The agent's child compiler: compiles the component on stdin into the cache.
    #[command(hide = true)]
    Compile {
        /// The component's sha256, which stdin must match.
        #[arg(long)]
        digest: String,
        /// This process's memory limit.
        #[arg(long)]
        memory_limit_bytes: u64,
        /// The artifact cache to store into.
        #[arg(long)]
        cache_dir: PathBuf,
    },
}

/// `vigil cleanup`'s two halves: the cluster's, run once, and each node's.
#[derive(Debug, clap::Subcommand)]
enum CleanupCommand {
    /// Remove vigil's taints (`vigil.dev/…`) and conditions (`Vigil…`) from every node and
    /// delete the fleet status objects; refused while an agent pod still runs.
    Cluster {
        /// The namespace the agents run in.
        #[arg(long, env = "POD_NAMESPACE", default_value = "vigil-system")]
        namespace: String,
        /// The label selector of the agent pods.
        #[arg(
            long,
            value_name = "SELECTOR",
            default_value = "app.kubernetes.io/name=vigil"
        )]
        agent_selector: String,
        /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// Remove the agent's entries (checkpoint, last-known-good and pulled policies, compile
    /// cache) from this node's state directory, leaving anything else.
    Node {
        /// The agent's state directory.
        #[arg(long, value_name = "DIR", default_value = "/var/lib/vigil")]
        state_dir: PathBuf,
        /// Then wait for SIGTERM (as a DaemonSet's container, which must not exit).
        #[arg(long)]
        wait: bool,
    },
}

/// Runs the command line.
///
/// # Errors
/// Whatever the command failed with; the caller prints it and exits non-zero.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Agent(args) => agent(*args).await,
        Command::Simulate(args) => simulate(args).await,
        Command::Policy(PolicyCommand::Check {
            files,
            builtin,
            config,
            cache,
        }) => check(&files, builtin, config.as_deref(), cache.dir()),
        Command::Policy(PolicyCommand::New {
            name,
            world,
            lang,
            dir,
        }) => new_policy(&name, world.into(), lang, dir),
        Command::Policy(PolicyCommand::Test {
            file,
            input,
            config,
            record,
            cache,
        }) => test(&file, &input, &config, record, cache.dir()),
        Command::Policy(PolicyCommand::Push {
            file,
            reference,
            registry,
            cache,
        }) => push(&file, &reference, &registry.access()?, cache.dir()).await,
        Command::Policy(PolicyCommand::Precompile {
            files,
            cpu_baseline,
            push,
            from_cluster,
            pin,
            kubeconfig,
            registry,
            cache,
        }) => {
            let access = registry.access()?;
            let host = Host::new(cache.dir())?;
            if from_cluster {
                precompile_cluster(&host, kubeconfig.as_deref(), cpu_baseline, &access, pin).await
            } else {
                precompile_files(&host, &files, cpu_baseline, push.as_deref(), &access).await
            }
        }
        Command::Policy(PolicyCommand::Sign {
            reference,
            key,
            registry,
        }) => {
            let access = registry.access()?;
            let pem = crate::fsutil::read_text(&key, 64 << 10)
                .with_context(|| format!("cannot read the key {}", key.display()))?;
            let key = crate::distribution::signature::SigningKey::from_pem(&pem)
                .with_context(|| format!("{} is not a signing key", key.display()))?;
            let pushed = crate::authoring::push::push_signature(&reference, &key, &access)
                .await
                .with_context(|| format!("cannot sign {reference}"))?;
            println!("signed {reference}: {}", pushed.pinned);
            Ok(())
        }
        Command::Policy(PolicyCommand::Compile {
            digest,
            memory_limit_bytes,
            cache_dir,
        }) => compile(&digest, memory_limit_bytes, cache_dir),
        Command::Cleanup(command) => cleanup(command).await,
        Command::OwnState { state_dir, user } => {
            let changed = crate::ownership::give(&state_dir, user.0, user.1)?;
            println!(
                "{}: owned by {}:{} ({changed} entr{} changed owner)",
                state_dir.display(),
                user.0,
                user.1,
                if changed == 1 { "y" } else { "ies" }
            );
            Ok(())
        }
        Command::Crd => {
            print!("{}", crate::crds::definitions());
            Ok(())
        }
        Command::ConfigSchema => {
            let schema = crate::config::schema::json_schema();
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(())
        }
        Command::ScenarioSchema => {
            let schema = crate::simulate::schema::json_schema();
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(())
        }
    }
}

fn check(
    files: &[PathBuf],
    builtin: bool,
    config: Option<&str>,
    cache_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    if files.is_empty() && !builtin {
        bail!("nothing to check: name component files, or pass --builtin");
    }
    let host = Host::new(cache_dir)?;
    let settings = config.map(check_config).transpose()?;
    let canary_config = |name: &str| {
        settings
            .as_ref()
            .map_or_else(|| "{}".to_owned(), |s| s.policy(name).config)
    };
    let mut failures = 0;
    if let Some(settings) = &settings {
        let known: Vec<String> = BUILTINS
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .chain(files.iter().map(|path| policy_name(path)))
            .collect();
        for unknown in unknown_policies(settings.policies.keys(), &settings.sorter, &known) {
            failures += 1;
            println!("config: INVALID: {unknown}");
        }
    }
    let builtins = BUILTINS.iter().filter(|_| builtin).map(|(name, bytes)| {
        let origin = format!("builtin:{name}");
        let config = canary_config(name);
        let result = check_bytes(
            &host,
            origin.clone(),
            name,
            *bytes,
            Source::Builtin,
            &config,
        );
        (origin, result)
    });
    let files = files.iter().map(|path| {
        let config = canary_config(&policy_name(path));
        (path.display().to_string(), check_file(&host, path, &config))
    });
    for (origin, result) in builtins.chain(files) {
        match result {
            Ok(report) if settings.is_some() && report.declined.is_some() => {
                failures += 1;
                let reason = report.declined.unwrap_or_default();
                println!("{origin}: INVALID: declined the canary call with its config: {reason}");
            }
            Ok(report) => println!("{report}"),
            Err(error) => {
                failures += 1;
                println!("{origin}: INVALID: {}", Chain(&error));
            }
        }
    }
    if failures > 0 {
        bail!("{failures} problem(s) found by the check");
    }
    Ok(())
}

/// The kind of policy `policy new` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Kind {
    /// An eviction strategy.
    Strategy,
    /// A candidate sorter.
    Sorter,
    /// A config merger.
    Merger,
}

impl From<Kind> for World {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Strategy => World::EvictionStrategy,
            Kind::Sorter => World::CandidateSorter,
            Kind::Merger => World::ConfigMerger,
        }
    }
}

/// `vigil policy new`: the skeleton, and what to do next.
fn new_policy(name: &str, world: World, lang: Lang, dir: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let written = scaffold::write(&dir, name, world, lang)?;
    let article = if world.name().starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    println!(
        "wrote {article} {world} in {} files to {}:",
        written.len(),
        dir.display()
    );
    for path in &written {
        println!("  {}", path.display());
    }
    let vigil = invocation();
    let test = if vigil == "vigil" {
        "./test.sh".to_owned()
    } else {
        format!("VIGIL={vigil} ./test.sh")
    };
    println!(
        "next: cd {} && ./build.sh && {test} && {vigil} simulate scenario.yaml",
        dir.display()
    );
    if vigil != "vigil" {
        println!(
            "(vigil is not on PATH; `cargo install --path engine` in vigil's repository puts it there)"
        );
    }
    Ok(())
}

/// How a shell runs this binary: `vigil` when that is what `PATH` finds,
/// else the binary's absolute path.
fn invocation() -> String {
    let Ok(me) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return "vigil".to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .filter_map(|dir| std::fs::canonicalize(dir.join("vigil")).ok())
            .next()
            .is_some_and(|found| found == me)
    });
    if on_path {
        "vigil".to_owned()
    } else {
        me.display().to_string()
    }
}

/// The largest `policy test` input read: far more than a node's snapshot.
const MAX_INPUT_BYTES: u64 = 16 << 20;

/// `vigil policy test`: the call's answer on stdout, or in the expected file
/// when recording; a fault is an error.
fn test(
    file: &str,
    input_path: &std::path::Path,
    config: &str,
    record: bool,
    cache_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    serde_json::from_str::<serde_json::Value>(config)
        .with_context(|| format!("--config is not JSON: {config}"))?;
    let expected = record
        .then(|| replay::expected_path(input_path))
        .transpose()?;
    let text = crate::fsutil::read_text(input_path, MAX_INPUT_BYTES)
        .with_context(|| format!("cannot read {}", input_path.display()))?;
    let input: Input = serde_norway::from_str(&text)
        .with_context(|| format!("{} is not a policy test input", input_path.display()))?;
    let host = Host::new(cache_dir)?;
    let limits = crate::policy::Limits::default();
    let policy = match file.strip_prefix("builtin:") {
        Some(name) => {
            let (name, bytes) = BUILTINS
                .iter()
                .find(|(builtin, _)| *builtin == name)
                .with_context(|| format!("no built-in policy is called {name}"))?;
            host.load(name, *bytes, Source::Builtin, limits)?
        }
        None => {
            let path = std::path::Path::new(file);
            let bytes = read_policy(path, DEFAULT_MAX_POLICY_BYTES)?;
            host.load(&policy_name(path), bytes, Source::File(path.into()), limits)
                .with_context(|| format!("{file} does not load"))?
        }
    };
    let answer = replay::call(&policy, input, config)?;
    let text = serde_json::to_string_pretty(&answer)? + "\n";
    match &expected {
        Some(path) => {
            crate::fsutil::write_atomic(path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("recorded {}", path.display());
        }
        None => print!("{text}"),
    }
    if let Answer::Fault(fault) = answer {
        bail!("{file} faulted: {fault}");
    }
    Ok(())
}

/// `vigil policy push`: checks the component as `policy check` does (a
/// component that would not serve is never published), then publishes it.
async fn push(
    file: &std::path::Path,
    reference: &str,
    access: &Access,
    cache_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let host = Host::new(cache_dir)?;
    let bytes = read_policy(file, DEFAULT_MAX_POLICY_BYTES)?;
    let origin = file.display().to_string();
    let source = Source::File(file.to_owned());
    let report = check_bytes(
        &host,
        origin,
        &policy_name(file),
        bytes.as_slice(),
        source,
        "{}",
    )
    .with_context(|| {
        format!(
            "{} is not a policy vigil would serve; nothing was pushed",
            file.display()
        )
    })?;
    let title = file.file_name().map_or_else(
        || "policy.wasm".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let pushed = crate::authoring::push::push(bytes, &report, &title, reference, access)
        .await
        .with_context(|| format!("cannot push {} to {reference}", file.display()))?;
    println!(
        "pushed {} ({}) to {reference}",
        file.display(),
        report.world
    );
    println!("digest: {}", pushed.manifest);
    println!("pin:    {}", pushed.pinned);
    Ok(())
}

/// The user `--username` names, with the password in
/// `$VIGIL_REGISTRY_PASSWORD`; `None`: anonymous.
fn registry_user(username: Option<String>) -> anyhow::Result<Option<(String, String)>> {
    let Some(user) = username else {
        return Ok(None);
    };
    let password = std::env::var("VIGIL_REGISTRY_PASSWORD")
        .context("--username needs the password in $VIGIL_REGISTRY_PASSWORD")?;
    Ok(Some((user, password)))
}

/// The PEM certificates of `--registry-ca`.
fn read_ca(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read --registry-ca {}", path.display()))
}

/// The cosign public key of `--verification-key`.
fn read_verification_key(path: &std::path::Path) -> anyhow::Result<VerificationKey> {
    read_key("--verification-key", path)
}

fn read_key(flag: &str, path: &std::path::Path) -> anyhow::Result<VerificationKey> {
    let pem = crate::fsutil::read_text(path, 64 * 1024)
        .with_context(|| format!("cannot read {flag} {}", path.display()))?;
    VerificationKey::from_pem(&pem).with_context(|| format!("{flag} {}", path.display()))
}

/// The native-code key at `path`; none if no file is there (the
/// DaemonSet mounts it from an optional Secret), which refuses every
/// precompiled artifact.
fn read_native_code_key(path: &std::path::Path) -> anyhow::Result<Option<VerificationKey>> {
    if !path.exists() {
        tracing::warn!(path = %path.display(), "no native-code key there: every precompiled policy is refused");
        return Ok(None);
    }
    read_key("--native-code-key", path).map(Some)
}

/// The settings of the config layer `arg` (inline JSON if it starts with
/// `{`, else a YAML or JSON file), checked against vigil's config schema.
fn check_config(arg: &str) -> anyhow::Result<EvictionSettings> {
    let (text, origin) = if arg.trim_start().starts_with('{') {
        (arg.to_owned(), "--config".to_owned())
    } else {
        let text = std::fs::read_to_string(arg).with_context(|| format!("cannot read {arg}"))?;
        (text, arg.to_owned())
    };
    let value: serde_json::Value =
        serde_norway::from_str(&text).with_context(|| format!("{origin} is not YAML or JSON"))?;
    let problems = crate::config::schema::violations(&value);
    if !problems.is_empty() {
        bail!(
            "{origin} does not match vigil's config schema: {}",
            problems.join("; ")
        );
    }
    let config: VigilConfig = serde_json::from_value(value)
        .with_context(|| format!("{origin} is not a valid vigil config"))?;
    Ok(EvictionSettings::from(&config))
}

/// `vigil policy precompile FILE…`: each artifact to a file beside its
/// component, or published to `push`.
async fn precompile_files(
    host: &Host,
    files: &[PathBuf],
    baseline: Baseline,
    push: Option<&str>,
    access: &Access,
) -> anyhow::Result<()> {
    use crate::authoring::precompile::precompile;
    for file in files {
        let bytes = read_policy(file, DEFAULT_MAX_POLICY_BYTES)?;
        let made = precompile(host, &policy_name(file), bytes.as_slice(), baseline)
            .with_context(|| format!("cannot precompile {}", file.display()))?;
        let engine_key = made.claims.engine_key.clone();
        let size = made.artifact.len();
        let reference = match push {
            Some(reference) => {
                crate::authoring::push::push_precompiled(
                    made.artifact,
                    &made.claims,
                    reference,
                    access,
                )
                .await
                .with_context(|| {
                    format!(
                        "cannot push the artifact of {} to {reference}",
                        file.display()
                    )
                })?
                .pinned
            }
            None => {
                let out = file.with_extension(format!("{baseline}.cwasm"));
                crate::fsutil::write_atomic(&out, &made.artifact)
                    .with_context(|| format!("cannot write {}", out.display()))?;
                out.display().to_string()
            }
        };
        println!(
            "precompiled {} for {baseline} ({size} bytes): {reference}",
            file.display()
        );
        println!("  engineKey: {engine_key}");
        println!("  build:     {}", made.claims.build);
    }
    Ok(())
}

/// `vigil policy precompile --from-cluster`.
async fn precompile_cluster(
    host: &Host,
    kubeconfig: Option<&std::path::Path>,
    baseline: Baseline,
    access: &Access,
    pin: bool,
) -> anyhow::Result<()> {
    use crate::distribution::store::BlobStore;
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::default());
    let clients = crate::cluster::client::connect(kubeconfig, &metrics, ClientOptions::default())
        .await
        .context("cannot reach the cluster")?;
    let dir = std::env::temp_dir().join(format!("vigil-precompile-{}", std::process::id()));
    let store = BlobStore::open(&dir).context("cannot make a temporary store")?;
    let done = crate::authoring::precompile::from_cluster(
        host,
        &kube::Api::all(clients.api),
        &store,
        baseline,
        access,
        pin,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let done = done.context("cannot precompile the cluster's policies")?;
    for made in &done {
        println!(
            "{}: {} -> {}",
            made.policy, made.component, made.pushed.pinned
        );
    }
    println!(
        "{} version(s) precompiled for {baseline}{}; sign each with the native-code key:",
        done.len(),
        if pin { " and pinned" } else { "" }
    );
    for made in &done {
        println!(
            "  cosign sign --key native.key --tlog-upload=false {}",
            made.pushed.pinned
        );
    }
    Ok(())
}

/// The child compiler's work (see [`crate::policy::compiler`]). A component
/// that does not compile ends the process with [`INVALID_EXIT`].
fn compile(digest: &str, memory_bytes: u64, cache_dir: PathBuf) -> anyhow::Result<()> {
    let bytes = child_input(digest, memory_bytes)?;
    let host = Host::for_compiling(cache_dir)?;
    match host.compile_into_cache(&bytes) {
        Ok(()) => {
            // Only a report: the artifact is stored either way.
            if let Ok(kib) = peak_rss_kib() {
                println!("{kib}");
            }
            Ok(())
        }
        Err(error @ LoadError::Compile(_)) => Err(error.into()),
        Err(error) => {
            eprintln!("error: {}", Chain(&error));
            std::process::exit(INVALID_EXIT);
        }
    }
}

async fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let scenario = Scenario::load(&args.scenario)?;
    let base = args.scenario.parent().unwrap_or(std::path::Path::new("."));
    let options = RunOptions {
        policies_dir: args.policies_dir,
        cache_dir: args.cache.dir(),
        snapshots: args.snapshots,
    };
    let simulation = crate::simulate::run(&scenario, base, &options)
        .await
        .with_context(|| format!("simulating {}", args.scenario.display()))?;
    match args.output {
        Output::Text => print!("{}", output::render(&simulation)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&simulation)?),
    }
    if let Some(path) = &args.plot {
        plot::draw(&simulation, path)?;
        eprintln!("chart written to {}", path.display());
    }
    Ok(())
}

async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let config = args.into_config()?;
    crate::agent::run(config, shutdown_signal()?).await
}

/// `vigil cleanup cluster|node`.
async fn cleanup(command: CleanupCommand) -> anyhow::Result<()> {
    match command {
        CleanupCommand::Cluster {
            namespace,
            agent_selector,
            kubeconfig,
        } => {
            let metrics = std::sync::Arc::new(crate::metrics::Metrics::default());
            let clients = crate::cluster::client::connect(
                kubeconfig.as_deref(),
                &metrics,
                ClientOptions::default(),
            )
            .await
            .context("cannot reach the cluster")?;
            let done = crate::cleanup::cluster(clients.api, &namespace, &agent_selector).await?;
            for node in &done.nodes {
                println!("{node}: vigil's taints and conditions removed");
            }
            println!(
                "{} of {} node(s) cleaned; {} VigilNodeStatus and {} VigilPolicyStatus object(s) deleted",
                done.nodes.len(),
                done.nodes_seen,
                done.node_statuses,
                done.policy_statuses
            );
            Ok(())
        }
        CleanupCommand::Node { state_dir, wait } => {
            let terminated = shutdown_signal()?;
            let done = crate::cleanup::state_dir(&state_dir)?;
            println!(
                "{}: removed {}",
                state_dir.display(),
                if done.removed.is_empty() {
                    "nothing".to_owned()
                } else {
                    done.removed.join(", ")
                }
            );
            if !done.left.is_empty() {
                println!(
                    "{}: left {} (not the agent's)",
                    state_dir.display(),
                    done.left.join(", ")
                );
            }
            if wait {
                terminated.await;
            }
            Ok(())
        }
    }
}

/// Parses `UID:GID`.
fn user(text: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = text.split_once(':').unwrap_or_default();
    match (uid.parse(), gid.parse()) {
        (Ok(uid), Ok(gid)) => Ok((uid, gid)),
        _ => Err(format!("{text:?} is not UID:GID (two numbers)")),
    }
}

/// Installs the SIGTERM and SIGINT handlers now, so that a signal during
/// start-up is not lost (it ends the agent once started), and resolves on
/// either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_as_kubernetes_users_write_them() {
        assert_eq!(duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert!(duration("-5s").unwrap_err().contains("negative"));
        assert!(duration("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn the_native_code_key_may_be_absent_but_never_the_component_key() {
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
        let config = |native: &std::path::Path| {
            let cli = Cli::try_parse_from([
                "vigil".as_ref(),
                "agent".as_ref(),
                "--node-name=n1".as_ref(),
                "--verification-key".as_ref(),
                key.as_os_str(),
                "--native-code-key".as_ref(),
                native.as_os_str(),
            ])
            .unwrap_or_else(|e| panic!("{e}"));
            let Command::Agent(args) = cli.command else {
                panic!("not the agent");
            };
            args.into_config()
        };
        // The optional Secret is not there: the agent runs, refusing
        // every precompiled artifact.
        let absent = config(&dir.path().join("absent.pub")).unwrap();
        assert!(absent.native_code_key.is_none() && absent.verification_key.is_some());
        let error = config(&key).unwrap_err();
        assert!(
            format!("{error:#}").contains("native code needs a key of its own"),
            "{error:#}"
        );
    }

    /// The pod of the DaemonSet in `deploy/FILE`.
    fn daemonset_pod(file: &str) -> serde_json::Value {
        let path = format!("{}/../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let daemonset: serde_json::Value = serde_norway::from_str(&text).unwrap();
        daemonset["spec"]["template"]["spec"].clone()
    }

    /// The DaemonSet's container in `deploy/daemonset.yaml`.
    fn daemonset_container() -> serde_json::Value {
        daemonset_pod("daemonset.yaml")["containers"][0].clone()
    }

    fn parse(args: &serde_json::Value) -> Command {
        let args: Vec<String> = serde_json::from_value(args.clone()).unwrap();
        let argv = std::iter::once("vigil".to_owned()).chain(args);
        Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{e}"))
            .command
    }

    /// Only the init container runs as root, and it gives the state
    /// directory to the user the agent (and the cleanup) then runs as.
    #[test]
    fn the_init_container_gives_the_state_directory_to_the_user_that_runs() {
        for file in ["daemonset.yaml", "cleanup/state.yaml"] {
            let pod = daemonset_pod(file);
            let init = &pod["initContainers"][0];
            let Command::OwnState { state_dir, user } = parse(&init["args"]) else {
                panic!("{file}: the init container does not run own-state");
            };
            let container = &pod["containers"][0];
            let context = &container["securityContext"];
            assert_eq!(context["runAsNonRoot"], true, "{file}");
            let runs_as = (
                context["runAsUser"].as_u64(),
                context["runAsGroup"].as_u64(),
            );
            assert_eq!(
                runs_as,
                (Some(user.0.into()), Some(user.1.into())),
                "{file}"
            );
            let mounted = |c: &serde_json::Value| {
                c["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["name"] == "state")
                    .map(|m| m["mountPath"].as_str().unwrap().to_owned())
            };
            assert_eq!(
                mounted(init),
                Some(state_dir.display().to_string()),
                "{file}"
            );
            assert_eq!(mounted(container), mounted(init), "{file}");
            let added = &init["securityContext"]["capabilities"]["add"];
            assert_eq!(
                added,
                &serde_json::json!(["CHOWN", "DAC_READ_SEARCH"]),
                "{file}"
            );
        }
        assert_eq!(user("65532:1"), Ok((65532, 1)));
        assert!(user("65532").unwrap_err().contains("UID:GID"));
        assert!(user("vigil:vigil").unwrap_err().contains("UID:GID"));
    }

    #[test]
    fn the_daemonset_passes_only_flags_and_variables_the_agent_accepts() {
        use clap::CommandFactory;
        let container = daemonset_container();
        let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
        let mut argv = vec!["vigil".to_owned()];
        argv.extend(args);
        let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(cli.command, Command::Agent(_)), "{argv:?}");

        let command = Cli::command();
        let agent = command.find_subcommand("agent").unwrap();
        let accepted: Vec<String> = agent
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        for env in container["env"].as_array().unwrap() {
            let name = env["name"].as_str().unwrap();
            assert!(
                accepted.iter().any(|a| a == name),
                "{name} is not read by `vigil agent`"
            );
        }
        // The probes ask the paths the agent serves, on the port it listens on.
        let port = container["ports"][0]["containerPort"].as_u64().unwrap();
        // Dual-stack: IPv6 and IPv4 alike.
        assert!(argv.contains(&format!("--metrics-addr=[::]:{port}")));
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    }
}
