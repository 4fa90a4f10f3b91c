//! The fleet view's publisher against the project's test API server, driven
//! by a real `kube::Client`: the status objects appear, follow the registry
//! and the loop, disappear with their policy, survive API errors and
//! conflicts, and a flapping policy costs a bounded number of writes.
//! Everything is awaited on the server's changes (never a sleep).

use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use vigil::base::clock::ManualClock;
use vigil::cluster::watches::{self, Reflected};
use vigil::config::{ConfigView, Reason, Status};
use vigil::eviction::{Settled, Urgency, Victim};
use vigil::fleet::Activity;
use vigil::fleet::{Inputs, Reconciler};
use vigil::policy::builtin;
use vigil::policy::{Origin, Policy, Registry};
use vigil_testbed::{ApiServer, objects};
use vigil_tests::*;

const NODE: &str = "node-1";
/// A bound for a broken test, never a wait.
const LIMIT: Duration = Duration::from_secs(60);
const POLICIES: &str = "vigilpolicystatuses";

/// A publisher running against a test API server holding the Node.
struct Fleet {
    server: ApiServer,
    registry: Arc<Registry>,
    clock: Arc<ManualClock>,
    config: watch::Sender<ConfigView>,
    activity: watch::Sender<Activity>,
    _node: Reflected<k8s_openapi::api::core::v1::Node>,
    stop: CancellationToken,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn report(reason: Reason, message: &str) -> ConfigView {
    ConfigView {
        status: Status {
            reason,
            message: message.into(),
        },
        assigned: None,
        active: None,
        last_known_good: None,
        trial_end: None,
        last_error: None,
        observing: false,
        paused_by: Vec::new(),
    }
}

impl Fleet {
    /// Starts the publisher; `before` runs on the server first (faults to inject).
    async fn start(spacing: Duration, before: impl FnOnce(&ApiServer)) -> Self {
        // No pull controller: its channel is closed from the start.
        let (fleet, _) = Self::pulling(spacing, before).await;
        fleet
    }

    /// [`Fleet::start`] beside a pull controller that has not passed yet;
    /// the function answered makes its first pass, finding no version.
    async fn pulling(spacing: Duration, before: impl FnOnce(&ApiServer)) -> (Self, impl FnOnce()) {
        let stop = CancellationToken::new();
        let pulls = watch::Sender::new(Default::default());
        let pulled = pulls.subscribe();
        let running = stop.clone();
        let first_pass = move || {
            pulls.send_modify(|_| {});
            // Open until the fleet stops, as a running controller keeps it.
            tokio::spawn(async move {
                running.cancelled().await;
                drop(pulls);
            });
        };
        let server = ApiServer::start().await;
        server.put("nodes", "", objects::node(NODE));
        before(&server);
        let config = kube::Config::new(server.url().parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (registry, clock) = registry(None);
        let node = watches::node(client.clone(), NODE, |_| {});
        let (config, activity) = (
            watch::Sender::new(report(Reason::Defaults, "running the defaults")),
            watch::Sender::new(Activity::default()),
        );
        let inputs = Inputs {
            registry: Arc::clone(&registry),
            config: config.subscribe(),
            activity: activity.subscribe(),
            node: node.store.clone(),
            node_changes: node.progress.clone(),
            pulls: pulled,
            shadows: watch::Sender::new(Default::default()).subscribe(),
        };
        let reconciler = Reconciler::new(client, NODE, inputs, spacing);
        tokio::spawn(reconciler.run(stop.clone()));
        let fleet = Self {
            server,
            registry,
            clock,
            config,
            activity,
            _node: node,
            stop,
        };
        (fleet, first_pass)
    }

    /// Waits until the policy statuses are those of every policy the
    /// registry reports, each as `check` wants.
    async fn until_policies(&self, what: &str, check: impl Fn(&[Value]) -> bool) {
        self.server
            .until(LIMIT, what, |s| check(&s.list(POLICIES)))
            .await;
    }

    fn node_status(&self) -> Option<Value> {
        self.server.get("vigilnodestatuses", "", NODE)
    }
}

fn of_policy<'a>(objects: &'a [Value], policy: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| o["spec"]["policy"] == policy)
        .collect()
}

/// The requests that wrote (created, replaced, deleted) policy statuses.
fn writes(server: &ApiServer) -> Vec<(String, u16)> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.uri.contains(POLICIES) && r.method != "GET")
        .map(|r| (r.method, r.status))
        .collect()
}

fn victim(name: &str) -> Victim {
    Victim {
        pod: candidate(name, 100).pod,
        strategy: "memory-pressure".into(),
        reason: "the largest working set".into(),
        urgency: Urgency::Hard,
        scope: Some("memory.available".into()),
        grace_period_seconds: None,
        dry_run: false,
        override_pdb: false,
        why: vigil::eviction::Why::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_objects_appear_follow_the_policies_and_the_loop_and_disappear() {
    let fleet = Fleet::start(Duration::from_millis(50), |_| {}).await;
    let builtins = fleet.registry.status().len();
    fleet
        .until_policies("a status per built-in policy", |objects| {
            objects.len() == builtins
        })
        .await;
    for object in fleet.server.list(POLICIES) {
        let policy = object["spec"]["policy"].as_str().unwrap();
        assert_eq!(object["metadata"]["name"], format!("{NODE}.{policy}"));
        assert_eq!(object["metadata"]["labels"]["vigil.dev/node"], NODE);
        assert_eq!(object["metadata"]["labels"]["vigil.dev/policy"], policy);
        assert_eq!(object["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(
            object["metadata"]["ownerReferences"][0]["uid"],
            "uid-node-1"
        );
        assert_eq!(object["status"]["state"], "Active", "{object}");
        assert_eq!(object["status"]["source"], "builtin");
        let digest = fleet.registry.get(policy).unwrap().digest();
        assert_eq!(object["status"]["digest"], digest.hex().as_str());
        assert_eq!(object["status"]["version"], digest.to_string().as_str());
    }
    fleet
        .server
        .until(LIMIT, "the node's status", |_| {
            fleet.node_status().is_some()
        })
        .await;
    let node = fleet.node_status().unwrap();
    assert_eq!(node["status"]["config"]["state"], "Defaults");
    assert_eq!(recorded(&node).len(), builtins, "{node}");
    assert_eq!(node["metadata"]["ownerReferences"][0]["name"], NODE);

    // A new version on trial, and a new policy.
    let sorter = version(&fleet.registry, "default-sorter", REVERSE_SORTER);
    let extra = version(&fleet.registry, "reverse-sorter", REVERSE_SORTER);
    fleet.registry.apply(vec![Arc::clone(&sorter), extra], &[]);
    fleet
        .until_policies("the trial and the new policy", |objects| {
            let sorter = of_policy(objects, "default-sorter");
            let extra = of_policy(objects, "reverse-sorter");
            sorter.len() == 1
                && sorter[0]["status"]["state"] == "Trial"
                && extra.len() == 1
                && extra[0]["status"]["source"] == "file"
        })
        .await;
    let objects = fleet.server.list(POLICIES);
    let trial = &of_policy(&objects, "default-sorter")[0]["status"];
    assert_eq!(trial["digest"], sorter.digest().hex().as_str());
    assert_eq!(
        trial["lastKnownGood"],
        fleet
            .registry
            .builtin("default-sorter")
            .unwrap()
            .digest()
            .hex()
            .as_str()
    );
    assert!(trial["trialEnd"].is_string(), "{trial}");

    // A version refused at load shows as Failed, what served before still serving.
    let refused = fleet.registry.prepare(
        "reverse-sorter",
        NOT_A_POLICY,
        Origin::File("/p/reverse-sorter.wasm".into()),
    );
    assert!(refused.is_err());
    fleet
        .until_policies("the refused version", |objects| {
            of_policy(objects, "reverse-sorter")
                .first()
                .is_some_and(|o| o["status"]["state"] == "Failed")
        })
        .await;
    let objects = fleet.server.list(POLICIES);
    let failed = &of_policy(&objects, "reverse-sorter")[0]["status"];
    assert!(
        failed["lastFault"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{failed}"
    );
    assert_eq!(failed["world"], "candidate-sorter");

    // Its file removed, its status goes.
    fleet.registry.apply(vec![], &["reverse-sorter".into()]);
    fleet
        .until_policies("the removed policy's status deleted", |objects| {
            of_policy(objects, "reverse-sorter").is_empty() && objects.len() == builtins
        })
        .await;
    fleet
        .server
        .until(LIMIT, "the node's record without it", |_| {
            fleet
                .node_status()
                .is_some_and(|n| recorded(&n).len() == builtins)
        })
        .await;

    // The loop's activity and the config's state reach the node's status.
    fleet.activity.send_modify(|activity| {
        activity.settled(
            &Settled::Accepted(victim("big")),
            std::time::SystemTime::now(),
        );
    });
    fleet
        .config
        .send_replace(report(Reason::Trial, "running pool-a on trial"));
    fleet
        .server
        .until(LIMIT, "the eviction and the config trial", |_| {
            fleet.node_status().is_some_and(|n| {
                n["status"]["lastEvictions"][0]["pod"] == "default/big"
                    && n["status"]["config"]["state"] == "Trial"
            })
        })
        .await;
    let node = fleet.node_status().unwrap();
    assert_eq!(node["status"]["evictions"]["accepted"], 1);
    assert_eq!(
        node["status"]["lastEvictions"][0]["strategy"],
        "memory-pressure"
    );
    assert_eq!(node["status"]["lastEvictions"][0]["urgency"], "hard");
}

/// The policies the node's status object records as having objects.
fn recorded(node: &Value) -> Vec<&str> {
    let policies = node["status"]["policies"].as_array();
    policies
        .map(|p| p.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A `VigilPolicyStatus` of `policy` on `node` named `name`.
fn policy_status(name: &str, node: &str, policy: &str) -> Value {
    serde_json::json!({
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "VigilPolicyStatus",
        "metadata": {
            "name": name,
            "labels": {"vigil.dev/node": node, "vigil.dev/policy": policy},
        },
        "spec": {"node": node, "policy": policy},
        "status": {"state": "Active", "since": "2026-01-01T00:00:00Z", "faults": 0},
    })
}

/// This node's `VigilNodeStatus` as an agent left it, recording `policies`
/// (absent: an agent before 0.2).
fn node_status(policies: Option<&[&str]>) -> Value {
    let mut status = serde_json::json!({"config": {"state": "Defaults", "message": "old"}});
    if let Some(policies) = policies {
        status["policies"] = policies.into();
    }
    serde_json::json!({
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "VigilNodeStatus",
        "metadata": {"name": NODE},
        "spec": {"node": NODE},
        "status": status,
    })
}

/// The names of the policy status objects on the server.
fn names(server: &ApiServer) -> Vec<String> {
    let mut names: Vec<String> = server
        .list(POLICIES)
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_a_policy_gone_while_the_agent_was_down_are_found_by_name() {
    // The agent stopped with `gone-sorter` running; its file went meanwhile.
    let fleet = Fleet::start(Duration::from_millis(50), |server| {
        server.put(
            "vigilnodestatuses",
            "",
            node_status(Some(&["default-sorter", "gone-sorter"])),
        );
        let gone = format!("{NODE}.gone-sorter");
        server.put(POLICIES, "", policy_status(&gone, NODE, "gone-sorter"));
    })
    .await;
    let mut wanted: Vec<String> = (fleet.registry.status().into_iter())
        .map(|s| format!("{NODE}.{}", s.name))
        .collect();
    wanted.sort();
    fleet
        .server
        .until(
            LIMIT,
            "the built-ins' objects, gone-sorter's deleted",
            |s| names(s) == wanted,
        )
        .await;
    let requests = fleet.server.requests();
    let reads: Vec<_> = requests
        .iter()
        .filter(|r| r.uri.contains("vigil") && r.method == "GET")
        .collect();
    assert!(reads.iter().all(|r| !r.is_list()), "no LIST: {reads:?}");
    assert!(
        reads.iter().all(|r| r.from_cache()),
        "every read from the cache: {reads:?}"
    );
    let read_gone = reads.iter().any(|r| r.uri.contains("node-1.gone-sorter"));
    assert!(read_gone, "the recorded policy's object was read by name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pulled_policys_object_is_kept_until_the_pull_controller_has_passed() {
    // The agent stopped serving `a-pulled-sorter` from a registry.
    // Restarted, its registry does not serve it yet and the pull controller
    // has not passed: the object is not taken for gone (a restart that
    // deleted and created it again was a write too many). Its name sorts
    // before the built-ins', so its key is synced before their objects are
    // written.
    let pulled = format!("{NODE}.a-pulled-sorter");
    let (fleet, first_pass) = Fleet::pulling(Duration::from_millis(50), |server| {
        server.put(
            "vigilnodestatuses",
            "",
            node_status(Some(&["a-pulled-sorter", "default-sorter"])),
        );
        server.put(
            POLICIES,
            "",
            policy_status(&pulled, NODE, "a-pulled-sorter"),
        );
    })
    .await;
    let mut builtins: Vec<String> = (fleet.registry.status().into_iter())
        .map(|s| format!("{NODE}.{}", s.name))
        .collect();
    let mut wanted = builtins.clone();
    wanted.push(pulled.clone());
    wanted.sort();
    fleet
        .server
        .until(LIMIT, "the built-ins' objects beside the pulled one", |s| {
            names(s) == wanted
        })
        .await;
    let deletes = |s: &ApiServer| s.requests().iter().filter(|r| r.method == "DELETE").count();
    assert_eq!(deletes(&fleet.server), 0);
    // Its first pass gives the node no version of it: now it is gone.
    first_pass();
    builtins.sort();
    fleet
        .server
        .until(LIMIT, "the pulled policy's object deleted", |s| {
            names(s) == builtins
        })
        .await;
    assert_eq!(deletes(&fleet.server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_named_by_an_earlier_release_are_replaced_after_one_list() {
    let fleet = Fleet::start(Duration::from_millis(50), |server| {
        server.put("vigilnodestatuses", "", node_status(None));
        let earlier = policy_status("node-1-x7k2q", NODE, "default-sorter");
        server.put(POLICIES, "", earlier);
        let other_node = policy_status("node-2-q2c9m", "node-2", "default-sorter");
        server.put(POLICIES, "", other_node);
    })
    .await;
    let mut wanted: Vec<String> = (fleet.registry.status().into_iter())
        .map(|s| format!("{NODE}.{}", s.name))
        .chain(["node-2-q2c9m".to_owned()])
        .collect();
    wanted.sort();
    fleet
        .server
        .until(LIMIT, "the earlier release's object replaced", |s| {
            names(s) == wanted
        })
        .await;
    fleet
        .server
        .until(LIMIT, "the node's record", |_| {
            fleet
                .node_status()
                .is_some_and(|n| recorded(&n).len() == wanted.len() - 1)
        })
        .await;
    let lists: Vec<_> = (fleet.server.requests().into_iter())
        .filter(|r| r.uri.contains("vigil") && r.is_list())
        .map(|r| r.uri)
        .collect();
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert!(
        lists[0].contains("labelSelector=vigil.dev%2Fnode%3Dnode-1"),
        "{lists:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_policy_costs_no_write_however_long_it_runs() {
    let fleet = Fleet::start(Duration::from_millis(50), |_| {}).await;
    let all = fleet.registry.status().len();
    fleet
        .until_policies("every status", |objects| objects.len() == all)
        .await;
    let before = writes(&fleet.server).len();
    for _ in 0..50 {
        sort_names(&fleet.registry, "default-sorter");
    }
    // Hours later, another policy appears: every key is synced again.
    fleet.clock.advance(Duration::from_secs(6 * 3600));
    let extra = version(&fleet.registry, "reverse-sorter", REVERSE_SORTER);
    fleet.registry.install(extra);
    fleet
        .until_policies("the new policy's status", |objects| {
            of_policy(objects, "reverse-sorter").len() == 1
        })
        .await;
    assert_eq!(
        writes(&fleet.server)[before..],
        [("POST".to_owned(), 201)],
        "only the new policy's object is written: call counts are metrics"
    );
    let objects = fleet.server.list(POLICIES);
    let sorter = &of_policy(&objects, "default-sorter")[0]["status"];
    assert!(sorter.get("calls").is_none(), "{sorter}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_rewrites_no_object_that_says_the_same() {
    let first = Fleet::start(Duration::from_millis(50), |_| {}).await;
    let all = first.registry.status().len();
    first
        .until_policies("every status", |objects| objects.len() == all)
        .await;
    first
        .server
        .until(LIMIT, "the node's record", |_| {
            first
                .node_status()
                .is_some_and(|n| recorded(&n).len() == all)
        })
        .await;
    let (node, objects) = (first.node_status().unwrap(), first.server.list(POLICIES));
    drop(first);
    // The agent restarts: its earlier process had started a day before, so
    // its objects say the built-ins are Active since then.
    let second = Fleet::start(Duration::from_millis(50), |server| {
        server.put("vigilnodestatuses", "", node);
        for mut object in objects {
            object["status"]["since"] = "2026-01-01T00:00:00Z".into();
            server.put(POLICIES, "", object);
        }
    })
    .await;
    // Another policy appears once the restarted agent has read its objects:
    // every key has been synced before it.
    second
        .server
        .until(LIMIT, "every object read", |s| {
            s.requests()
                .iter()
                .filter(|r| r.method == "GET" && r.uri.contains(POLICIES))
                .count()
                >= all
        })
        .await;
    let extra = version(&second.registry, "reverse-sorter", REVERSE_SORTER);
    second.registry.install(extra);
    second
        .until_policies("the new policy's status", |objects| {
            of_policy(objects, "reverse-sorter").len() == 1
        })
        .await;
    assert_eq!(
        writes(&second.server),
        [("POST".to_owned(), 201)],
        "only the new policy's object is written"
    );
    let objects = second.server.list(POLICIES);
    let sorter = &of_policy(&objects, "default-sorter")[0]["status"];
    assert_eq!(sorter["since"], "2026-01-01T00:00:00Z", "{sorter}");
}

/// `bytes` loaded as a version of `name` from the file `/p/NAME.wasm`.
fn version(registry: &Registry, name: &str, bytes: &[u8]) -> Arc<Policy> {
    let path = format!("/p/{name}.wasm");
    registry
        .prepare(name, bytes, Origin::File(path.into()))
        .unwrap()
}

/// Installs a new version of the default sorter (on trial).
fn new_sorter(registry: &Registry, bytes: &[u8]) {
    let version = version(registry, "default-sorter", bytes);
    registry.install(version);
}

fn sorter_state(objects: &[Value]) -> Option<String> {
    let sorter = of_policy(objects, "default-sorter");
    sorter.first()?["status"]["state"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_conflicts_are_retried_until_the_objects_are_right() {
    // The first list fails.
    let fleet = Fleet::start(Duration::from_millis(50), |server| {
        server.fail_next(POLICIES, 500);
    })
    .await;
    let builtins = fleet.registry.status().len();
    fleet
        .until_policies("every status despite the failed list", |objects| {
            objects.len() == builtins
        })
        .await;

    // An update fails: it is retried (after listing again).
    fleet.server.fail_next(POLICIES, 500);
    new_sorter(&fleet.registry, REVERSE_SORTER);
    fleet
        .until_policies("the trial despite the failed update", |objects| {
            sorter_state(objects).as_deref() == Some("Trial")
        })
        .await;
    let failed: Vec<_> = fleet
        .server
        .requests()
        .into_iter()
        .filter(|r| r.uri.contains(POLICIES) && r.status == 500)
        .map(|r| r.method)
        .collect();
    assert_eq!(failed, ["GET", "PUT"], "the list, then an update failed");

    // Someone else changes the object: the next update conflicts, the
    // publisher lists again and writes over it.
    let mut tampered = of_policy(&fleet.server.list(POLICIES), "default-sorter")[0].clone();
    tampered["status"]["state"] = "Tampered".into();
    fleet.server.put(POLICIES, "", tampered);
    new_sorter(&fleet.registry, builtin("default-sorter").unwrap());
    fleet
        .until_policies("the tampered object rewritten", |objects| {
            sorter_state(objects).as_deref() == Some("Active")
        })
        .await;
    let conflicts = fleet
        .server
        .requests()
        .iter()
        .filter(|r| r.uri.contains(POLICIES) && r.status == 409)
        .count();
    assert_eq!(conflicts, 1, "{:?}", writes(&fleet.server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_rapid_policy_changes_make_a_bounded_number_of_writes() {
    let spacing = Duration::from_millis(500);
    let fleet = Fleet::start(spacing, |_| {}).await;
    let builtins = fleet.registry.status().len();
    fleet
        .until_policies("the built-ins' statuses", |objects| {
            objects.len() == builtins
        })
        .await;
    let before = writes(&fleet.server).len();
    let versions = [REVERSE_SORTER, builtin("default-sorter").unwrap()]
        .map(|bytes| version(&fleet.registry, "flapper", bytes));
    // The policy flaps at 500 Hz for two seconds.
    let mut flaps = tokio::time::interval(Duration::from_millis(2));
    let start = Instant::now();
    for i in 0..1000 {
        flaps.tick().await;
        fleet.registry.install(Arc::clone(&versions[i % 2]));
    }
    let last = versions[1].digest().hex();
    fleet
        .until_policies("the last version published", |objects| {
            of_policy(objects, "flapper")
                .first()
                .is_some_and(|o| o["status"]["digest"] == last.as_str())
        })
        .await;
    let elapsed = start.elapsed();
    let made = writes(&fleet.server).len() - before;
    // One write at the first change, then at most one per spacing.
    let bound = 2 + (elapsed.as_secs_f64() / spacing.as_secs_f64()).ceil() as usize;
    assert!(
        made <= bound,
        "{made} writes for 1000 changes in {elapsed:?} (bound {bound})"
    );
    assert!(made >= 1);
}
