//! Uninstalling: `vigil cleanup cluster` removes every mark real agents left
//! on several nodes (taints, conditions, status objects) and nothing else,
//! refusing while an agent still runs; `vigil cleanup node` empties each
//! node's state directory as the agent left it.

use super::*;
use std::path::Path;

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// A node no agent ever ran on: nothing to clean, nothing written.
const UNTOUCHED: &str = "node-d";

/// Runs `vigil ARGS` off the runtime; whether it succeeded, and its output.
async fn vigil(args: Vec<String>) -> (bool, String) {
    tokio::task::spawn_blocking(move || {
        let ran = vigil_testbed::cli::output(crate::vigil().args(&args));
        (ran.ok, ran.text())
    })
    .await
    .expect("joins")
}

/// vigil's taint keys and condition types on node `name`.
fn marks(server: &ApiServer, name: &str) -> Vec<String> {
    let node = server.get("nodes", "", name).expect("the node");
    let keys = |list: &Value, field: &str| -> Vec<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item[field].as_str().map(str::to_owned))
            .collect()
    };
    keys(&node["spec"]["taints"], "key")
        .into_iter()
        .filter(|k| k.starts_with("vigil.dev/"))
        .chain(
            keys(&node["status"]["conditions"], "type")
                .into_iter()
                .filter(|t| t.starts_with("Vigil")),
        )
        .collect()
}

/// An agent pod as the DaemonSet makes it.
fn agent_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "vigil-system", "uid": format!("uid-{name}"),
                     "labels": {"app.kubernetes.io/name": "vigil"}},
        "spec": {"nodeName": UNTOUCHED, "containers": [{"name": "vigil"}]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_removes_every_mark_of_vigil_from_the_cluster_and_the_nodes() {
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node(UNTOUCHED));
    let binary = Path::new(env!("CARGO_BIN_EXE_vigil"));
    let mut agents = Vec::new();
    for (i, node) in NODES.into_iter().enumerate() {
        server.put("nodes", "", objects::node(node));
        let files = NodeFiles::default();
        let pod = objects::best_effort_pod(node, NS, &format!("app-{i}"), 3);
        files.best_effort_pod(pod["metadata"]["uid"].as_str().unwrap(), 100);
        server.put("pods", NS, pod);
        let agent = AgentProcess::start(
            binary,
            node,
            &files,
            &server,
            CONFIG,
            &["--status-interval", "100ms"],
        );
        agents.push((node, files, agent));
    }
    // Pressure on the first node, and none evicted: its pod cannot be.
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "app-0", 0));
    agents[0].1.memory_available(50);
    server
        .until(LIMIT, "every agent's marks", |s| {
            NODES
                .iter()
                .all(|n| marks(s, n).contains(&"VigilConfigOK".to_owned()))
                && marks(s, "node-a").contains(&"vigil.dev/MemoryPressure".to_owned())
                && s.list("vigilnodestatuses").len() == NODES.len()
                && s.list("vigilpolicystatuses").len() >= NODES.len()
        })
        .await;
    let kubeconfig = agents[0].1.path("kubeconfig").display().to_string();
    let cluster = vec![
        "cleanup".to_owned(),
        "cluster".to_owned(),
        "--kubeconfig".to_owned(),
        kubeconfig,
    ];

    // While the DaemonSet's pods are there, nothing is touched.
    server.put("pods", "vigil-system", agent_pod("vigil-x7k2p"));
    let before = server.request_count();
    let (ok, text) = vigil(cluster.clone()).await;
    assert!(!ok, "{text}");
    assert!(
        text.contains("1 agent pod(s) still run in namespace vigil-system (vigil-x7k2p); delete the vigil DaemonSet"),
        "{text}"
    );
    // (The agents go on writing; the cleanup wrote nothing.)
    assert_eq!(server.count_since(before, |r| r.method == "DELETE"), 0);
    assert!(marks(&server, "node-a").contains(&"vigil.dev/MemoryPressure".to_owned()));
    assert_eq!(server.list("vigilnodestatuses").len(), NODES.len());

    for (_, _, agent) in agents.iter_mut() {
        let status = tokio::task::block_in_place(|| agent.terminate());
        assert!(status.success(), "{}", agent.logs());
    }
    server.delete("pods", "vigil-system", "vigil-x7k2p");
    let before = server.request_count();
    let (ok, text) = vigil(cluster.clone()).await;
    assert!(ok, "{text}");
    assert!(
        text.contains("3 of 4 node(s) cleaned; 3 VigilNodeStatus and"),
        "{text}"
    );
    for node in NODES {
        assert!(
            text.contains(&format!("{node}: vigil's taints and conditions removed")),
            "{text}"
        );
        assert_eq!(marks(&server, node), Vec::<String>::new(), "{node}");
        let kept = server.get("nodes", "", node).unwrap();
        assert_eq!(kept["spec"]["taints"][0]["key"], "team/dedicated", "{node}");
        assert_eq!(kept["status"]["conditions"][0]["type"], "Ready", "{node}");
    }
    assert!(server.list("vigilnodestatuses").is_empty());
    assert!(server.list("vigilpolicystatuses").is_empty());
    assert!(
        server
            .requests_since(before)
            .iter()
            .all(|r| r.method == "GET" || !r.uri.contains(UNTOUCHED)),
        "a node without marks is not written to"
    );
    // What it did, deploy/cleanup/rbac.yaml allows (the agents were gone).
    let missing: Vec<_> = used_since(&server, before)
        .difference(&granted_by("cleanup/rbac.yaml"))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "deploy/cleanup/rbac.yaml does not allow {missing:?}"
    );
    // Again: nothing left to do.
    let (ok, text) = vigil(cluster).await;
    assert!(ok, "{text}");
    assert!(
        text.contains("0 of 4 node(s) cleaned; 0 VigilNodeStatus and 0 VigilPolicyStatus"),
        "{text}"
    );

    // Each node's state directory, as its agent left it, is emptied.
    for (node, files, _) in &agents {
        let state = files.path("state");
        let made = std::fs::read_dir(&state).unwrap().count();
        assert!(made >= 3, "{node}: the agent made its state");
        let (ok, text) = vigil(vec![
            "cleanup".into(),
            "node".into(),
            "--state-dir".into(),
            state.display().to_string(),
        ])
        .await;
        assert!(ok, "{text}");
        assert!(
            !text.contains("left"),
            "{node}: every entry is the agent's: {text}"
        );
        assert_eq!(
            std::fs::read_dir(&state).unwrap().count(),
            0,
            "{node}: {text}"
        );
    }
}
