//! The policy host: everything about loading, bounding, calling and replacing
//! WebAssembly policy components.
//!
//! Start with [`Registry`]: it owns the policies that serve, and is what the
//! rest of vigil calls. Underneath:
//! - [`Host`] compiles components (with an authenticated on-disk artifact
//!   cache whose artifacts are mapped, not copied; in the agent, in a child
//!   process with its own memory limit: `compiler`) and checks their world
//!   and imports; a [`Policy`] is one loaded
//!   version whose calls each run in a fresh, bounded store (the sandbox:
//!   memory, tables, logs, what the guest passes the host; `guest_env`: clocks
//!   that never wait, fixed randomness) and whose answers are validated and
//!   bounded, made through a typed handle per world ([`Strategy`],
//!   [`Sorter`], [`Merger`]);
//! - the registry swaps versions atomically, puts new ones on trial and rolls
//!   back to the last-known-good (kept in the state directory) on a fault;
//! - `reload` watches the policies directory and drives the registry,
//!   reading its files as untrusted input (`files`).
//!
//! The author's tools built on it (`vigil policy check`, `test`, `new`) live
//! in [`crate::authoring`], above the host.

pub mod artifacts;
mod error;
mod host;
pub mod lifecycle;
pub(crate) mod runtime;
mod world;

pub use artifacts::cache::{CacheOutcome, Collected};
pub use artifacts::compiler::{ChildCompiler, CompileError};
pub use artifacts::engine::{Baseline, EngineKey};
pub use artifacts::{DEFAULT_MAX_POLICY_BYTES, engine_key, precompile};
pub use error::{Cause, Fault, FaultKind, LoadError};
pub use host::{CompileMode, Host, HostError};
pub use lifecycle::registry::{
    Incident, Phase, PolicyStatus, RefusedVersion, Registry, RegistryError,
};
pub use lifecycle::{BUILTINS, Reloader, ScanReport, builtin};
pub use runtime::component::{Origin, Outcome, Policy};
pub use runtime::handle::{Merger, Sorter, Strategy, Supervisor};
pub use runtime::interest::Declared;
pub use runtime::limits::{Limits, LimitsTable};
pub use world::{CONTRACT_VERSION, Contract, World};
