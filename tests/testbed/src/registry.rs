//! [`OciRegistry`], a real OCI registry for the tests: the CNCF
//! distribution registry from Debian's `docker-registry` package, started
//! on a free loopback port with its storage in a temporary directory, and
//! stopped by PID when dropped; anonymous over plain HTTP, or behind TLS
//! (a certificate for `127.0.0.1` from a CA of its own, made with
//! `openssl`) and htpasswd sign-in (`htpasswd -B`). The tests reach into
//! its storage to tamper with what it serves.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The registry's binary, as Debian installs it.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// How a registry is reached.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Serve HTTPS with a certificate from the registry's own CA.
    pub tls: bool,
    /// Require this user and password (htpasswd, bcrypt).
    pub user: Option<(String, String)>,
}

/// A running registry.
#[derive(Debug)]
pub struct OciRegistry {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
    log: Arc<Log>,
}

/// The registry's log lines so far, and a signal for each new one.
#[derive(Debug, Default)]
struct Log {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Log {
    /// The lines, once `done` accepts them or `timeout` has passed.
    fn when(&self, timeout: Duration, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let lines = self.lines.lock().expect("log lock");
        let (lines, _) = self
            .grew
            .wait_timeout_while(lines, timeout, |lines| !done(lines))
            .expect("log lock");
        lines.clone()
    }
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
        Self::start_with(&RegistryOptions::default())
    }

    /// Starts a registry as `options` say, and answers once it listens.
    ///
    /// # Panics
    /// As [`OciRegistry::start`]; or `openssl` or `htpasswd` fail.
    pub fn start_with(options: &RegistryOptions) -> Self {
        let dir = tempfile::tempdir().expect("a registry directory");
        let storage = dir.path().join("storage");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n  secret: vigil-tests\n",
            storage.display()
        );
        if options.tls {
            certificates(dir.path());
            let path = |name: &str| dir.path().join(name).display().to_string();
            config += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                path("server.pem"),
                path("server.key")
            );
        }
        if let Some((user, password)) = &options.user {
            let output = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd runs (examples/policies/build.sh installs it)");
            assert!(output.status.success(), "htpasswd failed");
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, output.stdout).expect("the htpasswd file");
            config += &format!(
                "auth:\n  htpasswd:\n    realm: vigil-tests\n    path: {}\n",
                file.display()
            );
        }
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
        let log = Arc::new(Log::default());
        let copy = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                copy.lines.lock().expect("log lock").push(line);
                copy.grew.notify_all();
            }
        });
        let addr = log
            .when(Duration::from_secs(60), |lines| {
                lines.iter().any(|l| listening_on(l).is_some())
            })
            .iter()
            .find_map(|l| listening_on(l))
            .expect("the registry listens within a minute");
        Self {
            child,
            addr,
            dir,
            log,
        }
    }

    /// `127.0.0.1:PORT`: the registry part of a reference.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The registry's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The PEM certificate of the CA that signed its TLS certificate
    /// (present when it serves TLS).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
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
        self.log.when(Duration::ZERO, |_| true).join("\n")
    }

    /// How many requests of `method` for a path containing `path` it has
    /// logged as answered, once it has logged at least `at_least` of them
    /// (it logs a request just after answering it) or after a minute.
    pub fn requests(&self, method: &str, path: &str, at_least: usize) -> usize {
        let method = format!("http.request.method={method}");
        let count = |lines: &[String]| {
            lines
                .iter()
                .filter(|l| {
                    l.contains("response completed") && l.contains(&method) && l.contains(path)
                })
                .count()
        };
        count(
            &self
                .log
                .when(Duration::from_secs(60), |lines| count(lines) >= at_least),
        )
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

/// Makes a CA (`ca.pem`) and a certificate it signed for `127.0.0.1`
/// (`server.pem`, `server.key`) in `dir`.
fn certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(status.success(), "openssl {args:?} failed");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=vigil test CA",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"],
            &ec[..],
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("the extensions file");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
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
