//! The policy host: one wasmtime [`Engine`] (for this machine's
//! architecture at its default CPU baseline, see [`crate::policy::artifacts::engine`]), one
//! [`Linker`] (WASI plus the `log` import), an epoch ticker that enforces
//! call deadlines, the precompiled-artifact cache and, optionally, a child
//! process that compiles what the cache lacks. [`Host::load`] turns
//! component bytes into a [`Policy`] ready to call; it may compile, so run
//! it off the async runtime. Whether it compiles at all is its
//! [`CompileMode`].

use crate::base::clock::{Clock, SystemClock};
use crate::base::digest::{Digest, WasmBytes};
use crate::model::bindings::{merger, sorter, strategy};
use crate::model::{v0_1, v0_2};
use crate::policy::artifacts::cache::{ArtifactCache, CacheOutcome, Collected};
use crate::policy::artifacts::compiler::{ChildCompiler, CompileError, Compiled};
use crate::policy::artifacts::engine::{self, Baseline, EngineKey};
use crate::policy::error::cause;
use crate::policy::runtime::adapter::{MergerPre, SorterPre, StrategyPre};
use crate::policy::runtime::component::{Origin, Policy, Pre};
use crate::policy::runtime::guest_env;
use crate::policy::runtime::limits::EPOCH_TICK;
use crate::policy::runtime::pool::{self, CallSlots};
use crate::policy::runtime::sandbox::Sandbox;
use crate::policy::{Contract, Limits, LoadError, World};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

/// Why the host could not start.
#[derive(Debug, Error)]
pub enum HostError {
    /// The wasmtime engine or linker could not be set up.
    #[error("cannot set up the WebAssembly engine")]
    Engine(#[source] crate::policy::error::Cause),
    /// The cache directory cannot be created.
    #[error("cannot create the artifact cache in {dir}")]
    Cache {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A child compiler needs a cache to hand its artifacts back through.
    #[error("compiling in a child process needs an artifact cache")]
    ChildWithoutCache,
}

/// Starts the thread that advances `engine`'s epoch every [`EPOCH_TICK`].
/// It holds only a weak reference, so it ends on its own once the engine is
/// gone — the host and every policy loaded by it, which each hold the engine.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("vigil-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .expect("cannot spawn the epoch ticker thread");
}

/// Whether a host compiles policy components itself (`--compile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompileMode {
    /// Only precompiled artifacts (signed, imported into the cache) and
    /// the built-ins, which are part of the binary, load; nothing else is
    /// compiled, and no compiler process is ever started.
    Never,
    /// Precompiled artifacts where there are, else compile.
    #[default]
    Fallback,
    /// Compile everything here; artifacts compiled elsewhere are ignored.
    Always,
}

impl CompileMode {
    /// Every mode, by name.
    pub const ALL: [Self; 3] = [Self::Never, Self::Fallback, Self::Always];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Fallback => "fallback",
            Self::Always => "always",
        }
    }

    /// Whether artifacts compiled elsewhere are taken.
    pub fn takes_precompiled(self) -> bool {
        self != Self::Always
    }
}

impl std::str::FromStr for CompileMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == text)
            .ok_or_else(|| {
                format!("unknown compile mode {text:?}; one of: never, fallback, always")
            })
    }
}

/// Compiles and instantiates policies. One per process.
pub struct Host {
    engine: Engine,
    engine_key: EngineKey,
    clock: Arc<dyn Clock>,
    linker: Linker<Sandbox>,
    cache: Option<ArtifactCache>,
    compiler: Option<ChildCompiler>,
    mode: CompileMode,
    /// Components compiled (here or by the child) since the start.
    compiles: std::sync::atomic::AtomicU64,
    slots: Arc<CallSlots>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("cache", &self.cache)
            .field("compiler", &self.compiler)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host that caches precompiled components in `cache_dir`, if given,
    /// and whose policies read the system clock.
    ///
    /// # Errors
    /// The engine cannot be configured or the cache directory cannot be created.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Self, HostError> {
        Self::with_clock(cache_dir, Arc::new(SystemClock))
    }

    /// As [`Host::new`], with policies reading `clock` (see `crate::policy::runtime::guest_env`).
    ///
    /// # Errors
    /// As [`Host::new`].
    pub fn with_clock(
        cache_dir: Option<PathBuf>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, HostError> {
        Self::build(cache_dir, clock, true)
    }

    /// A host for the child compiler: it compiles into `cache_dir` with the
    /// agent's engine configuration, without the instance pool it never uses
    /// (see [`Host::compile_into_cache`]).
    ///
    /// # Errors
    /// As [`Host::new`].
    pub fn for_compiling(cache_dir: PathBuf) -> Result<Self, HostError> {
        Self::build(Some(cache_dir), Arc::new(SystemClock), false)
    }

    fn build(
        cache_dir: Option<PathBuf>,
        clock: Arc<dyn Clock>,
        pooled: bool,
    ) -> Result<Self, HostError> {
        let pool = pooled.then(pool::strategy);
        let engine = engine::config(Baseline::host(), pool)
            .and_then(|config| Engine::new(&config))
            .map_err(|e| HostError::Engine(cause(e)))?;
        let engine_key = EngineKey::of(&engine);
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| HostError::Engine(cause(e)))?;
        strategy::vigil::policy::log::add_to_linker::<_, HasSelf<Sandbox>>(&mut linker, |s| s)
            .map_err(|e| HostError::Engine(cause(e)))?;
        v0_2::strategy::vigil::policy::log::add_to_linker::<_, HasSelf<Sandbox>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| HostError::Engine(cause(e)))?;
        v0_1::strategy::vigil::policy::log::add_to_linker::<_, HasSelf<Sandbox>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| HostError::Engine(cause(e)))?;
        guest_env::link(&mut linker).map_err(|e| HostError::Engine(cause(e)))?;
        let cache = cache_dir
            .map(|dir| {
                ArtifactCache::new(dir.clone(), engine_key)
                    .map_err(|source| HostError::Cache { dir, source })
            })
            .transpose()?;
        start_epoch_ticker(&engine);
        Ok(Self {
            engine,
            engine_key,
            clock,
            linker,
            cache,
            compiler: None,
            mode: CompileMode::default(),
            compiles: std::sync::atomic::AtomicU64::new(0),
            slots: Arc::default(),
        })
    }

    /// The key of this host's engine: precompiled artifacts must be made
    /// for it.
    pub fn engine_key(&self) -> EngineKey {
        self.engine_key
    }

    /// This host, compiling as `mode` says.
    #[must_use]
    pub fn compile_mode(mut self, mode: CompileMode) -> Self {
        self.mode = mode;
        self
    }

    /// How this host compiles.
    pub fn mode(&self) -> CompileMode {
        self.mode
    }

    /// How many components this host has compiled (itself or in its
    /// child) since it started, built-ins aside: loads from the cache are
    /// not counted.
    pub fn compiles(&self) -> u64 {
        self.compiles.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `artifact`, compiled elsewhere for this host's engine and
    /// verified by the caller, as component `component`'s.
    ///
    /// # Errors
    /// The host has no cache, or the file cannot be imported into it.
    pub fn import_precompiled(&self, component: &Digest, artifact: &Path) -> std::io::Result<()> {
        self.cache
            .as_ref()
            .ok_or_else(|| std::io::Error::other("this host keeps no artifact cache"))?
            .import(component, artifact)
    }

    /// Whether the cache has an entry for `component` (checked when loaded).
    pub fn holds_artifact(&self, component: &Digest) -> bool {
        self.cache.as_ref().is_some_and(|c| c.holds(component))
    }

    /// Removes from the cache every artifact but those of `keep` (see
    /// `ArtifactCache::retain`); `None` without a cache.
    ///
    /// # Errors
    /// The cache directory cannot be listed.
    pub fn collect_garbage(
        &self,
        keep: &std::collections::HashSet<Digest>,
    ) -> Option<std::io::Result<Collected>> {
        self.cache.as_ref().map(|cache| cache.retain(keep))
    }

    /// This host, compiling what its cache lacks in a child process run by
    /// `compiler` rather than in this process.
    ///
    /// # Errors
    /// The host has no cache to take the child's artifacts from.
    pub fn compiling_in(mut self, compiler: ChildCompiler) -> Result<Self, HostError> {
        if self.cache.is_none() {
            return Err(HostError::ChildWithoutCache);
        }
        self.compiler = Some(compiler);
        Ok(self)
    }

    /// The child's side of [`Host::compiling_in`]: compiles `bytes` and
    /// stores the artifact in this host's cache.
    ///
    /// # Errors
    /// The bytes are not a component that compiles ([`LoadError::Invalid`]
    /// and kin), or the artifact cannot be stored ([`LoadError::Compile`]).
    pub fn compile_into_cache(&self, bytes: &[u8]) -> Result<(), LoadError> {
        check_header(bytes)?;
        let cache = self.cache.as_ref().ok_or_else(|| {
            LoadError::Compile(CompileError::NotCached("this host has no cache".into()))
        })?;
        let component =
            Component::new(&self.engine, bytes).map_err(|e| LoadError::Invalid(cause(e)))?;
        cache
            .store(&Digest::of(bytes), &component)
            .map_err(|e| LoadError::Compile(CompileError::NotCached(e)))
    }

    /// Loads `wasm` as the policy `name`: checks the format, compiles (or
    /// loads from the cache), identifies the world and checks every import.
    /// This compiles, which can take seconds for JS or Python components.
    ///
    /// # Errors
    /// Why the bytes cannot be a policy; see [`LoadError`].
    pub fn load(
        &self,
        name: &str,
        wasm: impl Into<WasmBytes>,
        source: Origin,
        limits: Limits,
    ) -> Result<Policy, LoadError> {
        let wasm = wasm.into();
        let (bytes, digest) = (Arc::clone(wasm.bytes()), wasm.digest());
        check_header(&bytes)?;
        let started = Instant::now();
        let (component, cache) = self.component(&digest, &bytes, &source)?;
        let compile_time = started.elapsed();
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        let imports: Vec<String> = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        let (world, contract) = World::from_exports(exports.iter().map(String::as_str))?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::UnsatisfiedImport(cause(e)))?;
        let pre = typed_pre(world, contract, instance_pre)?;
        if contract.is_adapted() {
            tracing::info!(policy = name, %contract, "component built for an earlier contract; served through the host's adapter");
        }
        Ok(Policy::new(crate::policy::runtime::component::Parts {
            name: name.to_owned(),
            digest,
            world,
            contract,
            source,
            size: bytes.len(),
            limits,
            engine: self.engine.clone(),
            clock: Arc::clone(&self.clock),
            slots: Arc::clone(&self.slots),
            pre,
            exports,
            imports,
            cache,
            compile_time,
        }))
    }

    /// The compiled component for `bytes`, from the cache when possible;
    /// otherwise compiled by the child compiler, or here — unless the mode
    /// is [`CompileMode::Never`] and it is not a built-in (compiled here:
    /// its code is part of the binary, and small).
    fn component(
        &self,
        digest: &Digest,
        bytes: &[u8],
        source: &Origin,
    ) -> Result<(Component, CacheOutcome), LoadError> {
        let outcome = match &self.cache {
            Some(cache) => match cache.load(&self.engine, digest, self.mode.takes_precompiled()) {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(outcome) => outcome,
            },
            None => CacheOutcome::Disabled,
        };
        let never = self.mode == CompileMode::Never;
        if never && *source != Origin::Builtin {
            return Err(LoadError::NotPrecompiled {
                engine_key: self.engine_key.hex(),
            });
        }
        if *source != Origin::Builtin {
            self.compiles
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let (Some(cache), Some(compiler), false) = (&self.cache, &self.compiler, never) {
            return match compiler
                .compile(cache.dir(), digest, bytes)
                .map_err(LoadError::Compile)?
            {
                Compiled::Invalid(message) => Err(LoadError::Invalid(message.into())),
                Compiled::Stored => match cache.load(&self.engine, digest, false) {
                    Ok(component) => Ok((component, outcome)),
                    Err(_) => Err(LoadError::Compile(CompileError::NotCached(
                        "the compiler stored it, but it does not load".into(),
                    ))),
                },
            };
        }
        let component =
            Component::new(&self.engine, bytes).map_err(|e| LoadError::Invalid(cause(e)))?;
        if let Some(cache) = &self.cache
            && let Err(error) = cache.store(digest, &component)
        {
            tracing::warn!(error, "cannot store precompiled artifact");
        }
        Ok((component, outcome))
    }
}

/// Tells a component from a core module or from something that is not wasm.
fn check_header(bytes: &[u8]) -> Result<(), LoadError> {
    match bytes {
        [0, b'a', b's', b'm', _, _, 1, 0, ..] => Ok(()),
        [0, b'a', b's', b'm', _, _, 0, 0, ..] => Err(LoadError::CoreModule),
        [0, b'a', b's', b'm', ..] => Err(LoadError::Invalid(
            "truncated or unknown WebAssembly header".into(),
        )),
        _ => Err(LoadError::NotWasm),
    }
}

/// The typed pre-instantiation of a component of `world` spoken in
/// `contract` (an earlier contract's is served through its adapter).
fn typed_pre(
    world: World,
    contract: Contract,
    instance_pre: wasmtime::component::InstancePre<Sandbox>,
) -> Result<Pre, LoadError> {
    let wrong = |e| LoadError::WrongExports {
        world: world.name(),
        contract,
        source: cause(e),
    };
    Ok(match (world, contract) {
        (World::EvictionStrategy, Contract::V0_3) => Pre::Strategy(StrategyPre::Current(
            strategy::EvictionStrategyPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::EvictionStrategy, Contract::V0_2) => Pre::Strategy(StrategyPre::V0_2(
            v0_2::strategy::EvictionStrategyPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::EvictionStrategy, Contract::V0_1) => Pre::Strategy(StrategyPre::V0_1(
            v0_1::strategy::EvictionStrategyPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::CandidateSorter, Contract::V0_3) => Pre::Sorter(SorterPre::Current(
            sorter::CandidateSorterPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::CandidateSorter, Contract::V0_2) => Pre::Sorter(SorterPre::V0_2(
            v0_2::sorter::CandidateSorterPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::CandidateSorter, Contract::V0_1) => Pre::Sorter(SorterPre::V0_1(
            v0_1::sorter::CandidateSorterPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::ConfigMerger, Contract::V0_3) => Pre::Merger(MergerPre::Current(
            merger::ConfigMergerPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::ConfigMerger, Contract::V0_2) => Pre::Merger(MergerPre::V0_2(
            v0_2::merger::ConfigMergerPre::new(instance_pre).map_err(wrong)?,
        )),
        (World::ConfigMerger, Contract::V0_1) => Pre::Merger(MergerPre::V0_1(
            v0_1::merger::ConfigMergerPre::new(instance_pre).map_err(wrong)?,
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn headers_tell_components_from_modules_and_garbage() {
        assert!(check_header(b"\0asm\x0d\0\x01\0rest").is_ok());
        assert!(matches!(
            check_header(b"\0asm\x01\0\0\0"),
            Err(LoadError::CoreModule)
        ));
        assert!(matches!(check_header(b"\0as"), Err(LoadError::NotWasm)));
        assert!(matches!(
            check_header(b"\0asm\x0d"),
            Err(LoadError::Invalid(_))
        ));
        assert!(matches!(
            check_header(b"#!/bin/sh"),
            Err(LoadError::NotWasm)
        ));
    }

    #[test]
    fn a_child_compiler_needs_a_cache_to_hand_artifacts_back() {
        let compiler = ChildCompiler {
            program: "/proc/self/exe".into(),
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(1),
        };
        let without = Host::new(None).unwrap().compiling_in(compiler.clone());
        assert!(matches!(without, Err(HostError::ChildWithoutCache)));
        let dir = tempfile::tempdir().unwrap();
        let with = Host::new(Some(dir.path().to_owned()))
            .unwrap()
            .compiling_in(compiler);
        assert!(with.is_ok());
    }
}
