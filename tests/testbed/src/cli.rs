//! Commands as tests and benchmarks run them — `vigil`'s above all — what
//! they print, and the key pairs (made by openssl) they sign with. The one
//! place a test runs a command: [`run`] and [`ok`] when it must succeed,
//! [`output`] when its failure is what is tested.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What one run of a command came to.
#[derive(Debug, Clone)]
pub struct Ran {
    /// It exited with success.
    pub ok: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Ran {
    /// Everything it printed: its standard output, then its standard error.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `command`, whatever its outcome.
///
/// # Panics
/// If it cannot start.
pub fn output(command: &mut Command) -> Ran {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?} starts: {error}"));
    Ran {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `command`, which must succeed; answers its standard output.
///
/// # Panics
/// If it cannot start or fails: the panic carries everything it printed.
pub fn ok(command: &mut Command) -> String {
    let ran = output(command);
    assert!(ran.ok, "{command:?} failed:\n{}", ran.text());
    ran.stdout
}

/// Runs `binary ARGS`, which must succeed; answers what it printed.
///
/// # Panics
/// If it cannot run or fails.
pub fn run(binary: &Path, args: &[&str]) -> String {
    ok(Command::new(binary).args(args))
}

/// The `vigil` at `binary` keeping the components it compiles in `cache`
/// (never the user's own cache).
pub fn vigil(binary: &Path, cache: &Path) -> Command {
    let mut command = Command::new(binary);
    command.env("VIGIL_CACHE_DIR", cache);
    command
}

/// The value after `field` (e.g. `engineKey:`, `pin:`) on a line of `out`.
///
/// # Panics
/// If no line has it.
pub fn printed(out: &str, field: &str) -> String {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(field))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("no {field} in {out}"))
}

/// The reference `vigil policy precompile --push` published: the last word
/// of its first line.
///
/// # Panics
/// If it printed nothing.
pub fn published(out: &str) -> String {
    out.lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("nothing published in {out}"))
        .to_owned()
}

/// A P-256 key pair made by openssl in `dir`: (private PEM, public PEM).
///
/// # Panics
/// If openssl is missing (`examples/policies/build.sh` installs it) or fails.
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let openssl = |command: &mut Command| {
        let status = command
            .status()
            .expect("openssl runs (examples/policies/build.sh installs it)");
        assert!(status.success(), "{command:?}");
    };
    openssl(
        Command::new("openssl")
            .args(["genpkey", "-algorithm", "EC"])
            .args(["-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
            .arg(&private),
    );
    openssl(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public),
    );
    (private, public)
}
