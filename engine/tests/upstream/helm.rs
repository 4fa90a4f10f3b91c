//! The Helm chart (`deploy/chart/`, generated from `deploy/`) on the real
//! server, with Helm built from its Go module (`release/tools/`): installed
//! as docs/operating.md says, upgraded with values an admin sets, and
//! uninstalled — leaving only the CRDs it keeps (and so the objects of
//! them). deploy/check.sh holds its renders equal to kustomize's.

use super::root;
use super::upgrade::{leftovers, until};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use vigil_testbed::upstream::Upstream;

/// Helm, built on first use by release/tools/build.sh.
fn helm() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(root().join("release/tools/build.sh"))
            .status()
            .expect("release/tools/build.sh runs (Go must be installed)");
        assert!(status.success(), "release/tools/build.sh failed");
        root().join("target/tools/helm")
    })
}

/// Runs Helm as the admin of `cluster`, the release kept in `default`;
/// answers its stdout.
fn helm_ok(cluster: &Upstream, args: &[&str]) -> String {
    let output = Command::new(helm())
        .args(args)
        .args(["--namespace", "default"])
        .arg(format!(
            "--kubeconfig={}",
            cluster.admin_kubeconfig().display()
        ))
        .output()
        .expect("helm runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "helm {args:?} failed: {stderr}");
    assert!(
        !stderr.contains("Warning"),
        "helm {args:?} warned: {stderr}"
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn agent_args(cluster: &Upstream) -> Vec<String> {
    let daemonset = cluster.get(Some("vigil-system"), "daemonset/vigil");
    let daemonset = daemonset.expect("the DaemonSet is served");
    let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
    let mut args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    args.push(format!("image {}", container["image"].as_str().unwrap()));
    args
}

#[test]
fn the_chart_installs_upgrades_with_values_and_uninstalls_keeping_the_crds() {
    let cluster = Upstream::start();
    let chart = root().join("deploy/chart");
    let chart = chart.to_str().unwrap();

    helm_ok(&cluster, &["install", "vigil", chart, "--wait=false"]);
    let namespace = cluster
        .get(None, "namespace/vigil-system")
        .expect("created");
    let labels = &namespace["metadata"]["labels"];
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged");
    let args = agent_args(&cluster);
    assert!(
        args.contains(&"--cgroup-driver=systemd".to_owned()),
        "{args:?}"
    );
    assert!(args.contains(&"--compile=never".to_owned()), "{args:?}");
    assert!(args.contains(&"--observe-first".to_owned()), "{args:?}");
    assert!(
        cluster.get(None, "clusterrole/vigil").is_some()
            && cluster
                .get(None, "validatingadmissionpolicy/vigil-own-node")
                .is_some()
    );

    // What an admin sets: the cgroup driver, a pinned image, an extra flag,
    // the compile-on-node component.
    let digest = format!("sha256:{}", "ab".repeat(32));
    helm_ok(
        &cluster,
        &[
            "upgrade",
            "vigil",
            chart,
            "--set",
            "cgroupDriver=cgroupfs",
            "--set",
            &format!("image.digest={digest}"),
            "--set",
            "extraArgs[0]=--status-interval=30s",
            "--set",
            "components.compileOnNode.enabled=true",
        ],
    );
    let args = agent_args(&cluster);
    for wanted in [
        "--cgroup-driver=cgroupfs",
        "--compile=fallback",
        "--compile-memory-mib=512",
        "--status-interval=30s",
        &format!("image ghcr.io/vigil-dev/vigil@{digest}"),
    ] {
        assert!(args.iter().any(|a| a == wanted), "{wanted}: {args:?}");
    }

    // A VigilConfig written meanwhile survives the uninstall with its CRD.
    cluster.apply(
        "apiVersion: vigil.dev/v1alpha1\nkind: VigilConfig\nmetadata: {name: fleet}\nspec: {config: {evictionBurst: 2}}\n",
    );
    helm_ok(&cluster, &["uninstall", "vigil", "--wait"]);
    until("only the kept CRDs are left", || {
        let left = leftovers(&cluster);
        left.iter()
            .all(|l| l.starts_with("customresourcedefinition"))
    });
    assert_eq!(
        leftovers(&cluster).len(),
        4,
        "the four CRDs are kept: {:?}",
        leftovers(&cluster)
    );
    assert!(cluster.get(None, "vigilconfig/fleet").is_some());
}
