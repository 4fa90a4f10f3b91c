//! Install: `deploy/` as docs/operating.md applies it, every component and
//! example under it, and every manifest the docs show, on the real server.

use super::{install_steps_ok, installed, overlay_with, root};
use std::path::Path;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;
use vigil_testbed::wait::Polling;

/// A bound for a broken test, never a wait: everything is awaited on changes.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn deploy_installs_with_every_object_accepted_and_no_warning() {
    // Each step accepted, said what it did, and warned of nothing: install().
    let cluster = installed();
    for what in [
        "namespace/vigil-system",
        "clusterrole/vigil",
        "validatingadmissionpolicy/vigil-own-node",
        "validatingadmissionpolicybinding/vigil-own-node",
        "prioritylevelconfiguration/vigil-evictions",
        "flowschema/vigil-evictions",
    ] {
        assert!(cluster.get(None, what).is_some(), "{what} is served");
    }
    for what in ["serviceaccount/vigil", "daemonset/vigil"] {
        assert!(
            cluster.get(Some("vigil-system"), what).is_some(),
            "{what} is served"
        );
    }
}

#[test]
fn the_admission_policy_type_checks_without_a_warning() {
    let cluster = installed();
    // The API server type-checks a policy in the background and reports on
    // the generation it checked.
    let checked = || {
        let policy = cluster
            .get(None, "validatingadmissionpolicy/vigil-own-node")
            .expect("installed");
        (policy["status"]["observedGeneration"] == policy["metadata"]["generation"])
            .then_some(policy)
    };
    let polling = Polling::new(Duration::from_millis(200), LIMIT);
    let policy = polling.until("the policy type-checked", checked, String::new);
    let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
    assert!(
        warnings.as_array().is_none_or(Vec::is_empty),
        "type checking warned: {warnings:#}"
    );
    // And the server did check it: the status says so.
    assert!(policy["status"]["typeChecking"].is_object(), "{policy:#}");
}

/// `deploy/` with `component`, rendered by the cluster's kubectl.
fn with_component(component: &str) -> String {
    let overlay = overlay_with(component);
    installed().kubectl_ok(&["kustomize", overlay.to_str().unwrap()])
}

#[test]
fn every_component_applies_over_deploy() {
    let cluster = installed();
    // The Prometheus Operator's CRDs, as a cluster running it has them.
    for crd in ["podmonitors", "prometheusrules"] {
        let file = root().join(format!("deploy/schemas/monitoring.coreos.com_{crd}.yaml"));
        cluster.kubectl_ok(&["apply", "--server-side", "-f", file.to_str().unwrap()]);
        cluster.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}.monitoring.coreos.com"),
        ]);
    }
    let components = std::fs::read_dir(root().join("deploy/components")).unwrap();
    let mut seen = Vec::new();
    for component in components {
        let name = component.unwrap().file_name().into_string().unwrap();
        let rendered = with_component(&name);
        // A dry run: the shared install stays as deploy/ made it.
        dry_run(
            cluster,
            &format!("deploy/ with components/{name}"),
            &rendered,
        );
        seen.push(name);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "compile-on-node",
            "cri-o",
            "metrics-auth",
            "pdb-override",
            "pods-cluster-wide",
            "prometheus"
        ]
    );
}

#[test]
fn every_example_under_deploy_and_in_the_docs_applies() {
    let cluster = installed();
    let mut manifests: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(root().join("deploy/examples")).unwrap() {
        let path = entry.unwrap().path();
        manifests.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).unwrap(),
        ));
    }
    let mut documents = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            documents.push(path);
        }
    }
    for document in documents {
        manifests.extend(yaml_manifests(&document));
    }
    assert!(
        manifests.len() >= 5,
        "the docs show manifests: {manifests:?}"
    );
    for (origin, manifest) in &manifests {
        dry_run(cluster, origin, manifest);
    }
}

/// Applies `yaml` server-side as a dry run: the server judges every object
/// and keeps none. Asserted as an install step.
fn dry_run(cluster: &Upstream, what: &str, yaml: &str) {
    let output = cluster.kubectl_as(
        &cluster.admin_kubeconfig(),
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(yaml),
    );
    install_steps_ok(what, &output);
}

/// The ```yaml blocks of a Markdown file that are whole Kubernetes objects
/// (an `apiVersion` and a `kind` at the top level), each named by its line.
fn yaml_manifests(document: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(document).unwrap();
    let mut manifests = Vec::new();
    // (first line, indentation of the fence, body so far)
    let mut block: Option<(usize, usize, String)> = None;
    for (number, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        match (&mut block, line.trim_start()) {
            (None, "```yaml") => block = Some((number + 1, indent, String::new())),
            (Some((start, _, body)), "```") => {
                if is_object(body) {
                    manifests.push((format!("{}:{start}", document.display()), body.clone()));
                }
                block = None;
            }
            (Some((_, fence, body)), _) => {
                // A block in a list item is indented as its fence is.
                body.push_str(line.get(*fence..).unwrap_or(""));
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    manifests
}

fn is_object(yaml: &str) -> bool {
    yaml.lines().any(|l| l.starts_with("apiVersion:"))
        && yaml.lines().any(|l| l.starts_with("kind:"))
        && !yaml.lines().any(|l| l.starts_with("apiVersion: kustomize"))
}

#[test]
fn the_docs_name_the_kubernetes_version_the_tests_run() {
    let cluster = installed();
    let version: serde_json::Value =
        serde_json::from_str(&cluster.kubectl_ok(&["version", "-o", "json"])).unwrap();
    let server = version["serverVersion"]["gitVersion"].as_str().unwrap();
    assert_eq!(server, cluster.version(), "the server is the build it says");
    assert_eq!(
        version["clientVersion"]["gitVersion"], server,
        "kubectl of the same version"
    );
    let guide = std::fs::read_to_string(root().join("docs/operating.md")).unwrap();
    let tested = format!("**Tested: Kubernetes {}**", server.trim_start_matches('v'));
    assert!(
        guide.contains(&tested),
        "docs/operating.md does not say {tested}"
    );
}
