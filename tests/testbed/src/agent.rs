//! A `vigil agent` process on the test node: started with the node's files
//! as its `/proc` and cgroup roots, a kubeconfig for the [`ApiServer`], a
//! config file, and empty policies and state directories beside them; its
//! log goes to a file. Killed when dropped.

use super::{ApiServer, NodeFiles};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The running agent.
#[derive(Debug)]
pub struct AgentProcess {
    child: Child,
    log: PathBuf,
    metrics: String,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AgentProcess {
    /// Starts `binary agent` for node `node` with `config` (YAML) and `extra` flags.
    ///
    /// # Panics
    /// If the files cannot be written or the process cannot start.
    pub fn start(
        binary: &Path,
        node: &str,
        files: &NodeFiles,
        server: &ApiServer,
        config: &str,
        extra: &[&str],
    ) -> Self {
        Self::start_with(binary, node, files, &server.kubeconfig(), config, extra)
    }

    /// Starts `binary agent` as [`AgentProcess::start`] does, for any API
    /// server: `kubeconfig` is the text of the agent's kubeconfig.
    ///
    /// # Panics
    /// If the files cannot be written or the process cannot start.
    pub fn start_with(
        binary: &Path,
        node: &str,
        files: &NodeFiles,
        kubeconfig: &str,
        config: &str,
        extra: &[&str],
    ) -> Self {
        files.write("kubeconfig", kubeconfig);
        files.write("config.yaml", config);
        std::fs::create_dir_all(files.path("policies")).expect("policies dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let metrics = format!("127.0.0.1:{port}");
        let log = files.path("agent.log");
        let arg = |p: &str| files.path(p).display().to_string();
        let child = Command::new(binary)
            .args(["agent", "--node-name", node, "--cgroup-driver", "cgroupfs"])
            .args(["--kubeconfig", &arg("kubeconfig")])
            .args(["--proc-root", &arg("proc"), "--cgroup-root", &arg("cgroup")])
            .args(["--nodefs", &arg("")])
            .args([
                "--state-dir",
                &arg("state"),
                "--policies-dir",
                &arg("policies"),
            ])
            .args(["--config", &arg("config.yaml"), "--metrics-addr", &metrics])
            // Config changes at once; a test of the spread gives its own.
            .arg("--config-spread=0s")
            .args(extra)
            .env("RUST_LOG", "info,vigil=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("the agent starts");
        Self {
            child,
            log,
            metrics,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory and the CPU time it used so far.
    pub fn usage(&self) -> AgentUse {
        AgentUse::of(self.pid())
    }

    /// Everything it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        self.child.wait().expect("the agent exits")
    }

    /// The value of the first metric line starting with `name` (a name,
    /// or a name and labels), if it answers and has one.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Its `/metrics` page (empty if it does not answer).
    pub fn metrics(&self) -> String {
        self.get("/metrics")
    }

    /// The whole HTTP response (status line, headers, body) of its endpoint
    /// `path`; empty if it does not answer.
    pub fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(&self.metrics) else {
            return String::new();
        };
        let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
        let mut text = String::new();
        if stream.write_all(request.as_bytes()).is_ok() {
            let _ = stream.read_to_string(&mut text);
        }
        text
    }
}

/// What one agent process used.
#[derive(Debug, Clone, Copy)]
pub struct AgentUse {
    /// Resident memory (`VmRSS`), in KiB.
    pub resident_kib: u64,
    /// User and system CPU time.
    pub cpu: Duration,
}

impl AgentUse {
    /// What process `pid` has used so far, from `/proc`.
    pub fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
        let resident_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("its stat");
        // Fields after the command's closing parenthesis; utime and stime
        // are the 14th and 15th of the line, in clock ticks (100 a second).
        let after = &stat[stat.rfind(')').expect("a command") + 2..];
        let ticks: u64 = after
            .split(' ')
            .skip(11)
            .take(2)
            .map(|t| t.parse::<u64>().expect("ticks"))
            .sum();
        Self {
            resident_kib,
            cpu: Duration::from_millis(ticks * 10),
        }
    }
}
