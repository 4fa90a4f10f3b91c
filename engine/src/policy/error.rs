//! Errors of the policy host: why a component cannot become a policy
//! ([`LoadError`]) and why one call to a policy failed ([`Fault`]).
//!
//! A policy's own refusal (a WIT `err`) is not an error here: calls return it
//! as the inner `Err` of `Result<Result<T, E>, Fault>`.

use std::path::PathBuf;
use thiserror::Error;

/// A wasmtime error, boxed so it can be a `#[source]`.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Boxes a wasmtime error as a [`Cause`].
pub(crate) fn cause(error: wasmtime::Error) -> Cause {
    error.into_boxed_dyn_error()
}

/// What a guest wrote to stderr before it trapped, ahead of the trap itself.
#[derive(Debug, Error)]
#[error("it wrote: {said}")]
pub(super) struct GuestSaid {
    /// Its last lines, joined by ` | `.
    pub said: String,
    /// The trap.
    #[source]
    pub source: Cause,
}

/// Why a component could not be loaded as a policy.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The path is not a regular file (a directory, FIFO, device or socket,
    /// or a symlink to one); it is never opened for reading.
    #[error("{path} is a {kind}, not a regular file")]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The file is larger than the policy size cap; it is not read.
    #[error("{path} is {size} bytes, over the {max}-byte cap on policy files")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least this much).
        size: u64,
        /// The cap.
        max: u64,
    },
    /// The file's name is not a policy name.
    #[error(transparent)]
    Name(#[from] crate::base::policy_name::NameError),
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly file (it does not start with the `\\0asm` magic)")]
    NotWasm,
    /// A core module rather than a component.
    #[error("a core WebAssembly module, not a component (wrap it with `wasm-tools component new`)")]
    CoreModule,
    /// The component is malformed (truncated, corrupt, or uses unsupported features).
    #[error("invalid component")]
    Invalid(#[source] Cause),
    /// Compiling it failed for want of memory or time, or its artifact could
    /// not be kept: the component itself may be fine.
    #[error("cannot be compiled")]
    Compile(#[source] crate::policy::CompileError),
    /// The host compiles nothing (`--compile=never`) and holds no
    /// precompiled artifact of the component for its engine.
    #[error(
        "not precompiled: this agent compiles nothing (--compile=never), and no precompiled artifact signed by the native-code key for engine key {engine_key} was imported"
    )]
    NotPrecompiled {
        /// The agent's engine key, the one an artifact must be made for.
        engine_key: String,
    },
    /// The component exports none of the policy interfaces.
    #[error(
        "exports none of the vigil:policy worlds, 0.1.0, 0.2.0 or 0.3.0 (its exports: {exports})"
    )]
    NoWorld {
        /// What it exports instead.
        exports: String,
    },
    /// The component speaks another version of the contract.
    #[error(
        "built for vigil:policy@{version}, this agent serves 0.1.0, 0.2.0 and 0.3.0 (it exports {found}); rebuild it against this agent's wit/"
    )]
    UnsupportedVersion {
        /// The contract version it was built for (what follows `@`).
        version: String,
        /// The export found.
        found: String,
    },
    /// The component exports more than one policy interface.
    #[error("exports several policy interfaces ({exports}); a policy implements exactly one world")]
    SeveralWorlds {
        /// The policy interfaces it exports.
        exports: String,
    },
    /// An import the sandbox does not provide (only WASI and `vigil:policy/log` are).
    #[error("has an import the sandbox cannot satisfy")]
    UnsatisfiedImport(#[source] Cause),
    /// The world's exports do not have the expected types.
    #[error("its exports do not match the {world} world of {contract}")]
    WrongExports {
        /// The world it claimed.
        world: &'static str,
        /// The contract version it claimed.
        contract: crate::policy::Contract,
        /// What did not match.
        #[source]
        source: Cause,
    },
    /// The name already serves as a policy of another world.
    #[error("is a {found} component, but {name} serves as a {serving}")]
    WorldChanged {
        /// The policy name.
        name: String,
        /// The world of the version serving under that name.
        serving: &'static str,
        /// The world of the new component.
        found: &'static str,
    },
    /// The canary call on a sample input failed.
    #[error("failed its canary call on a sample input")]
    Canary(#[source] Fault),
    /// These bytes failed their trial before; they are not loaded again until the file changes.
    #[error("version {digest} failed its trial earlier; change the file to try again")]
    Rejected {
        /// The rejected version.
        digest: crate::base::digest::Digest,
    },
}

/// Why one call to a policy failed. Every fault is the policy's own: it is
/// counted, logged with the policy's name and version, and nothing is evicted
/// because of it.
#[derive(Debug, Error)]
pub enum Fault {
    /// The call ran past its deadline and was interrupted.
    #[error("ran past its deadline of {deadline_ms} ms")]
    Deadline {
        /// The deadline, in milliseconds.
        deadline_ms: u128,
    },
    /// The guest tried to grow its memory past the cap.
    #[error("tried to use more than its memory limit of {limit_mib} MiB")]
    MemoryLimit {
        /// The cap, in MiB.
        limit_mib: u64,
    },
    /// The guest trapped (a panic, an `unreachable`, an out-of-bounds access...).
    #[error("trapped")]
    Trap(#[source] Cause),
    /// The component could not be instantiated for this call.
    #[error("could not be instantiated")]
    Instantiate(#[source] Cause),
    /// The answer broke the contract (an index out of range, an unknown pod...).
    #[error("gave an invalid answer: {0}")]
    InvalidAnswer(String),
}

/// What kind of fault a call raised, without its detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// It ran past its deadline.
    Deadline,
    /// It tried to grow past its memory cap.
    Memory,
    /// It trapped.
    Trap,
    /// It could not be instantiated.
    Instantiate,
    /// It answered what the contract does not allow.
    InvalidAnswer,
}

impl FaultKind {
    /// A short label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Memory => "memory",
            Self::Trap => "trap",
            Self::Instantiate => "instantiate",
            Self::InvalidAnswer => "invalid-answer",
        }
    }
}

impl Fault {
    /// What kind of fault it is.
    pub fn kind(&self) -> FaultKind {
        match self {
            Self::Deadline { .. } => FaultKind::Deadline,
            Self::MemoryLimit { .. } => FaultKind::Memory,
            Self::Trap(_) => FaultKind::Trap,
            Self::Instantiate(_) => FaultKind::Instantiate,
            Self::InvalidAnswer(_) => FaultKind::InvalidAnswer,
        }
    }
}
