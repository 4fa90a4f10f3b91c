//! Precompiled policies on a node that never compiles: artifacts made by
//! `vigil policy precompile` (another process than the agent), published
//! beside their component, signed with `vigil policy sign` under keys made
//! by openssl, pinned in `spec.precompiled`; the agent
//! (`--compile=never`) loads the one signed by its native-code key with
//! zero compiles, and refuses, before a byte of native code is fetched,
//! an unsigned one, one signed with the component key, and ones made for
//! another CPU baseline or architecture, keeping what served.

use super::pulled::{POLICY, example, pull_report, push, until_serving, vigil_policy};
use super::*;
use std::path::Path;
use vigil::base::digest::Digest;
use vigil_testbed::{OciRegistry, cli};

/// Runs `vigil ARGS`, which must succeed; answers what it printed.
fn vigil(args: &[&str]) -> String {
    cli::run(Path::new(env!("CARGO_BIN_EXE_vigil")), args)
}

/// Precompiles `file` for `baseline` into `dir` and publishes the same
/// artifact as `vigil/my-sorter:TAG`: answers (engine key, pinned
/// reference, the artifact's layer digest).
fn precompiled(
    registry: &OciRegistry,
    file: &str,
    baseline: &str,
    tag: &str,
    dir: &Path,
) -> (String, String, String) {
    let local = dir.join(format!("{tag}.wasm"));
    std::fs::copy(file, &local).unwrap();
    let local = local.to_str().unwrap();
    let cache = dir.to_str().unwrap();
    let out = vigil(&[
        "policy",
        "precompile",
        local,
        "--cpu-baseline",
        baseline,
        "--cache-dir",
        cache,
    ]);
    let artifact = std::fs::read(dir.join(format!("{tag}.{baseline}.cwasm"))).unwrap();
    let target = format!("{}/vigil/{POLICY}:{tag}", registry.addr());
    let pushed = vigil(&[
        "policy",
        "precompile",
        local,
        "--cpu-baseline",
        baseline,
        "--push",
        &target,
        "--insecure",
        "--cache-dir",
        cache,
    ]);
    (
        cli::printed(&out, "engineKey:"),
        cli::published(&pushed),
        Digest::of(&artifact).hex(),
    )
}

fn sign(reference: &str, key: &Path) {
    vigil(&[
        "policy",
        "sign",
        reference,
        "--key",
        key.to_str().unwrap(),
        "--insecure",
    ]);
}

/// The `VigilPolicy` for `component`, with `artifact` pinned for `engine_key`.
fn with_artifact(component: &str, engine_key: &str, artifact: &str) -> Value {
    let mut policy = vigil_policy(component, None);
    policy["spec"]["precompiled"] = json!([{"engineKey": engine_key, "ref": artifact}]);
    policy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_compiles_serves_signed_native_code_and_refuses_what_it_cannot_trust() {
    let registry = OciRegistry::start();
    let work = tempfile::tempdir().unwrap();
    let (native_key, native_pub) = cli::key_pair(work.path(), "native");
    let (component_key, component_pub) = cli::key_pair(work.path(), "component");
    let (c_file, c_bytes) = example("c-sorter");
    let v1 = push(&registry, &c_file, "1", work.path());
    let (engine_key, a1, a1_layer) =
        precompiled(&registry, &c_file, "x86-64-v2", "1-native", work.path());
    sign(&a1, &native_key);
    sign(&v1, &component_key);

    let (server, fixture) = test_node().await;
    server.put("vigilpolicies", "", with_artifact(&v1, &engine_key, &a1));
    let agent = start(
        &server,
        &fixture,
        &[
            "--compile",
            "never",
            "--native-code-key",
            native_pub.to_str().unwrap(),
            "--verification-key",
            component_pub.to_str().unwrap(),
            "--status-interval",
            "100ms",
        ],
    );
    until_serving(
        &server,
        "the C sorter, from its precompiled artifact",
        &c_bytes,
    )
    .await;
    until_metric(
        &agent,
        "vigil_policy_precompiled_total{result=\"imported\"} 1",
    )
    .await;
    assert!(
        agent
            .metrics()
            .lines()
            .any(|l| l == "vigil_policy_compiles_total 0"),
        "{}",
        agent.metrics()
    );

    // A second version (the C sorter with a custom section more: other
    // bytes, the same code), with artifacts no node may run.
    let v2_file = work.path().join("v2.wasm");
    let mut v2_bytes = c_bytes.clone();
    v2_bytes.extend_from_slice(b"\x00\x07\x04testv2");
    std::fs::write(&v2_file, &v2_bytes).unwrap();
    let v2_file = v2_file.to_str().unwrap().to_owned();
    let v2 = push(&registry, &v2_file, "2", work.path());
    sign(&v2, &component_key);
    let (_, unsigned, unsigned_layer) =
        precompiled(&registry, &v2_file, "x86-64-v2", "2-unsigned", work.path());
    let (_, by_component_key, by_component_key_layer) = precompiled(
        &registry,
        &v2_file,
        "x86-64-v2",
        "2-component-key",
        work.path(),
    );
    // Two artifacts of one component for one engine are the same bytes:
    // published under two tags, they are one manifest and one signature.
    assert_eq!(unsigned_layer, by_component_key_layer);
    let (v3_key, v3, v3_layer) = precompiled(&registry, &v2_file, "x86-64-v3", "2-v3", work.path());
    let (arm_key, arm, arm_layer) =
        precompiled(&registry, &v2_file, "armv8-a", "2-arm", work.path());
    assert!(v3_key != engine_key && arm_key != engine_key);
    sign(&v3, &native_key);
    sign(&arm, &native_key);
    let cases = [
        (unsigned.clone(), "signature", "no signature"),
        (
            by_component_key,
            "signature",
            "verifies with the configured key",
        ),
        (
            v3,
            "incompatible",
            "CPU baseline x86-64-v3, where this node needs x86-64-v2",
        ),
        (arm, "incompatible", "target aarch64-unknown-linux-gnu"),
    ];
    for (index, (artifact, reason, says)) in cases.into_iter().enumerate() {
        if index == 1 {
            sign(&unsigned, &component_key);
        }
        // Each pinned under this node's engine key: the entry lies, the
        // signed manifest does not.
        server.put(
            "vigilpolicies",
            "",
            with_artifact(&v2, &engine_key, &artifact),
        );
        server
            .until(
                LIMIT,
                &format!("the {artifact} artifact refused: {reason}"),
                |s| {
                    let report = pull_report(s);
                    report["reference"] == v2.as_str()
                        && report["state"] == "PullFailed"
                        && report["reason"] == reason
                        && report["message"].as_str().is_some_and(|m| m.contains(says))
                },
            )
            .await;
    }
    assert_eq!(
        policy_statuses(&server)[POLICY]["status"]["digest"],
        Digest::of(&c_bytes).hex().as_str(),
        "the C sorter still serves"
    );
    // Custom sections are not code: v2's x86-64-v2 artifact is v1's bytes,
    // fetched once, for v1. Nothing more of any refused artifact was.
    assert_eq!(unsigned_layer, a1_layer);
    for (layer, fetched) in [(&a1_layer, 1), (&v3_layer, 0), (&arm_layer, 0)] {
        assert_eq!(
            registry.requests("GET", &format!("/blobs/sha256:{layer}"), fetched),
            fetched,
            "{layer}"
        );
    }
    assert!(
        agent
            .metrics()
            .lines()
            .any(|l| l == "vigil_policy_compiles_total 0"),
        "nothing was compiled: {}",
        agent.metrics()
    );
    for reason in ["signature", "incompatible"] {
        let line = format!("vigil_policy_precompiled_total{{result=\"{reason}\"}}");
        assert!(agent.metrics().contains(&line), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precompiling_from_the_cluster_publishes_each_version_and_pins_only_this_engines_entries() {
    use vigil::base::build::BUILD;
    use vigil::distribution::Access;
    use vigil::distribution::BlobStore;
    use vigil::distribution::Claims;
    use vigil::distribution::{Expect, Pinned, pull};
    use vigil::policy::Baseline;
    use vigil::policy::engine_key;

    let registry = OciRegistry::start();
    let work = tempfile::tempdir().unwrap();
    let (c_file, c_bytes) = example("c-sorter");
    let v1 = push(&registry, &c_file, "1", work.path());
    let v2_bytes = [c_bytes.as_slice(), b"\x00\x07\x04testv2"].concat();
    let v2_file = work.path().join("v2.wasm");
    std::fs::write(&v2_file, &v2_bytes).unwrap();
    let v2 = push(&registry, v2_file.to_str().unwrap(), "2", work.path());

    let baseline = Baseline::X86_64V2;
    let ours = engine_key(baseline).unwrap().hex();
    let theirs = engine_key(Baseline::Armv8).unwrap().hex();
    let repository = format!("{}/vigil/{POLICY}", registry.addr());
    let stale = format!("{repository}@sha256:{}", "0".repeat(64));
    let kept =
        json!({"engineKey": theirs, "ref": format!("{repository}@sha256:{}", "1".repeat(64))});
    let server = ApiServer::start().await;
    let mut object = vigil_policy(&v2, Some((50, &v1)));
    object["spec"]["precompiled"] = json!([{"engineKey": ours, "ref": stale}, kept]);
    server.put("vigilpolicies", "", object);
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();

    let out = vigil(&[
        "policy",
        "precompile",
        "--from-cluster",
        "--pin",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--insecure",
        "--cache-dir",
        work.path().to_str().unwrap(),
    ]);
    assert!(
        out.contains("2 version(s) precompiled for x86-64-v2 and pinned"),
        "{out}"
    );

    let spec = server.get("vigilpolicies", "", POLICY).unwrap()["spec"].clone();
    assert_eq!(
        spec["source"]["oci"]["ref"],
        v2.as_str(),
        "the rest is untouched"
    );
    let entries = spec["precompiled"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(entries[0], kept, "another engine's entry stays, first");
    let pinned: Vec<&str> = entries[1..]
        .iter()
        .map(|e| {
            assert_eq!(e["engineKey"], ours.as_str());
            e["ref"].as_str().unwrap()
        })
        .collect();
    assert!(!pinned.contains(&stale.as_str()), "{pinned:?}");

    // Each entry is the artifact of one version, with the claims of this
    // build, byte for byte what precompiling that component here makes.
    let store = BlobStore::open(&work.path().join("store")).unwrap();
    let access = Access {
        insecure: true,
        ..Access::default()
    };
    let made_from = |reference: &str| {
        let line = format!(" -> {reference}");
        let component = out
            .lines()
            .find_map(|l| l.strip_suffix(&line)?.strip_prefix("my-sorter: "))
            .unwrap_or_else(|| panic!("{reference} is not in {out}"));
        if component == v1 {
            &c_bytes
        } else {
            assert_eq!(component, v2);
            &v2_bytes
        }
    };
    let mut versions = std::collections::BTreeSet::new();
    for reference in pinned {
        assert!(
            reference.contains("/vigil/my-sorter@sha256:"),
            "{reference}"
        );
        let component = made_from(reference);
        versions.insert(Digest::of(component));
        let claims = Claims {
            component: Digest::of(component),
            engine_key: ours.clone(),
            target: baseline.triple().to_owned(),
            cpu_baseline: baseline.name().to_owned(),
            build: BUILD.to_owned(),
        };
        let pulled = pull(
            &Pinned::parse(reference).unwrap(),
            &access,
            &store,
            u64::MAX,
            None,
            Expect::Precompiled(&claims),
        )
        .await
        .unwrap_or_else(|e| panic!("{reference}: {e}"));
        let made = vigil::policy::precompile(baseline, component).unwrap();
        assert_eq!(std::fs::read(&pulled.path).unwrap(), made.artifact);
    }
    assert_eq!(versions.len(), 2, "one artifact for each version");
}
