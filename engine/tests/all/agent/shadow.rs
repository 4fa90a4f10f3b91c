//! A new version of a policy in shadow on the node (`rollout.shadow`):
//! pulled from the loopback registry like any version, asked beside the
//! serving one on the same candidates, compared and never acted on; then
//! served when the rollout reaches the node, and in shadow no more.

use super::pulled::{example, push};
use super::*;
use vigil::base::digest::Digest;
use vigil::base::node_hash::bucket;
use vigil_testbed::OciRegistry;

/// The policy the versions are of: the sorter the config uses.
const SORTER: &str = "default-sorter";
/// The config's merger.
const MERGER: &str = "default-merger";

/// A `VigilPolicy` for [`SORTER`]: `source` to `percent` of the nodes over
/// `previous`, and in shadow up to `shadow` percent.
fn sorter_policy(source: &str, previous: &str, percent: u8, shadow: u8) -> Value {
    json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
           "metadata": {"name": SORTER},
           "spec": {"source": {"oci": {"ref": source, "insecure": true, "allowUnsigned": true}},
                    "rollout": {"percent": percent, "previous": previous,
                                "shadow": {"percent": shadow}}}})
}

/// A `VigilPolicy` `name` that no node serves (no `previous`: the
/// built-in serves) and every node runs in shadow: `reference`.
fn shadow_everywhere(name: &str, reference: &str) -> Value {
    json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
           "metadata": {"name": name},
           "spec": {"source": {"oci": {"ref": reference, "insecure": true, "allowUnsigned": true}},
                    "rollout": {"percent": 0, "shadow": {"percent": 100}}}})
}

/// Waits until `version` of `name` compares in shadow on this node (its
/// JavaScript compile included).
async fn until_comparing(server: &ApiServer, name: &str, version: &str) {
    let what = format!("{name}@{version} comparing in shadow");
    server
        .until(COMPILING, &what, |s| {
            let shadow = &policy_status(s, name)["shadow"];
            shadow["state"] == "Comparing" && shadow["version"] == version
        })
        .await;
}

/// The sorter's status on this node.
fn sorter_status(server: &ApiServer) -> Value {
    policy_status(server, SORTER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reversing_sorter_in_shadow_differs_while_the_serving_version_evicts_until_it_serves() {
    let registry = OciRegistry::start();
    let cache = tempfile::tempdir().unwrap();
    let (v1_file, v1) = example("js-sorter");
    let (v2_file, v2) = example("js-sorter-v2");
    let old = push(&registry, &v1_file, "1", cache.path());
    let new = push(&registry, &v2_file, "2", cache.path());
    let v2_version = Digest::of(&v2).to_string();

    // The rollout stops just short of this node's bucket, the shadow takes
    // it: v1 serves, v2 runs in shadow.
    let mine = bucket(SORTER, NODE);
    assert!(mine < 100);
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    server.put(
        "vigilpolicies",
        "",
        sorter_policy(&new, &old, mine, mine + 1),
    );
    let agent = start(&server, &fixture, &["--status-interval", "100ms"]);
    let v1_digest = Digest::of(&v1).hex();
    // Each compiled once, in a child process: one wait each.
    server
        .until(COMPILING, "v1 serving", |s| {
            sorter_status(s)["digest"] == v1_digest.as_str()
        })
        .await;
    until_comparing(&server, SORTER, &v2_version).await;
    assert_eq!(sorter_status(&server)["shadow"]["reference"], new.as_str());
    watching(&server).await;

    // Pressure: v1 keeps the strategy's order and evicts the biggest; v2
    // would have evicted the smallest, and says so; it evicts nobody.
    fixture.memory_available(50);
    until_evicted(&server, "big").await;
    let divergence = "serving evicts shop/big (rank 1), shadow evicts shop/small";
    server
        .until(LIMIT, "the divergence as an Event on the Node", |s| {
            !events(s, "PolicyShadowDiffers").is_empty()
        })
        .await;
    let event = &events(&server, "PolicyShadowDiffers")[0];
    assert_eq!(event["regarding"]["kind"], "Node");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.starts_with(&format!(
            "{SORTER}@{v2_version} in shadow decides otherwise: "
        )),
        "{note}"
    );
    assert!(note.contains(divergence), "{note}");
    server
        .until(LIMIT, "the divergence on the policy's status", |s| {
            let last = &sorter_status(s)["shadow"]["lastDivergence"];
            last["call"] == "sort"
                && last["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(divergence))
        })
        .await;
    fixture.memory_available(4096);
    let differ = format!(
        "vigil_policy_shadow_total{{policy=\"{SORTER}\",version=\"{v2_version}\",result=\"differ\"}}"
    );
    until_metric(&agent, &differ).await;
    assert_eq!(evicted_names(&server), [("big".to_owned(), 201)]);
    assert!(
        !agent.metrics().contains("result=\"fault\""),
        "{}",
        agent.metrics()
    );

    // The rollout reaches the node: v2 serves — from the artifact compiled
    // for the shadow, not compiled again — nothing runs in shadow, and the
    // next pressure evicts what v2 puts first.
    let compiles = agent.metric("vigil_policy_compiles_total");
    assert_eq!(compiles, Some(2.0), "v1 and v2: {}", agent.metrics());
    server.put(
        "vigilpolicies",
        "",
        sorter_policy(&new, &old, mine + 1, mine + 1),
    );
    let v2_digest = Digest::of(&v2).hex();
    server
        .until(LIMIT, "v2 serving, no shadow", |s| {
            let status = sorter_status(s);
            status["digest"] == v2_digest.as_str() && status["shadow"].is_null()
        })
        .await;
    assert_eq!(agent.metric("vigil_policy_compiles_total"), compiles);
    server
        .until(LIMIT, "the kubelet removed big", |s| {
            s.get("pods", NS, "big").is_none()
        })
        .await;
    fixture.memory_available(50);
    until_evicted(&server, "small").await;
    fixture.memory_available(4096);
    assert!(
        !evicted_names(&server)
            .iter()
            .any(|(pod, _)| pod == "medium"),
        "{:?}",
        evicted_names(&server)
    );
    assert_the_cluster_role_allows_every_request(&server);
    terminated_cleanly(agent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merger_in_shadow_merges_each_config_change_beside_the_serving_one() {
    let registry = OciRegistry::start();
    let cache = tempfile::tempdir().unwrap();
    // The JavaScript merger is the default merger again: it should agree.
    let (file, bytes) = example("js-merger");
    let reference = push(&registry, &file, "1", cache.path());
    let version = Digest::of(&bytes).to_string();
    let (server, fixture) = test_node().await;
    server.put("vigilpolicies", "", shadow_everywhere(MERGER, &reference));
    // The merger's calls may take 5 s: agreeing is the matter here, and a
    // JavaScript merger's first call on a busy machine may outlast 100 ms.
    let config = format!("{CONFIG}  {MERGER}: {{deadlineMs: 5000}}\n");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(binary, NODE, &fixture, &server, &config, &[]);
    until_comparing(&server, MERGER, &version).await;
    let agree = |n: u32| {
        format!(
            "vigil_policy_shadow_total{{policy=\"{MERGER}\",version=\"{version}\",result=\"agree\"}} {n}"
        )
    };
    assert!(!agent.metrics().contains(&agree(1)), "{}", agent.metrics());

    // Each change of the layers that apply is merged by both.
    for (generation, burst) in [(1, 2), (2, 4)] {
        let config = json!({"evictionBurst": burst, "configTrialSeconds": 0});
        server.put(
            "vigilconfigs",
            "",
            vigil_config("fleet", Value::Null, config),
        );
        let applied = format!("VigilConfig/fleet@{generation}");
        until_config(&server, "Active", &applied).await;
        until_metric(&agent, &agree(generation)).await;
    }
    let metrics = agent.metrics();
    assert!(!metrics.contains("result=\"differ\""), "{metrics}");
    assert!(!metrics.contains("result=\"fault\""), "{metrics}");
    terminated_cleanly(agent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulting_shadow_leaves_the_serving_version_and_the_cycle_untouched() {
    let registry = OciRegistry::start();
    let cache = tempfile::tempdir().unwrap();
    let (file, bytes) = example("js-sorter");
    let reference = push(&registry, &file, "1", cache.path());
    let version = Digest::of(&bytes).to_string();
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    // The sorter's calls may use 4 MiB: enough for the built-in that
    // serves, far too little for a JavaScript engine, which then faults on
    // every call in shadow (the shadow gets the serving version's limits).
    let limits = json!({"policies": {SORTER: {"memoryLimitMiB": 4}}});
    server.put(
        "vigilconfigs",
        "",
        vigil_config("fleet", Value::Null, limits),
    );
    server.put("vigilpolicies", "", shadow_everywhere(SORTER, &reference));
    let agent = start(&server, &fixture, &[]);
    until_comparing(&server, SORTER, &version).await;
    watching(&server).await;

    fixture.memory_available(50);
    until_evicted(&server, "big").await;
    let fault = format!(
        "vigil_policy_shadow_total{{policy=\"{SORTER}\",version=\"{version}\",result=\"fault\"}}"
    );
    until_metric(&agent, &fault).await;
    fixture.memory_available(4096);
    // The serving built-in answered, faulted never and serves on.
    let metrics = agent.metrics();
    let serving_faults: Vec<&str> = (metrics.lines())
        .filter(|l| l.starts_with("vigil_policy_faults_total{name=\"default-sorter\""))
        .collect();
    assert!(
        serving_faults.len() == 1 && serving_faults[0].ends_with("} 0"),
        "{metrics}"
    );
    assert_eq!(evicted_names(&server), [("big".to_owned(), 201)]);
    let status = sorter_status(&server);
    assert_eq!(status["source"], "builtin", "{status}");
    assert_eq!(status["state"], "Active", "{status}");
    terminated_cleanly(agent).await;
}
