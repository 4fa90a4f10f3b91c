//! The kubelet alone, for comparison: vigil removed, the kubelet's own
//! `evictionHard` on `memory.available` a few hundred MiB under its reading
//! of the moment (a drop-in in its configuration folder, read at a restart),
//! the same hog; timed from the kubelet's own reading (the root memory
//! cgroup, as cAdvisor reads it on cgroup v1) crossing the threshold to the
//! hog's process gone.

use super::pressure::{MARGIN_MIB, Workloads, condition, kubelet_reading, tainted, time_to_stop};
use super::until;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

const MIB: u64 = 1 << 20;
const LIMIT: Duration = Duration::from_secs(120);
/// The kubelet's housekeeping period, when it compares its signals with its
/// thresholds.
const HOUSEKEEPING: Duration = Duration::from_secs(10);

/// Sets the kubelet's hard threshold on `memory.available` to `threshold`
/// bytes (`None`: back to the node's own), and restarts it.
pub fn set_threshold(cluster: &mut Upstream, threshold: Option<u64>) {
    let drop_in = cluster.kubelet_drop_ins().join("50-memory.conf");
    match threshold {
        Some(threshold) => std::fs::write(
            &drop_in,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 evictionHard: {{memory.available: \"{}Mi\", nodefs.available: \"1%\", imagefs.available: \"1%\"}}\n\
                 evictionPressureTransitionPeriod: 5s\n",
                threshold / MIB
            ),
        )
        .expect("the drop-in"),
        None => std::fs::remove_file(&drop_in).expect("the drop-in"),
    }
    cluster.restart_kubelet();
}

/// One episode with the kubelet alone; returns the time from crossing to
/// the hog stopped.
pub fn kubelet_alone_episode(
    cluster: &mut Upstream,
    workloads: &mut Workloads,
    run: usize,
) -> Duration {
    if run == 0 {
        workloads.remove_guarded(cluster);
    }
    until("the node is out of the last episode", LIMIT, || {
        (condition(cluster, "MemoryPressure").as_deref() == Some("False")
            && !tainted(cluster, "node.kubernetes.io/memory-pressure"))
        .then_some(())
    });
    let threshold = kubelet_reading() - MARGIN_MIB * MIB;
    set_threshold(cluster, Some(threshold));
    std::thread::sleep(super::phase(HOUSEKEEPING, run));
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
        super::pressure::event_reasons(cluster, &name).contains(&"Evicted".to_owned()),
        "no Evicted Event from the kubelet: {pod:#}"
    );
    workloads.survived(cluster);
    cluster.kubectl_ok(&["-n", "pressure", "delete", &format!("pod/{name}")]);
    eprintln!("the kubelet alone, run {run}: {time:?}");
    time
}
