//! vigil: a Kubernetes node agent that protects nodes under resource pressure
//! by evicting pods, and whose decisions are WebAssembly components
//! ("policies") that operators hot-swap without a restart.
//!
//! Where to start:
//! - [`policy`]: the policy host — loading, sandboxing, calling, hot reload,
//!   trial and rollback;
//! - [`eviction`]: the eviction loop — strategies, thresholds, the kill queue;
//! - [`signals`]: node signals from the kernel's own files;
//! - [`simulate`]: scenarios on virtual time (`vigil simulate`);
//! - [`cli`]: the `vigil` command line (`main.rs` only calls [`cli::run`]).

pub mod cli;
pub mod clock;
pub mod config;
pub mod eviction;
pub mod fsutil;
pub mod policy;
pub mod report;
pub mod signals;
pub mod simulate;
