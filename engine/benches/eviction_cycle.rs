//! Benchmark of the eviction loop (not a test: it prints figures, asserts nothing).
//!
//! Run with `cargo bench -p vigil --bench eviction_cycle`. Prints, from one run:
//! - the time of one decision cycle with the default policies at 110, 500 and
//!   1000 pods (each with six labels and three annotations, as a Deployment's
//!   pods have), calm (every strategy judges, nobody is evicted) and under hard
//!   memory pressure (plus top victims, the sorter and the killer);
//! - the time from a signal event (a write to a cgroup's `memory.events`,
//!   seen through inotify) to the killer being called;
//! - what a sorter in shadow costs (`eviction::shadow`), for the Rust
//!   built-in and the JavaScript example (after `examples/policies/build.sh`):
//!   the extra time of a cycle under hard pressure (keeping the inputs) and
//!   of its judgement (the shadow's own sort), and the resident memory the
//!   shadow adds, loaded from the artifact cache and judging 30 cycles;
//! - what reading this machine's node signals costs: the kubelet's and PSI
//!   alone (what the built-ins ask), and with every signal a strategy may
//!   declare beyond them (`/proc/zoneinfo`, `/proc/vmstat`, `/proc/stat`,
//!   `/proc/loadavg`, the watermark scale factor);
//! - what reading 110 pods' cgroups costs on this machine (real cgroups made
//!   for the run under each v1 controller, root only): the usage every cycle
//!   reads, and what each pod fact a file gives adds (memory per NUMA node,
//!   cpu throttling, memory pressure: nothing opened on v1), for every pod
//!   and as a cycle reads them (a share of the pods each cycle).

use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};
use vigil::base::clock::SystemClock;
use vigil::eviction::shadow::{ShadowSet, Shadowed};
use vigil::eviction::{EvictionManager, EvictionSettings, KillError, Killer, NodeState, Victim};
use vigil::eviction::{Heartbeat, LoopReport, NodeSource, Policies, Runner};
use vigil::model::{KeyValue, QosClass, Signal};
use vigil::policy::{Host, Limits, LimitsTable, Origin, Registry};
use vigil::signals::wake::memory_events::watch_memory_events;

/// Labels of a typical Deployment's pod (value: the key's, with the pod's number).
const LABELS: [&str; 6] = [
    "app",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/part-of",
    "pod-template-hash",
    "team",
];
/// Annotations of a typical pod (the long ones the agent never passes are left out).
const ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/restartedAt",
    "prometheus.io/scrape",
    "prometheus.io/port",
];

fn pairs(keys: &[&str], i: usize) -> Vec<KeyValue> {
    keys.iter()
        .map(|key| KeyValue {
            key: (*key).into(),
            value: format!("{key}-{}", i % 17),
        })
        .collect()
}

/// `pods` pods (each with the usual labels and annotations) on a node with
/// `available_mib` of memory available.
fn node(pods: usize, available_mib: u64) -> NodeState {
    let qos = [
        QosClass::BestEffort,
        QosClass::Burstable,
        QosClass::Guaranteed,
    ];
    let pods = (0..pods)
        .map(|i| {
            let usage = ((i * 7919) % 2048) as u64;
            let request = ((i * 104_729) % 1024) as u64;
            let name = format!("pod-{i}");
            let mut pod = vigil::model::fixture::pod(&name)
                .qos(qos[i % 3])
                .priority((i % 7) as i32 * 100)
                .usage_mib(usage)
                .request_mib(request)
                .build();
            pod.labels = pairs(&LABELS, i);
            pod.annotations = pairs(&ANNOTATIONS, i);
            pod
        })
        .collect();
    let gib = (1u64 << 30) as f64;
    let signal = |name: &str, value: f64, capacity: f64| Signal {
        name: name.into(),
        value,
        capacity: Some(capacity),
    };
    NodeState {
        signals: vec![
            signal("memory.available", (available_mib << 20) as f64, 64.0 * gib),
            signal("nodefs.available", 60.0 * gib, 100.0 * gib),
            signal("pid.available", 30_000.0, 32_768.0),
            signal("psi.memory.some.avg10", 1.0, 100.0),
        ],
        pods,
        ..NodeState::default()
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The times of 200 cycles of `manager` on `calm`. The cycle takes the
/// node's state, as the agent hands over each observation: a copy is made
/// before the clock starts.
fn calm_cycles(manager: &mut EvictionManager, calm: &NodeState) -> Vec<Duration> {
    (0..200)
        .map(|_| {
            let calm = calm.clone();
            let t = Instant::now();
            manager.cycle(SystemTime::now(), calm);
            t.elapsed()
        })
        .collect()
}

fn cycle_times(registry: &Arc<Registry>) {
    println!("decision cycle with the default policies (median)");
    println!("{:>6} {:>12} {:>16}", "pods", "calm", "hard pressure");
    for pods in [110, 500, 1000] {
        let (calm, pressed) = (node(pods, 8192), node(pods, 50));
        let mut manager = EvictionManager::new(registry.clone(), EvictionSettings::default());
        let calm_times = calm_cycles(&mut manager, &calm);
        let pressed_times = (0..30)
            .map(|_| {
                // A fresh manager each time, so every cycle picks and evicts a victim.
                let mut manager =
                    EvictionManager::new(registry.clone(), EvictionSettings::default());
                let pressed = pressed.clone();
                let t = Instant::now();
                let report = manager.cycle(SystemTime::now(), pressed);
                assert_eq!(report.requested.len(), 1, "the benchmark must evict");
                t.elapsed()
            })
            .collect();
        println!(
            "{pods:>6} {:>12} {:>16}",
            ms(median(calm_times)),
            ms(median(pressed_times))
        );
    }
}

/// The calm cycle at 110 pods with katalyst's strategies off (as shipped),
/// all on (observing), and each on alone, on a node whose signals they
/// read; and each one's component size and compile time.
fn katalyst_costs(registry: &Arc<Registry>) {
    let mut calm = node(110, 8192);
    let gib = (1u64 << 30) as f64;
    for (name, value, capacity) in [
        ("memory.free", 20.0 * gib, Some(64.0 * gib)),
        ("vm.watermarkScaleFactor", 10.0, None),
        ("numa.0.memory.free", 20.0 * gib, Some(64.0 * gib)),
        ("numa.0.zone.normal.free", 19.0 * gib, Some(62.0 * gib)),
        ("numa.0.zone.normal.min", 0.05 * gib, Some(62.0 * gib)),
        ("numa.0.zone.normal.low", 0.06 * gib, Some(62.0 * gib)),
        ("numa.0.zone.normal.high", 0.07 * gib, Some(62.0 * gib)),
        (
            "numa.0.zone.normal.inactiveFile",
            8.0 * gib,
            Some(62.0 * gib),
        ),
        ("cpu.load1", 3.0, Some(16.0)),
        ("cpu.usage", 4.0, Some(16.0)),
    ] {
        calm.signals.push(Signal {
            name: name.into(),
            value,
            capacity,
        });
    }
    const KATALYST: [&str; 6] = [
        "rss-overuse",
        "numa-pressure",
        "system-memory-pressure",
        "system-cpu-pressure",
        "rootfs-pressure",
        "reclaimed-resources",
    ];
    let time = |enabled: &dyn Fn(&str) -> bool| {
        let mut settings = EvictionSettings::default();
        for name in KATALYST {
            let policy = vigil::eviction::PolicySettings {
                enabled: enabled(name),
                ..vigil::eviction::PolicySettings::default()
            };
            settings.policies.insert(name.to_owned(), policy);
        }
        let mut manager = EvictionManager::new(registry.clone(), settings);
        median(calm_cycles(&mut manager, &calm))
    };
    let (off, on) = (time(&|_| false), time(&|_| true));
    println!(
        "calm cycle, 110 pods: katalyst's strategies off (as shipped) {}, all on {} (+{} for their calls)",
        ms(off),
        ms(on),
        ms(on.saturating_sub(off))
    );
    println!("strategy                  size    compile  calm cycle alone (+ its call)");
    for name in KATALYST {
        let bytes = vigil::policy::builtin(name).expect("a built-in");
        let compile = Host::new(None)
            .expect("host")
            .load(name, bytes.to_vec(), Origin::Builtin, Limits::default())
            .expect("it loads")
            .compile_time();
        let alone = time(&|n| n == name);
        println!(
            "{name:<24} {:>4} KB  {:>6} ms  {} (+{})",
            bytes.len() / 1024,
            compile.as_millis(),
            ms(alone),
            ms(alone.saturating_sub(off))
        );
    }
}

/// Sends the instant each eviction starts.
struct TimingKiller(mpsc::UnboundedSender<Instant>);

impl Killer for TimingKiller {
    fn evict(&self, _victim: &Victim) -> BoxFuture<'static, Result<(), KillError>> {
        let _ = self.0.send(Instant::now());
        futures::future::ready(Ok(())).boxed()
    }
}

struct Shared(Arc<Mutex<NodeState>>);

impl NodeSource for Shared {
    fn observe(&mut self) -> NodeState {
        self.0.lock().expect("lock").clone()
    }
}

async fn event_to_killer(registry: &Arc<Registry>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let events = dir.path().join("memory.events");
    std::fs::write(
        &events,
        "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    )
    .expect("write");
    let mut samples = Vec::new();
    for i in 0..15 {
        let state = Arc::new(Mutex::new(node(110, 8192)));
        let (killed, mut kills) = mpsc::unbounded_channel();
        let manager = EvictionManager::new(registry.clone(), EvictionSettings::default());
        let (wake, wakes) = mpsc::channel(1);
        let _watcher = watch_memory_events(&events, wake).expect("watch");
        let (reports, mut cycles) = tokio::sync::broadcast::channel(64);
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async { stopped.await.unwrap_or(()) };
        let runner = Runner {
            manager,
            clock: Arc::new(SystemClock),
            killer: Arc::new(TimingKiller(killed)),
            wakes,
            memory_line: None,
            reports: Some(reports),
            heartbeat: Heartbeat::default(),
            settings: None,
        };
        let task = tokio::spawn(runner.run(Shared(Arc::clone(&state)), shutdown));
        while !matches!(cycles.recv().await.as_deref(), Ok(LoopReport::Cycle(..))) {}
        *state.lock().expect("lock") = node(110, 50);
        let written = Instant::now();
        std::fs::write(
            &events,
            format!(
                "low 0\nhigh {}\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
                i + 1
            ),
        )
        .expect("write");
        let killed_at = kills.recv().await.expect("an eviction");
        samples.push(killed_at - written);
        stop.send(()).expect("running");
        task.await.expect("joins");
    }
    println!(
        "signal event (memory.events write) to killer called, 110 pods: median {}, max {} over {} events",
        ms(median(samples.clone())),
        ms(*samples.iter().max().expect("samples")),
        samples.len()
    );
}

/// This process's resident memory, in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// Under hard pressure at 110 pods: a cycle with `policies`, and the
/// judgement after it (none without a shadow); medians.
fn pressed_cycle(policies: &Arc<dyn Policies>, judge: impl Fn()) -> (Duration, Duration) {
    let pressed = node(110, 50);
    let (mut cycles, mut judgements) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        let mut manager = EvictionManager::new(policies.clone(), EvictionSettings::default());
        let pressed = pressed.clone();
        let t = Instant::now();
        let report = manager.cycle(SystemTime::now(), pressed);
        cycles.push(t.elapsed());
        assert_eq!(report.requested.len(), 1, "the benchmark must evict");
        let t = Instant::now();
        judge();
        judgements.push(t.elapsed());
    }
    (median(cycles), median(judgements))
}

fn shadow_costs(registry: &Arc<Registry>) {
    let js = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/js-sorter/js-sorter.wasm");
    let rust = vigil::policy::builtin("default-sorter").expect("built in");
    let mut shadows = vec![("Rust (built-in)", rust.to_vec())];
    match std::fs::read(&js) {
        Ok(bytes) => shadows.push(("JavaScript (example)", bytes)),
        Err(e) => println!("{}: {e}; run examples/policies/build.sh", js.display()),
    }
    let alone: Arc<dyn Policies> = registry.clone();
    let (cycle, _) = pressed_cycle(&alone, || {});
    println!("\na sorter in shadow of default-sorter, hard pressure, 110 pods (median of 30)");
    println!("without a shadow: cycle {}", ms(cycle));
    println!(
        "{:<22} {:>10} {:>10} {:>12} {:>14}",
        "shadow", "cycle", "judgement", "extra/cycle", "resident +MiB"
    );
    // As an agent loads a pulled version: its engine is up, its artifact in
    // the cache (compiled once before the measure).
    let cache = tempfile::tempdir().expect("temp dir");
    let host = Host::new(Some(cache.path().to_owned())).expect("host");
    let limits = Limits {
        deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    let load = |bytes: &[u8]| {
        host.load("default-sorter", bytes.to_vec(), Origin::Builtin, limits)
            .expect("the shadow loads")
    };
    for (language, bytes) in shadows {
        drop(load(&bytes));
        let before = resident_kib();
        let policy = load(&bytes);
        let set = ShadowSet::new([Arc::new(policy)]);
        let names = set.names();
        let shadowed = Arc::new(Shadowed::new(alone.clone(), Arc::new(set), names));
        let policies: Arc<dyn Policies> = shadowed.clone();
        let (with, judgement) = pressed_cycle(&policies, || {
            let comparisons = shadowed.judge();
            assert_eq!(comparisons.len(), 1, "one sort judged a cycle");
        });
        let added = resident_kib().saturating_sub(before) as f64 / 1024.0;
        let extra = (with + judgement).saturating_sub(cycle);
        println!(
            "{language:<22} {:>10} {:>10} {:>12} {:>14.1}",
            ms(with),
            ms(judgement),
            ms(extra),
            added
        );
    }
}

fn main() {
    let host = Arc::new(Host::new(None).expect("host"));
    let registry = Arc::new(
        Registry::new(host, Arc::new(SystemClock), LimitsTable::default(), None).expect("registry"),
    );
    cycle_times(&registry);
    katalyst_costs(&registry);
    shadow_costs(&registry);
    node_reading_costs();
    pod_fact_costs();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(event_to_killer(&registry));
}

/// The time of reading 110 pods' cgroups, made for the run under this
/// machine's v1 controllers (`vigil-bench/podN`) and removed after: the
/// usage a cycle always reads, and each pod fact a file gives.
fn pod_fact_costs() {
    const PODS: usize = 110;
    const CONTROLLERS: [&str; 4] = ["memory", "cpu", "cpuacct", "pids"];
    let root = std::path::Path::new("/sys/fs/cgroup");
    let cgroups = vigil::signals::Cgroups::detect(root, vigil::signals::Driver::Cgroupfs);
    let relative = |pod: usize| std::path::PathBuf::from(format!("vigil-bench/pod{pod}"));
    let made = (0..PODS).all(|pod| {
        CONTROLLERS.iter().all(|controller| {
            std::fs::create_dir_all(root.join(controller).join(relative(pod))).is_ok()
        })
    });
    let remove = || {
        for controller in CONTROLLERS {
            for pod in 0..PODS {
                let _ = std::fs::remove_dir(root.join(controller).join(relative(pod)));
            }
            let _ = std::fs::remove_dir(root.join(controller).join("vigil-bench"));
        }
    };
    if !made || cgroups.version() != vigil::signals::Version::V1 {
        println!("pod facts: not measured (needs root and v1 controllers under {root:?})");
        remove();
        return;
    }
    const ROUNDS: u32 = 200;
    let time = |read: &dyn Fn(&std::path::Path)| {
        let started = Instant::now();
        for _ in 0..ROUNDS {
            for pod in 0..PODS {
                read(&relative(pod));
            }
        }
        started.elapsed() / ROUNDS
    };
    // As the agent reads them: kept open between cycles.
    let kept = cgroups
        .clone()
        .keeping(std::sync::Arc::new(vigil::signals::KeptFiles::default()));
    let usage = |cgroups: &vigil::signals::Cgroups| {
        time(&|pod| {
            let memory = cgroups.memory(pod).expect("memory");
            let cpu = cgroups.cpu_time(pod).expect("cpu time");
            let pids = cgroups.pids(pod).expect("pids");
            std::hint::black_box((memory, cpu, pids));
        })
    };
    let (opened, usage) = (usage(&cgroups), usage(&kept));
    let numa = time(&|pod| {
        std::hint::black_box(kept.numa(pod).expect("numa_stat"));
    });
    let throttling = time(&|pod| {
        std::hint::black_box(kept.throttling(pod).expect("cpu.stat"));
    });
    let pressure = time(&|pod| {
        std::hint::black_box(kept.memory_pressure(pod).is_ok());
    });
    let opened_facts = time(&|pod| {
        std::hint::black_box(cgroups.numa(pod).expect("numa_stat"));
        std::hint::black_box(cgroups.throttling(pod).expect("cpu.stat"));
    });
    // As a cycle reads them: a share of the pods each, chosen as the agent does.
    let uids: Vec<String> = (0..PODS).map(|pod| pod.to_string()).collect();
    let mut sampled = vigil::signals::SampledFacts::default();
    let mut now = std::time::SystemTime::now();
    let started = Instant::now();
    for _ in 0..ROUNDS {
        now += Duration::from_secs(1);
        let due = sampled.due(uids.iter().map(String::as_str), now);
        for pod in due {
            let pod = relative(pod.parse().expect("a number"));
            std::hint::black_box(kept.numa(&pod).expect("numa_stat"));
            std::hint::black_box(kept.throttling(&pod).expect("cpu.stat"));
        }
    }
    let spread = started.elapsed() / ROUNDS;
    remove();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{PODS} pods' cgroups, files kept open: usage {:.1} µs (opened at each read: {:.1} µs, {:.2}x); each pod fact for every pod: numa-memory +{:.1} µs, cpu-throttling +{:.1} µs, memory-pressure (absent on v1) +{:.1} µs (both files opened at each read: +{:.1} µs); both as a cycle reads them ({} pods a cycle, chosen): +{:.1} µs",
        us(usage),
        us(opened),
        us(opened) / us(usage),
        us(numa),
        us(throttling),
        us(pressure),
        us(opened_facts),
        vigil::signals::PER_CYCLE,
        us(spread),
    );
}

/// The time of one reading of this machine's node signals: as the built-ins
/// ask (nothing beyond the kubelet's), and with every declarable signal.
fn node_reading_costs() {
    let files = vigil::signals::SignalFiles {
        nodefs: "/".into(),
        ..vigil::signals::SignalFiles::default()
    };
    let every: Vec<String> = [
        "memory.free",
        "memory.watermark.*",
        "numa.*",
        "vm.*",
        "cpu.*",
        "psi.workload.*",
    ]
    .map(String::from)
    .to_vec();
    const ROUNDS: u32 = 2000;
    for (what, wanted) in [
        ("the built-ins' signals", &[][..]),
        ("every declarable signal", &every[..]),
    ] {
        let started = Instant::now();
        let mut read = 0;
        for _ in 0..ROUNDS {
            read += std::hint::black_box(files.read_node(wanted)).signals.len();
        }
        let each = started.elapsed() / ROUNDS;
        println!(
            "node reading, {what}: {:.1} µs ({} signals)",
            each.as_secs_f64() * 1e6,
            read / ROUNDS as usize
        );
    }
}
