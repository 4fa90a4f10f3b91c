//! What the agent costs the API server, the parts that multiply by the
//! fleet: lists answered from the watch cache, a liveness that does not
//! restart the agent (and list again) while the API server is slow,
//! evictions in a flow of their own, and PDB watches only under pressure.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_is_served_from_the_watch_cache_at_start_and_after_the_api_server_restarts() {
    let (server, fixture) = test_node().await;
    let _agent = start(&server, &fixture, &[]);
    watching(&server).await;
    let pod_lists = |s: &ApiServer| {
        s.requests()
            .iter()
            .filter(|r| r.is_list() && r.uri.starts_with("/api/v1/pods?"))
            .count()
    };
    assert_eq!(pod_lists(&server), 1);
    // An API server restart: a pod bound meanwhile, history compacted,
    // every watch dropped; each resumes with 410 Gone and lists again.
    server.pause_watches(true);
    pod(&server, &fixture, "bound-meanwhile", 1);
    server.compact();
    server.drop_watches();
    server.pause_watches(false);
    server
        .until(LIMIT, "the pods listed again", |s| pod_lists(s) == 2)
        .await;
    assert!(
        server.gone_sent() > 0,
        "the resumed watch was told 410 Gone"
    );
    let lists: Vec<Request> = server
        .requests()
        .into_iter()
        .filter(Request::is_list)
        .collect();
    let consistent: Vec<&str> = lists
        .iter()
        .filter(|r| !r.from_cache())
        .map(|r| r.uri.as_str())
        .collect();
    assert!(consistent.is_empty(), "consistent reads: {consistent:?}");
    for resource in ["pods", "nodes", "vigilconfigs", "vigilpolicies"] {
        assert!(
            lists
                .iter()
                .any(|r| r.uri.contains(&format!("/{resource}?"))),
            "{resource} listed: {lists:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_alive_while_its_first_pod_list_hangs_and_ready_only_once_listed() {
    let (server, fixture) = test_node().await;
    server.hang("/api/v1/pods?");
    let agent = start(&server, &fixture, &[]);
    // The node's config condition is written by a task started after the
    // endpoints listen, and needs no pods: once it is, they answer.
    server
        .until(
            LIMIT,
            "the config condition written, the pod list pending",
            |s| {
                let written = s.requests().iter().any(|r| {
                    r.method == "PATCH"
                        && r.uri.starts_with(&format!("/api/v1/nodes/{NODE}/status"))
                });
                written && s.arrived().iter().any(|a| a.starts_with("/api/v1/pods?"))
            },
        )
        .await;
    let healthz = agent.get("/healthz");
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    let readyz = agent.get("/readyz");
    assert!(
        readyz.starts_with("HTTP/1.1 503") && readyz.contains("waiting for the pod list"),
        "{readyz}"
    );
}

/// The FlowSchema of `deploy/flowcontrol.yaml` that API Priority and
/// Fairness gives a request of the agent's (group, resource, verb): the
/// first whose rule matches, by matching precedence.
fn flow_schema(schemas: &[Value], (group, resource, verb): &(String, String, String)) -> String {
    let has = |list: &Value, item: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .any(|v| v == "*" || v == item)
    };
    schemas
        .iter()
        .find(|schema| {
            schema["spec"]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|rule| {
                    let subject = &rule["subjects"][0]["serviceAccount"];
                    subject["name"] == "vigil"
                        && rule["resourceRules"].as_array().unwrap().iter().any(|r| {
                            has(&r["verbs"], verb)
                                && has(&r["apiGroups"], group)
                                && has(&r["resources"], resource)
                        })
                })
        })
        .map_or_else(
            || "none".to_owned(),
            |s| s["metadata"]["name"].as_str().unwrap().to_owned(),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_keeps_evictions_apart_from_the_agents_bookkeeping() {
    use serde::Deserialize;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/flowcontrol.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut schemas: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| doc["kind"] == "FlowSchema")
        .collect();
    schemas.sort_by_key(|s| s["spec"]["matchingPrecedence"].as_u64().unwrap());

    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    let _agent = start(&server, &fixture, &[]);
    watching(&server).await;
    pressure_until_one_is_evicted(&server, &fixture).await;
    // A request acting as the node is classified as the node's, by the API
    // server's own system-nodes schema (its priority level, the kubelets');
    // the agent's own requests by deploy/'s.
    let by_schema: BTreeSet<(String, String)> = (server.requests().iter())
        .map(|request| {
            let access = request.access().expect("a resource request");
            let schema = match &request.impersonated {
                Some(_) => "system-nodes".to_owned(),
                None => flow_schema(
                    &schemas,
                    &(access.group, access.resource.clone(), access.verb),
                ),
            };
            (schema, access.resource)
        })
        .collect();
    let as_node: Vec<&String> = by_schema
        .iter()
        .filter(|(schema, _)| schema == "system-nodes")
        .map(|(_, resource)| resource)
        .collect();
    assert_eq!(as_node, ["pods", "pods/eviction"], "{by_schema:?}");
    let elsewhere: Vec<_> = by_schema
        .iter()
        .filter(|(schema, _)| schema != "system-nodes" && schema != "vigil-bookkeeping")
        .collect();
    assert!(elsewhere.is_empty(), "{elsewhere:?}");
    // Evicting as its service account (components/pods-cluster-wide), the
    // agent's evictions have their own level.
    let evict = (
        String::new(),
        "pods/eviction".to_owned(),
        "create".to_owned(),
    );
    assert_eq!(flow_schema(&schemas, &evict), "vigil-evictions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_watched_only_while_a_threshold_holds() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 0));
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    // At rest the agent sends nothing the server could wake this test on:
    // its own endpoint is asked, a bounded number of times.
    let at_rest = tokio::time::timeout(LIMIT, async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while agent.metric("vigil_cycle_seconds_count").unwrap_or(0.0) < 3.0 {
            tick.tick().await;
        }
    });
    at_rest.await.expect("three cycles within the limit");
    let budget_requests = |s: &ApiServer| {
        s.requests()
            .iter()
            .filter(|r| r.uri.contains("poddisruptionbudgets"))
            .count()
    };
    assert_eq!(budget_requests(&server), 0, "no PDB request at rest");

    fixture.memory_available(50);
    watching_budgets(&server).await;
    server
        .until(LIMIT, "the protected pod refused", |s| {
            s.evictions().iter().any(|r| r.status == 429)
        })
        .await;
}
