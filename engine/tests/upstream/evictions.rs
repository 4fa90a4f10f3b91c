//! The Eviction API as the real server and its disruption controller answer
//! it, asked by the agent's killer under the agent's own token, acting as
//! its node: a budget's refusal, two budgets' 500, dry run, graceful
//! termination, throttling by API Priority and Fairness that is no budget's
//! refusal, and one node's credential refused every other node's pods.

use super::agent::{agent_identity, register_node, running_pod};
use super::{install_steps_ok, installed, overlay_with};
use serde_json::json;
use std::time::{Duration, Instant};
use vigil::cluster::{EvictionApi, PodAccess};
use vigil::eviction::{KillError, Killer, Urgency, Victim};
use vigil_testbed::upstream::Upstream;
use vigil_testbed::wait::Polling;

/// A bound for a broken test, never a wait.
const LIMIT: Duration = Duration::from_secs(60);

/// The killer as the agent on `node` builds it, under that agent's token.
async fn killer(cluster: &Upstream, node: &str) -> EvictionApi {
    EvictionApi::new(agent_client(cluster, node, PodAccess::Node).await)
}

/// A client as the agent on `node` builds its pods' and evictions' clients
/// for `access` (acting as the node, or as itself), under its token.
async fn agent_client(cluster: &Upstream, node: &str, access: PodAccess) -> kube::Client {
    client_acting_as(cluster, node, access.user(node)).await
}

/// A client under the token of the agent on `node`, impersonating `user`
/// (if any): the agent's, or a forgery.
async fn client_acting_as(cluster: &Upstream, node: &str, user: Option<String>) -> kube::Client {
    let text = agent_identity(cluster, node);
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    config.auth_info.impersonate = user;
    kube::Client::try_from(config).unwrap()
}

/// Asserts that pod `namespace/name` is there and not being deleted.
fn untouched(cluster: &Upstream, namespace: &str, name: &str) {
    let pod = cluster
        .get(Some(namespace), &format!("pod/{name}"))
        .expect("untouched");
    assert!(pod["metadata"]["deletionTimestamp"].is_null(), "{pod:#}");
}

fn victim(cluster: &Upstream, namespace: &str, name: &str) -> Victim {
    let pod = cluster
        .get(Some(namespace), &format!("pod/{name}"))
        .expect("the pod");
    let mut model: vigil::model::Pod = vigil::model::fixture::pod(name).usage_mib(100).build();
    model.namespace = namespace.into();
    model.uid = pod["metadata"]["uid"].as_str().unwrap().into();
    Victim {
        pod: model,
        strategy: "memory-pressure".into(),
        reason: "test".into(),
        urgency: Urgency::Hard,
        scope: Some("memory".into()),
        grace_period_seconds: Some(7),
        dry_run: false,
        override_pdb: false,
        why: vigil::eviction::Why::default(),
    }
}

/// A PodDisruptionBudget over the pods labelled `app: APP`, once the
/// disruption controller has judged it.
fn budget(cluster: &Upstream, namespace: &str, name: &str, app: &str) {
    cluster.apply(
        &json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        })
        .to_string(),
    );
    let judged = || {
        let pdb = cluster
            .get(Some(namespace), &format!("pdb/{name}"))
            .expect("the budget");
        (pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"]).then_some(())
    };
    let what = format!("the disruption controller judging {name}");
    Polling::new(Duration::from_millis(200), LIMIT).until(&what, judged, String::new);
}

/// The codes the API server answered to evictions of `namespace/pod`, from
/// its audit log.
fn answered(cluster: &Upstream, namespace: &str, pod: &str) -> Vec<u64> {
    let uri = format!("/api/v1/namespaces/{namespace}/pods/{pod}/eviction");
    cluster
        .audit()
        .iter()
        .filter(|e| {
            e["requestURI"]
                .as_str()
                .is_some_and(|u| u.starts_with(&uri))
        })
        .filter_map(|e| e["responseStatus"]["code"].as_u64())
        .collect()
}

fn pod_on(cluster: &Upstream, namespace: &str, name: &str, node: &str) {
    running_pod(cluster, namespace, name, node, json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_eviction_api_refuses_by_budget_and_terminates_gracefully() {
    let cluster = installed();
    register_node(cluster, "e1");
    let ns = "evictions";
    cluster.kubectl_ok(&["create", "namespace", ns]);
    for name in ["web", "db", "cache", "shared"] {
        pod_on(cluster, ns, name, "e1");
    }
    budget(cluster, ns, "db", "db");
    // Two budgets over one pod: the Eviction API cannot judge it.
    budget(cluster, ns, "shared-a", "shared");
    budget(cluster, ns, "shared-b", "shared");
    let killer = killer(cluster, "e1").await;

    let refused = killer.evict(&victim(cluster, ns, "db")).await;
    assert!(
        matches!(refused, Err(KillError::Refused(ref m)) if m.contains("disruption budget")),
        "{refused:?}"
    );
    let two = killer.evict(&victim(cluster, ns, "shared")).await;
    assert!(
        matches!(two, Err(KillError::NotEvictable(ref m)) if m.contains("more than one PodDisruptionBudget")),
        "{two:?}"
    );
    // What the server answered, as its audit log has it: the budget's 429
    // and the real 500.
    Polling::new(Duration::from_millis(200), LIMIT).until(
        "db answered 429 and shared 500",
        || {
            (answered(cluster, ns, "db") == [429] && answered(cluster, ns, "shared") == [500])
                .then_some(())
        },
        || {
            let (db, shared) = (answered(cluster, ns, "db"), answered(cluster, ns, "shared"));
            format!("db: {db:?}, shared: {shared:?}")
        },
    );
    // Dry run: judged, and nothing changes.
    let mut dry = victim(cluster, ns, "cache");
    dry.dry_run = true;
    assert_eq!(killer.evict(&dry).await, Ok(()));
    untouched(cluster, ns, "cache");
    // The next candidate is evicted, gracefully: terminating, not gone,
    // until its kubelet confirms.
    assert_eq!(killer.evict(&victim(cluster, ns, "web")).await, Ok(()));
    let web = cluster
        .get(Some(ns), "pod/web")
        .expect("terminating, not gone");
    assert!(web["metadata"]["deletionTimestamp"].is_string(), "{web:#}");
    assert_eq!(web["metadata"]["deletionGracePeriodSeconds"], 7);
    // A pod recreated under the name is not the victim.
    let mut stale = victim(cluster, ns, "cache");
    stale.pod.uid = "0b7d9b5e-0000-4000-8000-000000000000".into();
    let gone = killer.evict(&stale).await;
    assert!(matches!(gone, Err(KillError::Gone(_))), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_level_that_rejects_gives_429s_that_are_no_budgets_refusal() {
    let cluster = installed();
    register_node(cluster, "e2");
    let ns = "throttled";
    cluster.kubectl_ok(&["create", "namespace", ns]);
    pod_on(cluster, ns, "web", "e2");
    // No seats and nothing borrowed, and a full level rejects at once. (A
    // level with nothing executing still admits one request, so the 429s
    // come from evictions asked at once, as a node under pressure asks.)
    cluster.apply(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: test-reject}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 0\n    lendablePercent: 0\n    borrowingLimitPercent: 0\n    limitResponse: {type: Reject}\n",
    );
    // The agent evicts as its node (a node's requests are classified after
    // impersonation): the schema names the node, ahead of system-nodes (500).
    cluster.apply(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: test-reject}\nspec:\n  matchingPrecedence: 400\n  priorityLevelConfiguration: {name: test-reject}\n  rules:\n  - subjects:\n    - kind: User\n      user: {name: 'system:node:e2'}\n    resourceRules:\n    - verbs: [create]\n      apiGroups: ['']\n      resources: [pods/eviction]\n      namespaces: [throttled]\n",
    );
    let killer = killer(cluster, "e2").await;
    let mut dry = victim(cluster, ns, "web");
    dry.dry_run = true;
    let start = Instant::now();
    let throttled = loop {
        let answers = futures::future::join_all((0..32).map(|_| killer.evict(&dry))).await;
        for answer in &answers {
            assert!(
                matches!(answer, Ok(()) | Err(KillError::Throttled { .. })),
                "only admitted or throttled: {answer:?}"
            );
        }
        if let Some(Err(throttled)) = answers.into_iter().find(Result::is_err) {
            break throttled;
        }
        assert!(start.elapsed() < LIMIT, "never throttled");
    };
    let KillError::Throttled {
        retry_after,
        message,
    } = throttled
    else {
        unreachable!("only throttling is let through above");
    };
    assert!(retry_after >= Duration::from_secs(1), "{retry_after:?}");
    assert!(message.contains("Too many requests"), "{message}");
    untouched(cluster, ns, "web");
    cluster.kubectl_ok(&["delete", "flowschema", "test-reject"]);
}

/// What NodeRestriction says to a node about another node's pod.
const NOT_ITS_NODE: &str = "can only evict pods with spec.nodeName set to itself";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_nodes_credential_reads_and_evicts_its_own_nodes_pods_and_no_others() {
    let cluster = installed();
    for node in ["s1", "s2"] {
        register_node(cluster, node);
    }
    let ns = "scoped";
    cluster.kubectl_ok(&["create", "namespace", ns]);
    pod_on(cluster, ns, "theirs", "s1");
    pod_on(cluster, ns, "mine", "s2");
    let second = killer(cluster, "s2").await;

    // The second node's agent, acting as its node, cannot evict the first
    // node's pod: NodeRestriction refuses it, saying why.
    let refused = second.evict(&victim(cluster, ns, "theirs")).await;
    assert!(
        matches!(refused, Err(KillError::NotEvictable(ref m)) if m.starts_with("403") && m.contains(NOT_ITS_NODE)),
        "{refused:?}"
    );
    // Nor as itself: its service account may evict no pod at all.
    let itself = EvictionApi::new(agent_client(cluster, "s2", PodAccess::ServiceAccount).await);
    let refused = itself.evict(&victim(cluster, ns, "theirs")).await;
    assert!(
        matches!(refused, Err(KillError::NotEvictable(ref m)) if m.starts_with("403") && m.contains("cannot create resource \"pods/eviction\"")),
        "{refused:?}"
    );
    // Nor by naming the first node: its token is bound to the second.
    let forged = client_acting_as(cluster, "s2", PodAccess::Node.user("s1")).await;
    let forged = EvictionApi::new(forged);
    let refused = forged.evict(&victim(cluster, ns, "theirs")).await;
    assert!(
        matches!(refused, Err(KillError::NotEvictable(ref m)) if m.starts_with("403") && m.contains("impersonate")),
        "{refused:?}"
    );
    untouched(cluster, ns, "theirs");
    // Its own node's pod it evicts.
    assert_eq!(second.evict(&victim(cluster, ns, "mine")).await, Ok(()));

    // It reads its own node's pods, and no one else's.
    let pods = |client: kube::Client| kube::Api::<k8s_openapi::api::core::v1::Pod>::all(client);
    let as_node = pods(agent_client(cluster, "s2", PodAccess::Node).await);
    let on = |node: &str| kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let own = as_node.list(&on("s2")).await.expect("its own node's pods");
    assert!(
        own.items
            .iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("s2"))
    );
    assert!(
        own.items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("mine"))
    );
    for (what, params) in [
        ("the first node's", on("s1")),
        ("every", kube::api::ListParams::default()),
    ] {
        let error = as_node.list(&params).await.expect_err(what);
        assert!(
            matches!(&error, kube::Error::Api(status) if status.code == 403 && status.message.contains("spec.nodeName")),
            "listing {what} pods: {error:?}"
        );
    }
    let itself = pods(agent_client(cluster, "s2", PodAccess::ServiceAccount).await);
    let error = itself.list(&on("s2")).await.expect_err("no pods as itself");
    assert!(
        matches!(&error, kube::Error::Api(status) if status.code == 403),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_1_36_the_pods_cluster_wide_component_lets_the_service_account_read_and_evict() {
    // Its own cluster: the shared one keeps deploy/'s node-scoped rights.
    let cluster = Upstream::start();
    for (step, output) in cluster.install_steps(&overlay_with("pods-cluster-wide")) {
        install_steps_ok(&step, &output);
    }
    register_node(&cluster, "o1");
    let ns = "older";
    cluster.kubectl_ok(&["create", "namespace", ns]);
    pod_on(&cluster, ns, "web", "o1");
    let itself = agent_client(&cluster, "o1", PodAccess::ServiceAccount).await;
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::all(itself.clone());
    let on = kube::api::ListParams::default().fields("spec.nodeName=o1");
    let listed = pods.list(&on).await.expect("its node's pods, as itself");
    assert!(
        listed
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("web"))
    );
    // The price the docs name: every pod of the cluster, too.
    pods.list(&Default::default())
        .await
        .expect("every pod, as itself");
    let killer = EvictionApi::new(itself);
    assert_eq!(killer.evict(&victim(&cluster, ns, "web")).await, Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pdb_override_deletes_as_the_node_only_its_own_nodes_pods() {
    // Its own cluster: the shared one grants no delete.
    let cluster = Upstream::start();
    for (step, output) in cluster.install_steps(&overlay_with("pdb-override")) {
        install_steps_ok(&step, &output);
    }
    for node in ["d1", "d2"] {
        register_node(&cluster, node);
    }
    let ns = "overrides";
    cluster.kubectl_ok(&["create", "namespace", ns]);
    pod_on(&cluster, ns, "theirs", "d1");
    pod_on(&cluster, ns, "mine", "d2");
    let overriding = |name: &str| Victim {
        override_pdb: true,
        ..victim(&cluster, ns, name)
    };
    let second = killer(&cluster, "d2").await;
    let refused = second.evict(&overriding("theirs")).await;
    assert!(
        matches!(refused, Err(KillError::NotEvictable(ref m)) if m.starts_with("403") && m.contains("can only delete pods with spec.nodeName set to itself")),
        "{refused:?}"
    );
    // As itself it may delete nothing: the right is the node's.
    let itself = EvictionApi::new(agent_client(&cluster, "d2", PodAccess::ServiceAccount).await);
    let refused = itself.evict(&overriding("theirs")).await;
    assert!(
        matches!(refused, Err(KillError::NotEvictable(ref m)) if m.starts_with("403") && m.contains("cannot delete resource \"pods\"")),
        "{refused:?}"
    );
    untouched(&cluster, ns, "theirs");
    assert_eq!(second.evict(&overriding("mine")).await, Ok(()));
    let mine = cluster.get(Some(ns), "pod/mine");
    assert!(
        mine.is_none_or(|pod| !pod["metadata"]["deletionTimestamp"].is_null()),
        "its own pod stays"
    );
}
