//! vigil: a Kubernetes node agent that protects nodes under resource pressure
//! by evicting pods, and whose decisions are WebAssembly components
//! ("policies") that operators hot-swap without a restart.
//!
//! Where to start, from the bottom of the house up (every import points
//! down this list):
//! - [`model`]: the contract's records, the data model of the whole engine;
//! - [`signals`]: node signals from the kernel's own files;
//! - [`policy`]: the policy host — loading, sandboxing, calling, hot reload,
//!   trial and rollback;
//! - [`distribution`]: policies as OCI artifacts (`vigil policy push`);
//! - [`config`]: vigil's config, its schema and the `VigilConfig` resource;
//! - [`eviction`]: the eviction loop — strategies, thresholds, the kill queue;
//! - [`cluster`]: everything that talks to the Kubernetes API server;
//! - [`fleet`]: the status objects each agent publishes for its node;
//! - [`simulate`]: scenarios on virtual time (`vigil simulate`);
//! - [`authoring`]: the policy author's tools (`vigil policy check|test|new`);
//! - [`cleanup`]: what an uninstall removes besides the manifests (`vigil cleanup`);
//! - [`agent`]: `vigil agent`, the composition root of the DaemonSet process;
//! - [`cli`]: the `vigil` command line (`main.rs` only calls [`cli::run`]).

pub mod agent;
pub mod authoring;
pub mod cleanup;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod crds;
pub mod distribution;
pub mod eviction;
pub mod fleet;
pub mod fsutil;
pub mod metrics;
pub mod model;
pub mod node_hash;
pub mod ownership;
pub mod policy;
pub mod quantity;
pub mod rate;
pub mod report;
pub mod signals;
pub mod simulate;
