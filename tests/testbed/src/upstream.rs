//! The upstream Kubernetes control plane, for what only the real thing can
//! tell: etcd, kube-apiserver, kube-controller-manager and kubectl built from
//! their Go modules by `tests/cluster/build.sh` and run by its `up` command
//! (`tests/cluster/README.md`). [`Upstream::start`] builds it (once per test
//! process; Go's cache makes later builds quick) and starts a cluster of its
//! own in a temporary directory, stopped when dropped or when the test
//! process dies (the supervisor stops its children when its stdin closes).

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::OnceLock;

/// A running control plane.
#[derive(Debug)]
pub struct Upstream {
    supervisor: Child,
    commands: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    ready: Value,
    restarted: Option<jiff::Timestamp>,
    dir: tempfile::TempDir,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Closing stdin asks the supervisor to stop its children by PID.
        drop(self.commands.take());
        let _ = self.supervisor.wait();
    }
}

/// The built `vigil-cluster` binary, built on first use.
///
/// # Panics
/// If the build fails: its output says why.
pub fn binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = root.join("target/vigil-cluster/vigil-cluster");
        let status = Command::new(root.join("tests/cluster/build.sh"))
            .arg(&out)
            .status()
            .expect("tests/cluster/build.sh runs (Go must be installed)");
        assert!(status.success(), "tests/cluster/build.sh failed");
        out
    })
}

impl Upstream {
    /// Builds the components if needed and starts a fresh cluster.
    ///
    /// # Panics
    /// If it does not come up; the panic names the log to read.
    pub fn start() -> Self {
        let mut command = Command::new(binary());
        command.arg("up");
        Self::spawn(command)
    }

    /// Builds the components and the node's parts if needed and starts a
    /// fresh cluster with a real node, `vigil-node` (`tests/node/up.sh`:
    /// containerd, the kubelet, kube-proxy, a registry on loopback holding
    /// the node's images). Needs root.
    ///
    /// # Panics
    /// If it does not come up; the panic names the log to read.
    pub fn start_node() -> Self {
        binary();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        Self::spawn(Command::new(root.join("tests/node/up.sh")))
    }

    /// Starts `command` with a fresh directory as its last argument, and
    /// waits for its line that says the cluster is ready.
    fn spawn(mut command: Command) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut supervisor = command
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("up.log")).expect("a log"))
            .spawn()
            .expect("the cluster's supervisor starts");
        let commands = supervisor.stdin.take().expect("stdin");
        let answers = BufReader::new(supervisor.stdout.take().expect("stdout"));
        let mut cluster = Self {
            supervisor,
            commands: Some(commands),
            answers,
            ready: Value::Null,
            restarted: None,
            dir,
        };
        cluster.ready = cluster.answer("the cluster did not come up");
        cluster
    }

    /// The supervisor's next line, the cluster's description.
    fn answer(&mut self, failure: &str) -> Value {
        let mut line = String::new();
        self.answers.read_line(&mut line).expect("its answer");
        serde_json::from_str(&line).unwrap_or_else(|_| {
            // Keep the directory: its logs say why.
            self.dir.disable_cleanup(true);
            let log = std::fs::read_to_string(self.dir.path().join("up.log")).unwrap_or_default();
            panic!(
                "{failure}: its first line on stdout was {line:?}, not the cluster's JSON (logs in {}):\n{log}",
                self.dir.path().display()
            );
        })
    }

    /// Restarts kube-apiserver on the same port and etcd, and returns once
    /// it is ready again: its watch caches and every connection are lost.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn restart_apiserver(&mut self) {
        self.command("restart kube-apiserver", "the API server did not come back");
        self.restarted = Some(jiff::Timestamp::now());
    }

    /// Restarts the node's kubelet, which reads its configuration again
    /// (drop-ins in [`Upstream::kubelet_drop_ins`]), and returns once the
    /// node is Ready again.
    ///
    /// # Panics
    /// If the cluster has no node, or it does not come back.
    pub fn restart_kubelet(&mut self) {
        self.command("restart kubelet", "the kubelet did not come back");
    }

    /// Sends the supervisor `line` and waits for its answer.
    fn command(&mut self, line: &str, failure: &str) {
        let commands = self.commands.as_mut().expect("the supervisor's input");
        writeln!(commands, "{line}").expect("the supervisor reads");
        self.ready = self.answer(failure);
    }

    /// The cluster's directory (its logs, its node's state).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The folder of the kubelet's configuration drop-ins (`*.conf`, read
    /// at its start).
    pub fn kubelet_drop_ins(&self) -> PathBuf {
        self.dir.path().join("kubelet/config.d")
    }

    /// The node's registry on loopback, `127.0.0.1:PORT` (plain HTTP).
    ///
    /// # Panics
    /// If the cluster has no node.
    pub fn registry(&self) -> &str {
        self.ready["registry"].as_str().expect("a node's registry")
    }

    /// When the API server last came back ready from a restart. (It serves
    /// before: its port opens before its readiness, and its RBAC refuses what
    /// its caches do not hold yet.)
    pub fn restarted(&self) -> Option<jiff::Timestamp> {
        self.restarted
    }

    /// The API server's own metrics (`/metrics`, the Prometheus text format).
    pub fn metrics(&self) -> String {
        self.kubectl_ok(&["get", "--raw", "/metrics"])
    }

    /// Installs `deploy` (a kustomization) as docs/operating.md says:
    /// `kubectl apply --server-side -k`, then waits until vigil's CRDs are
    /// served. Each step's command and output, in order, for the caller to
    /// judge.
    pub fn install_steps(&self, deploy: &Path) -> Vec<(String, Output)> {
        let steps = [
            vec![
                "apply",
                "--server-side",
                "-k",
                deploy.to_str().expect("UTF-8"),
            ],
            vec![
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/vigilconfigs.vigil.dev",
                "crd/vigilpolicies.vigil.dev",
                "crd/vigilnodestatuses.vigil.dev",
                "crd/vigilpolicystatuses.vigil.dev",
            ],
        ];
        steps
            .iter()
            .map(|args| (format!("kubectl {}", args.join(" ")), self.kubectl(args)))
            .collect()
    }

    /// The API server's address, `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        self.ready["server"].as_str().expect("server")
    }

    /// The Kubernetes version it runs, `v1.X.Y`.
    pub fn version(&self) -> &str {
        self.ready["version"].as_str().expect("version")
    }

    /// The admin's kubeconfig file (`system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.ready["kubeconfig"].as_str().expect("kubeconfig"))
    }

    /// The audit log: one JSON event per line.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.path().join("audit.log")
    }

    /// The audit log's events so far: every request of a service account in
    /// `vigil-system`, with its user, verb, object and response code.
    pub fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.audit_log()).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str(line).expect("an audit event"))
            .collect()
    }

    /// Runs the cluster's kubectl as the admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.admin_kubeconfig(), args, None)
    }

    /// Runs kubectl with `kubeconfig`, feeding `input` on stdin if given.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Output {
        let mut child = Command::new(binary())
            .arg("kubectl")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        if let Some(input) = input {
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(input.as_bytes()).expect("kubectl reads");
        }
        child.wait_with_output().expect("kubectl finishes")
    }

    /// Runs kubectl as the admin and returns its stdout.
    ///
    /// # Panics
    /// If it fails; the panic carries its stderr.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("UTF-8")
    }

    /// Applies `yaml` as the admin, with server-side apply.
    ///
    /// # Panics
    /// If it is refused.
    pub fn apply(&self, yaml: &str) {
        let output = self.kubectl_as(
            &self.admin_kubeconfig(),
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(yaml),
        );
        assert!(
            output.status.success(),
            "apply refused: {}\n{yaml}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The object at `kind/name` (in `namespace` if given) as JSON, if it exists.
    pub fn get(&self, namespace: Option<&str>, what: &str) -> Option<Value> {
        let mut args = vec!["get", what, "-o", "json", "--ignore-not-found"];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        let text = self.kubectl_ok(&args);
        (!text.trim().is_empty()).then(|| serde_json::from_str(&text).expect("JSON"))
    }

    /// A token the API server issues for ServiceAccount `namespace/name`,
    /// bound to pod `pod` in the same namespace (so it carries the pod's
    /// node), for an hour.
    pub fn pod_token(&self, namespace: &str, name: &str, pod: &str) -> String {
        let token = self.kubectl_ok(&[
            "create",
            "token",
            name,
            "-n",
            namespace,
            "--bound-object-kind=Pod",
            &format!("--bound-object-name={pod}"),
            "--duration=1h",
        ]);
        token.trim().to_owned()
    }

    /// A kubeconfig's text that speaks to this server with `token`.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        let ca = self.dir.path().join("pki/ca.crt");
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: upstream\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: token\n  user:\n    token: {token}\ncontexts:\n- name: upstream\n  context: {{cluster: upstream, user: token}}\ncurrent-context: upstream\n",
            self.server(),
            ca.display()
        )
    }
}
