//! Shared fixtures for vigil's end-to-end tests: the test guests (built from
//! `guests/` by `build.rs`), inline WAT components, and helpers that set up a
//! real host and registry in temporary directories.

pub mod killer;

pub use killer::RecordingKiller;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use vigil::base::clock::ManualClock;
use vigil::model::bindings::{Candidate, KeyValue, QosClass, Urgency};
use vigil::policy::{Host, Limits, LimitsTable, Registry};

/// An honest sorter that orders candidates in reverse input order.
pub const REVERSE_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_REVERSE_SORTER"));
/// A sorter that never returns.
pub const ENDLESS_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_ENDLESS_SORTER"));
/// A sorter that allocates until stopped.
pub const HUNGRY_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_HUNGRY_SORTER"));
/// A sorter that always panics.
pub const TRAP_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_TRAP_SORTER"));
/// A sorter that answers an index out of range.
pub const BAD_INDEX_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_BAD_INDEX_SORTER"));
/// A reverse sorter that panics when a candidate is named `trigger-fault`.
pub const FLAKY_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_FLAKY_SORTER"));
/// A reverse sorter that first sleeps for ages when a candidate is named `trigger-fault`.
pub const SLEEPY_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_SLEEPY_SORTER"));
/// A reverse sorter that logs and prints 1 000 lines each per call.
pub const CHATTY_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_CHATTY_SORTER"));
/// A sorter that declines every call with a 50 MiB message.
pub const VERBOSE_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_VERBOSE_SORTER"));
/// A sorter that declines with how many calls its instance has seen and its memory size.
pub const REMEMBERING_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_REMEMBERING_SORTER"));
/// An eviction strategy that answers what its config says (see its crate docs).
pub const SCRIPTED_STRATEGY: &[u8] = include_bytes!(env!("VIGIL_GUEST_SCRIPTED_STRATEGY"));
/// An eviction strategy built from the first contract, `vigil:policy@0.1.0`.
pub const STRATEGY_0_1: &[u8] = include_bytes!(env!("VIGIL_GUEST_0_1_STRATEGY"));
/// A candidate sorter built from the first contract, `vigil:policy@0.1.0`.
pub const SORTER_0_1: &[u8] = include_bytes!(env!("VIGIL_GUEST_0_1_SORTER"));
/// A config merger built from the first contract, `vigil:policy@0.1.0`.
pub const MERGER_0_1: &[u8] = include_bytes!(env!("VIGIL_GUEST_0_1_MERGER"));
/// An eviction strategy built from the previous contract, `vigil:policy@0.2.0`.
pub const STRATEGY_0_2: &[u8] = include_bytes!(env!("VIGIL_GUEST_0_2_STRATEGY"));
/// A candidate sorter built from the previous contract, `vigil:policy@0.2.0`.
pub const SORTER_0_2: &[u8] = include_bytes!(env!("VIGIL_GUEST_0_2_SORTER"));
/// A WASI command component: no policy world at all.
pub const NOT_A_POLICY: &[u8] = include_bytes!(env!("VIGIL_GUEST_NOT_A_POLICY"));

/// The pod name that makes [`FLAKY_SORTER`] trap.
pub const TRIGGER: &str = "trigger-fault";

/// A component that exports a sorter interface of contract `version` with
/// no functions, importing `import` (a WIT interface name) if given.
pub fn hollow_sorter_wat(import: Option<&str>, version: &str) -> Vec<u8> {
    let import = import
        .map(|i| format!("(import \"{i}\" (instance (export \"f\" (func))))"))
        .unwrap_or_default();
    let wat = format!(
        "(component {import} (instance $empty) (export \"vigil:policy/sorter@{version}\" (instance $empty)))"
    );
    wat::parse_str(wat).expect("test WAT parses")
}

/// Limits for tests: short deadline, small memory, one-minute trial.
pub fn test_limits() -> Limits {
    Limits {
        deadline: Duration::from_millis(50),
        memory_bytes: 16 << 20,
        trial: Duration::from_secs(60),
    }
}

/// A host without cache and a registry on a manual clock, with `state_dir`.
pub fn registry(state_dir: Option<std::path::PathBuf>) -> (Arc<Registry>, Arc<ManualClock>) {
    let host = Arc::new(Host::new(None).expect("host starts"));
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    ));
    let limits = LimitsTable {
        default: test_limits(),
        overrides: Default::default(),
    };
    let registry = Registry::new(host, clock.clone(), limits, state_dir).expect("registry starts");
    (Arc::new(registry), clock)
}

/// The strategies the test candidates name: [`candidate`]'s is the first.
pub fn strategies() -> Vec<String> {
    ["test", "memory-pressure", "disk-pressure"]
        .map(String::from)
        .to_vec()
}

/// A best-effort candidate named `name` using `usage_mib` of memory,
/// proposed by strategy `test` under hard pressure.
pub fn candidate(name: &str, usage_mib: u64) -> Candidate {
    Candidate {
        pod: vigil::model::fixture::pod(name)
            .usage_mib(usage_mib)
            .build(),
        strategy: 0,
        urgency: Urgency::Hard,
    }
}

/// Candidates `a` (small), `b` (big), `c` (medium), in that input order.
pub fn three_candidates() -> Vec<Candidate> {
    vec![candidate("a", 10), candidate("b", 300), candidate("c", 100)]
}

/// The names of `candidates` in the order a sorter answered.
pub fn order_of(candidates: &[Candidate], order: &[u32]) -> Vec<String> {
    order
        .iter()
        .map(|&i| candidates[i as usize].pod.name.clone())
        .collect()
}

/// The names of [`three_candidates`] in the order the serving version of
/// the sorter `name` puts them.
///
/// # Panics
/// If `name` does not serve, is not a sorter, or faults.
pub fn sort_names(registry: &Registry, name: &str) -> Vec<String> {
    let policy = registry.get(name).expect("serves");
    let candidates = three_candidates();
    let sorted = registry
        .sorter(&policy)
        .expect("a sorter")
        .sort(&strategies(), &mut candidates.clone(), "{}")
        .unwrap()
        .unwrap();
    order_of(&candidates, &sorted.order)
}

/// The component of the example policy `name` (`examples/policies/NAME/NAME.wasm`).
///
/// # Panics
/// If it has not been built: `examples/policies/build.sh` builds them all.
pub fn example_policy(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies")
        .join(name)
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; build the example policies first with examples/policies/build.sh",
            path.display()
        )
    })
}

/// The bundled scenario files (`examples/scenarios/*.yaml`), sorted.
pub fn bundled_scenarios() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scenarios");
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/scenarios is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    found.sort();
    found
}

/// A small deterministic random generator (SplitMix64), so generated inputs
/// are the same on every run and a failure can be replayed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// `n` random candidates drawn from few values, so ties at every level of
/// the default sorter's order are common: shared namespaces and names
/// (non-ASCII among them), repeated usage and requests, refusable pods and
/// skip labels, and usage or requests at `u64::MAX`.
pub fn random_candidates(rng: &mut Rng, n: usize) -> Vec<Candidate> {
    const NAMES: [&str; 8] = [
        "web", "web-2", "Web", "db", "café", "日本", "ｚ-web", "🦀-job",
    ];
    const NAMESPACES: [&str; 3] = ["default", "batch", "ｚ-wide"];
    const QOS: [QosClass; 3] = [
        QosClass::BestEffort,
        QosClass::Burstable,
        QosClass::Guaranteed,
    ];
    const KEYS: [&str; 4] = ["app", "vigil.io/skip", "team", "vigil.io/keep"];
    const URGENCIES: [Urgency; 3] = [Urgency::Hard, Urgency::Force, Urgency::Soft];
    (0..n)
        .map(|i| {
            let name = *rng.pick(&NAMES);
            let mut pod = vigil::model::fixture::pod(name)
                .qos(*rng.pick(&QOS))
                .priority(*rng.pick(&[-5, 0, 0, 100, i32::MAX]))
                .usage_mib(*rng.pick(&[0, 64, 100, 512]))
                .request_mib(*rng.pick(&[0, 64, 100]))
                .build();
            pod.namespace = (*rng.pick(&NAMESPACES)).into();
            pod.uid = format!("uid-{}", rng.below(4));
            let extra = rng.below(2);
            let usage = &mut pod.usage.memory_working_set_bytes;
            *usage = usage.map(|bytes| bytes + extra);
            // The extremes, where `usage - request` needs more than 64 bits,
            // and a usage the host could not read.
            match rng.below(20) {
                0 => pod.usage.memory_working_set_bytes = Some(u64::MAX),
                1 => pod.requests.memory_bytes = u64::MAX,
                2 => pod.usage = vigil::model::Usage::unread(),
                _ => {}
            }
            let mut pairs = || {
                (0..rng.below(3))
                    .map(|_| KeyValue {
                        key: (*rng.pick(&KEYS)).into(),
                        value: (*rng.pick(&["x", "y"])).into(),
                    })
                    .collect::<Vec<_>>()
            };
            pod.labels = pairs();
            pod.annotations = pairs();
            let flag = rng.below(40);
            pod.is_static = flag == 0;
            pod.is_mirror = flag == 1;
            pod.is_critical = flag == 2;
            Candidate {
                pod,
                strategy: u32::try_from(i % 3).unwrap_or(0),
                urgency: *rng.pick(&URGENCIES),
            }
        })
        .collect()
}

/// A `tracing` writer that keeps what it is given, for tests that read logs.
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// A plain-text subscriber writing here.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An agent run in the test's own process (see [`agent_config`]).
pub struct InProcessAgent {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl InProcessAgent {
    /// Starts the agent of `config`.
    pub fn start(config: vigil::agent::AgentConfig) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(vigil::agent::run(config, async {
            stopped.await.ok();
        }));
        Self { stop, task }
    }

    /// Tells the agent to stop, and waits (at most 30 s) for it to end.
    ///
    /// # Panics
    /// If it does not end in time or did not run cleanly.
    pub async fn stop(self) {
        self.stop.send(()).expect("the agent is still running");
        tokio::time::timeout(std::time::Duration::from_secs(30), self.task)
            .await
            .expect("the agent ends when told")
            .expect("joins")
            .expect("ran cleanly");
    }
}

/// The config of an agent run in the test's own process for node `node-1`
/// on the testbed's node `files`: its kubeconfig, `config.yaml` and
/// `policies/` there, state under `state/`, the kubelet's cgroupfs layout,
/// no precompiled code and no registry.
pub fn agent_config(files: &vigil_testbed::NodeFiles) -> vigil::agent::AgentConfig {
    vigil::agent::AgentConfig {
        node_name: "node-1".into(),
        kubeconfig: Some(files.path("kubeconfig")),
        policies_dir: files.path("policies"),
        max_policy_bytes: vigil::policy::DEFAULT_MAX_POLICY_BYTES,
        state_dir: files.path("state"),
        namespace: "vigil-system".into(),
        registry_ca: None,
        verification_key: None,
        compile_mode: vigil::policy::CompileMode::Fallback,
        native_code_key: None,
        config_file: Some(files.path("config.yaml")),
        config_grace: std::time::Duration::from_secs(86_400),
        config_spread: std::time::Duration::ZERO,
        config_start_on_defaults: false,
        dry_run: false,
        observe_first: false,
        metrics_addr: "127.0.0.1:0".parse().expect("an address"),
        metrics_auth: vigil::agent::MetricsAuth::None,
        proc_root: files.path("proc"),
        cgroup_root: files.path("cgroup"),
        cgroup_driver: vigil::signals::Driver::Cgroupfs,
        nodefs: files.path(""),
        imagefs: None,
        workload_cgroup: None,
        kubelet: None,
        status_interval: std::time::Duration::from_secs(15),
        api: vigil::cluster::ClientOptions::default(),
        pod_access: vigil::cluster::PodAccess::Node,
        condition_heartbeat: std::time::Duration::from_secs(60),
        compiler: None,
    }
}
