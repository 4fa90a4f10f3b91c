//! vigil as shipped, on a real node: the upstream control plane with a node
//! of its own (`tests/node/up.sh`: the kubelet and kube-proxy of the same
//! pinned Kubernetes, containerd, runc, the CNI plugins and a registry on
//! the node's address), the release's image installed from `deploy/` by an overlay that
//! only pins the image and says what this node differs in, and real memory
//! pressure from a pod that allocates it. What no fixture can say — that the
//! agent runs as the DaemonSet says, reads the node's real `/proc` and cgroup
//! files, and that its eviction stops a real container ahead of the kubelet —
//! is asked here. Needs root; run with `cargo test -p vigil --test node`.
//!
//! katalyst's RSS overuse strategy, turned on, evicts a leaking pod over its
//! request × ratio on the calm node (`rss`); its system memory strategy,
//! in dry run, decides from the node's real files and evicts nobody
//! (`system_memory`).
//!
//! One test, in steps that share the node: pressure episodes must not
//! overlap, and each step starts from where the last one left the node.

mod hot_swap;
mod image;
mod install;
mod kubelet;
mod pressure;
mod removal;
mod rss;
mod signals;
mod system_memory;

use std::path::{Path, PathBuf};
use std::time::Duration;
use vigil_testbed::upstream::Upstream;
use vigil_testbed::wait::Polling;

/// How many pressure episodes each measurement takes its median of.
const RUNS: usize = 5;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Polls `check` every 50 ms (the suite's measures read times no finer)
/// until it gives a value; `limit` bounds a broken test.
fn until<T>(what: &str, limit: Duration, check: impl FnMut() -> Option<T>) -> T {
    until_explained(what, limit, check, String::new)
}

/// [`until`], and on failure what `explain` says (the agent's log, say).
fn until_explained<T>(
    what: &str,
    limit: Duration,
    check: impl FnMut() -> Option<T>,
    explain: impl FnOnce() -> String,
) -> T {
    Polling::new(Duration::from_millis(50), limit).until(what, check, explain)
}

/// The median of `times`.
fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// Where in a period of `period` run `run` starts its hog: the runs spread
/// evenly over the period. Whoever evicts looks at fixed times (the
/// kubelet every 10 s from its start, vigil every evaluation period from
/// its last config change, both just made), so a hog started at once would
/// cross at about the same point of that period every run; spread, the runs
/// sample the whole period, as pressure that comes at any time would. A
/// placement in time, not a wait for something.
fn phase(period: Duration, run: usize) -> Duration {
    period * run as u32 / RUNS as u32
}

#[test]
fn vigil_as_shipped_on_a_real_node_evicts_ahead_of_the_kubelet() {
    let layout = image::layout();
    let binary = image::binary(&layout);
    let keys = hot_swap::keys();
    let mut cluster = Upstream::start_node();
    let images = image::push(&cluster, &layout);
    install::install(&cluster, &images.first, &keys);
    install::agent_runs_as_shipped(&cluster);
    pressure::configure(&cluster, None, None);

    let mut workloads = pressure::Workloads::start(&cluster);
    signals::recorded(&cluster, "guaranteed");
    pressure::kubelet_below(&mut cluster);
    let vigil: Vec<Duration> = (0..RUNS)
        .map(|run| {
            let name = format!("hog-vigil-{run}");
            let start = phase(pressure::PERIOD, run);
            let (time, eviction) =
                pressure::vigil_episode(&cluster, &workloads, &name, start, None);
            let why = eviction["why"].as_str().expect("why");
            assert!(why.contains("by default-sorter@"), "{eviction:#}");
            time
        })
        .collect();
    pressure::budget_held(&cluster);
    rss::evicts_the_leaker(&cluster, &workloads);
    system_memory::observes_the_node(&cluster, &workloads);
    hot_swap::sorter_from_registry(&cluster, &workloads, &keys, &binary);

    removal::rolling_update_keeps_state(&cluster, &images.second);
    removal::cleanup_leaves_nothing(&cluster, &images.first);

    let kubelet: Vec<Duration> = (0..RUNS)
        .map(|run| kubelet::kubelet_alone_episode(&mut cluster, &mut workloads, run))
        .collect();
    kubelet::set_threshold(&mut cluster, None);

    let report = format!(
        "hog over the threshold to its container stopped, median of {RUNS}: vigil {:?} (runs {vigil:?}), the kubelet alone {:?} (runs {kubelet:?})\n",
        median(&vigil),
        median(&kubelet),
    );
    eprint!("{report}");
    std::fs::write(root().join("target/vigil-node/timing.txt"), report).expect("the report");
}
