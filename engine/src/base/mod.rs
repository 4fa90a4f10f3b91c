//! The ground floor: plain data and small tools that import nothing of the
//! crate, used from every room above.
//!
//! [`build`] is this build's identity; [`clock`] injected time; [`digest`]
//! content digests; [`fsutil`] careful file reads and writes; [`node_hash`]
//! a node's stable place in a fleet; [`ownership`] giving a directory to a
//! user; [`policy_name`] a policy's name and the built-ins'; [`quantity`]
//! Kubernetes quantities; [`rate`] a token bucket and a backoff; [`report`]
//! errors with their causes; [`schema_table`] a JSON Schema as the docs'
//! reference table; [`text`] guest text made safe to keep; `mutated` (tests
//! only) a kept sample, mutated, for property tests of parsers.

pub mod build;
pub mod clock;
pub mod digest;
pub mod fsutil;
#[cfg(test)]
pub(crate) mod mutated;
pub mod node_hash;
pub mod ownership;
pub mod policy_name;
pub mod quantity;
pub mod rate;
pub mod report;
pub mod schema_table;
pub mod text;
