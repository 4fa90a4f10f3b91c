//! What contract 0.3.0 gives a strategy on the real node, read once and
//! recorded in `target/vigil-node/signals.txt`: every node signal a strategy
//! may declare, read by the agent's own reader from this node's `/proc` and
//! cgroups (one NUMA node, cgroup v1's memory controller, so no workload
//! PSI), the pod facts of a running Guaranteed pod from its real cgroup, and
//! each pod's writable layers parsed by the agent's parser from the real
//! kubelet's statistics summary.

use super::{root, until};
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};
use vigil::cluster::kubelet_stats;
use vigil::signals::{Cgroups, Driver, Rates, SignalFiles};
use vigil_testbed::upstream::Upstream;

/// Signals this node has: those a strategy declares, and two of those
/// every strategy gets.
const EXPECTED: [&str; 19] = [
    "memory.free",
    "memory.watermark.min",
    "memory.watermark.low",
    "memory.watermark.high",
    "numa.0.memory.free",
    "numa.0.zone.normal.free",
    "numa.0.zone.normal.min",
    "numa.0.zone.normal.low",
    "numa.0.zone.normal.high",
    "numa.0.zone.normal.inactiveFile",
    "vm.watermarkScaleFactor",
    "vm.kswapd.steal",
    "vm.kswapd.scan",
    "vm.workingset.refault",
    "vm.oomKill",
    "cpu.load1",
    "cpu.usage",
    "psi.memory.some.avg10",
    "allocatable.memory.available",
];

/// Reads and records them; `guaranteed` is a running pod of class
/// Guaranteed (its cpu limit gives it CFS counters) in namespace `pressure`.
pub fn recorded(cluster: &Upstream, guaranteed: &str) {
    let files = SignalFiles {
        cgroup_root: "/sys/fs/cgroup".into(),
        driver: Driver::Cgroupfs,
        nodefs: "/".into(),
        ..SignalFiles::default()
    };
    let every = ["*".to_owned()];
    let mut rates = Rates::default();
    // The rates need a second reading: polled until it gives them.
    let (signals, gaps) = until(
        "two readings give the rates",
        Duration::from_secs(30),
        || {
            let reading = files.read_node(&every);
            let mut signals = reading.signals;
            signals.extend(rates.signals(SystemTime::now(), reading.counters));
            let has = |name: &str| signals.iter().any(|s| s.name == name);
            (has("vm.kswapd.steal") && has("cpu.usage")).then_some((signals, reading.gaps))
        },
    );
    let mut record = String::new();
    for signal in &signals {
        let capacity = signal
            .capacity
            .map_or(String::new(), |c| format!(" of {c}"));
        writeln!(record, "{} = {}{capacity}", signal.name, signal.value).unwrap();
    }
    for gap in &gaps {
        writeln!(record, "{}: not read ({})", gap.signal, gap.error).unwrap();
    }
    for name in EXPECTED {
        assert!(
            signals.iter().any(|s| s.name == name),
            "{name} is missing:\n{record}"
        );
    }
    assert!(
        gaps.iter().any(|g| g.signal == "psi.workload.memory"),
        "a v1 memory controller has no memory.pressure:\n{record}"
    );

    let pod = cluster
        .get(Some("pressure"), &format!("pod/{guaranteed}"))
        .expect("the pod");
    let uid = pod["metadata"]["uid"].as_str().expect("a UID");
    let cgroups = Cgroups::detect(Path::new("/sys/fs/cgroup"), Driver::Cgroupfs);
    let relative = cgroups.pod(uid, vigil::model::QosClass::Guaranteed);
    let numa = cgroups.numa(&relative).expect("memory.numa_stat");
    let throttling = cgroups.throttling(&relative).expect("cpu.stat");
    writeln!(
        record,
        "pod {guaranteed}: numa {numa:?}, cpu {throttling:?}"
    )
    .unwrap();
    assert_eq!(numa.len(), 1, "one NUMA node:\n{record}");

    // The agent's parser on the real kubelet's summary (read here through
    // the API server's node proxy, as an admin may).
    let node = pod["spec"]["nodeName"].as_str().expect("scheduled");
    // containerd measures a new container's layer within its 10 s period.
    let path = format!("/api/v1/nodes/{node}/proxy/stats/summary");
    let own = until("the pod's layer measured", Duration::from_secs(60), || {
        let summary = cluster.kubectl_ok(&["get", "--raw", &path]);
        let layers = kubelet_stats::parse(&summary, SystemTime::now()).expect("a summary");
        layers.get(uid).copied()
    });
    writeln!(record, "pod {guaranteed}: writable layers {own:?}").unwrap();
    eprint!("{record}");
    std::fs::write(root().join("target/vigil-node/signals.txt"), record).expect("the record");
}
