//! The engine policies are compiled for, named explicitly so that code
//! compiled once, in CI, runs on every node of an architecture.
//!
//! Left to itself, wasmtime compiles for the CPU it runs on, so an artifact
//! would only fit nodes of the same CPU model. Here the engine is configured
//! with a fixed `Target`: a Linux triple (with the C library of this
//! vigil build: wasmtime runs only code compiled for exactly the host's
//! triple, so the image's static musl build and a glibc build do not share
//! artifacts) and a named CPU [`Baseline`] (a Cranelift preset, `x86-64-v2`
//! unless told otherwise), and artifacts are bound to this vigil build
//! ([`BUILD`], wasmtime's module version). The [`EngineKey`] names all of
//! it: SHA-256 over wasmtime's compatibility hash (triple, flags, tunables,
//! features, module version), so it is the same in every process of a
//! build, on every machine, across Rust releases.

use crate::base::build::BUILD;
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use wasmtime::{Config, Engine, ModuleVersionStrategy};

/// A CPU baseline code is compiled for: the least a node's CPU must offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Baseline {
    /// Any x86-64.
    X86_64,
    /// x86-64 with SSE4.2, POPCNT, CMPXCHG16B (since 2009): the default.
    X86_64V2,
    /// x86-64-v2 with AVX2, BMI1/2, FMA, LZCNT (since 2015).
    X86_64V3,
    /// Any 64-bit Arm (Armv8.0-A): the default on aarch64.
    Armv8,
    /// Armv8.1-A: with the Large System Extensions (atomics).
    Armv81,
}

impl Baseline {
    /// Every baseline, by name.
    pub const ALL: [Self; 5] = [
        Self::X86_64,
        Self::X86_64V2,
        Self::X86_64V3,
        Self::Armv8,
        Self::Armv81,
    ];

    /// Its name, as given on the command line and in artifacts.
    pub fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86-64",
            Self::X86_64V2 => "x86-64-v2",
            Self::X86_64V3 => "x86-64-v3",
            Self::Armv8 => "armv8-a",
            Self::Armv81 => "armv8.1-a",
        }
    }

    /// The triple of its architecture, with this build's C library.
    pub fn triple(self) -> &'static str {
        let x86 = matches!(self, Self::X86_64 | Self::X86_64V2 | Self::X86_64V3);
        match (x86, cfg!(target_env = "musl")) {
            (true, false) => "x86_64-unknown-linux-gnu",
            (true, true) => "x86_64-unknown-linux-musl",
            (false, false) => "aarch64-unknown-linux-gnu",
            (false, true) => "aarch64-unknown-linux-musl",
        }
    }

    /// The Cranelift flags or presets it enables.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Self::X86_64 | Self::Armv8 => &[],
            Self::X86_64V2 => &["x86-64-v2"],
            Self::X86_64V3 => &["x86-64-v3"],
            Self::Armv81 => &["has_lse"],
        }
    }

    /// The default baseline of the architecture named by `arch` (as in
    /// `std::env::consts::ARCH`), if vigil runs there.
    pub fn default_for(arch: &str) -> Option<Self> {
        match arch {
            "x86_64" => Some(Self::X86_64V2),
            "aarch64" => Some(Self::Armv8),
            _ => None,
        }
    }

    /// The default baseline of this machine's architecture.
    pub fn host() -> Self {
        Self::default_for(std::env::consts::ARCH)
            .expect("vigil is built for x86_64 and aarch64 only")
    }
}

impl fmt::Display for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Baseline {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|b| b.name() == text)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|b| b.name()).collect();
                format!(
                    "unknown CPU baseline {text:?}; one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// The engine's configuration for `baseline`: epoch deadlines, components,
/// memories that start as copy-on-write images of the artifact, the fixed
/// target, the build's module version and, when `pooled`, pooled instances
/// (which change nothing compiled: the child compiler and `policy
/// precompile` do without them).
///
/// # Errors
/// The baseline's architecture is not compiled into this build.
pub(in crate::policy) fn config(
    baseline: Baseline,
    pooled: Option<wasmtime::InstanceAllocationStrategy>,
) -> wasmtime::Result<Config> {
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .wasm_component_model(true)
        .memory_init_cow(true)
        .module_version(ModuleVersionStrategy::Custom(BUILD.to_owned()))?;
    config.target(baseline.triple())?;
    for flag in baseline.flags() {
        // SAFETY: each flag is a Cranelift preset or flag of the baseline's
        // own architecture, and an engine only runs code on a host that has
        // every feature it enables (wasmtime checks this when it loads an
        // artifact, and the agent loads only for its own baseline).
        unsafe {
            config.cranelift_flag_enable(flag);
        }
    }
    if let Some(strategy) = pooled {
        config.allocation_strategy(strategy);
    }
    Ok(config)
}

/// Names an engine configuration: artifacts compiled under one key load
/// only in an engine of the same key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineKey([u8; 16]);

/// Feeds what `Hash` writes into SHA-256.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        unreachable!("only the SHA-256 state is read")
    }
}

impl EngineKey {
    /// The key of `engine`: the first 128 bits of SHA-256 over its
    /// compatibility hash.
    pub fn of(engine: &Engine) -> Self {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let digest: [u8; 32] = hasher.0.finalize().into();
        let mut key = [0; 16];
        key.copy_from_slice(&digest[..16]);
        Self(key)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Its 32 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for EngineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for EngineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EngineKey({self})")
    }
}

/// An engine for `baseline` that only compiles (no instance pool), and its key.
///
/// # Errors
/// The baseline's architecture is not compiled into this build.
pub(in crate::policy) fn compiling(baseline: Baseline) -> wasmtime::Result<(Engine, EngineKey)> {
    let engine = Engine::new(&config(baseline, None)?)?;
    let key = EngineKey::of(&engine);
    Ok((engine, key))
}

/// What `vigil policy precompile` makes: a component compiled for a
/// baseline, serialised, with the key of the engine it is for.
#[derive(Debug)]
pub struct Precompiled {
    /// The serialised artifact (native code).
    pub artifact: Vec<u8>,
    /// The key of the engine that loads it.
    pub engine_key: EngineKey,
}

/// Compiles `component` for `baseline` (any supported architecture, not
/// only this machine's).
///
/// # Errors
/// The bytes do not compile, or the architecture is not in this build.
pub fn precompile(baseline: Baseline, component: &[u8]) -> wasmtime::Result<Precompiled> {
    let (engine, engine_key) = compiling(baseline)?;
    Ok(Precompiled {
        artifact: engine.precompile_component(component)?,
        engine_key,
    })
}

/// The key of the engine for `baseline` in this build.
///
/// # Errors
/// The architecture is not in this build.
pub fn engine_key(baseline: Baseline) -> wasmtime::Result<EngineKey> {
    compiling(baseline).map(|(_, key)| key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_key_is_stable_and_names_target_and_baseline() {
        let key = |b| engine_key(b).unwrap();
        assert_eq!(key(Baseline::X86_64V2), key(Baseline::X86_64V2));
        let keys: std::collections::HashSet<EngineKey> = Baseline::ALL.map(key).into();
        assert_eq!(keys.len(), Baseline::ALL.len(), "{keys:?}");
        // Pooling instances changes nothing compiled, so nothing in the key.
        let pooled = Engine::new(
            &config(
                Baseline::host(),
                Some(crate::policy::runtime::pool::strategy()),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(EngineKey::of(&pooled), key(Baseline::host()));
    }

    #[test]
    fn baselines_parse_by_name() {
        for baseline in Baseline::ALL {
            assert_eq!(baseline.name().parse::<Baseline>(), Ok(baseline));
        }
        let error = "x86-64-v9".parse::<Baseline>().unwrap_err();
        assert!(error.contains("x86-64-v2, x86-64-v3"), "{error}");
    }
}
