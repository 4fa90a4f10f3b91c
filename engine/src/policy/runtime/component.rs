//! A loaded policy: one version of one component, pre-instantiated, with its
//! limits. Every call gets a fresh store (its instances from the host's pool,
//! see [`crate::policy::runtime::pool`]), an epoch deadline and a memory cap;
//! its answer is validated against the contract before anyone sees it.

use crate::base::clock::Clock;
use crate::base::digest::Digest;
use crate::policy::artifacts::cache::CacheOutcome;
use crate::policy::error::{Cause, cause};
use crate::policy::runtime::adapter::{MergerPre, SorterPre, StrategyPre};
use crate::policy::runtime::guest_env::GuestClock;
use crate::policy::runtime::handle::{Merger, Sorter, Strategy};
use crate::policy::runtime::interest::Declared;
use crate::policy::runtime::limits::EPOCH_TICK;
use crate::policy::runtime::pool::CallSlots;
use crate::policy::runtime::sandbox::{
    HOSTCALL_BYTES, LOG_BYTES_PER_CALL, LOG_LINES_PER_CALL, Sandbox, off_runtime,
};
use crate::policy::runtime::trap;
use crate::policy::runtime::validate::Declined;
use crate::policy::{Contract, Fault, Limits, World};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::{Engine, Store, Trap};

/// Where a policy's bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Built into the vigil binary.
    Builtin,
    /// A file in the policies directory.
    File(PathBuf),
    /// The last-known-good copy kept in the state directory.
    LastKnownGood(PathBuf),
}

/// The pre-instantiated component, typed by world (and, within it, by the
/// contract it speaks: see [`crate::policy::runtime::adapter`]).
pub(crate) enum Pre {
    Strategy(StrategyPre),
    Sorter(SorterPre),
    Merger(MergerPre),
}

/// Everything [`crate::policy::Host::load`] hands to [`Policy::new`].
pub(crate) struct Parts {
    pub(crate) name: String,
    pub(crate) digest: Digest,
    pub(crate) world: World,
    /// The contract version it was built for.
    pub(crate) contract: Contract,
    pub(crate) source: Origin,
    /// The component's size in bytes (the bytes themselves are not kept).
    pub(crate) size: usize,
    pub(crate) limits: Limits,
    pub(crate) engine: Engine,
    pub(crate) clock: Arc<dyn Clock>,
    /// The host's gate on instances held at once.
    pub(crate) slots: Arc<CallSlots>,
    pub(crate) pre: Pre,
    pub(crate) exports: Vec<String>,
    pub(crate) imports: Vec<String>,
    pub(crate) cache: CacheOutcome,
    pub(crate) compile_time: Duration,
}

/// One version of one policy, ready to call from any thread.
pub struct Policy {
    parts: Parts,
    label: Arc<str>,
    limits: Mutex<Limits>,
    calls: AtomicU64,
    faults: AtomicU64,
    log_dropped: AtomicU64,
    /// What the policy declared it reads, and the config it declared it for.
    interest: Mutex<Option<(String, Arc<Declared>)>>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.parts.name)
            .field("digest", &self.parts.digest)
            .field("world", &self.parts.world)
            .field("source", &self.parts.source)
            .finish_non_exhaustive()
    }
}

/// A call's outcome: the policy's own answer (which may be a refusal), or a fault.
pub type Outcome<T, E> = Result<Result<T, E>, Fault>;

impl Policy {
    pub(crate) fn new(parts: Parts) -> Self {
        let label = format!("{}@{}", parts.name, parts.digest).into();
        Self {
            limits: Mutex::new(parts.limits),
            parts,
            label,
            calls: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            log_dropped: AtomicU64::new(0),
            interest: Mutex::new(None),
        }
    }

    /// The policy's name (its file stem).
    pub fn name(&self) -> &str {
        &self.parts.name
    }
    /// The version: sha256 of the component bytes.
    pub fn digest(&self) -> Digest {
        self.parts.digest
    }
    /// `name@version`, as used in logs.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The world it implements.
    pub fn world(&self) -> World {
        self.parts.world
    }
    /// The contract version it was built for (an earlier one is adapted).
    pub fn contract(&self) -> Contract {
        self.parts.contract
    }
    /// Where its bytes came from.
    pub fn origin(&self) -> &Origin {
        &self.parts.source
    }
    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.parts.size
    }
    /// Its limits.
    pub fn limits(&self) -> Limits {
        *self.limits.lock().expect("limits lock poisoned")
    }
    /// Applies `limits` from the next call on; nothing is recompiled.
    pub(crate) fn set_limits(&self, limits: Limits) {
        *self.limits.lock().expect("limits lock poisoned") = limits;
    }
    /// Names the component exports.
    pub fn exports(&self) -> &[String] {
        &self.parts.exports
    }
    /// Names the component imports.
    pub fn imports(&self) -> &[String] {
        &self.parts.imports
    }
    /// What the artifact cache did when this version was loaded.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.parts.cache
    }
    /// Time spent compiling or loading the precompiled artifact.
    pub fn compile_time(&self) -> Duration {
        self.parts.compile_time
    }
    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
    /// Calls that faulted so far.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }
    /// Log lines dropped so far because a call went over its budget.
    pub fn log_lines_dropped(&self) -> u64 {
        self.log_dropped.load(Ordering::Relaxed)
    }

    /// Runs one call in a fresh, bounded store: `instantiate`, then `invoke`.
    /// Safe to call from anywhere, async runtime threads included.
    pub(in crate::policy) fn call<I, R: Send>(
        &self,
        instantiate: impl FnOnce(&mut Store<Sandbox>) -> wasmtime::Result<I> + Send,
        invoke: impl FnOnce(&I, &mut Store<Sandbox>) -> wasmtime::Result<R> + Send,
    ) -> Result<R, Fault> {
        off_runtime(|| self.call_in_store(instantiate, invoke))
    }

    fn call_in_store<I, R>(
        &self,
        instantiate: impl FnOnce(&mut Store<Sandbox>) -> wasmtime::Result<I>,
        invoke: impl FnOnce(&I, &mut Store<Sandbox>) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let limits = self.limits();
        let clock = GuestClock::new(Arc::clone(&self.parts.clock));
        // Declared before the store, so dropped after it: the instances go
        // back to the pool before the slot is given up.
        let _slot = self.parts.slots.take();
        let mut store = Store::new(
            &self.parts.engine,
            Sandbox::new(Arc::clone(&self.label), limits.memory_bytes, clock),
        );
        Sandbox::bound(&mut store);
        let ticks = limits
            .deadline
            .as_nanos()
            .div_ceil(EPOCH_TICK.as_nanos())
            .max(1);
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX));
        let result = match instantiate(&mut store) {
            Ok(instance) => invoke(&instance, &mut store).map_err(|e| {
                match classify(e, &store, limits, Fault::Trap) {
                    Fault::Trap(cause) => Fault::Trap(store.data().explain(cause)),
                    other => other,
                }
            }),
            Err(e) => Err(classify(e, &store, limits, Fault::Instantiate)),
        };
        let explained = matches!(result, Err(Fault::Trap(_)));
        store.data_mut().forward_stdio(explained);
        self.count_dropped_logs(store.data().log_lines_dropped());
        result
    }

    /// Counts log lines a call dropped; the first drop of this version is
    /// reported, later ones only counted.
    fn count_dropped_logs(&self, dropped: u64) {
        if dropped > 0 && self.log_dropped.fetch_add(dropped, Ordering::Relaxed) == 0 {
            tracing::warn!(
                policy = %self.label,
                dropped,
                "policy logged more than {LOG_LINES_PER_CALL} lines or {LOG_BYTES_PER_CALL} bytes in one call; \
                 the excess is dropped, and from now on only counted (vigil_policy_log_lines_dropped_total)"
            );
        }
    }

    /// Counts `result` as a fault if it is one.
    pub(in crate::policy) fn counted<T>(&self, result: Result<T, Fault>) -> Result<T, Fault> {
        result.inspect_err(|_| {
            self.faults.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// The policy's answer, once `check` has found it within the contract
    /// (and bounded it); a refusal is bounded too. A fault of the call or of
    /// the check is counted.
    pub(in crate::policy) fn checked<T, E: Declined>(
        &self,
        outcome: Result<Result<T, E>, Fault>,
        check: impl FnOnce(&mut T) -> Result<(), Fault>,
    ) -> Outcome<T, E> {
        let mut answer = self.counted(outcome)?;
        match &mut answer {
            Ok(value) => self.counted(check(value))?,
            Err(declined) => declined.bound(),
        }
        Ok(answer)
    }

    /// What the policy reads under `config`: asked with a call to `declare`
    /// the first time after the config changes, remembered since. A fault or
    /// an interest out of bounds is counted, and asked again next time.
    pub(in crate::policy) fn interest<I, D: Into<Declared> + Send>(
        &self,
        config: &str,
        instantiate: impl FnOnce(&mut Store<Sandbox>) -> wasmtime::Result<I> + Send,
        declare: impl FnOnce(&I, &mut Store<Sandbox>) -> wasmtime::Result<D> + Send,
    ) -> Result<Arc<Declared>, Fault> {
        let mut known = self.interest.lock().expect("interest lock poisoned");
        if let Some((for_config, interest)) = known.as_ref()
            && for_config == config
        {
            return Ok(Arc::clone(interest));
        }
        let interest: Declared = self.counted(self.call(instantiate, declare))?.into();
        self.counted(crate::policy::runtime::interest::check(&interest))?;
        let interest = Arc::new(interest);
        *known = Some((config.to_owned(), Arc::clone(&interest)));
        Ok(interest)
    }

    /// This policy as an eviction strategy, if it is one.
    pub fn as_strategy(&self) -> Option<Strategy<'_>> {
        match &self.parts.pre {
            Pre::Strategy(pre) => Some(Strategy::new(self, pre)),
            _ => None,
        }
    }

    /// This policy as a candidate sorter, if it is one.
    pub fn as_sorter(&self) -> Option<Sorter<'_>> {
        match &self.parts.pre {
            Pre::Sorter(pre) => Some(Sorter::new(self, pre)),
            _ => None,
        }
    }

    /// This policy as a config merger, if it is one.
    pub fn as_merger(&self) -> Option<Merger<'_>> {
        match &self.parts.pre {
            Pre::Merger(pre) => Some(Merger::new(self, pre)),
            _ => None,
        }
    }
}

/// How wasmtime says a guest passed more than the hostcall fuel allows (its
/// error type is private; a test pins the text).
const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// Turns a wasmtime error from a call into the fault it stands for.
fn classify(
    error: wasmtime::Error,
    store: &Store<Sandbox>,
    limits: Limits,
    other: fn(Cause) -> Fault,
) -> Fault {
    if store.data().memory_limit_hit() {
        Fault::MemoryLimit {
            limit_mib: limits.memory_bytes >> 20,
        }
    } else if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        Fault::Deadline {
            deadline_ms: limits.deadline.as_millis(),
        }
    } else if error
        .chain()
        .any(|e| e.to_string().contains(HOSTCALL_FUEL_EXHAUSTED))
    {
        Fault::InvalidAnswer(format!(
            "more than {HOSTCALL_BYTES} bytes passed to the host at once"
        ))
    } else {
        match trap::describe(&error) {
            Some(trap) => other(Box::new(trap)),
            None => other(cause(error)),
        }
    }
}
