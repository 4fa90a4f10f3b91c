//! The registry: which version of each policy serves, and its lifecycle.
//!
//! Readers take a snapshot of the serving set (`arc-swap`), so a call never
//! waits for a reload and a call already running finishes on the version it
//! started with. Every change goes through one mutex and republishes the set.
//!
//! # Lifecycle (the kubelet config controller's pattern, applied to policies)
//! - A new version is compiled and canaried *before* the swap
//!   ([`Registry::prepare`], no lock held), then swapped in on trial
//!   ([`Registry::apply`], with every other change of the same scan).
//! - A fault during the trial rolls back to the last-known-good version (or the
//!   built-in of that name; with neither, the policy is deregistered), and its
//!   digest is rejected until the file changes, across restarts too.
//! - After the trial ([`Registry::graduate_due`]) the version becomes the
//!   last-known-good; file-backed ones are saved to the state directory, so a
//!   restart with a bad file on disk still serves them.
//! - Deleting the file deregisters the policy, falling back to the built-in.

use crate::base::clock::Clock;
use crate::base::digest::{Digest, WasmBytes};
use crate::base::report::Chain;
use crate::policy::lifecycle::builtin::BUILTINS;
use crate::policy::lifecycle::state::StateStore;
use crate::policy::runtime::canary;
use crate::policy::{
    Fault, Host, LimitsTable, LoadError, Merger, Origin, Policy, Sorter, Strategy, Supervisor,
    World,
};
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use thiserror::Error;
use tokio::sync::watch;

/// Why the registry could not start.
#[derive(Debug, Error)]
pub enum RegistryError {
    /// The state directory cannot be created.
    #[error("cannot open the state directory {dir}")]
    StateDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A built-in policy does not load: the binary itself is broken.
    #[error("built-in policy {name} does not load")]
    Builtin {
        /// The policy.
        name: &'static str,
        /// Why.
        #[source]
        source: LoadError,
    },
}

/// Where a serving version is in its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Newly swapped in; a fault before `until` rolls it back.
    Trial {
        /// When the trial ends.
        until: SystemTime,
    },
    /// Past its trial (or built in): the last-known-good.
    Active,
    /// Serving the last-known-good because a newer version failed its trial.
    RolledBack {
        /// The version that failed.
        from: Digest,
        /// Why it failed.
        reason: String,
    },
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Trial { until } => match jiff::Timestamp::try_from(*until) {
                Ok(until) => write!(f, "trial until {until:.0}"),
                Err(_) => write!(f, "trial"),
            },
            Phase::Active => write!(f, "active"),
            Phase::RolledBack { from, reason } => {
                write!(f, "rolled back from {from}: {reason}")
            }
        }
    }
}

/// What serves under one name, for status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyStatus {
    /// Policy name.
    pub name: String,
    /// Its world.
    pub world: World,
    /// The serving version.
    pub digest: Digest,
    /// Where the serving version came from.
    pub source: Origin,
    /// Lifecycle phase.
    pub phase: Phase,
    /// The version a rollback would return to, if any.
    pub last_known_good: Option<Digest>,
    /// When this version (or this phase of it) began serving.
    pub since: SystemTime,
    /// The newest fault of any version of this name.
    pub last_fault: Option<Incident>,
    /// The newest version of this name that was refused at load, if it is
    /// newer than what serves (its file is still there).
    pub refused: Option<RefusedVersion>,
}

/// Something that went wrong with a policy, for status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    /// When.
    pub at: SystemTime,
    /// What, for people.
    pub message: String,
}

/// A version refused at load (it cannot be read, does not load, has the
/// wrong world, fails its canary or was rejected before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedVersion {
    /// The version refused, if its bytes could be read.
    pub digest: Option<Digest>,
    /// When and why.
    pub incident: Incident,
}

/// One name's serving version and what to fall back to.
#[derive(Debug, Clone)]
struct Lifecycle {
    current: Arc<Policy>,
    phase: Phase,
    fallback: Option<Arc<Policy>>,
    since: SystemTime,
}

#[derive(Debug, Default)]
struct Books {
    by_name: BTreeMap<String, Lifecycle>,
    builtins: HashMap<String, Arc<Policy>>,
    rejected: VecDeque<Digest>,
    /// The newest fault of each name.
    faults: BTreeMap<String, Incident>,
    /// Names whose newest file was refused at load.
    refused: BTreeMap<String, RefusedVersion>,
}

/// The set of serving policies, their lifecycles, and the host that loads them.
pub struct Registry {
    host: Arc<Host>,
    clock: Arc<dyn Clock>,
    limits: Mutex<LimitsTable>,
    state: StateStore,
    serving: ArcSwap<BTreeMap<String, Arc<Policy>>>,
    books: Mutex<Books>,
    generation: watch::Sender<u64>,
    /// Versions the shadow controller runs (or is loading) beside these:
    /// their precompiled artifacts are kept.
    in_shadow: Mutex<std::collections::HashSet<Digest>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("serving", &self.serving.load().keys())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// The host that loads this registry's policies.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// A registry serving the built-in policies, then every valid
    /// last-known-good version saved in `state_dir`.
    ///
    /// # Errors
    /// The state directory cannot be created, or a built-in does not load.
    pub fn new(
        host: Arc<Host>,
        clock: Arc<dyn Clock>,
        limits: LimitsTable,
        state_dir: Option<PathBuf>,
    ) -> Result<Self, RegistryError> {
        let state =
            StateStore::open(state_dir.clone()).map_err(|source| RegistryError::StateDir {
                dir: state_dir.unwrap_or_default(),
                source,
            })?;
        let mut books = Books {
            rejected: state.rejected(),
            ..Books::default()
        };
        let started = clock.now();
        for (name, bytes) in BUILTINS {
            let policy = host
                .load(name, bytes, Origin::Builtin, limits.for_policy(name))
                .map_err(|source| RegistryError::Builtin { name, source })?;
            let policy = Arc::new(policy);
            books.builtins.insert(name.to_owned(), Arc::clone(&policy));
            books.by_name.insert(
                name.to_owned(),
                Lifecycle {
                    current: policy,
                    phase: Phase::Active,
                    fallback: None,
                    since: started,
                },
            );
        }
        for saved in state.last_known_good() {
            let source = Origin::LastKnownGood(saved.path.clone());
            match host.load(
                &saved.name,
                saved.wasm,
                source,
                limits.for_policy(&saved.name),
            ) {
                Ok(policy) => {
                    let fallback = books.builtins.get(&saved.name).cloned();
                    let lifecycle = Lifecycle {
                        current: Arc::new(policy),
                        phase: Phase::Active,
                        fallback,
                        since: started,
                    };
                    books.by_name.insert(saved.name, lifecycle);
                }
                Err(error) => {
                    tracing::error!(path = %saved.path.display(), error = %Chain(&error), "ignoring last-known-good copy that does not load")
                }
            }
        }
        let registry = Self {
            host,
            clock,
            limits: Mutex::new(limits),
            state,
            serving: ArcSwap::from_pointee(BTreeMap::new()),
            books: Mutex::new(Books::default()),
            generation: watch::Sender::new(0),
            in_shadow: Mutex::default(),
        };
        registry.publish(&books);
        *registry.books.lock().expect("registry lock poisoned") = books;
        Ok(registry)
    }

    /// The serving version of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Policy>> {
        self.serving.load().get(name).cloned()
    }

    /// The built-in version of `name`, whatever serves under that name now.
    pub fn builtin(&self, name: &str) -> Option<Arc<Policy>> {
        self.lock().builtins.get(name).cloned()
    }

    /// Every serving policy, by name.
    pub fn serving(&self) -> Vec<Arc<Policy>> {
        self.serving.load().values().cloned().collect()
    }

    /// Every serving policy of `world`, by name.
    pub fn of_world(&self, world: World) -> Vec<Arc<Policy>> {
        self.serving
            .load()
            .values()
            .filter(|p| p.world() == world)
            .cloned()
            .collect()
    }

    /// Every serving policy's status, by name.
    pub fn status(&self) -> Vec<PolicyStatus> {
        let books = self.lock();
        books
            .by_name
            .iter()
            .map(|(name, lc)| PolicyStatus {
                name: name.clone(),
                world: lc.current.world(),
                digest: lc.current.digest(),
                source: lc.current.origin().clone(),
                phase: lc.phase.clone(),
                last_known_good: match lc.phase {
                    Phase::Trial { .. } => lc.fallback.as_ref().map(|p| p.digest()),
                    Phase::Active | Phase::RolledBack { .. } => Some(lc.current.digest()),
                },
                since: lc.since,
                last_fault: books.faults.get(name).cloned(),
                refused: books.refused.get(name).cloned(),
            })
            .collect()
    }

    /// Names whose newest file was refused at load while no version of
    /// theirs serves (a new policy that never loaded).
    pub fn refused_unserved(&self) -> Vec<(String, RefusedVersion)> {
        let books = self.lock();
        books
            .refused
            .iter()
            .filter(|(name, _)| !books.by_name.contains_key(*name))
            .map(|(name, refusal)| (name.clone(), refusal.clone()))
            .collect()
    }

    /// The limits new versions load with.
    pub fn limits(&self) -> LimitsTable {
        self.limits.lock().expect("limits lock poisoned").clone()
    }

    /// Applies `limits` to every loaded version — serving, last-known-good
    /// and built-in — from its next call on, and to versions loaded later.
    /// Nothing is recompiled.
    pub fn set_limits(&self, limits: LimitsTable) {
        let books = self.lock();
        let loaded = books
            .by_name
            .values()
            .flat_map(|lc| std::iter::once(&lc.current).chain(lc.fallback.as_ref()));
        for policy in loaded.chain(books.builtins.values()) {
            policy.set_limits(limits.for_policy(policy.name()));
        }
        *self.limits.lock().expect("limits lock poisoned") = limits;
    }

    /// A receiver that changes whenever the serving set does, and whenever
    /// a policy faults or a new version is refused (what [`Registry::status`]
    /// reports changed).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn lock(&self) -> MutexGuard<'_, Books> {
        self.books.lock().expect("registry lock poisoned")
    }

    fn publish(&self, books: &Books) {
        let serving = books
            .by_name
            .iter()
            .map(|(n, lc)| (n.clone(), Arc::clone(&lc.current)))
            .collect();
        self.serving.store(Arc::new(serving));
        self.generation.send_modify(|g| *g += 1);
    }

    /// Loads and canaries `bytes` as a new version of `name`, without
    /// touching what serves. This compiles: call it off the async runtime.
    ///
    /// # Errors
    /// The bytes were rejected before, do not load, or fail the canary.
    pub fn prepare(
        &self,
        name: &str,
        wasm: impl Into<WasmBytes>,
        source: Origin,
    ) -> Result<Arc<Policy>, LoadError> {
        let wasm = wasm.into();
        let digest = wasm.digest();
        self.try_prepare(name, wasm, source)
            .inspect_err(|error| self.refuse(name, Some(digest), Chain(error).to_string()))
    }

    /// Records that the newest file of `name` was refused: status reports
    /// show it until a version of `name` is installed or removed, or
    /// [`Registry::forget_refusal`].
    pub fn refuse(&self, name: &str, digest: Option<Digest>, message: String) {
        let incident = Incident {
            at: self.clock.now(),
            message,
        };
        let refusal = RefusedVersion { digest, incident };
        self.lock().refused.insert(name.to_owned(), refusal);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Forgets the refusal of `name` (its file is back to the version that serves).
    pub fn forget_refusal(&self, name: &str) {
        if self.lock().refused.remove(name).is_some() {
            self.generation.send_modify(|g| *g += 1);
        }
    }

    fn try_prepare(
        &self,
        name: &str,
        wasm: WasmBytes,
        source: Origin,
    ) -> Result<Arc<Policy>, LoadError> {
        let digest = wasm.digest();
        if self.lock().rejected.contains(&digest) {
            return Err(LoadError::Rejected { digest });
        }
        let limits = self.limits().for_policy(name);
        let policy = self.host.load(name, wasm, source, limits)?;
        if let Some(serving) = self.get(name).filter(|s| s.world() != policy.world()) {
            return Err(LoadError::WorldChanged {
                name: name.to_owned(),
                serving: serving.world().name(),
                found: policy.world().name(),
            });
        }
        // A refusal is an answer: the version may serve.
        canary::run(&policy, "{}").map_err(LoadError::Canary)?;
        Ok(Arc::new(policy))
    }

    /// Swaps `policy` in as the serving version of its name (see [`Registry::apply`]).
    pub fn install(&self, policy: Arc<Policy>) {
        self.apply(vec![policy], &[]);
    }

    /// Applies one change of the policies directory at once: each of
    /// `installs` swaps in as the serving version of its name, on trial
    /// (unless it is the version a rollback would return to, which serves
    /// as last-known-good straight away), and each of `removals` (its file
    /// is gone) is deregistered, the built-in of that name serving again if
    /// there is one. Callers see the set before or after, never a mix.
    pub fn apply(&self, installs: Vec<Arc<Policy>>, removals: &[String]) {
        if installs.is_empty() && removals.is_empty() {
            return;
        }
        let mut books = self.lock();
        let now = self.clock.now();
        for name in removals {
            books.refused.remove(name);
            match books.builtins.get(name).cloned() {
                Some(builtin) => {
                    let lifecycle = Lifecycle {
                        current: builtin,
                        phase: Phase::Active,
                        fallback: None,
                        since: now,
                    };
                    books.by_name.insert(name.clone(), lifecycle);
                }
                None => {
                    books.by_name.remove(name);
                }
            }
            tracing::info!(policy = name, "policy file removed; deregistered");
        }
        for policy in installs {
            self.install_locked(&mut books, policy);
        }
        self.publish(&books);
        drop(books);
        for name in removals {
            self.state.remove_last_known_good(name);
        }
    }

    fn install_locked(&self, books: &mut Books, policy: Arc<Policy>) {
        let name = policy.name().to_owned();
        books.refused.remove(&name);
        let since = self.clock.now();
        let fallback = match books.by_name.get(&name) {
            Some(lc) if lc.current.digest() == policy.digest() => return,
            Some(lc) if matches!(lc.phase, Phase::Trial { .. }) => lc.fallback.clone(),
            Some(lc) => Some(Arc::clone(&lc.current)),
            None => None,
        };
        let lifecycle = match fallback {
            Some(lkg) if lkg.digest() == policy.digest() => Lifecycle {
                current: lkg,
                phase: Phase::Active,
                fallback: None,
                since,
            },
            fallback => {
                let until = since + policy.limits().trial;
                Lifecycle {
                    current: policy,
                    phase: Phase::Trial { until },
                    fallback,
                    since,
                }
            }
        };
        tracing::info!(policy = lifecycle.current.label(), world = %lifecycle.current.world(), phase = %lifecycle.phase, "policy version swapped in");
        books.by_name.insert(name, lifecycle);
    }

    /// Removes from the host's cache the artifacts of every version this
    /// registry no longer holds (neither serving, nor a fallback, nor built
    /// in); `None` when the host has no cache. Only for a cache this
    /// registry's host owns, while nothing compiles into it.
    ///
    /// # Errors
    /// The cache directory cannot be listed.
    pub fn collect_garbage(&self) -> Option<std::io::Result<crate::policy::Collected>> {
        let held: std::collections::HashSet<Digest> = {
            let books = self.lock();
            books
                .by_name
                .values()
                .flat_map(|lc| std::iter::once(&lc.current).chain(&lc.fallback))
                .chain(books.builtins.values())
                .map(|policy| policy.digest())
                .chain(
                    self.in_shadow
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .copied(),
                )
                .collect()
        };
        self.host.collect_garbage(&held)
    }

    /// Keeps the precompiled artifacts of `digests`, the versions in
    /// shadow (and those being loaded for it), from now on instead of the
    /// ones held before: a version judged in shadow that then serves is
    /// not compiled again.
    pub fn hold_for_shadow(&self, digests: std::collections::HashSet<Digest>) {
        *self.in_shadow.lock().unwrap_or_else(|e| e.into_inner()) = digests;
    }

    /// Names whose serving version came from the policies directory or its saved copy.
    pub fn file_backed(&self) -> Vec<String> {
        let books = self.lock();
        books
            .by_name
            .iter()
            .filter(|(_, lc)| lc.current.origin() != &Origin::Builtin || lc.fallback.is_some())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// `policy` as a strategy whose faults this registry supervises.
    pub fn strategy<'a>(&'a self, policy: &'a Policy) -> Option<Strategy<'a>> {
        policy.as_strategy().map(|s| s.supervised_by(self))
    }

    /// `policy` as a sorter whose faults this registry supervises.
    pub fn sorter<'a>(&'a self, policy: &'a Policy) -> Option<Sorter<'a>> {
        policy.as_sorter().map(|s| s.supervised_by(self))
    }

    /// `policy` as a merger whose faults this registry supervises.
    pub fn merger<'a>(&'a self, policy: &'a Policy) -> Option<Merger<'a>> {
        policy.as_merger().map(|m| m.supervised_by(self))
    }

    /// Rolls `policy` back if it is the serving version and on trial.
    fn on_fault(&self, policy: &Policy, fault: &Fault) {
        self.roll_back_trial(policy.name(), policy.digest(), Chain(fault).to_string());
    }

    /// Rolls version `digest` of `name` back, as a fault would, for
    /// breaking a bound of its trial (`reason`); answers whether it was the
    /// serving version on trial (else nothing changes but the record of
    /// the incident).
    pub fn fail_trial(&self, name: &str, digest: Digest, reason: String) -> bool {
        tracing::error!(policy = name, version = %digest, %reason, "version broke a bound of its trial");
        self.roll_back_trial(name, digest, reason)
    }

    fn roll_back_trial(&self, name: &str, digest: Digest, reason: String) -> bool {
        let mut books = self.lock();
        let now = self.clock.now();
        let Books {
            by_name,
            rejected,
            faults,
            ..
        } = &mut *books;
        let incident = Incident {
            at: now,
            message: format!("{name}@{digest}: {reason}"),
        };
        faults.insert(name.to_owned(), incident);
        let on_trial = by_name
            .get_mut(name)
            .filter(|lc| lc.current.digest() == digest && matches!(lc.phase, Phase::Trial { .. }));
        let Some(lc) = on_trial else {
            self.generation.send_modify(|g| *g += 1);
            return false;
        };
        let policy = Arc::clone(&lc.current);
        self.state.reject(rejected, digest);
        match lc.fallback.take() {
            Some(lkg) => {
                tracing::error!(policy = policy.label(), restored = lkg.label(), %reason, "version failed its trial; rolled back to last-known-good");
                *lc = Lifecycle {
                    current: lkg,
                    phase: Phase::RolledBack {
                        from: policy.digest(),
                        reason,
                    },
                    fallback: None,
                    since: now,
                };
            }
            None => {
                tracing::error!(policy = policy.label(), %reason, "version failed its trial and has no last-known-good; deregistered");
                by_name.remove(name);
            }
        }
        self.publish(&books);
        true
    }

    /// Graduates every version whose trial is over: it becomes the
    /// last-known-good, saved to the state directory if it came from a file.
    /// Returns the names graduated.
    pub fn graduate_due(&self) -> Vec<String> {
        let now = self.clock.now();
        let mut graduated = Vec::new();
        let mut books = self.lock();
        for (name, lc) in books.by_name.iter_mut() {
            if matches!(lc.phase, Phase::Trial { until } if until <= now) {
                lc.phase = Phase::Active;
                lc.fallback = None;
                lc.since = now;
                graduated.push((name.clone(), Arc::clone(&lc.current)));
            }
        }
        drop(books);
        for (_, policy) in &graduated {
            tracing::info!(
                policy = policy.label(),
                "version passed its trial; it is now the last-known-good"
            );
            let Origin::File(path) = policy.origin() else {
                continue;
            };
            let saved = self
                .state
                .save_last_known_good(policy.name(), policy.digest(), path);
            if let Err(error) = saved {
                tracing::error!(policy = policy.label(), %error, "cannot save last-known-good copy");
            }
        }
        graduated.into_iter().map(|(name, _)| name).collect()
    }
}

/// The registry supervises the handles it gives out: a fault is logged and,
/// if the version is on trial, rolls it back to its last-known-good.
impl Supervisor for Registry {
    fn fault(&self, policy: &Policy, fault: &Fault) {
        tracing::error!(policy = policy.label(), kind = fault.kind().as_str(), error = %Chain(fault), "policy call faulted");
        self.on_fault(policy, fault);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_phase_reads_as_words_and_a_time() {
        let until = UNIX_EPOCH + Duration::from_millis(1_700_000_300_250);
        assert_eq!(
            Phase::Trial { until }.to_string(),
            "trial until 2023-11-14T22:18:20Z"
        );
        assert_eq!(Phase::Active.to_string(), "active");
        let from = Digest::of(b"v2");
        let rolled_back = Phase::RolledBack {
            from,
            reason: "trapped".into(),
        };
        assert_eq!(
            rolled_back.to_string(),
            format!("rolled back from {from}: trapped")
        );
    }
}
