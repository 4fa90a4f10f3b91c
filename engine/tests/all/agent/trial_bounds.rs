//! A trial that judges decisions, not only faults: a version on trial that
//! takes part in more evictions than its `VigilPolicy`'s
//! `spec.trial.maxEvictions` allows rolls back as a faulting one would,
//! with the reason on its status.

use super::pulled::{example, push};
use super::*;
use vigil::base::digest::Digest;
use vigil_testbed::OciRegistry;

/// Waits until the node evicted `pod` (accepted), then relieves the
/// pressure.
async fn pressure_until_evicted(server: &ApiServer, fixture: &NodeFiles, pod: &str) {
    fixture.memory_available(50);
    until_evicted(server, pod).await;
    fixture.memory_available(4096);
    server
        .until(LIMIT, &format!("the kubelet removed {pod}"), |s| {
            s.get("pods", NS, pod).is_none()
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sorter_on_trial_that_evicts_past_its_bound_rolls_back_with_the_reason() {
    let registry = OciRegistry::start();
    let cache = tempfile::tempdir().unwrap();
    let (file, bytes) = example("js-sorter");
    let reference = push(&registry, &file, "1", cache.path());
    let (server, fixture) = test_node().await;
    for (name, mib) in [("small", 100), ("big", 900), ("medium", 300)] {
        pod(&server, &fixture, name, mib);
    }
    let policy = json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
        "metadata": {"name": "default-sorter"},
        "spec": {"source": {"oci": {"ref": reference, "insecure": true, "allowUnsigned": true}},
                 "trial": {"maxEvictions": 1}}});
    server.put("vigilpolicies", "", policy);
    let agent = start(&server, &fixture, &["--status-interval", "100ms"]);
    let status = |s: &ApiServer| policy_status(s, "default-sorter");
    let version = Digest::of(&bytes).hex();
    server
        .until(COMPILING, "the pulled sorter on trial", |s| {
            status(s)["digest"] == version.as_str() && status(s)["state"] == "Trial"
        })
        .await;
    watching(&server).await;

    // The first eviction is within the bound; the second is past it.
    pressure_until_evicted(&server, &fixture, "big").await;
    assert_eq!(status(&server)["state"], "Trial");
    pressure_until_evicted(&server, &fixture, "medium").await;
    server
        .until(LIMIT, "the sorter rolled back", |s| {
            status(s)["state"] == "RolledBack"
        })
        .await;
    let rolled_back = status(&server);
    assert_eq!(rolled_back["source"], "builtin", "{rolled_back}");
    let message = rolled_back["lastFault"]["message"].as_str().unwrap();
    assert!(
        message.contains("took part in 2 evictions on trial, above spec.trial.maxEvictions 1"),
        "{message}"
    );
    assert!(
        agent.logs().contains("version broke a bound of its trial"),
        "{}",
        agent.logs()
    );
    assert_eq!(
        evicted_names(&server),
        [("big".to_owned(), 201), ("medium".to_owned(), 201)]
    );
    assert_the_cluster_role_allows_every_request(&server);
    terminated_cleanly(agent).await;
}
