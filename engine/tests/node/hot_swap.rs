//! Hot swap on the node: a sorter (the C example) published to the node's
//! registry with the image's own `vigil` binary — pushed, precompiled for
//! the agents' engine, both signed with the native-code key whose public
//! half the DaemonSet mounts — named by a `VigilPolicy` and a `VigilConfig`,
//! reaches the running agent (it compiles nothing: `--compile=never`); the
//! next pressure episode evicts the pod that sorter puts first, and the
//! agent's pod never restarts.

use super::image::run;
use super::install::agent_pod;
use super::pressure::{Sorter, Workloads, vigil_episode};
use super::{root, until};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use vigil_testbed::cli::{key_pair, printed, published};
use vigil_testbed::upstream::Upstream;

const POLICY: &str = "c-sorter";
/// It refuses pods carrying the label `app` (the guarded pod), so the hog
/// comes first; the built-in sorter puts the guarded pod, the larger, first.
const CONFIG: &str = "{skipLabels: [app]}";

/// The two key pairs the DaemonSet's Secrets hold the public halves of
/// (PKCS#8 P-256, as `vigil policy sign` takes): the private key and the
/// public key of each.
pub struct Keys {
    /// Components from a registry are signed with it.
    pub component: (PathBuf, PathBuf),
    /// Precompiled artifacts (native code) are signed with it.
    pub native: (PathBuf, PathBuf),
}

/// Fresh keys for a run.
pub fn keys() -> Keys {
    let dir = root().join("target/vigil-node/keys");
    std::fs::create_dir_all(&dir).expect("the keys' folder");
    Keys {
        component: key_pair(&dir, "component"),
        native: key_pair(&dir, "native"),
    }
}

/// Runs the image's `vigil` with `args`; returns its stdout.
fn vigil(binary: &Path, args: &[&str]) -> String {
    let cache = root().join("target/vigil-node/cache");
    run(Command::new(binary)
        .args(args)
        .arg("--cache-dir")
        .arg(cache))
}

/// Publishes the sorter, names it, and checks the next episode.
pub fn sorter_from_registry(cluster: &Upstream, workloads: &Workloads, keys: &Keys, binary: &Path) {
    let agent = agent_pod(cluster);
    let component = root().join(format!("examples/policies/{POLICY}/{POLICY}.wasm"));
    let component = component.to_str().expect("UTF-8");
    let repository = format!("{}/vigil/{POLICY}", cluster.registry());

    let pushed = vigil(
        binary,
        &[
            "policy",
            "push",
            component,
            &format!("{repository}:1"),
            "--insecure",
        ],
    );
    let reference = printed(&pushed, "pin:");
    let precompiled = vigil(
        binary,
        &[
            "policy",
            "precompile",
            component,
            "--push",
            &format!("{repository}:1-x86-64-v2"),
            "--insecure",
        ],
    );
    let artifact = published(&precompiled);
    let engine_key = printed(&precompiled, "engineKey:");
    // Each under its own key: the component under the verification key,
    // the native code under the native-code key (the DaemonSet verifies
    // both before a byte of either is read).
    for (signed, (key, _)) in [(&reference, &keys.component), (&artifact, &keys.native)] {
        let key = key.to_str().expect("UTF-8");
        run(Command::new(binary).args(["policy", "sign", signed, "--key", key, "--insecure"]));
    }
    cluster.apply(&format!(
        "apiVersion: vigil.dev/v1alpha1\nkind: VigilPolicy\nmetadata: {{name: {POLICY}}}\n\
         spec:\n  source: {{oci: {{ref: \"{reference}\", insecure: true}}}}\n  precompiled:\n  - {{engineKey: \"{engine_key}\", ref: \"{artifact}\"}}\n"
    ));
    // What serves is named by its component's digest.
    let bytes = std::fs::read(component).expect("the component");
    let digest = vigil::base::digest::Digest::of(&bytes).hex();
    let served = until(
        "the agent serves the sorter from the registry",
        Duration::from_secs(120),
        || {
            let statuses = cluster.kubectl_ok(&[
                "get",
                "vigilpolicystatuses",
                "-o",
                "json",
                &format!("-l=vigil.dev/policy={POLICY}"),
            ]);
            let statuses: serde_json::Value = serde_json::from_str(&statuses).expect("JSON");
            let status = statuses["items"].as_array()?.first()?.clone();
            let serving = status["status"]["digest"].as_str()?;
            (serving.trim_start_matches("sha256:") == digest).then_some(status)
        },
    );
    // Taken because its signature verified (the install's default: no
    // unsigned version without the policy's allowUnsigned).
    assert_eq!(
        served["status"]["pull"]["signature"], "verified",
        "{served:#}"
    );

    let sorter = Sorter {
        name: POLICY,
        config: CONFIG,
    };
    let (_, eviction) = vigil_episode(
        cluster,
        workloads,
        "hog-swapped",
        Duration::ZERO,
        Some(&sorter),
    );
    let why = eviction["why"].as_str().expect("why");
    assert!(
        why.contains("rank 1 of") && why.contains(&format!("by {POLICY}@")),
        "{eviction:#}"
    );

    let after = agent_pod(cluster);
    assert_eq!(
        after["metadata"]["uid"], agent["metadata"]["uid"],
        "the agent's pod was replaced"
    );
    assert_eq!(
        after["status"]["containerStatuses"][0]["restartCount"], 0,
        "{after:#}"
    );
}
