//! Dynamic config: `VigilConfig` layers applied live, on trial, rejected with
//! their path or rolled back, chosen by node labels, `configFrom`
//! ConfigMaps followed with one watch each, and the install's observing
//! lifted by the enforce layer.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vigil_config_applies_live_graduates_and_a_bad_change_is_rejected_with_its_path() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &[]);
    until_config(&server, "Defaults", "no VigilConfig applies").await;

    // Cluster-wide: dry-run, a short trial.
    let fleet = json!({"dryRun": true, "configTrialSeconds": 2});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, fleet),
    );
    until_config(&server, "Trial", "VigilConfig/fleet@1").await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "a dry-run eviction", |s| !s.evictions().is_empty())
        .await;
    let body = server.evictions()[0].body.clone().expect("a body");
    assert_eq!(
        body["deleteOptions"]["dryRun"],
        json!(["All"]),
        "the layer's dryRun is in force without a restart"
    );
    until_config(&server, "Active", "passed its trial").await;
    // A config that runs is no Event: at fleet scale, one per node per change.
    assert!(events(&server, "ConfigTrial").is_empty());
    assert!(events(&server, "ConfigActive").is_empty());

    // A bad value: rejected with its layer and path; the old config keeps running.
    let bad = json!({"dryRun": true, "evictionBurst": 0});
    server.put("vigilconfigs", "", vigil_config("fleet", Value::Null, bad));
    let message = until_config(&server, "Rejected", "VigilConfig/fleet@2").await;
    assert!(
        message.contains("$.evictionBurst: 0 is less than the minimum of 1"),
        "{message}"
    );
    assert!(message.contains("running VigilConfig/fleet@1"), "{message}");
    assert_eq!(config_condition(&server).unwrap().0, "False");
    let rejected = events(&server, "ConfigRejected");
    assert_eq!(rejected[0]["type"], "Warning");
    let metrics = agent.metrics();
    for line in [
        r#"vigil_config_updates_total{result="rejected"} 1"#,
        r#"vigil_config_updates_total{result="graduated"} 1"#,
        r#"vigil_config_state{reason="Rejected"} 1"#,
        r#"vigil_config_checkpoint_loads_total{status="missing"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    let saved = vigil::config::CheckpointFile::new(&fixture.path("state"))
        .load()
        .expect("a sound checkpoint")
        .expect("saved");
    assert_eq!(saved.rejected.len(), 1);
    assert!(saved.last_known_good.is_some());
    assert_the_cluster_role_allows_every_request(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_observes_first_evicts_and_taints_nothing_until_the_enforce_layer() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &["--observe-first"]);
    until_config(&server, "Defaults", "no VigilConfig applies").await;

    // Under pressure it decides, reports and sets the condition; it evicts
    // and taints nothing.
    fixture.memory_available(50);
    server
        .until(LIMIT, "a dry-run eviction and the condition", |s| {
            !s.evictions().is_empty()
                && node_condition(s, "VigilMemoryPressure").as_deref() == Some("True")
        })
        .await;
    server
        .until(LIMIT, "the node's report says it observes", |s| {
            node_mode(s) == "observe" && node_report(s)["evictions"]["dry-run"].as_u64() > Some(0)
        })
        .await;
    assert!(
        (server.evictions().iter())
            .all(|e| e.body.as_ref().unwrap()["deleteOptions"]["dryRun"] == json!(["All"])),
        "{:?}",
        evicted_names(&server)
    );
    assert!(
        vigil_taints(&server).is_empty(),
        "{:?}",
        taint_keys(&server)
    );
    assert!(agent.metrics().contains("vigil_observing 1"));

    // The enforce step (the object `vigil enforce --percent 100` applies).
    let enforce = serde_json::to_value(vigil::config::ConfigLayer::enforcing(100)).unwrap();
    server.put("vigilconfigs", "", enforce);
    until_config(&server, "Trial", "VigilConfig/vigil-enforce@1").await;
    until_evicted(&server, "big").await;
    server
        .until(LIMIT, "the taint and the report's mode", |s| {
            vigil_taints(s) == ["vigil.dev/MemoryPressure"] && node_mode(s) == "enforce"
        })
        .await;
    until_metric(&agent, "vigil_observing 0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pausing_layer_stops_evictions_and_taints_at_once_and_its_deletion_resumes_them() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    // Any other change of the layers would wait up to an hour for this
    // node's turn: the brake does not.
    let agent = start(&server, &fixture, &["--config-spread=1h"]);
    until_config(&server, "Defaults", "no VigilConfig applies").await;
    fixture.memory_available(50);
    until_evicted(&server, "big").await;
    server
        .until(LIMIT, "vigil's taint", |s| !vigil_taints(s).is_empty())
        .await;

    let pause = serde_json::to_value(vigil::config::ConfigLayer::pausing()).unwrap();
    server.put("vigilconfigs", "", pause);
    until_metric(&agent, "vigil_paused 1").await;
    server
        .until(LIMIT, "the taint gone, the report paused", |s| {
            vigil_taints(s).is_empty() && node_mode(s) == "paused"
        })
        .await;
    // Still under pressure: the next victim is a dry run.
    pod(&server, &fixture, "late", 900);
    let late = |s: &ApiServer| -> Vec<Value> {
        (s.evictions().into_iter())
            .filter(|e| e.uri.contains("/pods/late/"))
            .map(|e| e.body.unwrap_or_default())
            .collect()
    };
    server
        .until(LIMIT, "a dry-run eviction of late", |s| !late(s).is_empty())
        .await;
    for body in late(&server) {
        assert_eq!(body["deleteOptions"]["dryRun"], json!(["All"]), "{body}");
    }

    // Restarted with the API server down, it is paused from its first
    // moment: the pause is in its checkpoint.
    drop(agent);
    server.outage(true);
    let agent = start(&server, &fixture, &["--config-spread=1h"]);
    until_metric(&agent, "vigil_paused 1").await;
    server.outage(false);

    server.delete("vigilconfigs", "", vigil::config::PAUSE_LAYER);
    until_evicted(&server, "late").await;
    server
        .until(LIMIT, "the taint back, the report enforcing", |s| {
            !vigil_taints(s).is_empty() && node_mode(s) == "enforce"
        })
        .await;
    until_metric(&agent, "vigil_paused 0").await;
    // Both took effect without the spread: no layer set was applied.
    let (_, reason, _) = config_condition(&server).unwrap();
    assert_eq!(reason, "Defaults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_makes_policies_fault_is_rolled_back_to_the_last_known_good() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &[]);
    let good = json!({"evictionBurst": 2, "configTrialSeconds": 0});
    server.put("vigilconfigs", "", vigil_config("fleet", Value::Null, good));
    until_config(&server, "Active", "VigilConfig/fleet@1").await;
    // One MiB is less than the strategy's instance needs: every call faults.
    let faulting = json!({"evictionBurst": 2,
        "policies": {"memory-pressure": {"memoryLimitMiB": 1}}});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, faulting),
    );
    until_config(&server, "Trial", "VigilConfig/fleet@2").await;
    let message = until_config(&server, "RolledBack", "faulted").await;
    assert!(message.contains("running VigilConfig/fleet@1"), "{message}");
    assert!(!events(&server, "ConfigRolledBack").is_empty());
    // The limits of the last-known-good are back: the strategy evicts again.
    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction under the restored limits", |s| {
            !s.evictions().is_empty()
        })
        .await;
    assert!(
        agent
            .metrics()
            .contains(r#"vigil_config_updates_total{result="rolled-back"} 1"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_evicts_more_than_its_trial_allows_is_rolled_back() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    pod(&server, &fixture, "small", 100);
    let _agent = start(&server, &fixture, &[]);
    let good = json!({"evictionBurst": 1, "configTrialSeconds": 0});
    server.put("vigilconfigs", "", vigil_config("fleet", Value::Null, good));
    until_config(&server, "Active", "VigilConfig/fleet@1").await;
    // On trial for ten minutes, and allowed one eviction in them.
    let bounded = json!({"evictionBurst": 1, "configTrialMaxEvictions": 1});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, bounded),
    );
    until_config(&server, "Trial", "VigilConfig/fleet@2").await;
    assert!(server.evictions().is_empty());

    // Pressure evicts one pod a cycle: the second is past the bound.
    fixture.memory_available(50);
    let message = until_config(
        &server,
        "RolledBack",
        "2 evictions during its trial, above its configTrialMaxEvictions 1",
    )
    .await;
    assert!(message.contains("running VigilConfig/fleet@1"), "{message}");
    let accepted = (server.evictions().iter())
        .filter(|e| e.status == 201)
        .count();
    assert!(accepted >= 2, "{:?}", evicted_names(&server));
    assert!(!events(&server, "ConfigRolledBack").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_labels_choose_the_layers_and_an_expired_override_stops_applying() {
    let (server, fixture) = test_node().await;
    let _agent = start(&server, &fixture, &[]);
    let pool = json!({"nodeSelector": {"matchLabels": {"pool": "batch"}}});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("everyone", Value::Null, json!({"evictionBurst": 2})),
    );
    server.put(
        "vigilconfigs",
        "",
        vigil_config("batch", pool, json!({"evictionBurst": 4})),
    );
    until_config(&server, "Trial", "VigilConfig/everyone@1 (").await;

    let mut labelled = vigil_testbed::objects::node(NODE);
    labelled["metadata"]["labels"] = json!({"pool": "batch"});
    server.put("nodes", "", labelled);
    until_config(
        &server,
        "Trial",
        "VigilConfig/everyone@1, VigilConfig/batch@1",
    )
    .await;

    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let just_me = json!({"nodeNames": [NODE], "expiresAfter": expires.to_string()});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("override", just_me, json!({"dryRun": true})),
    );
    until_config(
        &server,
        "Trial",
        "VigilConfig/batch@1, VigilConfig/override@1",
    )
    .await;
    // Once past expiresAfter, the override no longer applies (the agent wakes for it).
    until_config(
        &server,
        "Trial",
        "VigilConfig/everyone@1, VigilConfig/batch@1 (",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_interrupted_watch_a_node_relabel_applies_without_waiting_for_a_config_change() {
    let (server, fixture) = test_node().await;
    let pool = json!({"nodeSelector": {"matchLabels": {"pool": "batch"}}});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("batch", pool, json!({"evictionBurst": 4})),
    );
    let _agent = start(&server, &fixture, &[]);
    until_config(&server, "Defaults", "no VigilConfig applies").await;

    // The API server restarts and answers the renewed watch with a 500
    // (a 503 the client would retry unseen): the watch is interrupted.
    server.fail_next("vigil.dev/v1alpha1/vigilconfigs", 500);
    server.drop_watches();
    server
        .until(LIMIT, "the VigilConfig watch interrupted", |s| {
            s.requests()
                .iter()
                .any(|r| r.uri.contains("/vigilconfigs?") && r.status == 500)
        })
        .await;
    // No VigilConfig changes; the node is relabelled.
    let mut labelled = vigil_testbed::objects::node(NODE);
    labelled["metadata"]["labels"] = json!({"pool": "batch"});
    server.put("nodes", "", labelled);
    until_config(&server, "Trial", "VigilConfig/batch@1").await;
}

/// Open watches on the ConfigMap `NAME` in vigil's namespace.
fn config_map_watches(server: &ApiServer, name: &str) -> usize {
    server.open_watches(&format!(
        "/namespaces/{VIGIL_NS}/configmaps?fieldSelector=metadata.name={name}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_config_from_a_config_map_applies_follows_it_and_its_watch_lives_as_long_as_a_reference()
 {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    // Over the --config threshold (500Mi): only the ConfigMap's 800Mi makes it pressure.
    fixture.memory_available(600);
    let _agent = start(&server, &fixture, &[]);
    until_config(&server, "Defaults", "no VigilConfig applies").await;

    let thresholds = |memory: &str| {
        let data = json!({"memory.yaml": format!("hard: {memory}\n"), "pids.yaml": "hard: 1%"});
        config_map("thresholds", data, false)
    };
    server.put("configmaps", VIGIL_NS, thresholds("800Mi"));
    let both = json!({"policies": {
        "memory-pressure": {"configFrom": config_from("thresholds", "memory.yaml")},
        "pid-pressure": {"configFrom": config_from("thresholds", "pids.yaml")},
    }});
    server.put("vigilconfigs", "", vigil_config("fleet", Value::Null, both));
    let first = until_config(
        &server,
        "Trial",
        "ConfigMap/vigil-system/thresholds[memory.yaml] for memory-pressure",
    )
    .await;
    server
        .until(LIMIT, "an eviction under the ConfigMap's threshold", |s| {
            !s.evictions().is_empty()
        })
        .await;
    assert_eq!(
        config_map_watches(&server, "thresholds"),
        1,
        "two references, one watch"
    );

    // A changed value is a new config on trial.
    server.put("configmaps", VIGIL_NS, thresholds("700Mi"));
    server
        .until(LIMIT, "the changed ConfigMap on trial", |s| {
            config_condition(s).is_some_and(|(_, r, m)| r == "Trial" && m != first)
        })
        .await;

    // A missing ConfigMap refuses the config; the previous one keeps running.
    let missing = json!({"policies": {
        "memory-pressure": {"configFrom": config_from("thresholds", "memory.yaml")},
        "pid-pressure": {"configFrom": config_from("later", "pids.json")},
    }});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, missing.clone()),
    );
    let message = until_config(&server, "Rejected", "VigilConfig/fleet@2").await;
    assert!(
        message.contains("ConfigMap/vigil-system/later[pids.json]: the ConfigMap does not exist"),
        "{message}"
    );
    // A ConfigMap outside vigil's namespace is never read: its Role allows
    // no other.
    let mut theirs = thresholds("100Mi");
    theirs["metadata"]["namespace"] = json!("ops");
    server.put("configmaps", "ops", theirs);
    let elsewhere = json!({"policies": {"memory-pressure": {"configFrom":
        [{"namespace": "ops", "name": "thresholds", "key": "memory.yaml"}]}}});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, elsewhere),
    );
    let message = until_config(&server, "Rejected", "VigilConfig/fleet@3").await;
    assert!(
        message.contains(
            "ConfigMap/ops/thresholds[memory.yaml]: ConfigMaps are read only in vigil's namespace, vigil-system"
        ),
        "{message}"
    );
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.uri.contains("/namespaces/ops/")),
        "nothing read in another namespace"
    );
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, missing.clone()),
    );
    until_config(&server, "Rejected", "VigilConfig/fleet@4").await;

    // Once it exists, the config is tried; being immutable, it is read once.
    let later = config_map("later", json!({"pids.json": r#"{"hard": "1%"}"#}), true);
    server.put("configmaps", VIGIL_NS, later);
    until_config(
        &server,
        "Trial",
        "ConfigMap/vigil-system/later[pids.json] for pid-pressure",
    )
    .await;
    server
        .until(LIMIT, "the immutable ConfigMap's watch stopped", |s| {
            config_map_watches(s, "later") == 0
        })
        .await;
    assert_eq!(config_map_watches(&server, "thresholds"), 1);

    // No reference left: no watch left.
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, json!({"evictionBurst": 2})),
    );
    until_config(&server, "Trial", "VigilConfig/fleet@5 (").await;
    server
        .until(LIMIT, "every ConfigMap watch stopped", |s| {
            s.open_watches("/configmaps") == 0
        })
        .await;
    assert_the_cluster_role_allows_every_request(&server);
}

/// vigil's own taints on the node, by key.
fn vigil_taints(server: &ApiServer) -> Vec<String> {
    (taint_keys(server).into_iter())
        .filter(|k| k.starts_with("vigil.dev/"))
        .collect()
}

/// The node's mode, as its `VigilNodeStatus` says it (empty before one).
fn node_mode(server: &ApiServer) -> String {
    let mode = &node_report(server)["mode"];
    mode.as_str().unwrap_or_default().to_owned()
}
