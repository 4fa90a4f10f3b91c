//! The kubelet's own memory threshold: `evictionHard` on
//! `memory.available`, in a drop-in in its configuration folder, read at a
//! restart.

use vigil_testbed::upstream::Upstream;

const MIB: u64 = 1 << 20;

/// Sets the kubelet's hard threshold on `memory.available` to `threshold`
/// bytes, and restarts it.
pub fn set_threshold(cluster: &mut Upstream, threshold: u64) {
    let drop_in = cluster.kubelet_drop_ins().join("50-memory.conf");
    std::fs::write(
        &drop_in,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             evictionHard: {{memory.available: \"{}Mi\", nodefs.available: \"1%\", imagefs.available: \"1%\"}}\n\
             evictionPressureTransitionPeriod: 5s\n",
            threshold / MIB
        ),
    )
    .expect("the drop-in");
    cluster.restart_kubelet();
}
