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
