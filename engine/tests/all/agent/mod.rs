//! The real `vigil agent` binary against the project's test API server
//! (`vigil-testbed`, HTTP on loopback), with the node's `/proc` and cgroup
//! files laid out as fixtures in a temporary directory. Memory pressure is
//! made by writing the fixture `meminfo`; the API server plays the kubelet.
//!
//! One file per topic; this one holds what they share: the test node, the
//! agent process, and questions asked of the API server.

mod admission;
mod api_cost;
mod checkpoint;
mod cleanup;
mod compiler;
mod conditions;
mod config;
mod eviction;
mod eviction_api;
mod fleet;
mod fleet_scale;
mod precompiled;
mod pulled;
mod scenario_replay;
mod shadow;
mod startup;
mod trial_bounds;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use vigil_testbed::wait::Polling;
use vigil_testbed::{AgentProcess, ApiServer, NodeFiles, Request, objects};

const NODE: &str = "node-1";

const NS: &str = "shop";

/// A bound for a broken test, never a wait: everything is awaited on changes.
const LIMIT: Duration = Duration::from_secs(60);
/// [`LIMIT`] for every wait that covers a compile (a component new to the
/// agent's cache, compiled by the debug build's child compiler): a 12 MB
/// JavaScript component takes it 15–25 s alone, and several times that
/// while other tests compile beside it on CI's two cores.
const COMPILING: Duration = Duration::from_secs(300);

/// The agent's config: a short period and transition so tests are quick.
/// The node's disk is the test machine's own (its fill level is not the
/// test's), so the disk strategy is off.
const CONFIG: &str = "evictionPeriodSeconds: 1\nconditionTransitionSeconds: 2\npolicies:\n  memory-pressure:\n    config: {hard: 500Mi}\n  disk-pressure: {enabled: false}\n";

/// What `deploy/rbac.yaml`'s ClusterRole and Role grant: (API group,
/// resource, verb). (The Role's `resourceNames` are the operator's to
/// extend: a test's Secret is named as the Role names it.)
fn granted() -> BTreeSet<(String, String, String)> {
    granted_by("rbac.yaml")
}

/// What the ClusterRole and Role of `deploy/FILE` grant, as [`granted`].
fn granted_by(file: &str) -> BTreeSet<(String, String, String)> {
    use serde::Deserialize;
    let path = format!("{}/../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let roles: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| doc["kind"] == "ClusterRole" || doc["kind"] == "Role")
        .collect();
    assert_eq!(roles.len(), 2, "a ClusterRole and a Role");
    let names = |rule: &Value, key: &str| -> Vec<String> {
        serde_json::from_value(rule[key].clone()).unwrap()
    };
    let mut granted = BTreeSet::new();
    for rule in roles
        .iter()
        .flat_map(|role| role["rules"].as_array().unwrap())
    {
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

/// What the rules `deploy/components/NAME` adds to the ClusterRole grant,
/// as [`granted`].
fn granted_by_component(name: &str) -> BTreeSet<(String, String, String)> {
    use serde::Deserialize;
    let path = format!(
        "{}/../deploy/components/{name}/kustomization.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let component: Value = serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut granted = BTreeSet::new();
    for patch in component["patches"].as_array().unwrap() {
        let ops = Value::deserialize(serde_norway::Deserializer::from_str(
            patch["patch"].as_str().unwrap(),
        ))
        .unwrap();
        for op in ops.as_array().unwrap() {
            if op["op"] != "add" || op["path"] != "/rules/-" {
                continue;
            }
            let rule = &op["value"];
            let names =
                |key: &str| -> Vec<String> { serde_json::from_value(rule[key].clone()).unwrap() };
            for group in names("apiGroups") {
                for resource in names("resources") {
                    for verb in names("verbs") {
                        granted.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    assert!(!granted.is_empty(), "components/{name} adds no rule");
    granted
}

/// What the requests the server received needed: (API group, resource, verb).
fn used(server: &ApiServer) -> BTreeSet<(String, String, String)> {
    used_since(server, 0)
}

/// What the requests since `mark` (see [`ApiServer::request_count`]) needed:
/// a request acting as the node needs its verb on the resource through
/// constrained impersonation, and the right to impersonate the node the
/// agent's token is bound to.
fn used_since(server: &ApiServer, mark: usize) -> BTreeSet<(String, String, String)> {
    let requests = server.requests_since(mark);
    assert!(!requests.is_empty());
    let mut used = BTreeSet::new();
    for request in &requests {
        let access = request.access().unwrap_or_else(|| panic!("{request:?}"));
        used.insert((access.group, access.resource, access.verb));
        if let Some(user) = &request.impersonated {
            assert_eq!(*user, format!("system:node:{NODE}"), "{request:?}");
            let node = (
                "authentication.k8s.io",
                "nodes",
                "impersonate:associated-node",
            );
            used.insert((node.0.into(), node.1.into(), node.2.into()));
        }
    }
    used
}

/// Asserts that the ClusterRole in `deploy/rbac.yaml` allows every request
/// the server received: what the agent did here, it may do on a cluster.
fn assert_the_cluster_role_allows_every_request(server: &ApiServer) {
    assert_allowed_with(server, &[]);
}

/// As [`assert_the_cluster_role_allows_every_request`], with what
/// `components` add to it.
fn assert_allowed_with(server: &ApiServer, components: &[&str]) {
    let mut granted = granted();
    for component in components {
        granted.extend(granted_by_component(component));
    }
    let missing: Vec<_> = used(server).difference(&granted).cloned().collect();
    assert!(
        missing.is_empty(),
        "deploy/rbac.yaml with {components:?} does not allow {missing:?}"
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

/// Waits until the agent's metrics show `line`.
async fn until_metric(agent: &AgentProcess, line: &str) {
    // Not on the server's changes: a count that moves writes nothing there
    // (the shadow's counts reach its status at most every 10 minutes).
    until_agent(agent, line, |a| a.metrics().contains(line)).await;
}

/// Waits until `condition` holds of the agent's own endpoints, asking every
/// 100 ms (they are no API server: nothing wakes a wait on them when the
/// agent has nothing to write); panics after [`LIMIT`], a bound for a
/// broken test, not a wait.
async fn until_agent(agent: &AgentProcess, what: &str, condition: impl Fn(&AgentProcess) -> bool) {
    let polling = Polling::new(Duration::from_millis(100), LIMIT);
    let check = || condition(agent).then_some(());
    polling.until_async(what, check, || agent.logs()).await;
}

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

/// The status objects of this node, by policy.
fn policy_statuses(server: &ApiServer) -> std::collections::BTreeMap<String, Value> {
    server
        .list("vigilpolicystatuses")
        .into_iter()
        .filter(|o| o["spec"]["node"] == NODE)
        .map(|o| (o["spec"]["policy"].as_str().unwrap().to_owned(), o))
        .collect()
}

/// The status of policy `name` on this node (null without one).
fn policy_status(server: &ApiServer, name: &str) -> Value {
    policy_statuses(server)
        .get(name)
        .map_or(Value::Null, |o| o["status"].clone())
}

/// Waits until the node evicted `pod` (accepted).
async fn until_evicted(server: &ApiServer, pod: &str) {
    server
        .until(LIMIT, &format!("{pod} evicted"), |s| {
            evicted_names(s).contains(&(pod.to_owned(), 201))
        })
        .await;
}

fn node_report(server: &ApiServer) -> Value {
    server
        .get("vigilnodestatuses", "", NODE)
        .map_or(Value::Null, |o| o["status"].clone())
}

/// vigil's own namespace, the agent's default: the only one it reads
/// ConfigMaps in.
const VIGIL_NS: &str = "vigil-system";

/// A ConfigMap in vigil's namespace.
fn config_map(name: &str, data: Value, immutable: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": VIGIL_NS},
           "data": data, "immutable": immutable})
}

/// A `configFrom` entry naming `vigil-system/NAME[KEY]`.
fn config_from(name: &str, key: &str) -> Value {
    json!([{"namespace": VIGIL_NS, "name": name, "key": key}])
}

/// Waits until the agent watches the PodDisruptionBudgets of the test namespace.
async fn watching_budgets(server: &ApiServer) {
    server
        .until(LIMIT, "the agent watches the namespace's PDBs", |s| {
            s.requests().iter().any(|r| {
                r.uri
                    .starts_with("/apis/policy/v1/namespaces/shop/poddisruptionbudgets")
            })
        })
        .await;
}

/// Sends the agent SIGTERM and asserts it stopped cleanly; its logs.
async fn terminated_cleanly(mut agent: AgentProcess) -> String {
    let (status, logs) = tokio::task::spawn_blocking(move || {
        let status = agent.terminate();
        (status, agent.logs())
    })
    .await
    .expect("joins");
    assert!(status.success(), "exit {status:?}: {logs}");
    assert!(logs.contains("vigil agent stopped"), "{logs}");
    logs
}

/// Puts the node under hard memory pressure until an eviction is accepted,
/// then relieves it; every eviction asked for meanwhile, with its answer.
async fn pressure_until_one_is_evicted(
    server: &ApiServer,
    fixture: &NodeFiles,
) -> Vec<(String, u16)> {
    fixture.memory_available(50);
    server
        .until(LIMIT, "an accepted eviction", |s| {
            s.evictions().iter().any(|r| r.status == 201)
        })
        .await;
    fixture.memory_available(4096);
    evicted_names(server)
}
