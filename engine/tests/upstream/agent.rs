//! The agent under its real identity: a token the API server issues for the
//! DaemonSet's ServiceAccount, bound to a pod on node `n1`, with exactly
//! `deploy/`'s RBAC, FlowSchemas and admission policy in force. Its whole
//! life is read back from the API server's audit log; a second agent with
//! node `n2`'s token is refused each write to `n1`'s objects.

use super::{install, installed, items};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;
use vigil_testbed::wait::Polling;
use vigil_testbed::{AgentProcess, NodeFiles};

/// A bound for a broken test, never a wait.
const LIMIT: Duration = Duration::from_secs(90);

/// The agent's config: quick periods; the node's disk is the test machine's
/// own, so the disk strategy is off.
const CONFIG: &str = "evictionPeriodSeconds: 1\nconditionTransitionSeconds: 2\npolicies:\n  memory-pressure:\n    config: {hard: 500Mi}\n  disk-pressure: {enabled: false}\n";

const AGENT: &str = "system:serviceaccount:vigil-system:vigil";
const CLEANUP: &str = "system:serviceaccount:vigil-system:vigil-cleanup";

/// Asks `condition` every 200 ms until it holds; panics after [`LIMIT`]
/// with `what` and the agent's log.
fn until(what: &str, agent: &AgentProcess, condition: impl Fn() -> bool) {
    let polling = Polling::new(Duration::from_millis(200), LIMIT);
    polling.until(what, || condition().then_some(()), || agent.logs());
}

/// Node `name` as its kubelet registers it, and its first status.
pub(crate) fn register_node(cluster: &Upstream, name: &str) {
    cluster.apply(
        &json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
        })
        .to_string(),
    );
    kubelet_heartbeat(cluster, name);
}

/// The kubelet's node status update, as the kubelet sends it: a strategic
/// merge patch of `nodes/status` by field manager `kubelet`, with its four
/// conditions and a fresh heartbeat.
pub(crate) fn kubelet_heartbeat(cluster: &Upstream, name: &str) {
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    let condition = |kind: &str, status: &str, reason: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": format!("kubelet says {reason}"),
               "lastHeartbeatTime": now, "lastTransitionTime": "2026-11-26T00:00:00Z"})
    };
    let status = json!({"status": {
        "allocatable": {"memory": "8Gi", "cpu": "4", "pods": "110"},
        "capacity": {"memory": "8Gi", "cpu": "4", "pods": "110"},
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("Ready", "True", "KubeletReady"),
        ],
    }});
    cluster.kubectl_ok(&[
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=strategic",
        "--field-manager=kubelet",
        "-p",
        &status.to_string(),
    ]);
}

/// The kubelet's conditions on `node`, whole.
fn kubelet_conditions(cluster: &Upstream, node: &str) -> Vec<Value> {
    let node = node_object(cluster, node);
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !c["type"].as_str().unwrap().starts_with("Vigil"))
        .cloned()
        .collect()
}

/// A pod on `node` in `namespace`, Running as its kubelet reports it; its UID.
pub(crate) fn running_pod(
    cluster: &Upstream,
    namespace: &str,
    name: &str,
    node: &str,
    spec: Value,
) -> String {
    let mut pod_spec = json!({
        "nodeName": node, "terminationGracePeriodSeconds": 3,
        "containers": [{"name": "main", "image": "example.invalid/workload:1"}],
    });
    pod_spec
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    cluster.apply(
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": pod_spec,
        })
        .to_string(),
    );
    let status = json!({"status": {"phase": "Running", "startTime": jiff::Timestamp::now().to_string(),
        "conditions": [{"type": "Ready", "status": "True"}]}});
    cluster.kubectl_ok(&[
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    let pod = cluster
        .get(Some(namespace), &format!("pod/{name}"))
        .expect("created");
    pod["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// The agent's own pod on `node` (as the DaemonSet would make it) and a
/// kubeconfig with a token bound to it.
pub(crate) fn agent_identity(cluster: &Upstream, node: &str) -> String {
    let pod = format!("vigil-agent-{node}");
    running_pod(
        cluster,
        "vigil-system",
        &pod,
        node,
        json!({"serviceAccountName": "vigil"}),
    );
    // Labelled as the DaemonSet labels its pods: `vigil cleanup` sees an agent.
    cluster.kubectl_ok(&[
        "label",
        "pod",
        &pod,
        "-n",
        "vigil-system",
        "app.kubernetes.io/name=vigil",
    ]);
    cluster.kubeconfig_for(&cluster.pod_token("vigil-system", "vigil", &pod))
}

/// The agents go, as the guide's uninstall begins: the DaemonSet deleted,
/// and its pods' kubelets (the test) confirm their containers have ended.
pub(crate) fn remove_agents(cluster: &Upstream) {
    cluster.kubectl_ok(&[
        "delete",
        "daemonset",
        "vigil",
        "-n",
        "vigil-system",
        "--wait",
    ]);
    cluster.kubectl_ok(&[
        "delete",
        "pods",
        "-n",
        "vigil-system",
        "-l",
        "app.kubernetes.io/name=vigil",
        "--grace-period=0",
        "--force",
    ]);
}

/// Node `name` as the API server has it (null if it has none).
fn node_object(cluster: &Upstream, name: &str) -> Value {
    cluster
        .get(None, &format!("node/{name}"))
        .unwrap_or(Value::Null)
}

/// The node's conditions by type: status.
fn conditions(cluster: &Upstream, node: &str) -> Vec<(String, String)> {
    let node = node_object(cluster, node);
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn taints(cluster: &Upstream, node: &str) -> Vec<String> {
    let node = node_object(cluster, node);
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["key"].as_str().unwrap().to_owned())
        .collect()
}

/// The requests of `user` that RBAC (403) or admission refused, from the
/// audit log: code, verb, URI, message. (An admission policy's denial is a
/// 422 whose message names the policy; the audit log has no other mark of it.)
fn refusals(cluster: &Upstream, user: &str) -> Vec<String> {
    cluster
        .audit()
        .iter()
        .filter(|e| e["user"]["username"] == user)
        .filter(|e| {
            let message = e["responseStatus"]["message"].as_str().unwrap_or_default();
            e["responseStatus"]["code"] == 403
                || message.contains("ValidatingAdmissionPolicy")
                || message.contains("admission webhook")
        })
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["responseStatus"]["code"],
                e["verb"],
                e["requestURI"],
                e["responseStatus"]["message"]
            )
        })
        .collect()
}

fn vigil() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_vigil"))
}

#[test]
fn the_agent_lives_its_whole_life_under_its_own_token_with_no_refusal() {
    let cluster = install(Upstream::start());
    for node in ["n1", "n2"] {
        register_node(&cluster, node);
    }
    cluster.kubectl_ok(&["create", "namespace", "shop"]);
    let files = NodeFiles::default();
    for (name, usage) in [("small", 100), ("big", 900)] {
        let uid = running_pod(&cluster, "shop", name, "n1", json!({}));
        files.best_effort_pod(&uid, usage);
    }
    let kubelets = kubelet_conditions(&cluster, "n1");
    assert_eq!(kubelets.len(), 4);
    let kubeconfig = agent_identity(&cluster, "n1");
    // Observing first, as the shipped DaemonSet starts it.
    let observe = "--observe-first";
    let mut agent =
        AgentProcess::start_with(vigil(), "n1", &files, &kubeconfig, CONFIG, &[observe]);

    // It publishes its node's status object.
    until("the VigilNodeStatus of n1", &agent, || {
        cluster.get(None, "vigilnodestatus/n1").is_some()
    });
    // A VigilConfig for its node, and a policy it cannot pull.
    cluster.apply(
        "apiVersion: vigil.dev/v1alpha1\nkind: VigilConfig\nmetadata: {name: n1-sorting}\nspec:\n  priority: 5\n  target: {nodeNames: [n1]}\n  config: {evictionBurst: 2}\n",
    );
    cluster.apply(&format!(
        "apiVersion: vigil.dev/v1alpha1\nkind: VigilPolicy\nmetadata: {{name: team-sorter}}\nspec:\n  source:\n    oci: {{ref: '127.0.0.1:9/policies/sorter@sha256:{}'}}\n  rollout: {{percent: 100}}\n",
        "0".repeat(64)
    ));
    until("its VigilPolicyStatus for the policy", &agent, || {
        let list = cluster.kubectl_ok(&["get", "vigilpolicystatuses", "-o", "json"]);
        items(&list)
            .iter()
            .any(|s| s["spec"]["policy"] == "team-sorter" && s["spec"]["node"] == "n1")
    });
    until("it runs the VigilConfig", &agent, || {
        cluster.get(None, "vigilnodestatus/n1").is_some_and(|s| {
            let config = &s["status"]["config"];
            config["active"].is_string() && config["active"] == config["assigned"]
        })
    });

    // Memory pressure while observing: a dry-run eviction, no taint.
    files.memory_available(50);
    until("n1 reports a dry-run eviction, observing", &agent, || {
        cluster.get(None, "vigilnodestatus/n1").is_some_and(|s| {
            s["status"]["mode"] == "observe"
                && s["status"]["evictions"]["dry-run"].as_u64() > Some(0)
        })
    });
    let big = cluster.get(Some("shop"), "pod/big").unwrap();
    assert!(big["metadata"]["deletionTimestamp"].is_null(), "{big:#}");
    assert!(
        !taints(&cluster, "n1")
            .iter()
            .any(|t| t.starts_with("vigil.dev/")),
        "{:?}",
        taints(&cluster, "n1")
    );
    let daemonset = std::fs::read_to_string(super::root().join("deploy/daemonset.yaml")).unwrap();
    assert!(
        daemonset.contains(&format!("- {observe}\n")),
        "the DaemonSet ships {observe}"
    );

    // The enforce step, as the docs give it: the top pod is evicted through
    // the real Eviction API, gracefully: it is terminating until its kubelet
    // confirms.
    let admin = cluster.admin_kubeconfig();
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(vigil())
            .args(args)
            .arg("--kubeconfig")
            .arg(&admin)
            .output()
            .expect("vigil runs");
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let enforce = cli(&["enforce", "--percent", "100"]);
    assert!(enforce.contains("VigilConfig/vigil-enforce"), "{enforce}");
    until("big is terminating", &agent, || {
        cluster
            .get(Some("shop"), "pod/big")
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
    });
    let big = cluster.get(Some("shop"), "pod/big").unwrap();
    assert_eq!(big["metadata"]["deletionGracePeriodSeconds"], 1, "{big:#}");
    until("the condition and the taint on n1", &agent, || {
        conditions(&cluster, "n1").contains(&("VigilMemoryPressure".into(), "True".into()))
            && taints(&cluster, "n1").contains(&"vigil.dev/MemoryPressure".to_owned())
    });
    // Beside the kubelet's: its four conditions are as it wrote them, and
    // its next heartbeat leaves vigil's in place.
    assert_eq!(
        kubelet_conditions(&cluster, "n1"),
        kubelets,
        "vigil rewrote the kubelet's"
    );
    kubelet_heartbeat(&cluster, "n1");
    let kubelets = kubelet_conditions(&cluster, "n1");
    assert!(conditions(&cluster, "n1").contains(&("VigilMemoryPressure".into(), "True".into())));
    // The kubelet confirms: the containers stopped, the pod goes.
    files.memory_available(4096);
    cluster.kubectl_ok(&[
        "delete",
        "pod",
        "big",
        "-n",
        "shop",
        "--grace-period=0",
        "--force",
    ]);
    until("the condition clears and the taint goes", &agent, || {
        conditions(&cluster, "n1").contains(&("VigilMemoryPressure".into(), "False".into()))
            && !taints(&cluster, "n1")
                .iter()
                .any(|t| t.starts_with("vigil.dev/"))
    });
    until("its Events", &agent, || {
        let list = cluster.kubectl_ok(&["get", "events.events.k8s.io", "-A", "-o", "json"]);
        let reasons: Vec<Value> = items(&list).iter().map(|e| e["reason"].clone()).collect();
        reasons.contains(&json!("Evicting"))
            && reasons.contains(&json!("VigilMemoryPressureStarted"))
    });
    assert!(
        cluster.get(Some("shop"), "pod/small").is_some(),
        "one victim"
    );
    // The fleet's brake, by the commands the docs give, and lifted.
    cli(&["pause"]);
    until("paused", &agent, || {
        agent.metrics().contains("vigil_paused 1")
    });
    cli(&["resume"]);
    until("resumed", &agent, || {
        agent.metrics().contains("vigil_paused 0")
    });
    assert!(cli(&["resume"]).contains("nothing to resume"));
    assert_eq!(
        kubelet_conditions(&cluster, "n1"),
        kubelets,
        "vigil rewrote the kubelet's"
    );
    assert!(agent.terminate().success(), "{}", agent.logs());

    // The uninstall: agents gone, then `vigil cleanup cluster` under the
    // cleanup Job's own identity.
    cluster.kubectl_ok(&[
        "apply",
        "-k",
        super::root().join("deploy/cleanup").to_str().unwrap(),
    ]);
    remove_agents(&cluster);
    running_pod(
        &cluster,
        "vigil-system",
        "cleanup",
        "n1",
        json!({"serviceAccountName": "vigil-cleanup"}),
    );
    let token = cluster.pod_token("vigil-system", "vigil-cleanup", "cleanup");
    files.write("cleanup.kubeconfig", &cluster.kubeconfig_for(&token));
    let cleanup = std::process::Command::new(vigil())
        .args(["cleanup", "cluster", "--kubeconfig"])
        .arg(files.path("cleanup.kubeconfig"))
        .output()
        .unwrap();
    assert!(
        cleanup.status.success(),
        "{}",
        String::from_utf8_lossy(&cleanup.stderr)
    );
    assert!(
        !conditions(&cluster, "n1")
            .iter()
            .any(|(t, _)| t.starts_with("Vigil"))
    );
    assert_eq!(
        kubelet_conditions(&cluster, "n1"),
        kubelets,
        "the cleanup removed only vigil's"
    );
    let managers =
        cluster.kubectl_ok(&["get", "node", "n1", "--show-managed-fields", "-o", "json"]);
    assert!(managers.contains("\"manager\": \"kubelet\""), "{managers}");
    assert!(cluster.get(None, "vigilnodestatus/n1").is_none());

    let agent_requests = cluster
        .audit()
        .iter()
        .filter(|e| e["user"]["username"] == AGENT)
        .count();
    assert!(
        agent_requests > 20,
        "the audit log saw the agent: {agent_requests}"
    );
    assert_eq!(
        refusals(&cluster, AGENT),
        Vec::<String>::new(),
        "the agent was refused"
    );
    assert_eq!(
        refusals(&cluster, CLEANUP),
        Vec::<String>::new(),
        "the cleanup was refused"
    );
}

#[test]
fn an_agent_with_another_nodes_token_is_refused_each_write_to_n1s_objects() {
    let cluster = installed();
    for node in ["n1", "n2"] {
        register_node(cluster, node);
    }
    cluster.kubectl_ok(&["create", "namespace", "refusals"]);
    running_pod(cluster, "refusals", "on-n1", "n1", json!({}));
    cluster.apply("apiVersion: vigil.dev/v1alpha1\nkind: VigilNodeStatus\nmetadata: {name: n1}\nspec: {node: n1}\n");
    cluster.apply("apiVersion: vigil.dev/v1alpha1\nkind: VigilPolicyStatus\nmetadata: {name: n1.default-sorter, labels: {vigil.dev/node: n1}}\nspec: {node: n1, policy: default-sorter}\n");
    let files = NodeFiles::default();
    files.write("n2.kubeconfig", &agent_identity(cluster, "n2"));
    let n2 = files.path("n2.kubeconfig");
    // As the agent writes them: server-side apply, with no read first.
    let taint = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nspec:\n  taints: [{key: vigil.dev/MemoryPressure, effect: NoSchedule}]\n";
    let condition = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  conditions: [{type: VigilMemoryPressure, status: 'True'}]\n";
    let apply = ["apply", "--server-side", "--field-manager=vigil", "-f", "-"];
    let apply_status = [
        "apply",
        "--server-side",
        "--field-manager=vigil",
        "--subresource=status",
        "-f",
        "-",
    ];
    let status = "apiVersion: vigil.dev/v1alpha1\nkind: VigilNodeStatus\nmetadata: {name: n1}\nspec: {node: n1}\n";
    let policy_status = "apiVersion: vigil.dev/v1alpha1\nkind: VigilPolicyStatus\nmetadata: {name: n1.default-sorter, labels: {vigil.dev/node: n2}}\nspec: {node: n2, policy: default-sorter}\n";
    let writes: [(&str, Vec<&str>, Option<&str>, &str); 5] = [
        (
            "taint n1",
            apply.to_vec(),
            Some(taint),
            "the vigil agent on node n2 may not write nodes n1",
        ),
        (
            "a condition on n1",
            apply_status.to_vec(),
            Some(condition),
            "the vigil agent on node n2 may not write nodes n1",
        ),
        (
            "n1's VigilNodeStatus",
            vec!["replace", "-f", "-"],
            Some(status),
            "the vigil agent on node n2 may not write vigilnodestatuses n1",
        ),
        (
            "n1's VigilPolicyStatus",
            vec!["replace", "-f", "-"],
            Some(policy_status),
            "may write only the VigilPolicyStatuses of its node, not n1.default-sorter",
        ),
        (
            "delete n1's VigilPolicyStatus",
            vec!["delete", "vigilpolicystatus", "n1.default-sorter"],
            None,
            "may write only the VigilPolicyStatuses of its node, not n1.default-sorter",
        ),
    ];
    for (what, args, input, says) in writes {
        let output = cluster.kubectl_as(&n2, &args, input);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "n2 may {what}");
        assert!(stderr.contains(says), "{what}: {stderr}");
        assert!(
            stderr.contains("ValidatingAdmissionPolicy 'vigil-own-node'"),
            "{what}: {stderr}"
        );
    }
    // Deleting a pod is not the agent's right at all without the
    // pdb-override component (its evictions go as its node).
    let output = cluster.kubectl_as(&n2, &["delete", "pod", "on-n1", "-n", "refusals"], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("cannot delete resource \"pods\""),
        "{stderr}"
    );
    // Its own node it may taint, keeping the taints of others (a taint
    // list is atomic: the apply above would drop them on n2, and is refused).
    let taint_n2 = ["taint", "node", "n2", "vigil.dev/MemoryPressure:NoSchedule"];
    let output = cluster.kubectl_as(&n2, &taint_n2, None);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The audit log shows each refusal as `refusals` reads it: the reading
    // the agent's clean record rests on sees admission denials.
    Polling::new(Duration::from_millis(200), LIMIT).until(
        "six refusals in the audit log",
        || (refusals(cluster, AGENT).len() >= 6).then_some(()),
        || format!("{:#?}", refusals(cluster, AGENT)),
    );
}

#[test]
fn on_its_own_node_an_agent_changes_only_vigils_taints_and_conditions() {
    let cluster = installed();
    register_node(cluster, "w1");
    let files = NodeFiles::default();
    files.write("w1.kubeconfig", &agent_identity(cluster, "w1"));
    let w1 = files.path("w1.kubeconfig");
    let kubectl = |args: &[&str], input: Option<&str>| cluster.kubectl_as(&w1, args, input);
    // Forced: a forgery of the kubelet's fields would first conflict.
    let status_apply = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=vigil",
        "--subresource=status",
        "-f",
        "-",
    ];
    let status = |fields: &str| {
        format!("apiVersion: v1\nkind: Node\nmetadata: {{name: w1}}\nstatus:\n{fields}")
    };
    // Each forgery refused, saying why.
    let forged: [(&str, Vec<&str>, Option<String>, &str); 7] = [
        (
            "a pinned workload's label",
            vec![
                "label",
                "node",
                "w1",
                "node-restriction.kubernetes.io/pci=true",
            ],
            None,
            "may change only its taints and conditions",
        ),
        (
            // As `kubectl cordon` sends it (which exits 0 when refused).
            "cordoned",
            vec![
                "patch",
                "node",
                "w1",
                "-p",
                r#"{"spec":{"unschedulable":true}}"#,
            ],
            None,
            "may change only its taints and conditions",
        ),
        (
            "another owner's taint",
            vec!["taint", "node", "w1", "dedicated=db:NoSchedule"],
            None,
            "may change only vigil.dev/ taints",
        ),
        (
            "a NoExecute taint",
            vec!["taint", "node", "w1", "vigil.dev/MemoryPressure:NoExecute"],
            None,
            "may not add a NoExecute taint",
        ),
        (
            "the kubelet's condition",
            status_apply.to_vec(),
            Some(status(
                "  conditions: [{type: Ready, status: 'False', reason: Forged}]\n",
            )),
            "may change only Vigil conditions",
        ),
        (
            "its capacity",
            status_apply.to_vec(),
            Some(status("  capacity: {memory: 64Gi}\n")),
            "may change only its taints and conditions",
        ),
        (
            "its addresses",
            status_apply.to_vec(),
            Some(status(
                "  addresses: [{type: InternalIP, address: 10.6.6.6}]\n",
            )),
            "may change only its taints and conditions",
        ),
    ];
    let before = cluster.get(None, "node/w1").expect("the node");
    for (what, args, input, says) in &forged {
        let output = kubectl(args, input.as_deref());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "w1's agent may set {what}");
        assert!(stderr.contains(says), "{what}: {stderr}");
    }
    let after = cluster.get(None, "node/w1").expect("the node");
    assert_eq!(after["metadata"]["labels"], before["metadata"]["labels"]);
    assert_eq!(after["spec"], before["spec"]);
    // What the agent writes, it may.
    let accepted: [(Vec<&str>, Option<String>); 2] = [
        (
            vec!["taint", "node", "w1", "vigil.dev/MemoryPressure:NoSchedule"],
            None,
        ),
        (
            status_apply.to_vec(),
            Some(status(
                "  conditions: [{type: VigilMemoryPressure, status: 'True', reason: Test}]\n",
            )),
        ),
    ];
    for (args, input) in &accepted {
        let output = kubectl(args, input.as_deref());
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Status objects: another node's name taken first, or its own naming
    // another node, refused.
    let policy_status = |name: &str, node: &str| {
        format!(
            "apiVersion: vigil.dev/v1alpha1\nkind: VigilPolicyStatus\nmetadata: {{name: {name}, labels: {{vigil.dev/node: w1}}}}\nspec: {{node: {node}, policy: default-sorter}}\n"
        )
    };
    for (yaml, says) in [
        (
            policy_status("w2.default-sorter", "w1"),
            "may create only VigilPolicyStatuses named w1.*, not w2.default-sorter",
        ),
        (
            policy_status("w1.default-sorter", "w2"),
            "may write only vigilpolicystatuses whose spec.node is w1",
        ),
    ] {
        let output = kubectl(&["create", "-f", "-"], Some(&yaml));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{yaml}");
        assert!(stderr.contains(says), "{stderr}");
    }
    let output = kubectl(
        &["create", "-f", "-"],
        Some(&policy_status("w1.default-sorter", "w1")),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
