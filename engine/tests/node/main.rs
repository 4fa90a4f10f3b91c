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

mod common;
mod hot_swap;
mod image;
mod install;
mod kubelet;
mod pressure;
mod removal;
mod rss;
mod signals;
mod system_memory;

use common::{root, until, until_explained};
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

#[test]
fn vigil_as_shipped_on_a_real_node_evicts_ahead_of_the_kubelet() {
    let _machine = image::machine_to_itself();
    let layout = image::layout();
    let binary = image::binary(&layout);
    let keys = hot_swap::keys();
    let mut cluster = Upstream::start_node();
    let images = image::push(&cluster, &layout);
    install::install(&cluster, &images.first, &keys);
    install::agent_runs_as_shipped(&cluster);
    install::enforce(&cluster, &binary);
    pressure::configure(&cluster, None, None);

    let workloads = pressure::Workloads::start(&cluster);
    signals::recorded(&cluster, "guaranteed");
    pressure::kubelet_below(&mut cluster);
    let (time, eviction) =
        pressure::vigil_episode(&cluster, &workloads, "hog-vigil", Duration::ZERO, None);
    let why = eviction["why"].as_str().expect("why");
    assert!(why.contains("by default-sorter@"), "{eviction:#}");
    pressure::budget_held(&cluster);
    rss::evicts_the_leaker(&cluster, &workloads);
    system_memory::observes_the_node(&cluster, &workloads);
    hot_swap::sorter_from_registry(&cluster, &workloads, &keys, &binary);

    removal::rolling_update_keeps_state(&cluster, &images.second);
    removal::cleanup_leaves_nothing(&cluster, &images.first);
    // One episode is a check, not a measure: the comparison with the
    // kubelet alone is the node bench's (`bench.rs`).
    eprintln!("hog over the threshold to its container stopped: vigil {time:?} (one episode)");
}
