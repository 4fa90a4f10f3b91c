//! Upgrade and removal on the real server: a cluster as vigil 0.1.0 left it
//! (its `deploy/`, applied client-side as its guide said, and a
//! `VigilConfig` written for it), upgraded as this release's notes say
//! (docs/operating.md, "Upgrading vigil": server-side, taking over 0.1.0's
//! client-side fields once); the config kept and served to this
//! release's agent; then the uninstall (docs/operating.md, "Uninstalling"):
//! `vigil cleanup` refuses while an agent runs, then leaves no taint,
//! condition or status object, and `kubectl delete -k` leaves nothing.

use super::agent::{agent_identity, register_node, remove_agents, running_pod};
use super::{install_steps_ok, root};
use std::time::Duration;
use vigil_testbed::upstream::Upstream;
use vigil_testbed::wait::Polling;
use vigil_testbed::{AgentProcess, NodeFiles};

/// A bound for a broken test, never a wait.
const LIMIT: Duration = Duration::from_secs(120);

const CONFIG: &str = "evictionPeriodSeconds: 1\npolicies:\n  disk-pressure: {enabled: false}\n";

pub(super) fn until(what: &str, condition: impl Fn() -> bool) {
    let polling = Polling::new(Duration::from_millis(250), LIMIT);
    polling.until(what, || condition().then_some(()), String::new);
}

/// Everything of vigil's the API server still holds, by kind.
pub(super) fn leftovers(cluster: &Upstream) -> Vec<String> {
    let mut left = Vec::new();
    for kind in [
        "customresourcedefinitions",
        "clusterroles",
        "clusterrolebindings",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "flowschemas",
        "prioritylevelconfigurations",
        "namespaces",
    ] {
        let names = cluster.kubectl_ok(&["get", kind, "-o", "name"]);
        left.extend(
            names
                .lines()
                .filter(|name| name.contains("vigil"))
                .map(str::to_owned),
        );
    }
    left
}

#[test]
fn a_cluster_of_0_1_0_upgrades_keeps_its_config_and_uninstalls_to_nothing() {
    let cluster = Upstream::start();
    let fixtures = root().join("engine/tests/fixtures/deploy-0.1.0");
    // vigil 0.1.0, installed as its guide said.
    let old = fixtures.join("deploy.yaml");
    cluster.kubectl_ok(&["apply", "-f", old.to_str().unwrap()]);
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/vigilconfigs.vigil.dev",
    ]);
    let config = fixtures.join("vigilconfig.yaml");
    cluster.kubectl_ok(&["apply", "-f", config.to_str().unwrap()]);
    let before = cluster
        .get(None, "vigilconfig/fleet")
        .expect("the 0.1.0 config");

    // The upgrade, as this release's notes say: the CRDs of the new
    // release first, then its manifests, all server-side.
    let crds = std::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(crds.status.success());
    let crds = String::from_utf8(crds.stdout).unwrap();
    let output = cluster.kubectl_as(
        &cluster.admin_kubeconfig(),
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&crds),
    );
    install_steps_ok(
        "vigil crd | kubectl apply --server-side --force-conflicts -f -",
        &output,
    );
    let deploy = root().join("deploy");
    // Without --force-conflicts, the first server-side apply stops on what
    // 0.1.0's client-side apply owns, as the notes warn.
    let output = cluster.kubectl(&["apply", "--server-side", "-k", deploy.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("kubectl-client-side-apply"));
    let output = cluster.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        deploy.to_str().unwrap(),
    ]);
    install_steps_ok(
        "kubectl apply --server-side --force-conflicts -k deploy/",
        &output,
    );
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/vigilpolicies.vigil.dev",
    ]);

    // Kept: the config as written, and the operator's policies ConfigMap
    // (0.1.0 rendered it; this release never touches it).
    let after = cluster.get(None, "vigilconfig/fleet").expect("kept");
    assert_eq!(after["spec"], before["spec"]);
    assert!(
        cluster
            .get(Some("vigil-system"), "configmap/vigil-policies")
            .is_some()
    );

    // Served to this release's agent: it runs the layer.
    register_node(&cluster, "n1");
    let files = NodeFiles::default();
    let kubeconfig = agent_identity(&cluster, "n1");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let mut agent = AgentProcess::start_with(binary, "n1", &files, &kubeconfig, CONFIG, &[]);
    until("the agent runs the 0.1.0 VigilConfig", || {
        cluster
            .get(None, "vigilnodestatus/n1")
            .is_some_and(|s| s["status"]["config"]["active"].is_string())
    });
    let status = cluster.get(None, "vigilnodestatus/n1").unwrap();
    assert!(
        status["status"]["config"]["assigned"] == status["status"]["config"]["active"],
        "{status:#}\n{}",
        agent.logs()
    );

    // The uninstall. The cleanup Job's identity; it refuses while the agent
    // pod runs, and removes nothing.
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "-k",
        root().join("deploy/cleanup").to_str().unwrap(),
    ]);
    running_pod(
        &cluster,
        "vigil-system",
        "cleanup",
        "n1",
        serde_json::json!({"serviceAccountName": "vigil-cleanup"}),
    );
    let token = cluster.pod_token("vigil-system", "vigil-cleanup", "cleanup");
    files.write("cleanup.kubeconfig", &cluster.kubeconfig_for(&token));
    let cleanup = || {
        std::process::Command::new(binary)
            .args(["cleanup", "cluster", "--kubeconfig"])
            .arg(files.path("cleanup.kubeconfig"))
            .output()
            .unwrap()
    };
    let refused = cleanup();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("still run"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        cluster.get(None, "vigilnodestatus/n1").is_some(),
        "nothing removed"
    );
    assert!(agent.terminate().success(), "{}", agent.logs());
    remove_agents(&cluster);
    let cleaned = cleanup();
    assert!(
        cleaned.status.success(),
        "{}",
        String::from_utf8_lossy(&cleaned.stderr)
    );
    for kind in ["vigilnodestatuses", "vigilpolicystatuses"] {
        assert_eq!(
            cluster.kubectl_ok(&["get", kind, "-o", "name"]).trim(),
            "",
            "{kind} left"
        );
    }
    let node = cluster.get(None, "node/n1").unwrap();
    let text = node.to_string();
    assert!(
        !text.contains("vigil.dev/") && !text.contains("\"Vigil"),
        "{node:#}"
    );

    // Then the manifests: nothing of vigil is left. (The test plays the
    // kubelet of the cleanup Job's pod: its container has ended.)
    cluster.kubectl_ok(&[
        "delete",
        "pod",
        "cleanup",
        "-n",
        "vigil-system",
        "--grace-period=0",
        "--force",
    ]);
    cluster.kubectl_ok(&[
        "delete",
        "-k",
        root().join("deploy/cleanup").to_str().unwrap(),
        "--wait",
        "--timeout=60s",
    ]);
    // The DaemonSet went first: the guide's delete ignores it.
    cluster.kubectl_ok(&[
        "delete",
        "-k",
        deploy.to_str().unwrap(),
        "--ignore-not-found",
        "--wait",
        "--timeout=90s",
    ]);
    until("nothing of vigil is left", || {
        leftovers(&cluster).is_empty()
    });
}
