//! What the agent writes on its Node heals itself: taints stay until the first
//! decision, a crash under pressure leaves nothing behind after a calm restart,
//! and a holding condition's heartbeat moves.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_already_on_the_node_stay_until_the_first_cycle_has_decided() {
    let (server, fixture) = test_node().await;
    let mut node = server.get("nodes", "", NODE).unwrap();
    node["spec"]["taints"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "vigil.dev/MemoryPressure", "effect": "NoSchedule"}));
    server.put("nodes", "", node);
    // The pods never list: the loop cannot decide.
    server.hang("/api/v1/pods?");
    let agent = start(&server, &fixture, &[]);
    server
        .until(
            LIMIT,
            "the agent runs (its config condition is written)",
            |s| {
                node_condition(s, "VigilConfigOK").is_some()
                    && s.arrived()
                        .iter()
                        .any(|uri| uri.starts_with("/api/v1/pods?"))
            },
        )
        .await;
    assert!(
        taint_keys(&server).contains(&"vigil.dev/MemoryPressure".to_owned()),
        "{}",
        agent.logs()
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !(r.method == "PATCH"
                && r.uri.split('?').next() == Some("/api/v1/nodes/node-1"))),
        "no taint written before a decision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_under_pressure_and_a_calm_restart_leave_no_condition_or_taint_behind() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 0));
    let heartbeat = ["--condition-heartbeat", "1s"];
    let agent = start(&server, &fixture, &heartbeat);
    watching(&server).await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "the condition and the taint", |s| {
            node_condition(s, "VigilMemoryPressure").as_deref() == Some("True")
                && taint_keys(s).contains(&"vigil.dev/MemoryPressure".to_owned())
        })
        .await;
    // A holding condition's heartbeat moves while nothing else changes.
    let heartbeat_of = |s: &ApiServer| {
        let node = s.get("nodes", "", NODE).unwrap_or(Value::Null);
        node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "VigilMemoryPressure")
            .map(|c| c["lastHeartbeatTime"].clone())
    };
    let first = heartbeat_of(&server);
    server
        .until(LIMIT, "a refreshed heartbeat", |s| heartbeat_of(s) != first)
        .await;
    // The agent dies under pressure; the node is calm when it comes back.
    drop(agent);
    fixture.memory_available(4096);
    let agent = start(&server, &fixture, &[]);
    server
        .until(LIMIT, "vigil's condition and taint removed", |s| {
            node_condition(s, "VigilMemoryPressure").is_none()
                && !taint_keys(s).contains(&"vigil.dev/MemoryPressure".to_owned())
        })
        .await;
    assert_eq!(taint_keys(&server), ["team/dedicated"], "{}", agent.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_behind_the_kubelets_is_reported_on_the_node_its_status_and_in_an_event() {
    let (server, fixture) = test_node().await;
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    server
        .until(LIMIT, "ahead of the kubelet's defaults", |s| {
            node_condition(s, "VigilAheadOfKubelet").as_deref() == Some("True")
        })
        .await;
    // This node's kubelet evicts below 1Gi; vigil's memory threshold is 500Mi.
    let kubelet = json!({"kubelet": {"evictionHard": {"memory.available": "1Gi"}}});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("kubelet", Value::Null, kubelet),
    );
    server
        .until(LIMIT, "the condition, the Event and the status", |s| {
            let status = s.get("vigilnodestatuses", "", NODE).unwrap_or(Value::Null);
            node_condition(s, "VigilAheadOfKubelet").as_deref() == Some("False")
                && !events(s, "BehindKubelet").is_empty()
                && status["status"]["besideKubelet"]
                    .as_array()
                    .is_some_and(|b| !b.is_empty())
        })
        .await;
    let node = server.get("nodes", "", NODE).unwrap();
    let condition = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "VigilAheadOfKubelet")
        .unwrap()
        .clone();
    assert_eq!(condition["reason"], "BehindKubelet");
    assert_eq!(
        condition["message"],
        "memory-pressure: memory.available < 500.0 MiB is not ahead of the kubelet's 1.0 GiB: the kubelet evicts first",
        "{}",
        agent.logs()
    );
    assert!(agent.metrics().contains(
        r#"vigil_thresholds_misplaced{strategy="memory-pressure",signal="memory.available",place="BehindKubelet"} 1"#
    ));
    assert_eq!(
        events(&server, "BehindKubelet").len(),
        1,
        "once, not per cycle"
    );
}
