//! vigil: a Kubernetes node agent that protects nodes under resource pressure
//! by evicting pods, and whose decisions are WebAssembly components
//! ("policies") that operators hot-swap without a restart.
//!
//! The house, one floor a line from the bottom up; every import points down
//! this list (`.ci/house.py` checks it):
//! - [`base`]: the ground floor, plain data and tools that import nothing of
//!   the crate (time, digests, files, quantities, backoff, a node's hash);
//! - [`model`]: the contract's records, the data model of the whole engine;
//! - [`signals`]: node signals from the kernel's own files;
//! - [`policy`]: the policy host — the runtime that calls a component, the
//!   artifacts on disk, the lifecycle of versions (trial, rollback, reload);
//! - [`distribution`]: policies as OCI artifacts, and the pull plan;
//! - [`config`]: vigil's config, its schema and the `VigilConfig` resource;
//! - [`eviction`]: the eviction loop — strategies, thresholds, the kill queue;
//! - [`metrics`]: the agent's Prometheus metrics;
//! - [`cluster`]: everything that talks to the Kubernetes API server;
//! - [`fleet`]: the status objects each agent publishes for its node;
//! - [`crds`]: every custom resource definition vigil reads (`vigil crd`);
//! - [`controllers`]: the loops that follow objects others write (config,
//!   pulls, shadow, trial), each a shell around its plan; the loops that
//!   write what the node decided live with what they write ([`cluster`]'s
//!   publisher, [`fleet`]'s reconciler);
//! - [`simulate`]: scenarios on virtual time (`vigil simulate`);
//! - [`authoring`]: the policy author's tools (`vigil policy check|test|new`);
//! - [`cleanup`]: what an uninstall removes besides the manifests (`vigil cleanup`);
//! - [`agent`]: `vigil agent`, the composition root of the DaemonSet process;
//! - [`cli`]: the `vigil` command line (`main.rs` only calls [`cli::run`]);
//! - [`testing`]: what tests and benchmarks need beyond the rooms' façades,
//!   and (tests only) property tests of every parser of outside input.

#![warn(unreachable_pub)]

pub mod agent;
pub mod authoring;
pub mod base;
pub mod cleanup;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod crds;
pub mod distribution;
pub mod eviction;
pub mod fleet;
pub mod metrics;
pub mod model;
pub mod policy;
pub mod signals;
pub mod simulate;
pub mod testing;
