//! The Kubernetes objects the agent sees, as JSON.

use serde_json::{Value, json};

/// A running best-effort pod bound to `node`, UID `uid-NAME`, label
/// `app: NAME`, terminating in `grace_seconds`.
pub fn best_effort_pod(node: &str, namespace: &str, name: &str, grace_seconds: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "labels": {"app": name}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace_seconds,
                 "containers": [{"name": "main", "image": "example"}]},
        "status": {"phase": "Running", "startTime": "2026-11-22T10:00:00Z"},
    })
}

/// A Ready Node with 8 GiB allocatable and one taint vigil does not own.
pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {"taints": [{"key": "team/dedicated", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"memory": "8Gi"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// A PodDisruptionBudget in `namespace` selecting `app: APP`, allowing `allowed` disruptions.
pub fn pdb(namespace: &str, app: &str, allowed: u32) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": format!("{app}-pdb"), "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    })
}
