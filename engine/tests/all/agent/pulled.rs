//! Policies from an OCI registry: components published with `vigil policy
//! push` to Debian's distribution registry on loopback, named by
//! `VigilPolicy` objects, pulled and served by the agent; a staged rollout
//! across this node's bucket; the registry going away.

use super::*;
use base64::Engine as _;
use vigil::base::digest::Digest;
use vigil::base::node_hash::bucket;
use vigil_testbed::{OciRegistry, RegistryOptions};

pub(super) const POLICY: &str = "my-sorter";

/// An example policy's component (built by `examples/policies/build.sh`).
pub(super) fn example(name: &str) -> (String, Vec<u8>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../examples/policies/{name}/{name}.wasm"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the example policies with examples/policies/build.sh",
            path.display()
        )
    });
    (path.display().to_string(), bytes)
}

/// Publishes `file` as `registry/vigil/my-sorter:TAG` with `vigil policy
/// push` over plain HTTP; answers the pinned reference it prints.
pub(super) fn push(
    registry: &OciRegistry,
    file: &str,
    tag: &str,
    cache: &std::path::Path,
) -> String {
    push_with(registry, file, tag, cache, &["--insecure"], "")
}

/// [`push`] with `flags`, and `password` in `$VIGIL_REGISTRY_PASSWORD`.
fn push_with(
    registry: &OciRegistry,
    file: &str,
    tag: &str,
    cache: &std::path::Path,
    flags: &[&str],
    password: &str,
) -> String {
    let target = format!("{}/vigil/{POLICY}:{tag}", registry.addr());
    let output = crate::vigil()
        .args(["policy", "push", file, &target, "--cache-dir"])
        .arg(cache)
        .args(flags)
        .env("VIGIL_REGISTRY_PASSWORD", password)
        .output()
        .expect("vigil runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    vigil_testbed::cli::printed(&stdout, "pin:")
}

/// A `VigilPolicy` for [`POLICY`] at `reference`, rolled out to `percent`
/// over `previous` if given.
pub(super) fn vigil_policy(reference: &str, rollout: Option<(u8, &str)>) -> Value {
    let mut spec =
        json!({"source": {"oci": {"ref": reference, "insecure": true, "allowUnsigned": true}}});
    if let Some((percent, previous)) = rollout {
        spec["rollout"] = json!({"percent": percent, "previous": previous});
    }
    json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
           "metadata": {"name": POLICY}, "spec": spec})
}

/// The policy's pull report on its status.
pub(super) fn pull_report(server: &ApiServer) -> Value {
    policy_statuses(server)
        .get(POLICY)
        .map_or(Value::Null, |o| o["status"]["pull"].clone())
}

/// Waits until the policy's status shows the component `bytes` serving
/// (pulled, and compiled unless precompiled).
pub(super) async fn until_serving(server: &ApiServer, what: &str, bytes: &[u8]) {
    let digest = Digest::of(bytes).hex();
    server
        .until(COMPILING, what, |s| {
            policy_statuses(s)
                .get(POLICY)
                .is_some_and(|o| o["status"]["digest"] == digest.as_str())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vigil_policy_serves_from_a_registry_rolls_out_by_bucket_and_survives_the_registry_going_away()
 {
    let mut registry = OciRegistry::start();
    let cache = tempfile::tempdir().unwrap();
    let (js_file, js_bytes) = example("js-sorter");
    let (py_file, py_bytes) = example("python-sorter");
    let old = push(&registry, &js_file, "1", cache.path());
    let new = push(&registry, &py_file, "2", cache.path());

    // A rollout that stops just short of this node's bucket leaves it on
    // the previous version; one more percent takes it to the new one.
    let mine = bucket(POLICY, NODE);
    let (server, fixture) = test_node().await;
    server.put("vigilpolicies", "", vigil_policy(&new, Some((mine, &old))));
    let mut agent = start(&server, &fixture, &["--status-interval", "100ms"]);
    until_serving(
        &server,
        "the previous version, the 12 MB JavaScript sorter",
        &js_bytes,
    )
    .await;
    server
        .until(LIMIT, "the previous stage on the status", |s| {
            pull_report(s)["stage"] == "previous" && pull_report(s)["reference"] == old.as_str()
        })
        .await;
    server.put(
        "vigilpolicies",
        "",
        vigil_policy(&new, Some((mine + 1, &old))),
    );
    until_serving(&server, "the 18 MB Python sorter, pulled", &py_bytes).await;
    server
        .until(LIMIT, "the newest stage on the status", |s| {
            pull_report(s)["stage"] == "newest" && pull_report(s)["state"] == "Pulled"
        })
        .await;
    until_metric(&agent, "vigil_policy_pulls_total{result=\"pulled\"} 2").await;
    let bytes = (js_bytes.len() + py_bytes.len()).to_string();
    until_metric(&agent, &format!("vigil_policy_pull_bytes_total {bytes}")).await;

    // The registry goes away and the agent restarts: it serves what it
    // pulled from its state directory, without a request.
    registry.stop();
    terminated_cleanly(std::mem::replace(
        &mut agent,
        start(&server, &fixture, &["--status-interval", "100ms"]),
    ))
    .await;
    until_metric(&agent, "vigil_policy_pulls_total{result=\"held\"} 1").await;
    until_serving(
        &server,
        "the Python sorter, from the state directory",
        &py_bytes,
    )
    .await;
    assert!(
        !agent.metrics().contains("result=\"unavailable\""),
        "{}",
        agent.metrics()
    );
    // This node has no verification key: it took the version unsigned, as
    // its policy allows, and says so.
    server
        .until(LIMIT, "the unsigned version on the status", |s| {
            pull_report(s)["signature"] == "unsigned"
        })
        .await;

    // A new digest the registry cannot give: what serves stays, the
    // failure is counted and logged.
    let (repository, _) = new.split_once('@').unwrap();
    let missing = format!(
        "{repository}@sha256:{}",
        Digest::of(b"another version").hex()
    );
    server.put("vigilpolicies", "", vigil_policy(&missing, None));
    server
        .until(LIMIT, "the registry unavailable on the status", |s| {
            pull_report(s)["reason"] == "unavailable"
        })
        .await;
    assert!(
        agent
            .metrics()
            .contains("vigil_policy_pulls_total{result=\"unavailable\"}")
    );
    assert_eq!(
        policy_statuses(&server)[POLICY]["status"]["digest"],
        Digest::of(&py_bytes).hex().as_str()
    );
    assert!(
        agent
            .logs()
            .contains("cannot take a policy version; keeping what serves")
    );

    // The policy no longer allows unsigned versions: the one serving stops
    // serving (the built-in takes over), and the status says why.
    let mut signed_only = vigil_policy(&new, None);
    signed_only["spec"]["source"]["oci"]["allowUnsigned"] = json!(false);
    server.put("vigilpolicies", "", signed_only);
    server
        .until(LIMIT, "the unsigned version refused on the status", |s| {
            pull_report(s)["reason"] == "signature"
        })
        .await;
    let report = pull_report(&server);
    assert!(
        (report["message"].as_str().unwrap()).contains("does not say allowUnsigned: true"),
        "{report}"
    );
    server
        .until(LIMIT, "the Python sorter no longer serving", |s| {
            policy_statuses(s)
                .get(POLICY)
                .is_some_and(|o| o["status"]["digest"] != Digest::of(&py_bytes).hex().as_str())
        })
        .await;
    assert!(
        agent
            .metrics()
            .contains("vigil_policy_pulls_total{result=\"signature\"}"),
        "{}",
        agent.metrics()
    );

    // The object goes: the policy goes with it.
    server.delete("vigilpolicies", "", POLICY);
    server
        .until(LIMIT, "the policy's status removed", |s| {
            !policy_statuses(s).contains_key(POLICY)
        })
        .await;
    assert_the_cluster_role_allows_every_request(&server);
    terminated_cleanly(agent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_secret_signs_in_to_a_tls_registry_that_refuses_anonymous_pulls() {
    let registry = OciRegistry::start_with(&RegistryOptions {
        tls: true,
        user: Some(("puller".into(), "s3cret".into())),
    });
    let ca = registry.ca().display().to_string();
    let cache = tempfile::tempdir().unwrap();
    let (c_file, c_bytes) = example("c-sorter");
    let flags = ["--username", "puller", "--registry-ca", &ca];
    let pinned = push_with(&registry, &c_file, "1", cache.path(), &flags, "s3cret");

    // Anonymous: refused, and the status says so and when it tries again.
    let (server, fixture) = test_node().await;
    let mut policy = json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
        "metadata": {"name": POLICY},
        "spec": {"source": {"oci": {"ref": pinned, "allowUnsigned": true}}}});
    server.put("vigilpolicies", "", policy.clone());
    let agent = start(
        &server,
        &fixture,
        &["--status-interval", "100ms", "--registry-ca", &ca],
    );
    server
        .until(LIMIT, "an unauthorized pull on the status", |s| {
            pull_report(s)["reason"] == "unauthorized"
        })
        .await;
    let report = pull_report(&server);
    assert_eq!(report["state"], "PullFailed", "{report}");
    assert_eq!(report["reference"], pinned.as_str(), "{report}");
    assert!(report["nextRetry"].is_string(), "{report}");
    assert_eq!(
        policy_statuses(&server)[POLICY]["status"]["state"],
        "PullFailed"
    );

    // A pull Secret that does not exist yet.
    policy["spec"]["source"]["oci"]["pullSecretRef"] = json!({"name": "vigil-registry"});
    server.put("vigilpolicies", "", policy);
    server
        .until(LIMIT, "missing credentials on the status", |s| {
            pull_report(s)["reason"] == "credentials"
        })
        .await;

    // It arrives: the next retry signs in.
    let config = json!({"auths": {registry.addr(): {"username": "puller", "password": "s3cret"}}});
    let encoded = base64::engine::general_purpose::STANDARD.encode(config.to_string());
    server.put(
        "secrets",
        "vigil-system",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
               "metadata": {"name": "vigil-registry", "namespace": "vigil-system"},
               "data": {".dockerconfigjson": encoded}}),
    );
    until_serving(&server, "the C sorter, pulled with the Secret", &c_bytes).await;
    assert_eq!(pull_report(&server)["state"], "Pulled");
    assert_the_cluster_role_allows_every_request(&server);
    terminated_cleanly(agent).await;
}
