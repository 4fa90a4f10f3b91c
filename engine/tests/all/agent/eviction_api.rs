//! The killer alone, in-process, with a real `kube::Client` against the test server.

use super::*;
use vigil::cluster::{EvictionApi, PodAccess};
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
        why: vigil::eviction::Why::default(),
    }
}

/// The killer as the agent builds it: acting as its node.
fn killer(server: &ApiServer) -> EvictionApi {
    let mut config = kube::Config::new(server.url().parse().expect("a URL"));
    config.default_retry = false;
    config.auth_info.impersonate = PodAccess::Node.user(NODE);
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
    assert_eq!(
        deleted.impersonated,
        PodAccess::Node.user(NODE),
        "as the node"
    );
    // Deleting is the PDB override component's right alone.
    let delete = (
        "".to_owned(),
        "pods".to_owned(),
        "impersonate-on:associated-node:delete".to_owned(),
    );
    assert!(!granted().contains(&delete));
    assert_allowed_with(&server, &["pdb-override"]);
}

#[tokio::test]
async fn the_bookkeeping_client_retries_a_503_and_counts_the_retry() {
    let server = ApiServer::start().await;
    server.put("pods", NS, objects::best_effort_pod(NODE, NS, "web", 30));
    let metrics = std::sync::Arc::new(vigil::metrics::Metrics::default());
    let config = kube::Config::new(server.url().parse().expect("a URL"));
    let options = vigil::cluster::ClientOptions::default();
    let client = vigil::cluster::build(config, &metrics, options, true).unwrap();
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
    let options = vigil::cluster::ClientOptions {
        timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let client = vigil::cluster::build(config, &metrics, options, false).unwrap();
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

#[tokio::test]
async fn a_victim_asked_to_go_at_once_is_terminated_gracefully_never_force_deleted() {
    let server = ApiServer::start().await;
    server.kubelet(false);
    for name in ["web", "db", "raw"] {
        server.put("pods", NS, objects::best_effort_pod(NODE, NS, name, 30));
    }
    // What the API server makes of a grace period of 0: the object is gone
    // at once, its containers not yet stopped (a force delete).
    let raw = http::Request::delete(format!("/api/v1/namespaces/{NS}/pods/raw"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(br#"{"gracePeriodSeconds": 0}"#.to_vec())
        .unwrap();
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    client.request_text(raw).await.expect("deleted");
    assert!(server.get("pods", NS, "raw").is_none(), "removed at once");

    // vigil asked for 0 (by a policy, a config, a pod's own spec): both of
    // its requests carry a second, and the pod is terminating, not gone.
    let killer = killer(&server);
    let mut evicted = victim("web", "uid-web");
    evicted.grace_period_seconds = Some(0);
    assert_eq!(killer.evict(&evicted).await, Ok(()));
    let mut deleted = victim("db", "uid-db");
    deleted.grace_period_seconds = Some(0);
    deleted.override_pdb = true;
    assert_eq!(killer.evict(&deleted).await, Ok(()));
    for name in ["web", "db"] {
        let pod = server.get("pods", NS, name).expect("terminating, not gone");
        assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 1, "{name}");
        assert!(!pod["metadata"]["deletionTimestamp"].is_null(), "{name}");
    }
    let sent: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r.uri.contains("/pods/web") || r.uri.contains("/pods/db"))
        .filter_map(|r| r.body)
        .map(|body| body.get("deleteOptions").cloned().unwrap_or(body))
        .collect();
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter().all(|o| o["gracePeriodSeconds"] == 1),
        "{sent:?}"
    );
}
