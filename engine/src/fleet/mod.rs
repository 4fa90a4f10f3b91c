//! The fleet view: what each node runs and did lately, published as API
//! objects so that `kubectl get vigilnodestatuses` and `kubectl get
//! vigilpolicystatuses -l vigil.dev/policy=NAME` answer for a whole fleet
//! without logging into a node.
//!
//! - `kinds` defines the `VigilNodeStatus` and `VigilPolicyStatus`
//!   custom resources;
//! - `activity` keeps the loop's recent conditions and evictions;
//! - `desired` says what each object should hold;
//! - `queue` is the rate-limited work queue keyed by object;
//! - `reconcile` makes the objects on the API server what they should be;
//! - `summary` counts one policy's rollout from those objects (`vigil status`);
//! - `rollout` counts the config's rollout and the agents' builds (`vigil
//!   status --config`, `vigil version`);
//! - `explain` tells why a pod was evicted from them (`vigil explain`).

pub(crate) mod activity;
pub(crate) mod desired;
pub(crate) mod explain;
pub(crate) mod kinds;
pub(crate) mod queue;
pub(crate) mod reconcile;
pub(crate) mod rollout;
pub(crate) mod summary;
pub use activity::Activity;
pub use reconcile::{Inputs, Reconciler};
