//! A `vigil agent` process on the test node: started with the node's files
//! as its `/proc` and cgroup roots, a kubeconfig for the [`ApiServer`], a
//! config file, and empty policies and state directories beside them; its
//! log goes to a file. It listens on a port the kernel picks and says which
//! in its log: a port picked here and freed before the agent binds it can
//! be taken meanwhile by any process's outgoing connection. Killed when
//! dropped.

use super::{ApiServer, NodeFiles};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The running agent.
#[derive(Debug)]
pub struct AgentProcess {
    child: Mutex<Child>,
    log: PathBuf,
    /// Where it serves `/metrics`, once its log says.
    addr: OnceLock<String>,
}

/// The line the agent logs once it listens, with `addr=` on it.
const LISTENING: &str = "serving /metrics, /healthz and /readyz";

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        // A failing test shows the end of what its agent did.
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!("the agent's log, its last lines:\n{}", tail.join("\n"));
        }
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
            .args([
                "--config",
                &arg("config.yaml"),
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            // Config changes at once; a test of the spread gives its own.
            .arg("--config-spread=0s")
            .args(extra)
            .env("RUST_LOG", "info,vigil=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("the agent starts");
        Self {
            child: Mutex::new(child),
            log,
            addr: OnceLock::new(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where it serves its endpoints, once it has said so.
    pub fn addr(&self) -> Option<&str> {
        if self.addr.get().is_none() {
            let logs = self.logs();
            let line = logs.lines().find(|l| l.contains(LISTENING))?;
            let addr = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("addr="))?;
            let _ = self.addr.set(addr.to_owned());
        }
        self.addr.get().map(String::as_str)
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
    pub fn alive(&self) -> bool {
        self.child().try_wait().expect("wait").is_none()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.pid().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        self.child().wait().expect("the agent exits")
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
    /// `path`; empty if it does not answer (or does not listen yet).
    pub fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Some(addr) = self.addr() else {
            return String::new();
        };
        let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
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
