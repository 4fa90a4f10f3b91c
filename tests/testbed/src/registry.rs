//! [`OciRegistry`], a real OCI registry for the tests: the CNCF
//! distribution registry from Debian's `docker-registry` package, started
//! on a free loopback port with its storage in a temporary directory, and
//! stopped by PID when dropped. The tests reach into its storage to tamper
//! with what it serves.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The registry's binary, as Debian installs it.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// A running registry.
#[derive(Debug)]
pub struct OciRegistry {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

impl OciRegistry {
    /// Starts an anonymous registry over plain HTTP on `127.0.0.1`, and
    /// answers once it listens.
    ///
    /// # Panics
    /// If the registry is not installed (`examples/policies/build.sh`
    /// installs it), cannot start or does not listen within a minute.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a registry directory");
        let storage = dir.path().join("storage");
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n  secret: vigil-tests\n",
            storage.display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("the registry's config");
        let mut child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {REGISTRY_BINARY} (examples/policies/build.sh installs it): {e}"
                )
            });
        let stderr = child.stderr.take().expect("piped stderr");
        let log = dir.path().join("registry.log");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || copy_log(stderr, &log, &tx));
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the registry listens within a minute");
        Self { child, addr, dir }
    }

    /// `127.0.0.1:PORT`: the registry part of a reference.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The registry's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the registry keeps the blob of `digest` (`sha256:…`): writing
    /// there changes what it serves without changing what it claims.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Everything it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Stops it (by PID) and waits for it to exit; its storage stays until
    /// it is dropped.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The registry's directory (config, storage, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Copies the registry's log to `log`, sending the address it listens on
/// once it says so.
fn copy_log(stderr: std::process::ChildStderr, log: &Path, listening: &mpsc::Sender<String>) {
    let Ok(mut file) = std::fs::File::create(log) else {
        return;
    };
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        let _ = writeln!(file, "{line}");
        if let Some(addr) = listening_on(&line) {
            let _ = listening.send(addr);
        }
    }
}

/// The address in the registry's `msg="listening on ADDR"` line.
fn listening_on(line: &str) -> Option<String> {
    let rest = &line[line.find("msg=\"listening on ")? + "msg=\"listening on ".len()..];
    let end = rest.find(['"', ','])?;
    Some(rest[..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::listening_on;

    #[test]
    fn reads_the_address_from_the_registrys_log_line() {
        let line = r#"time="2026-11-25T08:01:26Z" level=info msg="listening on 127.0.0.1:43041" go.version=go1.19.8"#;
        assert_eq!(listening_on(line).as_deref(), Some("127.0.0.1:43041"));
        let tls = r#"level=info msg="listening on 127.0.0.1:5001, tls" go.version=go1.19.8"#;
        assert_eq!(listening_on(tls).as_deref(), Some("127.0.0.1:5001"));
        assert_eq!(
            listening_on(r#"level=info msg="redis not configured""#),
            None
        );
    }
}
