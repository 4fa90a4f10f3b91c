//! The kubelet alone, for comparison: vigil removed, the kubelet's own
//! `evictionHard` on `memory.available` a few hundred MiB under its reading
//! of the moment, the same hog; timed from the kubelet's own reading (the
//! root memory cgroup, as cAdvisor reads it on cgroup v1) crossing the
//! threshold to the hog's process gone.

use super::kubelet::set_threshold;
use super::pressure::{
    MARGIN_MIB, Workloads, condition, event_reasons, kubelet_reading, tainted, time_to_stop,
};
use super::until;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

const MIB: u64 = 1 << 20;
const LIMIT: Duration = Duration::from_secs(120);
/// The kubelet's housekeeping period, when it compares its signals with its
/// thresholds.
pub const HOUSEKEEPING: Duration = Duration::from_secs(10);

/// Episode `run` with the kubelet alone, the hog started `start` after the
/// kubelet's restart; returns the time from crossing to the hog stopped.
pub fn kubelet_alone_episode(
    cluster: &mut Upstream,
    workloads: &mut Workloads,
    run: usize,
    start: Duration,
) -> Duration {
    if run == 0 {
        // The kubelet alone heeds no budget.
        cluster.kubectl_ok(&["-n", "pressure", "delete", "pod/guarded", "--wait"]);
        workloads.survivors.retain(|(name, _)| name != "guarded");
    }
    until("the node is out of the last episode", LIMIT, || {
        (condition(cluster, "MemoryPressure").as_deref() == Some("False")
            && !tainted(cluster, "node.kubernetes.io/memory-pressure"))
        .then_some(())
    });
    let threshold = kubelet_reading() - MARGIN_MIB * MIB;
    set_threshold(cluster, threshold);
    std::thread::sleep(start);
    let name = format!("hog-kubelet-{run}");
    let pid = workloads.start_hog(cluster, &name);
    let time = time_to_stop(pid, threshold, kubelet_reading);
    // The kubelet's eviction: its disruption condition and Event (the pod
    // ends Succeeded, as the hog exits 0 on SIGTERM).
    let pod = until("the kubelet's eviction", LIMIT, || {
        let pod = cluster.get(Some("pressure"), &format!("pod/{name}"))?;
        let conditions = pod["status"]["conditions"].as_array()?;
        conditions
            .iter()
            .any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "TerminationByKubelet")
            .then_some(pod)
    });
    assert!(
        event_reasons(cluster, &name).contains(&"Evicted".to_owned()),
        "no Evicted Event from the kubelet: {pod:#}"
    );
    workloads.survived(cluster);
    cluster.kubectl_ok(&["-n", "pressure", "delete", &format!("pod/{name}")]);
    eprintln!("the kubelet alone, run {run}: {time:?}");
    time
}
