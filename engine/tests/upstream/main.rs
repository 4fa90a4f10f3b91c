//! vigil against the upstream Kubernetes control plane: kube-apiserver,
//! kube-controller-manager and etcd built from their Go modules
//! (`tests/cluster/`), with real TLS, a real service-account issuer, the Node
//! and RBAC authorizers and NodeRestriction. What the project's own test API
//! server cannot know — whether the real server accepts `deploy/`, compiles
//! its CEL, enforces its RBAC and admission policy on the agent's real
//! identity, and how the Eviction API and server-side apply really behave —
//! is asked here. Run with `cargo test -p vigil --test upstream`.
//!
//! The suites share one cluster with `deploy/` installed ([`installed`]);
//! each works in namespaces and on nodes of its own.

mod agent;
mod evictions;
mod fleet;
mod helm;
mod install;
mod metrics_auth;
mod upgrade;
mod validation;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use vigil_testbed::upstream::Upstream;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shared cluster, with `deploy/` installed as docs/operating.md says:
/// started by the first suite that needs it.
fn installed() -> &'static Upstream {
    static INSTALLED: OnceLock<Upstream> = OnceLock::new();
    INSTALLED.get_or_init(|| install(Upstream::start()))
}

/// An overlay of `deploy/` with `component`, as docs/operating.md writes
/// one (kustomize takes relative paths only, so the overlay lives in the
/// repository's `target/`).
fn overlay_with(component: &str) -> PathBuf {
    let overlay = root().join("target/upstream-overlays").join(component);
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [../../../deploy]\ncomponents: [../../../deploy/components/{component}]\n"
        ),
    )
    .unwrap();
    overlay
}

/// Installs `deploy/` on `cluster` as docs/operating.md says, each step
/// accepted without a warning, and waits until its CRDs are served.
fn install(cluster: Upstream) -> Upstream {
    for (step, output) in cluster.install_steps(&root().join("deploy")) {
        install_steps_ok(&step, &output);
    }
    cluster
}

/// Asserts that the kubectl step `step` succeeded, said what it did, and
/// warned of nothing.
fn install_steps_ok(step: &str, output: &std::process::Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{step} refused: {stderr}");
    assert!(!stderr.contains("Warning:"), "{step} warned:\n{stderr}");
    assert!(!output.stdout.is_empty(), "{step} said nothing");
}

/// The `items` of a kubectl list, as JSON.
fn items(list: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(list).expect("JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}
