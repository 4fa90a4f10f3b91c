//! The `vigil` binary's commands as tests and benchmarks run them, what
//! they print, and the key pairs (made by openssl) they sign with.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `binary ARGS`, which must succeed; answers what it printed.
///
/// # Panics
/// If it cannot run or fails.
pub fn run(binary: &Path, args: &[&str]) -> String {
    let output = Command::new(binary)
        .args(args)
        .output()
        .expect("vigil runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "vigil {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
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
