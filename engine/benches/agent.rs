//! Benchmark of `vigil agent` on a node (not a test: it prints figures and
//! asserts nothing). Run with `cargo bench -p vigil --bench agent`: the
//! release binary against the project's test API server, with the node's
//! kernel files as fixtures. Prints, from one run:
//! - from a signal change (`meminfo` under the hard threshold, then a `high`
//!   event in the kubepods cgroup's `memory.events`) to the Eviction POST
//!   arriving at the API server: median and max over 20 events;
//! - the agent's RSS, its CPU use and its API requests while at rest for
//!   20 s, with 110 and with 1000 pods on the node, and with 110 pods and a
//!   `VigilConfig` whose policies take their config from two ConfigMaps;
//!   and how many of the requests went to the status objects (`vigil.dev`
//!   `…statuses`) before and during the rest;
//! - the agent's memory (resident, anonymous, file-backed, and its peak)
//!   with the built-ins only, then once the example JavaScript sorter and
//!   Python strategy are dropped into its policies directory and compiled
//!   (cold artifact cache; the most the agent held while they compiled,
//!   sampled, and the peaks of the child processes that compiled them, from
//!   the agent's log), then restarted with the cache warm.
//!
//! - the agent's CPU during an eviction storm (1000 pods, the JavaScript
//!   sorter, pressure flapping), on average and in its busiest second.
//!
//! `VIGIL_BINARY=PATH` measures another build of vigil, e.g. the image's.
//! `VIGIL_BENCH=storm` runs only the storm.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vigil_testbed::wait::Polling;
use vigil_testbed::{AgentProcess, ApiServer, NodeFiles, objects};

const NODE: &str = "bench-node";
const NS: &str = "bench";
const LIMIT: Duration = Duration::from_secs(60);
const REST: Duration = Duration::from_secs(20);
/// The default period (5 s): events, not the period, must drive the loop.
/// The node's disk is this machine's own, so the disk strategy is off (on a
/// machine whose disk is over 90 % full it would hold the node under disk
/// pressure, and the bench would wait for a memory eviction forever).
const CONFIG: &str =
    "policies:\n  memory-pressure:\n    config: {hard: 500Mi}\n  disk-pressure: {enabled: false}\n";

/// The binary measured: `$VIGIL_BINARY` if set (e.g. the image's static
/// musl build, `target/x86_64-unknown-linux-musl/release/vigil`), else
/// cargo's build of this bench.
fn binary() -> PathBuf {
    std::env::var_os("VIGIL_BINARY")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vigil")), PathBuf::from)
}

fn pod(server: &ApiServer, files: &NodeFiles, name: &str, usage_mib: u64) {
    let object = objects::best_effort_pod(NODE, NS, name, 0);
    let uid = object["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_owned();
    files.best_effort_pod(&uid, usage_mib);
    server.put("pods", NS, object);
}

async fn started(server: &ApiServer, agent: &AgentProcess) {
    server
        .until(LIMIT, "the agent watches pods", |s| {
            s.requests()
                .iter()
                .any(|r| r.uri.starts_with("/api/v1/pods?") && r.uri.contains("watch=true"))
        })
        .await;
    // Its first cycles are done once /metrics shows one.
    let cycled = || {
        agent
            .metrics()
            .contains("vigil_cycle_seconds_count")
            .then_some(())
    };
    let polling = Polling::new(Duration::from_millis(50), LIMIT);
    polling
        .until_async("a first cycle", cycled, || agent.logs())
        .await;
}

fn in_flight(agent: &AgentProcess) -> Option<u64> {
    agent
        .metrics()
        .lines()
        .find(|l| l.starts_with("vigil_evictions_in_flight "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

async fn signal_to_eviction() {
    const EVENTS: usize = 20;
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node(NODE));
    let files = NodeFiles::default();
    // The largest goes first: victim-0 in the first event, and so on.
    for i in 0..EVENTS {
        pod(
            &server,
            &files,
            &format!("victim-{i}"),
            4000 - i as u64 * 10,
        );
    }
    let agent = AgentProcess::start(&binary(), NODE, &files, &server, CONFIG, &[]);
    started(&server, &agent).await;
    let mut samples = Vec::new();
    for i in 0..EVENTS {
        let posts = server.evictions().len();
        let signal = Instant::now();
        files.memory_available(50);
        files.memory_event();
        server
            .until(LIMIT, "the eviction POST", |s| {
                s.arrived()
                    .iter()
                    .filter(|u| u.ends_with("/eviction"))
                    .count()
                    > posts
            })
            .await;
        samples.push(signal.elapsed());
        files.memory_available(4096);
        // The victim is gone (grace 0); wait until the agent knows, so the
        // next event is not held back as reclaim in progress.
        server
            .until(LIMIT, "the victim is gone", |s| {
                s.get("pods", NS, &format!("victim-{i}")).is_none()
            })
            .await;
        let settled = || (in_flight(&agent) == Some(0)).then_some(());
        let polling = Polling::new(Duration::from_millis(20), LIMIT);
        polling
            .until_async("no eviction in flight", settled, || agent.logs())
            .await;
    }
    samples.sort();
    println!(
        "signal change -> Eviction POST at the API server: median {:.1} ms, max {:.1} ms over {} events (period 5 s)",
        samples[samples.len() / 2].as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3,
        samples.len()
    );
}

/// Memory of a process, in MiB, from `/proc/PID/status`.
struct Memory {
    resident: f64,
    anonymous: f64,
    file: f64,
    peak: f64,
}

fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> f64 {
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"));
        kib as f64 / 1024.0
    };
    Memory {
        resident: field("VmRSS:"),
        anonymous: field("RssAnon:"),
        file: field("RssFile:"),
        peak: field("VmHWM:"),
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {:.1} MiB ({:.1} anonymous, {:.1} file-backed), peak {:.1} MiB",
            self.resident, self.anonymous, self.file, self.peak
        )
    }
}

/// Waits until the agent serves every policy in `names`; the most resident
/// and anonymous memory (MiB) seen in the samples taken meanwhile.
async fn serving(agent: &AgentProcess, names: &[&str]) -> (f64, f64) {
    let start = Instant::now();
    let mut most = (0.0_f64, 0.0_f64);
    loop {
        let now = memory(agent.pid());
        most = (most.0.max(now.resident), most.1.max(now.anonymous));
        let metrics = agent.metrics();
        let loaded =
            |name: &&str| metrics.contains(&format!("vigil_policy_state{{policy=\"{name}\""));
        if names.iter().all(loaded) {
            return most;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "{names:?} not loaded: {}",
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn memory_with_example_policies() {
    const EXAMPLES: [&str; 2] = ["js-sorter", "python-psi-strategy"];
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node(NODE));
    let files = NodeFiles::default();
    let agent = AgentProcess::start(&binary(), NODE, &files, &server, CONFIG, &[]);
    started(&server, &agent).await;
    println!("memory, built-ins only: {}", memory(agent.pid()));
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    for name in EXAMPLES {
        let file = format!("{name}.wasm");
        std::fs::copy(
            examples.join(name).join(&file),
            files.path(&format!("policies/{file}")),
        )
        .expect("the example policies are built (examples/policies/build.sh)");
    }
    let compile = Instant::now();
    let (resident, anonymous) = serving(&agent, &EXAMPLES).await;
    println!(
        "memory, + JS sorter + Python strategy compiled in {:.1} s (cold cache): {}",
        compile.elapsed().as_secs_f64(),
        memory(agent.pid())
    );
    println!(
        "  while they compiled (sampled every 100 ms): at most RSS {resident:.1} MiB, {anonymous:.1} anonymous"
    );
    let logs = agent.logs();
    let children: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("compiled in a child process"))
        .filter_map(|l| l.split("peak_rss_mib=").nth(1)?.split_whitespace().next())
        .collect();
    println!("  the compiler children's peaks (MiB, built-ins first): {children:?}");
    drop(agent);
    let agent = AgentProcess::start(&binary(), NODE, &files, &server, CONFIG, &[]);
    started(&server, &agent).await;
    serving(&agent, &EXAMPLES).await;
    println!(
        "memory, + JS sorter + Python strategy, restarted (warm cache): {}",
        memory(agent.pid())
    );
}

/// A `VigilConfig` for every node whose two strategies read their
/// thresholds from two ConfigMaps, and the ConfigMaps.
fn config_from_config_maps(server: &ApiServer) {
    for (name, value) in [("memory", "hard: 500Mi"), ("pids", "hard: 1%")] {
        let map = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ops"}, "data": {"config.yaml": value}});
        server.put("configmaps", "ops", map);
    }
    let from =
        |name: &str| serde_json::json!([{"namespace": "ops", "name": name, "key": "config.yaml"}]);
    let config = serde_json::json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilConfig",
    "metadata": {"name": "fleet"},
    "spec": {"config": {"policies": {
        "memory-pressure": {"configFrom": from("memory")},
        "pid-pressure": {"configFrom": from("pids")},
    }}}});
    server.put("vigilconfigs", "", config);
}

async fn at_rest(pods: usize, config_maps: bool) {
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node(NODE));
    if config_maps {
        config_from_config_maps(&server);
    }
    let files = NodeFiles::default();
    for i in 0..pods {
        pod(&server, &files, &format!("pod-{i}"), 10 + (i as u64 % 200));
    }
    let agent = AgentProcess::start(&binary(), NODE, &files, &server, CONFIG, &[]);
    started(&server, &agent).await;
    server
        .until(LIMIT, "the status objects published", |s| {
            s.get("vigilnodestatuses", "", NODE).is_some()
                && s.list("vigilpolicystatuses").len() == 6
        })
        .await;
    if config_maps {
        server
            .until(LIMIT, "both ConfigMaps watched", |s| {
                s.open_watches("/configmaps?") == 2
            })
            .await;
    }
    let requests_before = server.requests().len();
    let before = agent.usage();
    let start = Instant::now();
    tokio::time::sleep(REST).await;
    let after = agent.usage();
    let (rss, cpu_before, cpu_after) = (after.resident_kib, before.cpu, after.cpu);
    let wall = start.elapsed();
    let all = server.requests();
    let statuses = |requests: &[vigil_testbed::Request]| {
        requests
            .iter()
            .filter(|r| r.uri.contains("statuses"))
            .count()
    };
    let status_requests = (
        statuses(&all[..requests_before]),
        statuses(&all[requests_before..]),
    );
    let requests = all[requests_before..].to_vec();
    let watches = server.open_watches("/");
    let what = if config_maps {
        " + 2 ConfigMaps referenced"
    } else {
        ""
    };
    println!(
        "{pods:>5} pods{what} at rest: RSS {:.1} MiB, cpu {:.2} % of a core, {} API requests in {:.0} s ({:.1}/min; {} watches open, each renewed every 290 s); status objects: {} requests at start, {} at rest",
        rss as f64 / 1024.0,
        (cpu_after - cpu_before).as_secs_f64() / wall.as_secs_f64() * 100.0,
        requests.len(),
        wall.as_secs_f64(),
        requests.len() as f64 * 60.0 / wall.as_secs_f64(),
        watches,
        status_requests.0,
        status_requests.1,
    );
}

/// An eviction storm: 1000 pods, the example JavaScript sorter ordering
/// them, and memory pressure flapping (under the threshold with a
/// `memory.events` wake-up, then relieved) every half second for
/// [`STORM`], while the API server plays the kubelet (each victim is gone
/// after its grace period). The agent's CPU over the storm, its busiest
/// second, and the evictions it made: what its CPU request and limit are
/// decided from.
async fn eviction_storm() {
    const PODS: usize = 1000;
    const STORM: Duration = Duration::from_secs(30);
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node(NODE));
    let files = NodeFiles::default();
    for i in 0..PODS {
        pod(
            &server,
            &files,
            &format!("storm-{i}"),
            100 + (i as u64 % 300),
        );
    }
    let policies = files.path("policies");
    std::fs::create_dir_all(&policies).expect("policies dir");
    let js =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/js-sorter/js-sorter.wasm");
    std::fs::copy(&js, policies.join("js-sorter.wasm"))
        .unwrap_or_else(|e| panic!("{}: {e}; run examples/policies/build.sh", js.display()));
    let config = format!("sorter: js-sorter\n{CONFIG}");
    let agent = AgentProcess::start(&binary(), NODE, &files, &server, &config, &[]);
    started(&server, &agent).await;
    serving(&agent, &["js-sorter"]).await;
    let before = agent.usage();
    let evicted = server.evictions().len();
    let start = Instant::now();
    let mut busiest = Duration::ZERO;
    let mut second = (start, before.cpu);
    let mut pressed = false;
    while start.elapsed() < STORM {
        pressed = !pressed;
        files.memory_available(if pressed { 50 } else { 4096 });
        if pressed {
            files.memory_event();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        if second.0.elapsed() >= Duration::from_secs(1) {
            let now = agent.usage().cpu;
            busiest = busiest.max((now - second.1).div_f64(second.0.elapsed().as_secs_f64()));
            second = (Instant::now(), now);
        }
    }
    let after = agent.usage();
    let wall = start.elapsed();
    println!(
        "eviction storm ({PODS} pods, js-sorter, pressure flapping every 500 ms for {:.0} s): cpu {:.1} % of a core on average, {:.1} % in the busiest second; {} evictions; RSS {:.1} MiB",
        wall.as_secs_f64(),
        (after.cpu - before.cpu).as_secs_f64() / wall.as_secs_f64() * 100.0,
        busiest.as_secs_f64() * 100.0,
        server.evictions().len() - evicted,
        after.resident_kib as f64 / 1024.0
    );
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            if std::env::var("VIGIL_BENCH").as_deref() == Ok("storm") {
                return eviction_storm().await;
            }
            signal_to_eviction().await;
            at_rest(110, false).await;
            at_rest(110, true).await;
            at_rest(1000, false).await;
            memory_with_example_policies().await;
            eviction_storm().await;
        });
}
