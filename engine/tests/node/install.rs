//! The install, as an admin does it: `kubectl apply --server-side -k` of an
//! overlay of `deploy/` that pins the image by digest and says what this
//! node differs in — its cgroup driver (cgroupfs) and where its kubelet and
//! containerd keep their data (under the cluster's directory) — and nothing
//! else; then the agent as the DaemonSet runs it.

use super::hot_swap::Keys;
use super::{root, until};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

/// The shipped agent's user and group.
const AGENT_ID: &str = "65532";

/// The agent's state directory on the node (`deploy/`'s hostPath).
pub const STATE: &str = "/var/lib/vigil";
/// Every file under the state directory, by its path there (none if it is
/// missing).
pub fn state_files() -> Vec<String> {
    fn walk(dir: &Path, files: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, files);
            } else if let Ok(relative) = path.strip_prefix(STATE) {
                files.push(relative.display().to_string());
            }
        }
    }
    let mut files = Vec::new();
    walk(Path::new(STATE), &mut files);
    files.sort();
    files
}

/// Writes the overlay for `image` (`REGISTRY/vigil@sha256:…`) and returns
/// its folder.
pub fn overlay(folder: &str, base: &str, image: &str, patch: &str) -> PathBuf {
    let (name, digest) = image.split_once('@').expect("an image by digest");
    let dir = root().join("target/vigil-node").join(folder);
    std::fs::create_dir_all(&dir).expect("the overlay's folder");
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../../{base}\nimages:\n  - name: ghcr.io/vigil-dev/vigil\n    newName: {name}\n    digest: {digest}\n{patch}"
        ),
    )
    .expect("the overlay");
    dir
}

/// The patch of `deploy/`'s DaemonSet for this node: each replaced value
/// is first tested to be the shipped one, so a change to `deploy/` fails
/// here by name rather than patching the wrong field.
pub fn node_patch(cluster: &Upstream) -> String {
    let dir = cluster.dir();
    let ops = [
        (
            "test",
            "containers/0/args/6",
            "--cgroup-driver=systemd".to_owned(),
        ),
        (
            "replace",
            "containers/0/args/6",
            "--cgroup-driver=cgroupfs".to_owned(),
        ),
        (
            "test",
            "volumes/2/hostPath/path",
            "/var/lib/kubelet/vigil-statfs".to_owned(),
        ),
        (
            "replace",
            "volumes/2/hostPath/path",
            format!("{}/kubelet/root/vigil-statfs", dir.display()),
        ),
        (
            "test",
            "volumes/3/hostPath/path",
            "/var/lib/containerd/vigil-statfs".to_owned(),
        ),
        (
            "replace",
            "volumes/3/hostPath/path",
            format!("{}/containerd/root/vigil-statfs", dir.display()),
        ),
    ];
    let ops: String = ops
        .iter()
        .map(|(op, path, value)| {
            format!("      - {{op: {op}, path: /spec/template/spec/{path}, value: \"{value}\"}}\n")
        })
        .collect();
    format!("patches:\n  - target: {{kind: DaemonSet, name: vigil}}\n    patch: |-\n{ops}")
}

/// Installs vigil with `image`, the public halves of `keys` in their
/// Secrets first, as docs/operating.md says, and waits for its DaemonSet
/// to roll out.
pub fn install(cluster: &Upstream, image: &str, keys: &Keys) {
    let left = state_files();
    assert!(
        left.is_empty(),
        "{STATE} holds {left:?}: a run before left it; remove it"
    );
    cluster.kubectl_ok(&["create", "namespace", "vigil-system"]);
    for (secret, (_, public)) in [
        ("vigil-verification-key", &keys.component),
        ("vigil-native-code-key", &keys.native),
    ] {
        let key = format!("--from-file=cosign.pub={}", public.display());
        let create = ["create", "secret", "generic", secret, &key];
        cluster.kubectl_ok(&[&["-n", "vigil-system"][..], &create].concat());
    }
    let overlay = overlay("overlay", "deploy", image, &node_patch(cluster));
    for (step, output) in cluster.install_steps(&overlay) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{step} refused: {stderr}");
        assert!(!stderr.contains("Warning:"), "{step} warned:\n{stderr}");
    }
    rolled_out(cluster);
}

/// The node's mode, as its `VigilNodeStatus` says it.
fn mode(cluster: &Upstream) -> Option<String> {
    let status = cluster.get(None, "vigilnodestatus/vigil-node")?;
    status["status"]["mode"].as_str().map(str::to_owned)
}

/// The enforce step as docs/operating.md gives it, with the release's own
/// `binary`: the agent observes as installed, then enforces once `vigil
/// enforce --percent 100` has applied its layer.
pub fn enforce(cluster: &Upstream, binary: &Path) {
    let limit = Duration::from_secs(60);
    until("the agent observes, as installed", limit, || {
        (mode(cluster)? == "observe").then_some(())
    });
    let output = std::process::Command::new(binary)
        .args(["enforce", "--percent", "100", "--kubeconfig"])
        .arg(cluster.admin_kubeconfig())
        .output()
        .expect("vigil enforce runs");
    assert!(output.status.success(), "vigil enforce: {output:?}");
    // Within the shipped --config-spread (30 s), then its status write.
    until("the agent enforces", Duration::from_secs(90), || {
        (mode(cluster)? == "enforce").then_some(())
    });
}

/// Waits until the agent's DaemonSet has rolled out.
pub fn rolled_out(cluster: &Upstream) {
    cluster.kubectl_ok(&[
        "-n",
        "vigil-system",
        "rollout",
        "status",
        "daemonset/vigil",
        "--timeout=180s",
    ]);
}

/// The agent's pods, terminating ones too.
pub fn agent_pods(cluster: &Upstream) -> Vec<Value> {
    let selector = "--selector=app.kubernetes.io/name=vigil";
    let pods = cluster.kubectl_ok(&["-n", "vigil-system", "get", "pods", selector, "-o", "json"]);
    let pods: Value = serde_json::from_str(&pods).expect("JSON");
    pods["items"].as_array().expect("items").clone()
}

/// The agent's pod.
pub fn agent_pod(cluster: &Upstream) -> Value {
    let pods = agent_pods(cluster);
    let running: Vec<&Value> = pods
        .iter()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .collect();
    assert_eq!(running.len(), 1, "one agent on the one node: {pods:#?}");
    running[0].clone()
}

/// The agent pod is Ready after its init container, its process runs as
/// the agent's user, it publishes its node's and its policies' status, and
/// its metrics answer on the pod's port.
pub fn agent_runs_as_shipped(cluster: &Upstream) {
    let pod = agent_pod(cluster);
    let init = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(init["name"], "own-state", "{pod:#}");
    assert_eq!(init["state"]["terminated"]["exitCode"], 0, "{pod:#}");
    let agent = &pod["status"]["containerStatuses"][0];
    assert_eq!(agent["ready"], true, "{pod:#}");
    assert_eq!(agent["restartCount"], 0, "{pod:#}");

    let pid = agent_process().expect("the agent's process on this machine");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    for field in ["Uid:", "Gid:"] {
        let ids: Vec<&str> = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .expect("the field")
            .split_whitespace()
            .collect();
        assert_eq!(ids, [AGENT_ID; 4], "{field} of the agent's process");
    }

    let node = until(
        "the node's VigilNodeStatus",
        Duration::from_secs(60),
        || cluster.get(None, "vigilnodestatus/vigil-node"),
    );
    let agent = node["status"]["agent"].as_str().unwrap_or_default();
    assert!(agent.starts_with("vigil "), "{node:#}");
    let policies = node["status"]["policies"]
        .as_array()
        .expect("its policies")
        .len();
    assert!(policies > 0, "{node:#}");
    until(
        "a VigilPolicyStatus for each policy",
        Duration::from_secs(60),
        || {
            let statuses = cluster.kubectl_ok(&["get", "vigilpolicystatuses", "-o", "name"]);
            (statuses.lines().count() == policies).then_some(())
        },
    );

    let ip = pod["status"]["podIP"].as_str().expect("the pod's IP");
    let metrics = http_get(&format!("{ip}:9464"), "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("vigil_build_info"), "{metrics}");
}

/// The PID of the agent's process (`vigil agent …`) on this machine.
pub fn agent_process() -> Option<u32> {
    processes().into_iter().find_map(|(pid, args)| {
        (args.first().is_some_and(|a| a.ends_with("vigil"))
            && args.get(1).is_some_and(|a| a == "agent"))
        .then_some(pid)
    })
}

/// Every process on this machine with its arguments.
pub fn processes() -> Vec<(u32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        found.push((pid, args));
    }
    found
}

/// An HTTP/1.1 GET of `path` on `address`: the whole response.
fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("{address}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("the response");
    response
}
