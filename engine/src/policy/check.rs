//! `vigil policy check`: loads component files exactly as the agent would
//! (format, world, imports, canary call) and describes each one.

use super::{Digest, Host, Limits, LoadError, Policy, Source, WasmBytes, World, canary};
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// What a valid policy component is.
#[derive(Debug)]
pub struct CheckReport {
    /// What was checked (a path, or `builtin:NAME`).
    pub origin: String,
    /// The world it implements.
    pub world: World,
    /// Its exports.
    pub exports: Vec<String>,
    /// Its imports.
    pub imports: Vec<String>,
    /// Size in bytes.
    pub size: usize,
    /// Version digest.
    pub digest: Digest,
    /// Time to compile it.
    pub compile_time: Duration,
}

impl CheckReport {
    fn new(origin: String, policy: &Policy) -> Self {
        Self {
            origin,
            world: policy.world(),
            exports: policy.exports().to_vec(),
            imports: policy.imports().to_vec(),
            size: policy.bytes().len(),
            digest: policy.digest(),
            compile_time: policy.compile_time(),
        }
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: ok", self.origin)?;
        writeln!(
            f,
            "  world:    vigil:policy/{}@{}",
            self.world,
            super::CONTRACT_VERSION
        )?;
        writeln!(f, "  exports:  {}", self.exports.join(", "))?;
        writeln!(
            f,
            "  imports:  {}",
            if self.imports.is_empty() {
                "none".into()
            } else {
                self.imports.join(", ")
            }
        )?;
        writeln!(f, "  size:     {} bytes", self.size)?;
        writeln!(f, "  digest:   sha256:{}", self.digest.hex())?;
        write!(
            f,
            "  compile:  {:.1} ms; canary call passed",
            self.compile_time.as_secs_f64() * 1e3
        )
    }
}

/// Loads `bytes` like the agent would and runs its canary call.
///
/// # Errors
/// Why it cannot serve as a policy.
pub fn check_bytes(
    host: &Host,
    origin: String,
    name: &str,
    wasm: impl Into<WasmBytes>,
    source: Source,
) -> Result<CheckReport, LoadError> {
    let policy = host.load(name, wasm, source, Limits::default())?;
    canary::run(&policy, "{}").map_err(LoadError::Canary)?;
    Ok(CheckReport::new(origin, &policy))
}

/// Checks the component file at `path`.
///
/// # Errors
/// Why it cannot serve as a policy.
pub fn check_file(host: &Host, path: &Path) -> Result<CheckReport, LoadError> {
    let bytes = super::files::read_policy(path, super::files::DEFAULT_MAX_POLICY_BYTES)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let source = Source::File(path.to_owned());
    check_bytes(host, path.display().to_string(), &name, bytes, source)
}
