//! The fleet view: the node's and its policies' status objects; the
//! ClusterRole is exactly what the agent uses, and the admission policy
//! admits all of it.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_objects_show_the_node_and_its_policies_and_rbac_and_admission_allow_exactly_what_the_agent_does()
 {
    let (server, fixture) = test_node().await;
    // The only pod is protected by its budget: under hard pressure it is
    // refused, then deleted once the override time (30 s) has passed.
    pod(&server, &fixture, "big", 900);
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 0));
    server.put(
        "configmaps",
        VIGIL_NS,
        config_map(
            "limits",
            json!({"memory.json": "{\"hard\": \"500Mi\"}"}),
            false,
        ),
    );
    let layer = json!({"policies": {"memory-pressure": {"configFrom": config_from("limits", "memory.json")}}});
    server.put("vigilconfigs", "", vigil_config("pool", Value::Null, layer));
    let c_sorter = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/c-sorter/c-sorter.wasm");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    // The shortest override delay allowed: the test waits it out.
    let config = format!("{CONFIG}pdbOverrideAfterSeconds: 30\n");
    let agent = AgentProcess::start(
        binary,
        NODE,
        &fixture,
        &server,
        &config,
        &["--status-interval", "100ms"],
    );
    watching(&server).await;

    // A status per built-in policy, and one for the node.
    server
        .until(LIMIT, "the built-in policies' statuses", |s| {
            policy_statuses(s).len() == 6 && node_report(s)["config"]["state"] == "Trial"
        })
        .await;
    let statuses = policy_statuses(&server);
    let sorter = &statuses["default-sorter"];
    assert_eq!(sorter["status"]["state"], "Active");
    assert_eq!(sorter["status"]["source"], "builtin");
    assert_eq!(sorter["status"]["world"], "candidate-sorter");
    assert_eq!(
        sorter["metadata"]["ownerReferences"][0]["uid"],
        "uid-node-1"
    );
    assert_eq!(
        node_report(&server)["config"]["assigned"],
        node_report(&server)["config"]["active"]
    );

    // A policy file comes on trial, then goes.
    let added = fixture.path("policies/c-sorter.wasm");
    std::fs::copy(&c_sorter, &added).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the example policies with examples/policies/build.sh",
            c_sorter.display()
        )
    });
    server
        .until(COMPILING, "the new policy's status", |s| {
            policy_statuses(s)
                .get("c-sorter")
                .is_some_and(|o| o["status"]["state"] == "Trial" && o["status"]["source"] == "file")
        })
        .await;
    // A half-written new version is refused: the status says so, the
    // version on trial still serves.
    let serving = policy_statuses(&server)["c-sorter"]["status"]["digest"].clone();
    std::fs::write(&added, b"\0asm\x0d\0\x01\0 cut short").unwrap();
    server
        .until(LIMIT, "the refused version on the policy's status", |s| {
            policy_statuses(s)
                .get("c-sorter")
                .is_some_and(|o| o["status"]["state"] == "Failed")
        })
        .await;
    let failed = &policy_statuses(&server)["c-sorter"]["status"];
    assert_eq!(failed["digest"], serving);
    assert!(failed["lastFault"]["message"].is_string(), "{failed}");
    // The file put back, the refusal is over.
    std::fs::copy(&c_sorter, &added).unwrap();
    server
        .until(COMPILING, "the policy back on trial", |s| {
            policy_statuses(s)
                .get("c-sorter")
                .is_some_and(|o| o["status"]["state"] == "Trial")
        })
        .await;

    // Pressure: the eviction is refused, then the pod deleted; the node's
    // status shows the condition and both calls.
    fixture.memory_available(50);
    server
        .until(LIMIT * 2, "the pod deleted despite its budget", |s| {
            s.get("pods", NS, "big").is_none()
        })
        .await;
    server
        .until(
            LIMIT,
            "the pressure and the evictions on the node's status",
            |s| {
                let report = node_report(s);
                report["conditions"][0]["type"] == "VigilMemoryPressure"
                    && report["evictions"]["refused"].as_u64() >= Some(1)
                    && report["evictions"]["accepted"] == 1
            },
        )
        .await;
    let report = node_report(&server);
    let last = report["lastEvictions"].as_array().unwrap();
    assert!(last.len() <= 10);
    assert_eq!(last[0]["pod"], "shop/big");
    assert_eq!(last[0]["result"], "refused");
    assert_eq!(last[0]["strategy"], "memory-pressure");
    assert_eq!(report["lastEvictionTime"], last.last().unwrap()["time"]);
    fixture.memory_available(4096);

    std::fs::remove_file(&added).unwrap();
    server
        .until(LIMIT, "the removed policy's status deleted", |s| {
            !policy_statuses(s).contains_key("c-sorter")
        })
        .await;

    // Every request was allowed, and every permission was needed. Patching
    // an Event is how kube's recorder counts a repeat, and a repeat of one
    // reason on one object waits a minute (cluster::events): longer than
    // this test, so that one permission goes unused here; reading a pull
    // Secret is the pulled-policies test's; listing policy statuses is for
    // the objects of an earlier release (vigil-tests' fleet tests); the
    // kubelet's statistics are asked of the kubelet, which authorizes them
    // as `get nodes/stats` (vigil-tests' scopes:: reads them); katalyst's
    // CustomNodeResource is watched only while reclaimed-resources reads
    // it (agent::eviction's reclaimed test). The override this test waits
    // out deletes with the right components/pdb-override adds.
    let (mut used, mut granted) = (used(&server), granted());
    granted.extend(granted_by_component("pdb-override"));
    for verb in ["list", "watch"] {
        let cnr = "customnoderesources".to_owned();
        used.insert(("node.katalyst.kubewharf.io".into(), cnr, verb.into()));
    }
    used.insert(("".into(), "nodes/stats".into(), "get".into()));
    used.insert(("events.k8s.io".into(), "events".into(), "patch".into()));
    used.insert(("".into(), "secrets".into(), "get".into()));
    used.insert((
        "vigil.dev".into(),
        "vigilpolicystatuses".into(),
        "list".into(),
    ));
    let unused: Vec<_> = granted.difference(&used).collect();
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(
        unused.is_empty() && missing.is_empty(),
        "deploy/rbac.yaml with pdb-override grants {unused:?} that the agent never used, and lacks {missing:?}\n{}",
        agent.logs()
    );
    // And the admission policy admits each of its writes, and no forgery.
    admission::assert_it_admits_the_agent_and_denies_forgeries(&server);
}
