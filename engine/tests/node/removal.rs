//! Upgrade and removal on the node: a rolling update of the DaemonSet to a
//! second image keeps the agent's state directory and the policies it
//! serves (the node compiles nothing: `--compile=never`, as shipped); then
//! the uninstall of docs/operating.md with `deploy/cleanup/` leaves the node
//! without vigil's taints, conditions and state.

use super::install::{STATE, agent_pod, agent_pods, node_patch, overlay, rolled_out, state_files};
use super::until;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

const LIMIT: Duration = Duration::from_secs(180);

/// Each policy status: its name with what it serves.
fn serving(cluster: &Upstream) -> BTreeMap<String, Value> {
    let list = cluster.kubectl_ok(&["get", "vigilpolicystatuses", "-o", "json"]);
    let list: Value = serde_json::from_str(&list).expect("JSON");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|status| {
            (
                status["metadata"]["name"]
                    .as_str()
                    .expect("a name")
                    .to_owned(),
                status["status"]["digest"].clone(),
            )
        })
        .collect()
}

/// Rolls the DaemonSet to `second`: a new agent pod, the same state and
/// the same policies served.
pub fn rolling_update_keeps_state(cluster: &Upstream, second: &str) {
    let before = agent_pod(cluster);
    let files = state_files();
    assert!(!files.is_empty(), "the agent keeps no state in {STATE}");
    let policies = serving(cluster);
    assert!(
        policies.values().all(Value::is_string),
        "a policy serves nothing: {policies:?}"
    );
    let upgrade = overlay("upgrade", "deploy", second, &node_patch(cluster));
    cluster.kubectl_ok(&[
        "apply",
        "--server-side",
        "-k",
        upgrade.to_str().expect("UTF-8"),
    ]);
    rolled_out(cluster);
    let after = agent_pod(cluster);
    assert_ne!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "the agent pod was not replaced"
    );
    assert_eq!(after["spec"]["containers"][0]["image"], second);
    assert_eq!(
        after["status"]["containerStatuses"][0]["restartCount"], 0,
        "{after:#}"
    );
    // Kept: all but the pulled store's blobs, which each agent collects of
    // what its policies no longer need (a precompiled artifact's manifest
    // and signature, once its code is imported).
    let now = state_files();
    let lost: Vec<&String> = (files.iter())
        .filter(|f| !now.contains(f) && !f.starts_with("oci/"))
        .collect();
    assert!(lost.is_empty(), "the update lost state files: {lost:?}");
    until("the new agent serves the same policies", LIMIT, || {
        (serving(cluster) == policies).then_some(())
    });
}

/// Removes the agent, then runs `deploy/cleanup/` with `image`: no taint,
/// condition or state of vigil's is left on the node.
pub fn cleanup_leaves_nothing(cluster: &Upstream, image: &str) {
    cluster.kubectl_ok(&["-n", "vigil-system", "delete", "daemonset/vigil", "--wait"]);
    until("the agent's pod is gone", LIMIT, || {
        agent_pods(cluster).is_empty().then_some(())
    });
    let cleanup = overlay("cleanup", "deploy/cleanup", image, "");
    let cleanup = cleanup.to_str().expect("UTF-8");
    cluster.kubectl_ok(&["apply", "--server-side", "-k", cleanup]);
    cluster.kubectl_ok(&[
        "-n",
        "vigil-system",
        "wait",
        "--for=condition=complete",
        "job/vigil-cleanup",
        "--timeout=180s",
    ]);
    cluster.kubectl_ok(&[
        "-n",
        "vigil-system",
        "rollout",
        "status",
        "daemonset/vigil-cleanup-state",
        "--timeout=180s",
    ]);
    let node = cluster.get(None, "node/vigil-node").expect("the node");
    let taints: Vec<&Value> = node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("vigil.dev/"))
        })
        .collect();
    assert!(taints.is_empty(), "vigil's taints are left: {taints:?}");
    let conditions: Vec<&Value> = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"].as_str().is_some_and(|t| t.starts_with("Vigil")))
        .collect();
    assert!(
        conditions.is_empty(),
        "vigil's conditions are left: {conditions:?}"
    );
    assert_eq!(
        state_files(),
        Vec::<String>::new(),
        "state is left in {STATE}"
    );
    cluster.kubectl_ok(&["delete", "-k", cleanup, "--wait"]);
    let deploy = super::root().join("target/vigil-node/overlay");
    cluster.kubectl_ok(&[
        "delete",
        "-k",
        deploy.to_str().expect("UTF-8"),
        "--wait",
        "--ignore-not-found",
    ]);
}
