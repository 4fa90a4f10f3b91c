//! The real `vigil agent` binary against the project's test API server
//! (`vigil-testbed`, HTTP on loopback), with the node's `/proc` and cgroup
//! files laid out as fixtures in a temporary directory. Memory pressure is
//! made by writing the fixture `meminfo`; the API server plays the kubelet.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use vigil_testbed::{AgentProcess, ApiServer, NodeFiles, objects};

const NODE: &str = "node-1";
const NS: &str = "shop";
/// A bound for a broken test, never a wait: everything is awaited on changes.
const LIMIT: Duration = Duration::from_secs(60);

/// The agent's config: a short period and transition so tests are quick.
/// The node's disk is the test machine's own (its fill level is not the
/// test's), so the disk strategy is off.
const CONFIG: &str = "evictionPeriodSeconds: 1\nconditionTransitionSeconds: 2\npolicies:\n  memory-pressure:\n    config: {hard: 500Mi}\n  disk-pressure: {enabled: false}\n";

/// What `deploy/rbac.yaml`'s ClusterRole grants: (API group, resource, verb).
fn granted() -> BTreeSet<(String, String, String)> {
    use serde::Deserialize;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let role = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let names = |rule: &Value, key: &str| -> Vec<String> {
        serde_json::from_value(rule[key].clone()).unwrap()
    };
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in names(rule, "apiGroups") {
            for resource in names(rule, "resources") {
                for verb in names(rule, "verbs") {
                    granted.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    granted
}

/// What the requests the server received needed: (API group, resource, verb).
fn used(server: &ApiServer) -> BTreeSet<(String, String, String)> {
    let requests = server.requests();
    assert!(!requests.is_empty());
    requests
        .iter()
        .map(|request| {
            let access = request.access().unwrap_or_else(|| panic!("{request:?}"));
            (access.group, access.resource, access.verb)
        })
        .collect()
}

/// Asserts that the ClusterRole in `deploy/rbac.yaml` allows every request
/// the server received: what the agent did here, it may do on a cluster.
fn assert_the_cluster_role_allows_every_request(server: &ApiServer) {
    let missing: Vec<_> = used(server).difference(&granted()).cloned().collect();
    assert!(
        missing.is_empty(),
        "deploy/rbac.yaml does not allow {missing:?}"
    );
}

/// A best-effort pod on this node whose cgroup uses `usage_mib`; its UID.
fn pod(server: &ApiServer, fixture: &NodeFiles, name: &str, usage_mib: u64) -> String {
    let object = objects::best_effort_pod(NODE, NS, name, 3);
    let uid = object["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_owned();
    fixture.best_effort_pod(&uid, usage_mib);
    server.put("pods", NS, object);
    uid
}

fn node(server: &ApiServer) {
    server.put("nodes", "", objects::node(NODE));
}

/// A test API server holding this node, and the node's files.
async fn test_node() -> (ApiServer, NodeFiles) {
    let server = ApiServer::start().await;
    node(&server);
    (server, NodeFiles::default())
}

/// Starts the agent on the fixture's node.
fn start(server: &ApiServer, fixture: &NodeFiles, extra: &[&str]) -> AgentProcess {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    AgentProcess::start(binary, NODE, fixture, server, CONFIG, extra)
}

/// Waits until the agent watches pods (its first list is done).
async fn watching(server: &ApiServer) {
    server
        .until(LIMIT, "the agent watches this node's pods", |s| {
            s.requests()
                .iter()
                .any(|r| r.uri.starts_with("/api/v1/pods?") && r.uri.contains("watch=true"))
        })
        .await;
}

fn evicted_names(server: &ApiServer) -> Vec<(String, u16)> {
    server
        .evictions()
        .iter()
        .map(|r| {
            let name = r.uri.rsplit('/').nth(1).unwrap_or_default().to_owned();
            (name, r.status)
        })
        .collect()
}

fn node_condition(server: &ApiServer, kind: &str) -> Option<String> {
    let node = server.get("nodes", "", NODE)?;
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

fn taint_keys(server: &ApiServer) -> Vec<String> {
    let node = server.get("nodes", "", NODE).unwrap_or(Value::Null);
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["key"].as_str().map(str::to_owned))
        .collect()
}

fn events(server: &ApiServer, reason: &str) -> Vec<Value> {
    server
        .list("events")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pressure_evicts_the_top_pod_through_the_api_and_shows_it_on_the_node() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    let big = pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;

    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    let eviction = &server.evictions()[0];
    assert!(
        eviction.uri.ends_with("/namespaces/shop/pods/big/eviction"),
        "{}",
        agent.logs()
    );
    assert_eq!(eviction.status, 201);
    let body = eviction.body.as_ref().expect("a JSON body");
    assert_eq!(body["kind"], "Eviction");
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], big.as_str());
    assert!(body["deleteOptions"].get("dryRun").is_none());
    // The pressure is relieved once the victim is terminating.
    fixture.memory_available(4096);

    server
        .until(LIMIT, "the condition and the taint", |s| {
            node_condition(s, "VigilMemoryPressure").as_deref() == Some("True")
                && taint_keys(s).contains(&"vigil.dev/MemoryPressure".to_owned())
        })
        .await;
    assert!(taint_keys(&server).contains(&"team/dedicated".to_owned()));
    server
        .until(LIMIT, "the kubelet removed the pod", |s| {
            s.get("pods", NS, "big").is_none()
        })
        .await;
    server
        .until(
            LIMIT,
            "the condition clears after the transition period",
            |s| {
                node_condition(s, "VigilMemoryPressure").as_deref() == Some("False")
                    && !taint_keys(s).iter().any(|k| k.starts_with("vigil.dev/"))
            },
        )
        .await;
    assert_eq!(
        taint_keys(&server),
        ["team/dedicated"],
        "other taints untouched"
    );
    assert_eq!(node_condition(&server, "Ready").as_deref(), Some("True"));
    server
        .until(LIMIT, "events on the pod and the node", |s| {
            !events(s, "Evicting").is_empty()
                && !events(s, "EvictionCompleted").is_empty()
                && !events(s, "VigilMemoryPressureStarted").is_empty()
                && !events(s, "VigilMemoryPressureEnded").is_empty()
        })
        .await;
    let evicting = &events(&server, "Evicting")[0];
    assert_eq!(evicting["regarding"]["name"], "big");
    assert_eq!(evicting["reportingController"], "vigil");
    assert_eq!(
        evicted_names(&server),
        [("big".to_owned(), 201)],
        "one eviction only"
    );

    let metrics = agent.metrics();
    assert!(
        metrics.contains(r#"vigil_evictions_total{strategy="memory-pressure",urgency="hard",result="accepted"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("vigil_api_requests_total{verb=\"POST\",code=\"201\"}"));
    assert!(metrics.contains("vigil_build_info"));
    assert!(agent.get("/healthz").starts_with("HTTP/1.1 200"));
    assert!(agent.get("/readyz").starts_with("HTTP/1.1 200"));
    assert_the_cluster_role_allows_every_request(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_policy_name_is_a_warning_and_a_refused_candidate_is_counted() {
    let (server, fixture) = test_node().await;
    // The biggest pod is system-critical: the sorter refuses it.
    let mut critical = objects::best_effort_pod(NODE, NS, "critical", 3);
    critical["spec"]["priority"] = json!(2_000_001_000);
    fixture.best_effort_pod(critical["metadata"]["uid"].as_str().unwrap(), 900);
    server.put("pods", NS, critical);
    pod(&server, &fixture, "other", 300);
    let config = format!("{CONFIG}  memory-presure: {{enabled: false}}\n");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(binary, NODE, &fixture, &server, &config, &[]);
    until_metric(&server, &agent, "vigil_config_unknown_policies 1").await;
    assert!(
        agent.logs().contains(
            r#"config field policies.memory-presure names policy "memory-presure", which is not loaded; did you mean "memory-pressure"?"#
        ),
        "{}",
        agent.logs()
    );
    watching(&server).await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    assert!(server.evictions()[0].uri.ends_with("/pods/other/eviction"));
    until_metric(
        &server,
        &agent,
        r#"vigil_sorter_refusals_total{name="default-sorter"} "#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_protected_top_victim_passes_the_turn_to_the_next_pod_at_once() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 0));
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    server
        .until(LIMIT, "the agent watches the namespace's PDBs", |s| {
            s.requests().iter().any(|r| {
                r.uri
                    .starts_with("/apis/policy/v1/namespaces/shop/poddisruptionbudgets")
            })
        })
        .await;

    fixture.memory_available(50);
    server
        .until(LIMIT, "an accepted eviction", |s| {
            s.evictions().iter().any(|r| r.status == 201)
        })
        .await;
    fixture.memory_available(4096);
    let evicted = evicted_names(&server);
    assert_eq!(
        evicted[..2],
        [("big".to_owned(), 429), ("medium".to_owned(), 201)],
        "{}",
        agent.logs()
    );
    server
        .until(LIMIT, "the refusal is an event", |s| {
            !events(s, "EvictionRefused").is_empty()
        })
        .await;
    assert!(
        server.get("pods", NS, "big").is_some(),
        "the protected pod stays"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.uri.starts_with("/apis/policy/v1/poddisruptionbudgets")),
        "no cluster-wide PDB watch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_dropped_watch_and_410_gone_the_agent_sees_new_pods_and_evicts_once() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    let lists_before = pod_lists(&server);

    // A pod arrives while the stream holds changes back; the history is
    // compacted and the stream dropped: resuming gets 410 Gone and must list again.
    server.pause_watches(true);
    pod(&server, &fixture, "huge", 2048);
    server.compact();
    server.drop_watches();
    server.pause_watches(false);
    server
        .until(LIMIT, "the pods are listed again", |s| {
            pod_lists(s) > lists_before
        })
        .await;
    assert!(
        server.gone_sent() > 0,
        "the resumed watch was told 410 Gone"
    );
    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    fixture.memory_available(4096);
    server
        .until(LIMIT, "the pod is gone", |s| {
            s.get("pods", NS, "huge").is_none()
        })
        .await;
    assert_eq!(
        evicted_names(&server),
        [("huge".to_owned(), 201)],
        "{}",
        agent.logs()
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains("vigil_watch_restarts_total{name=\"pods\"}"),
        "{metrics}"
    );
}

/// Plain lists of this node's pods (not watches).
fn pod_lists(server: &ApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.uri.starts_with("/api/v1/pods?") && !r.uri.contains("watch=true"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_under_pressure_is_survived_and_evictions_resume() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    let mut agent = start(&server, &fixture, &[]);
    watching(&server).await;

    server.outage(true);
    fixture.memory_available(50);
    server
        .until(LIMIT, "eviction attempts fail during the outage", |s| {
            s.evictions().iter().filter(|r| r.status == 503).count() >= 2
        })
        .await;
    assert!(agent.alive(), "{}", agent.logs());
    server.outage(false);
    server
        .until(LIMIT, "the eviction goes through", |s| {
            s.evictions().iter().any(|r| r.status == 201)
        })
        .await;
    fixture.memory_available(4096);
    let accepted: Vec<_> = evicted_names(&server)
        .into_iter()
        .filter(|(_, status)| *status == 201)
        .collect();
    assert_eq!(accepted, [("big".to_owned(), 201)], "{}", agent.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_sends_a_dry_run_request_and_an_event_and_deletes_nothing() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &["--dry-run"]);
    watching(&server).await;

    fixture.memory_available(50);
    server
        .until(LIMIT, "a dry-run event", |s| {
            !events(s, "EvictionDryRun").is_empty()
        })
        .await;
    let eviction = &server.evictions()[0];
    let options = &eviction.body.as_ref().expect("a body")["deleteOptions"];
    assert_eq!(options["dryRun"], json!(["All"]), "{}", agent.logs());
    assert!(
        eviction.uri.ends_with("/eviction?dryRun=All"),
        "{}",
        eviction.uri
    );
    let pod = server.get("pods", NS, "big").expect("the pod stays");
    assert!(pod["metadata"]["deletionTimestamp"].is_null());
    // The condition is shown; no taint and no DELETE are sent.
    server
        .until(LIMIT, "the condition", |s| {
            node_condition(s, "VigilMemoryPressure").as_deref() == Some("True")
        })
        .await;
    assert_eq!(
        taint_keys(&server),
        ["team/dedicated"],
        "no taint of vigil's"
    );
    assert!(server.requests().iter().all(|r| r.method != "DELETE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_api_server_delays_the_eviction_and_moves_on_to_nobody() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    let config = format!("{CONFIG}pdbOverrideAfterSeconds: 30\n");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(binary, NODE, &fixture, &server, &config, &[]);
    watching(&server).await;
    server.throttle_next("/pods/big/eviction", 3, 1);
    fixture.memory_available(50);
    server
        .until(LIMIT, "an accepted eviction", |s| {
            s.evictions().iter().any(|r| r.status == 201)
        })
        .await;
    let evicted = evicted_names(&server);
    let big = |code| ("big".to_owned(), code);
    assert_eq!(
        evicted,
        [big(429), big(429), big(429), big(201)],
        "the same victim, after each wait: {}",
        agent.logs()
    );
    // Each retry came after its Retry-After: three waits of at least a second.
    assert!(server.requests().iter().all(|r| r.method != "DELETE"));
    assert!(events(&server, "EvictionRefused").is_empty());
    until_metric(
        &server,
        &agent,
        r#"vigil_evictions_total{strategy="memory-pressure",urgency="hard",result="throttled"} 3"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_the_api_server_will_not_evict_pass_the_turn_to_the_next() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    pod(&server, &fixture, "tiny", 50);
    // Two budgets select big: the eviction subresource refuses it with a 500.
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 1));
    let mut second = objects::pdb(NS, "big", 1);
    second["metadata"]["name"] = json!("big-too");
    server.put("poddisruptionbudgets", NS, second);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    server
        .until(LIMIT, "the agent watches the namespace's PDBs", |s| {
            s.requests().iter().any(|r| {
                r.uri
                    .starts_with("/apis/policy/v1/namespaces/shop/poddisruptionbudgets")
            })
        })
        .await;
    server.fail_next("/pods/medium/eviction", 403);
    server.fail_next("/pods/small/eviction", 422);
    fixture.memory_available(50);
    server
        .until(LIMIT, "an accepted eviction", |s| {
            s.evictions().iter().any(|r| r.status == 201)
        })
        .await;
    fixture.memory_available(4096);
    let evicted = evicted_names(&server);
    assert_eq!(
        evicted[..4],
        [
            ("big".to_owned(), 500),
            ("medium".to_owned(), 403),
            ("small".to_owned(), 422),
            ("tiny".to_owned(), 201)
        ],
        "{}",
        agent.logs()
    );
    assert!(server.get("pods", NS, "big").is_some());
    until_metric(
        &server,
        &agent,
        r#"vigil_evictions_total{strategy="memory-pressure",urgency="hard",result="not-evictable"} 3"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_events_api_delays_neither_an_eviction_nor_a_taint() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    server.hang("events.k8s.io");
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "the eviction and the taint", |s| {
            s.evictions().iter().any(|r| r.status == 201)
                && taint_keys(s).contains(&"vigil.dev/MemoryPressure".to_owned())
        })
        .await;
    assert!(
        server
            .arrived()
            .iter()
            .any(|uri| uri.contains("events.k8s.io")),
        "an Event was tried: {}",
        agent.logs()
    );
}

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
async fn sigterm_during_an_eviction_call_lets_it_finish_and_exits_cleanly() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    let mut agent = start(&server, &fixture, &[]);
    watching(&server).await;

    server.latency(Duration::from_millis(1500));
    fixture.memory_available(50);
    server
        .until(LIMIT, "the eviction call is under way", |s| {
            s.arrived().iter().any(|uri| uri.ends_with("/eviction"))
        })
        .await;
    assert!(server.evictions().is_empty(), "not answered yet");
    let (status, logs) = tokio::task::spawn_blocking(move || {
        let status = agent.terminate();
        (status, agent.logs())
    })
    .await
    .expect("joins");
    assert!(status.success(), "exit {status:?}: {logs}");
    assert!(logs.contains("vigil agent stopped"), "{logs}");
    assert_eq!(
        evicted_names(&server),
        [("big".to_owned(), 201)],
        "the call in flight was answered before the exit"
    );
}

#[test]
fn the_agent_refuses_to_start_without_a_node_name() {
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["agent", "--kubeconfig", "/nonexistent"])
        .env_remove("NODE_NAME")
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--node-name"), "{stderr}");
}

/// The killer alone, in-process, with a real `kube::Client` against the test server.
mod eviction_api {
    use super::*;
    use vigil::cluster::evict::EvictionApi;
    use vigil::eviction::{KillError, Killer, Urgency, Victim};
    use vigil::model::Pod;

    fn victim(name: &str, uid: &str) -> Victim {
        let mut pod: Pod = vigil::model::fixture::pod(name).usage_mib(100).build();
        pod.namespace = NS.into();
        pod.uid = uid.into();
        Victim {
            pod,
            strategy: "memory-pressure".into(),
            reason: "test".into(),
            urgency: Urgency::Hard,
            scope: Some("memory".into()),
            grace_period_seconds: Some(7),
            dry_run: false,
            override_pdb: false,
        }
    }

    fn killer(server: &ApiServer) -> EvictionApi {
        let mut config = kube::Config::new(server.url().parse().expect("a URL"));
        config.default_retry = false;
        EvictionApi::new(kube::Client::try_from(config).expect("a client"))
    }

    #[tokio::test]
    async fn the_eviction_apis_answers_mean_what_the_api_server_says() {
        let server = ApiServer::start().await;
        for name in ["web", "db", "cache"] {
            server.put("pods", NS, objects::best_effort_pod(NODE, NS, name, 30));
        }
        server.put("poddisruptionbudgets", NS, objects::pdb(NS, "db", 0));
        let killer = killer(&server);

        // Accepted, with the strategy's grace period and the UID precondition.
        assert_eq!(killer.evict(&victim("web", "uid-web")).await, Ok(()));
        let options = &server.evictions()[0].body.clone().expect("a body")["deleteOptions"];
        assert_eq!(options["gracePeriodSeconds"], 7);
        assert_eq!(options["preconditions"]["uid"], "uid-web");
        let web = server
            .get("pods", NS, "web")
            .expect("terminating, not gone");
        assert_eq!(web["metadata"]["deletionGracePeriodSeconds"], 7);

        // A PodDisruptionBudget allowing nothing: refused, for now.
        let refused = killer.evict(&victim("db", "uid-db")).await;
        assert!(
            matches!(refused, Err(KillError::Refused(ref m)) if m.contains("disruption budget")),
            "{refused:?}"
        );
        // Dry-run is judged the same way, and changes nothing.
        let mut dry = victim("db", "uid-db");
        dry.dry_run = true;
        assert!(matches!(
            killer.evict(&dry).await,
            Err(KillError::Refused(_))
        ));
        let mut dry = victim("cache", "uid-cache");
        dry.dry_run = true;
        assert_eq!(killer.evict(&dry).await, Ok(()));
        let cache = server.get("pods", NS, "cache").expect("still there");
        assert!(cache["metadata"]["deletionTimestamp"].is_null());

        // A new pod under the same name, and a pod that is gone: nothing to evict.
        let recreated = killer.evict(&victim("cache", "uid-old-cache")).await;
        assert!(
            matches!(recreated, Err(KillError::Gone(_))),
            "{recreated:?}"
        );
        let gone = killer.evict(&victim("nobody", "uid-nobody")).await;
        assert!(matches!(gone, Err(KillError::Gone(_))), "{gone:?}");

        // An API server error is no answer: the victim waits, once, not for minutes.
        server.fail_next("/pods/cache/eviction", 500);
        let failed = killer.evict(&victim("cache", "uid-cache")).await;
        assert!(
            matches!(failed, Err(KillError::Unavailable(_))),
            "{failed:?}"
        );

        // Throttling is not a budget's refusal: wait, with the server's Retry-After.
        server.throttle_next("/pods/cache/eviction", 1, 2);
        let throttled = killer.evict(&victim("cache", "uid-cache")).await;
        assert!(
            matches!(throttled, Err(KillError::Throttled { retry_after, .. }) if retry_after >= Duration::from_secs(2)),
            "{throttled:?}"
        );
        // A refusal of the pod itself: passed over.
        for code in [403, 422] {
            server.fail_next("/pods/cache/eviction", code);
            let refused = killer.evict(&victim("cache", "uid-cache")).await;
            assert!(
                matches!(refused, Err(KillError::NotEvictable(_))),
                "{refused:?}"
            );
        }
        // A dry run says so in the URL too, and never deletes.
        let mut dry = victim("db", "uid-db");
        dry.dry_run = true;
        dry.override_pdb = true;
        assert!(matches!(
            killer.evict(&dry).await,
            Err(KillError::Refused(_))
        ));
        let last = server.requests().last().cloned().expect("a request");
        assert_eq!(last.method, "POST");
        assert!(
            last.uri.ends_with("/pods/db/eviction?dryRun=All"),
            "{}",
            last.uri
        );

        // The PDB override deletes, with the same precondition.
        let mut forced = victim("db", "uid-db");
        forced.override_pdb = true;
        assert_eq!(killer.evict(&forced).await, Ok(()));
        let deleted = server
            .requests()
            .into_iter()
            .find(|r| r.method == "DELETE")
            .expect("a DELETE");
        let options = deleted.body.expect("options");
        assert_eq!(options["preconditions"]["uid"], "uid-db");
        assert_eq!(options["gracePeriodSeconds"], 7);
        assert_the_cluster_role_allows_every_request(&server);
    }

    #[tokio::test]
    async fn the_bookkeeping_client_retries_a_503_and_counts_the_retry() {
        let server = ApiServer::start().await;
        server.put("pods", NS, objects::best_effort_pod(NODE, NS, "web", 30));
        let metrics = std::sync::Arc::new(vigil::metrics::Metrics::default());
        let config = kube::Config::new(server.url().parse().expect("a URL"));
        let options = vigil::cluster::client::ClientOptions::default();
        let client = vigil::cluster::client::build(config, &metrics, options, true).unwrap();
        server.fail_next("/pods/web", 503);
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, NS);
        let pod = pods.get("web").await.expect("answered on the retry");
        assert_eq!(pod.metadata.name.as_deref(), Some("web"));
        let retries = metrics
            .api_retries
            .get_or_create(&vigil::metrics::ApiLabels {
                verb: "GET".into(),
                code: "503".into(),
            })
            .get();
        assert_eq!(retries, 1);
        let statuses: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [503, 200]);
    }

    #[tokio::test]
    async fn a_pod_with_two_budgets_is_not_evictable_and_a_hung_call_times_out() {
        let server = ApiServer::start().await;
        server.put("pods", NS, objects::best_effort_pod(NODE, NS, "web", 30));
        server.put("poddisruptionbudgets", NS, objects::pdb(NS, "web", 1));
        let mut second = objects::pdb(NS, "web", 1);
        second["metadata"]["name"] = json!("web-too");
        server.put("poddisruptionbudgets", NS, second);
        let metrics = std::sync::Arc::new(vigil::metrics::Metrics::default());
        let config = kube::Config::new(server.url().parse().expect("a URL"));
        let options = vigil::cluster::client::ClientOptions {
            timeout: Duration::from_millis(200),
            ..Default::default()
        };
        let client = vigil::cluster::client::build(config, &metrics, options, false).unwrap();
        let killer = EvictionApi::new(client);
        let several = killer.evict(&victim("web", "uid-web")).await;
        assert!(
            matches!(several, Err(KillError::NotEvictable(ref m)) if m.contains("more than one PodDisruptionBudget")),
            "{several:?}"
        );
        server.hang("/pods/web/eviction");
        let hung = killer.evict(&victim("web", "uid-web")).await;
        assert!(
            matches!(hung, Err(KillError::Unavailable(ref m)) if m.contains("no answer within")),
            "{hung:?}"
        );
    }
}

/// A bundled scenario replayed step by step through the cluster path — pods
/// as Kubernetes objects read by the agent's pod reader, usage from cgroup
/// files, `memory.available` from `meminfo`, the Eviction API killer against
/// the test API server — evicts the same pods at the same times as
/// `vigil simulate`.
mod scenario_replay {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::reflector::{self, Store};
    use kube::runtime::watcher::Event;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};
    use vigil::clock::ManualClock;
    use vigil::cluster::budgets::Budgets;
    use vigil::cluster::evict::EvictionApi;
    use vigil::cluster::source::ClusterSource;
    use vigil::config::VigilConfig;
    use vigil::eviction::EvictionManager;
    use vigil::eviction::runner::NodeSource;
    use vigil::model::{Layer, QosClass};
    use vigil::policy::{Host, LimitsTable, Registry};
    use vigil::signals::{CpuRates, Driver, Sources};
    use vigil::simulate::{PodSpec, RunOptions, Scenario, run};

    /// The virtual start of every simulation.
    const START: Duration = Duration::from_secs(1_700_000_000);

    fn quantity(bytes: f64) -> String {
        format!("{}", bytes as u64)
    }

    fn resources(memory: f64, cpu: f64) -> Value {
        let mut map = serde_json::Map::new();
        if memory > 0.0 {
            map.insert("memory".into(), json!(quantity(memory)));
        }
        if cpu > 0.0 {
            map.insert("cpu".into(), json!(format!("{}m", cpu as u64)));
        }
        Value::Object(map)
    }

    fn pod_object(spec: &PodSpec) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": spec.name, "namespace": spec.namespace,
                         "uid": format!("uid-{}", spec.name), "labels": spec.labels,
                         "annotations": spec.annotations},
            "spec": {"nodeName": NODE, "priority": spec.priority,
                     "terminationGracePeriodSeconds": spec.grace_period.as_secs(),
                     "containers": [{"name": "main", "image": "example", "resources": {
                         "requests": resources(spec.requests.memory, spec.requests.cpu),
                         "limits": resources(spec.limits.memory, spec.limits.cpu)}}]},
            "status": {"phase": "Running", "startTime": "2023-11-14T22:13:20Z"},
        })
    }

    fn cgroup(spec: &PodSpec, qos: QosClass) -> String {
        let uid = format!("uid-{}", spec.name);
        match qos {
            QosClass::BestEffort => format!("kubepods/besteffort/pod{uid}"),
            QosClass::Burstable => format!("kubepods/burstable/pod{uid}"),
            QosClass::Guaranteed => format!("kubepods/pod{uid}"),
        }
    }

    /// Fills `store` with `objects`, as a watcher's initial list would.
    fn fill<K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned>(
        writer: &mut reflector::store::Writer<K>,
        objects: Vec<Value>,
    ) {
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            let object: K = serde_json::from_value(object).expect("a valid object");
            writer.apply_watcher_event(&Event::InitApply(object));
        }
        writer.apply_watcher_event(&Event::InitDone);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hard_memory_pressure_evicts_the_same_pods_at_the_same_times_as_simulate() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/scenarios/hard-memory-pressure.yaml");
        let scenario = Scenario::load(&path).expect("a valid scenario");
        let simulated: Vec<(u64, String)> =
            run(&scenario, path.parent().unwrap(), &RunOptions::default())
                .await
                .expect("simulates")
                .evictions
                .iter()
                .map(|e| (e.at as u64, e.pod.clone()))
                .collect();
        assert!(simulated.len() >= 2, "{simulated:?}");

        let server = ApiServer::start().await;
        server.kubelet(false);
        let files = NodeFiles::default();
        let mut node = objects::node(NODE);
        node["status"]["allocatable"]["memory"] = json!(quantity(scenario.node.memory));
        server.put("nodes", "", node.clone());
        for spec in &scenario.pods {
            server.put("pods", &spec.namespace, pod_object(spec));
        }
        let mut config = kube::Config::new(server.url().parse().expect("a URL"));
        config.default_retry = false;
        let client = kube::Client::try_from(config).expect("a client");

        let host = Arc::new(Host::new(None).expect("host"));
        let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + START));
        let registry = Arc::new(
            Registry::new(host, clock.clone(), LimitsTable::default(), None).expect("registry"),
        );
        let layer = Layer {
            source: "scenario".into(),
            json: scenario.config.clone().unwrap_or(json!({})).to_string(),
        };
        // The replay's disk is the test machine's own, not the scenario's.
        let no_disk = Layer {
            source: "test".into(),
            json: r#"{"policies": {"disk-pressure": {"enabled": false}}}"#.into(),
        };
        let config =
            VigilConfig::merge(&registry, vec![layer, no_disk]).expect("the scenario's config");
        let settings = vigil::eviction::EvictionSettings::from(&config);
        let period = settings.period;
        let mut manager = EvictionManager::new(registry, settings);
        let killer = EvictionApi::new(client.clone());
        let (pods, mut pods_writer) = reflector::store::<Pod>();
        let (nodes, mut nodes_writer): (Store<Node>, _) = reflector::store();
        fill(&mut nodes_writer, vec![node]);
        let mut source = ClusterSource {
            signals: Sources {
                proc_root: files.path("proc"),
                cgroup_root: files.path("cgroup"),
                driver: Driver::Cgroupfs,
                nodefs: files.root().to_owned(),
                ..Sources::default()
            },
            pods,
            node: nodes,
            budgets: Arc::new(Budgets::new(client, |_| {})),
            clock: clock.clone(),
            cpu: CpuRates::default(),
        };

        let mut leaves: Vec<(String, Duration)> = Vec::new();
        let mut replayed = Vec::new();
        let mut t = Duration::ZERO;
        while t <= scenario.duration {
            // The kubelet: pods whose grace period is over are gone.
            for (name, at) in &leaves {
                if *at <= t {
                    server.delete("pods", "default", name);
                }
            }
            let present: Vec<&PodSpec> = scenario
                .pods
                .iter()
                .filter(|p| server.get("pods", &p.namespace, &p.name).is_some())
                .collect();
            let mut used = scenario.node.system_memory.at(t);
            for spec in &present {
                let bytes = spec.memory.at(t);
                used += bytes;
                files.cgroup_bytes(&cgroup(spec, spec.qos().into()), bytes as u64);
            }
            let total = scenario.node.memory;
            files.meminfo(total as u64, (total - used).max(0.0) as u64);
            fill(&mut pods_writer, server.list("pods"));

            let now = SystemTime::UNIX_EPOCH + START + t;
            let state = source.observe();
            let report = manager.cycle_through(now, &state, &killer).await;
            for victim in &report.started {
                let spec = scenario
                    .pods
                    .iter()
                    .find(|p| p.name == victim.pod.name)
                    .expect("a scenario pod");
                let grace = victim
                    .grace_period_seconds
                    .map_or(spec.grace_period, Duration::from_secs);
                leaves.push((spec.name.clone(), t + grace));
                replayed.push((t.as_secs(), format!("{}/{}", spec.namespace, spec.name)));
            }
            t += period;
            clock.advance(period);
        }
        assert_eq!(replayed, simulated);
        assert_eq!(
            server.evictions().len(),
            simulated.len(),
            "one API call per victim"
        );
    }
}

/// Runs `vigil agent` for node `n1` with `args` and state in a temp dir; its stderr, if it failed.
fn failed_start(args: &[&str]) -> String {
    let state = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["agent", "--node-name", "n1", "--state-dir"])
        .arg(state.path())
        .args(args)
        .output()
        .expect("runs");
    assert!(!output.status.success(), "the agent should refuse to start");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_config_layer_with_a_mistyped_field_stops_the_start_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "evictionBursts: 2\n").expect("write");
    let stderr = failed_start(&["--config", &config.display().to_string()]);
    assert!(stderr.contains("evictionBursts"), "{stderr}");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "evictionBurst: [\n").expect("write");
    let stderr = failed_start(&["--config", &broken.display().to_string()]);
    assert!(stderr.contains("is not YAML or JSON"), "{stderr}");
}

#[test]
fn an_unreadable_kubeconfig_stops_the_start_naming_the_file() {
    let stderr = failed_start(&["--kubeconfig", "/nonexistent/kubeconfig"]);
    assert!(
        stderr.contains("cannot read the kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn a_state_directory_others_can_write_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("temp dir");
    let state = root.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["agent", "--node-name", "n1", "--state-dir"])
        .arg(&state)
        .output()
        .expect("runs");
    assert!(!output.status.success(), "the agent should refuse to start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{} is owned by uid", state.display()))
            && stderr.contains("mode 777")
            && stderr.contains("run native code"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_agent_while_a_policy_compiles() {
    let (server, fixture) = test_node().await;
    let js = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/js-sorter/js-sorter.wasm");
    std::fs::create_dir_all(fixture.path("policies")).expect("policies dir");
    std::fs::copy(&js, fixture.path("policies/js-sorter.wasm")).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the example policies with examples/policies/build.sh",
            js.display()
        )
    });
    let mut agent = start(&server, &fixture, &[]);
    watching(&server).await;
    // The JavaScript component compiles for seconds, from an empty cache.
    let (status, logs) = tokio::task::spawn_blocking(move || {
        let status = agent.terminate();
        (status, agent.logs())
    })
    .await
    .expect("joins");
    assert!(status.success(), "exit {status:?}: {logs}");
    assert!(logs.contains("vigil agent stopped"), "{logs}");
    assert!(
        !logs.contains("js-sorter@"),
        "the exit waited for the compile to finish: {logs}"
    );
}

// ---- Dynamic config ----------------------------------------------------------

/// A `VigilConfig` object.
fn vigil_config(name: &str, target: Value, config: Value) -> Value {
    let mut spec = json!({"config": config});
    if !target.is_null() {
        spec["target"] = target;
    }
    json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilConfig",
           "metadata": {"name": name}, "spec": spec})
}

/// The `VigilConfigOK` condition: status, reason, message.
fn config_condition(server: &ApiServer) -> Option<(String, String, String)> {
    let node = server.get("nodes", "", NODE)?;
    let condition = node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "VigilConfigOK")?
        .clone();
    let text = |key: &str| condition[key].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

async fn until_config(server: &ApiServer, reason: &str, message_has: &str) -> String {
    server
        .until(
            LIMIT,
            &format!("VigilConfigOK {reason}: {message_has}"),
            |s| config_condition(s).is_some_and(|(_, r, m)| r == reason && m.contains(message_has)),
        )
        .await;
    config_condition(server).expect("waited for it").2
}

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
    assert!(!events(&server, "ConfigTrial").is_empty());
    assert!(!events(&server, "ConfigActive").is_empty());

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
    let saved = vigil::config::checkpoint::CheckpointFile::new(&fixture.path("state"))
        .load()
        .expect("a sound checkpoint")
        .expect("saved");
    assert_eq!(saved.rejected.len(), 1);
    assert!(saved.last_known_good.is_some());
    assert_the_cluster_role_allows_every_request(&server);
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

/// A ConfigMap in the namespace `ops`.
fn config_map(name: &str, data: Value, immutable: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "ops"},
           "data": data, "immutable": immutable})
}

/// A `configFrom` entry naming `ops/NAME[KEY]`.
fn config_from(name: &str, key: &str) -> Value {
    json!([{"namespace": "ops", "name": name, "key": key}])
}

/// Open watches on the ConfigMap `ops/NAME`.
fn config_map_watches(server: &ApiServer, name: &str) -> usize {
    server.open_watches(&format!(
        "/namespaces/ops/configmaps?fieldSelector=metadata.name={name}"
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
    server.put("configmaps", "ops", thresholds("800Mi"));
    let both = json!({"policies": {
        "memory-pressure": {"configFrom": config_from("thresholds", "memory.yaml")},
        "pid-pressure": {"configFrom": config_from("thresholds", "pids.yaml")},
    }});
    server.put("vigilconfigs", "", vigil_config("fleet", Value::Null, both));
    let first = until_config(
        &server,
        "Trial",
        "ConfigMap/ops/thresholds[memory.yaml] for memory-pressure",
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
    server.put("configmaps", "ops", thresholds("700Mi"));
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
        vigil_config("fleet", Value::Null, missing),
    );
    let message = until_config(&server, "Rejected", "VigilConfig/fleet@2").await;
    assert!(
        message.contains("ConfigMap/ops/later[pids.json]: the ConfigMap does not exist"),
        "{message}"
    );
    // Once it exists, the config is tried; being immutable, it is read once.
    let later = config_map("later", json!({"pids.json": r#"{"hard": "1%"}"#}), true);
    server.put("configmaps", "ops", later);
    until_config(
        &server,
        "Trial",
        "ConfigMap/ops/later[pids.json] for pid-pressure",
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
    until_config(&server, "Trial", "VigilConfig/fleet@3 (").await;
    server
        .until(LIMIT, "every ConfigMap watch stopped", |s| {
            s.open_watches("/configmaps") == 0
        })
        .await;
    assert_the_cluster_role_allows_every_request(&server);
}

/// A checkpoint of one layer, fetched `age` ago, as the agent would save it.
fn save_checkpoint(fixture: &NodeFiles, age: jiff::SignedDuration) {
    use vigil::config::checkpoint::{Assigned, Checkpoint, CheckpointFile, LayerSet};
    let set = LayerSet::new(vec![vigil::model::Layer {
        source: "VigilConfig/fleet@7".into(),
        json: r#"{"evictionBurst": 2}"#.into(),
    }]);
    let checkpoint = Checkpoint {
        assigned: Some(Assigned {
            set,
            fetched_at: jiff::Timestamp::now() - age,
        }),
        ..Checkpoint::default()
    };
    CheckpointFile::new(&fixture.path("state"))
        .save(&checkpoint)
        .expect("saved");
}

/// Waits until the agent's metrics show `line`.
async fn until_metric(server: &ApiServer, agent: &AgentProcess, line: &str) {
    // The agent's HTTP endpoint is not the server: check it on the server's
    // own changes (the agent's failing requests during the outage are changes too).
    server
        .until(LIMIT, line, |_| agent.metrics().contains(line))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_api_server_down_at_start_up_the_checkpoint_runs_while_it_is_fresh() {
    let hour = jiff::SignedDuration::from_hours(1);
    for (age, corrupt, load, reason) in [
        (hour, false, "fresh", "CheckpointInUse"),
        (hour * 30, false, "expired", "Defaults"),
        (hour, true, "corrupt", "Defaults"),
    ] {
        let (server, fixture) = test_node().await;
        save_checkpoint(&fixture, age);
        let checkpoint = fixture.path("state/config/checkpoint.json");
        if corrupt {
            let mut bytes = std::fs::read(&checkpoint).unwrap();
            let last = bytes.len() - 2;
            bytes[last] ^= 1;
            std::fs::write(&checkpoint, bytes).unwrap();
        }
        let before = std::fs::read(&checkpoint).unwrap();
        server.outage(true);
        let agent = start(&server, &fixture, &[]);
        until_metric(
            &server,
            &agent,
            &format!(r#"vigil_config_checkpoint_loads_total{{status="{load}"}} 1"#),
        )
        .await;
        until_metric(
            &server,
            &agent,
            &format!(r#"vigil_config_state{{reason="{reason}"}} 1"#),
        )
        .await;
        if corrupt {
            let aside = fixture.path("state/config/checkpoint.json.damaged");
            assert_eq!(
                std::fs::read(aside).unwrap(),
                before,
                "a damaged checkpoint is set aside for inspection"
            );
            assert!(agent.logs().contains("damaged"), "{}", agent.logs());
        } else {
            // Reusing the checkpoint does not make it younger.
            use vigil::config::checkpoint::CheckpointFile;
            let saved = CheckpointFile::new(&fixture.path("state"))
                .load()
                .unwrap()
                .unwrap();
            let fetched = saved.assigned.unwrap().fetched_at;
            assert!(
                jiff::Timestamp::now().duration_since(fetched) >= age,
                "{load}"
            );
        }
        // Once the API server answers, the cluster's (empty) assignment runs.
        server.outage(false);
        until_config(&server, "Defaults", "no VigilConfig applies").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_agent_while_it_saves_checkpoints_never_leaves_a_damaged_one() {
    let (server, fixture) = test_node().await;
    let file = vigil::config::checkpoint::CheckpointFile::new(&fixture.path("state"));
    for round in 0..8u64 {
        let mut agent = start(&server, &fixture, &[]);
        let config = json!({"evictionBurst": round + 1});
        server.put(
            "vigilconfigs",
            "",
            vigil_config("fleet", Value::Null, config),
        );
        // Kill it as it takes the change in: before, during or after its save.
        server
            .until(LIMIT, "the agent watches VigilConfigs", |s| {
                s.requests()
                    .iter()
                    .any(|r| r.uri.contains("vigilconfigs") && r.uri.contains("watch=true"))
            })
            .await;
        Command::new("kill")
            .args(["-KILL", &agent.pid().to_string()])
            .status()
            .expect("kill runs");
        while agent.alive() {
            std::thread::yield_now();
        }
        if let Err(error) = file.load() {
            panic!("round {round}: {error}");
        }
    }
    assert!(file.load().unwrap().is_some(), "checkpoints were written");
}

/// The status objects of this node, by policy.
fn policy_statuses(server: &ApiServer) -> std::collections::BTreeMap<String, Value> {
    server
        .list("vigilpolicystatuses")
        .into_iter()
        .filter(|o| o["spec"]["node"] == NODE)
        .map(|o| (o["spec"]["policy"].as_str().unwrap().to_owned(), o))
        .collect()
}

fn node_report(server: &ApiServer) -> Value {
    server
        .get("vigilnodestatuses", "", NODE)
        .map_or(Value::Null, |o| o["status"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_objects_show_the_node_and_its_policies_and_the_cluster_role_is_exactly_what_the_agent_uses()
 {
    let (server, fixture) = test_node().await;
    // The only pod is protected by its budget: under hard pressure it is
    // refused, then deleted once the override time (30 s) has passed.
    pod(&server, &fixture, "big", 900);
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 0));
    server.put(
        "configmaps",
        "ops",
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
        .until(LIMIT, "the new policy's status", |s| {
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
        .until(LIMIT, "the policy back on trial", |s| {
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
    // this test, so that one permission goes unused here.
    let (mut used, granted) = (used(&server), granted());
    used.insert(("events.k8s.io".into(), "events".into(), "patch".into()));
    let unused: Vec<_> = granted.difference(&used).collect();
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(
        unused.is_empty() && missing.is_empty(),
        "deploy/rbac.yaml grants {unused:?} that the agent never used, and lacks {missing:?}\n{}",
        agent.logs()
    );
}

// ---- Compiling in a child ----------------------------------------------------

/// An example policy's component (built by `examples/policies/build.sh`).
fn example(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../examples/policies/{name}/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the example policies with examples/policies/build.sh",
            path.display()
        )
    })
}

/// A host whose compiles run in this package's `vigil` binary, with `memory_mib` and `deadline`.
fn child_compiling_host(
    cache: &std::path::Path,
    memory_mib: u64,
    deadline: Duration,
) -> vigil::policy::Host {
    vigil::policy::Host::new(Some(cache.to_owned()))
        .unwrap()
        .compiling_in(vigil::policy::ChildCompiler {
            program: env!("CARGO_BIN_EXE_vigil").into(),
            memory_bytes: memory_mib << 20,
            deadline,
        })
        .unwrap()
}

/// Loads `bytes` as the policy `name` through `host`, with the default limits.
fn load_with(
    host: &vigil::policy::Host,
    name: &str,
    bytes: Vec<u8>,
) -> Result<vigil::policy::Policy, vigil::policy::LoadError> {
    use vigil::policy::{Limits, Source};
    host.load(name, bytes, Source::Builtin, Limits::default())
}

/// The files of the cache directory with `extension`.
fn cache_files(cache: &std::path::Path, extension: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect()
}

#[test]
fn a_child_compiles_what_the_cache_lacks_and_the_artifact_is_mapped_from_the_cache() {
    use vigil::policy::CacheOutcome;
    let cache = tempfile::tempdir().unwrap();
    let host = child_compiling_host(cache.path(), 1024, LIMIT);
    let policy = load_with(&host, "c-sorter", example("c-sorter")).unwrap();
    assert_eq!(policy.cache_outcome(), CacheOutcome::Miss);
    assert!(policy.as_sorter().is_some());
    let artifacts = cache_files(cache.path(), "cwasm");
    assert_eq!(artifacts.len(), 1, "the child stored one artifact");
    // Its pages are this process's mapping of the file, not a copy.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let artifact = artifacts[0].canonicalize().unwrap();
    assert!(
        maps.contains(artifact.to_str().unwrap()),
        "{} is not mapped:\n{maps}",
        artifact.display()
    );
    // A second host finds it there and compiles nothing.
    let host = child_compiling_host(cache.path(), 1024, LIMIT);
    let again = load_with(&host, "c-sorter", example("c-sorter")).unwrap();
    assert_eq!(again.cache_outcome(), CacheOutcome::Hit);
}

#[test]
fn a_component_that_does_not_compile_in_the_child_is_invalid_with_the_reason() {
    use vigil::policy::LoadError;
    let cache = tempfile::tempdir().unwrap();
    let host = child_compiling_host(cache.path(), 1024, LIMIT);
    let error = load_with(&host, "cut", b"\0asm\x0d\0\x01\0 cut short".to_vec()).unwrap_err();
    assert!(matches!(error, LoadError::Invalid(_)), "{error:?}");
    let reason = std::error::Error::source(&error).unwrap().to_string();
    assert!(
        !reason.is_empty() && !reason.contains("it said nothing"),
        "{reason}"
    );
    assert!(cache_files(cache.path(), "cwasm").is_empty());
}

#[test]
fn a_compile_past_its_memory_limit_or_deadline_fails_that_component_only() {
    use vigil::policy::{CompileError, LoadError};
    let cache = tempfile::tempdir().unwrap();
    let load = |host: &vigil::policy::Host| load_with(host, "js-sorter", example("js-sorter"));
    // The JavaScript engine alone needs a few hundred MiB to compile.
    match load(&child_compiling_host(cache.path(), 64, LIMIT)) {
        Err(LoadError::Compile(CompileError::OutOfMemory {
            limit_mib: 64,
            detail,
        })) => assert!(!detail.is_empty()),
        other => panic!("expected running out of memory, got {other:?}"),
    }
    // And it takes seconds.
    let deadline = Duration::from_millis(100);
    match load(&child_compiling_host(cache.path(), 1024, deadline)) {
        Err(LoadError::Compile(CompileError::Deadline { deadline: d })) => assert_eq!(d, deadline),
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert!(
        cache_files(cache.path(), "mac").is_empty(),
        "nothing is vouched for"
    );
    // The limit was the JavaScript component's: a small one compiles within it.
    let host = child_compiling_host(cache.path(), 64, LIMIT);
    assert!(load_with(&host, "c-sorter", example("c-sorter")).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_whose_compile_runs_out_of_memory_is_refused_and_the_built_in_serves() {
    let (server, fixture) = test_node().await;
    std::fs::create_dir_all(fixture.path("policies")).unwrap();
    std::fs::write(
        fixture.path("policies/js-sorter.wasm"),
        example("js-sorter"),
    )
    .unwrap();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let mut agent = AgentProcess::start(
        binary,
        NODE,
        &fixture,
        &server,
        CONFIG,
        &["--status-interval", "100ms", "--compile-memory-mib", "64"],
    );
    server
        .until(LIMIT, "the refused policy's status", |s| {
            policy_statuses(s)
                .get("js-sorter")
                .is_some_and(|o| o["status"]["state"] == "Failed")
        })
        .await;
    let statuses = policy_statuses(&server);
    let fault = statuses["js-sorter"]["status"]["lastFault"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(fault.contains("memory limit of 64 MiB"), "{statuses:#?}");
    assert_eq!(statuses["default-sorter"]["status"]["state"], "Active");
    assert!(agent.alive(), "{}", agent.logs());
}
