//! `vigil policy check`: loads component files exactly as the agent would
//! (format, world, imports, canary call) and describes each one.

use crate::base::digest::{Digest, WasmBytes};
use crate::base::policy_name::PolicyName;
use crate::policy::runtime::canary;
use crate::policy::{
    CONTRACT_VERSION, CacheOutcome, Contract, Host, Limits, LoadError, Origin, Policy, World,
};
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
    /// The contract version it was built for.
    pub contract: Contract,
    /// Its exports.
    pub exports: Vec<String>,
    /// Its imports.
    pub imports: Vec<String>,
    /// Size in bytes.
    pub size: usize,
    /// Version digest.
    pub digest: Digest,
    /// Time to compile it (or to load it from the cache).
    pub compile_time: Duration,
    /// Whether it was loaded from the artifact cache rather than compiled.
    pub cached: bool,
    /// Why the canary call declined, if it did (an answer, not a fault).
    pub declined: Option<String>,
}

impl CheckReport {
    fn new(origin: String, policy: &Policy, declined: Option<String>) -> Self {
        Self {
            origin,
            world: policy.world(),
            contract: policy.contract(),
            exports: policy.exports().to_vec(),
            imports: policy.imports().to_vec(),
            size: policy.size(),
            digest: policy.digest(),
            compile_time: policy.compile_time(),
            cached: policy.cache_outcome() == CacheOutcome::Hit,
            declined,
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
            self.contract.version()
        )?;
        if self.contract.is_adapted() {
            writeln!(
                f,
                "  contract: {} (an earlier one: this agent adapts it to {CONTRACT_VERSION}; rebuild against wit/ to move on)",
                self.contract
            )?;
        } else {
            writeln!(f, "  contract: {} (current)", self.contract)?;
        }
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
            "  compile:  {:.1} ms{}; canary call passed",
            self.compile_time.as_secs_f64() * 1e3,
            if self.cached { " (from the cache)" } else { "" }
        )?;
        match &self.declined {
            Some(reason) => write!(f, " (it declined: {reason})"),
            None => Ok(()),
        }
    }
}

/// Loads `bytes` like the agent would and runs its canary call with
/// `config`, the policy's own configuration as JSON.
///
/// # Errors
/// Why it cannot serve as a policy.
pub fn check_bytes(
    host: &Host,
    origin: String,
    name: &str,
    wasm: impl Into<WasmBytes>,
    source: Origin,
    config: &str,
) -> Result<CheckReport, LoadError> {
    let policy = host.load(name, wasm, source, Limits::default())?;
    let declined = canary::run(&policy, config).map_err(LoadError::Canary)?;
    Ok(CheckReport::new(origin, &policy, declined))
}

/// Checks the component file at `path`, as [`check_bytes`] does.
///
/// # Errors
/// Why it cannot serve as a policy.
pub(crate) fn check_file(host: &Host, path: &Path, config: &str) -> Result<CheckReport, LoadError> {
    let bytes = crate::policy::artifacts::files::read_policy(
        path,
        crate::policy::artifacts::files::DEFAULT_MAX_POLICY_BYTES,
    )?;
    let source = Origin::File(path.to_owned());
    check_bytes(
        host,
        path.display().to_string(),
        PolicyName::of_path(path)?.as_str(),
        bytes,
        source,
        config,
    )
}

/// What `vigil policy check` found: the config's names that no policy
/// answers to, and each component's report or why it cannot serve.
#[derive(Debug)]
pub(crate) struct CheckRun {
    /// Policies the config names that are neither checked nor built in.
    pub unknown: Vec<crate::config::names::UnknownPolicy>,
    /// Each component checked, by origin (a path, or `builtin:NAME`).
    pub checked: Vec<(String, Result<CheckReport, LoadError>)>,
    /// Whether a config was given: then a declined canary call is a failure.
    pub with_config: bool,
}

impl CheckRun {
    /// How many problems were found.
    pub(crate) fn failures(&self) -> usize {
        let failed = |(_, result): &&(String, Result<CheckReport, LoadError>)| match result {
            Ok(report) => self.with_config && report.declined.is_some(),
            Err(_) => true,
        };
        self.unknown.len() + self.checked.iter().filter(failed).count()
    }
}

/// Which built-ins `vigil policy check` checks beside the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtins {
    /// Only the files.
    Skip,
    /// The policies built into this binary too.
    Check,
}

/// Checks `files` (and the built-ins), each canary call with its policy's
/// config from `settings` when given, and the names `settings` uses.
pub(crate) fn check_all(
    host: &Host,
    files: &[std::path::PathBuf],
    builtins: Builtins,
    settings: Option<&crate::eviction::EvictionSettings>,
) -> CheckRun {
    use crate::policy::lifecycle::builtin::BUILTINS;
    let canary_config =
        |name: &str| settings.map_or_else(|| "{}".to_owned(), |s| s.policy(name).config);
    let unknown = settings.map_or_else(Vec::new, |settings| {
        let files = files
            .iter()
            .filter_map(|path| PolicyName::of_path(path).ok());
        let known: Vec<String> = BUILTINS
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .chain(files.map(String::from))
            .collect();
        crate::config::names::unknown_policies(settings.policies.keys(), &settings.sorter, &known)
    });
    let builtins = BUILTINS
        .iter()
        .filter(|_| builtins == Builtins::Check)
        .map(|(name, bytes)| {
            let origin = format!("builtin:{name}");
            let config = canary_config(name);
            let result = check_bytes(host, origin.clone(), name, *bytes, Origin::Builtin, &config);
            (origin, result)
        });
    let files = files.iter().map(|path| {
        let name = PolicyName::of_path(path).map(String::from);
        let config = canary_config(name.as_deref().unwrap_or_default());
        (path.display().to_string(), check_file(host, path, &config))
    });
    CheckRun {
        unknown,
        checked: builtins.chain(files).collect(),
        with_config: settings.is_some(),
    }
}
