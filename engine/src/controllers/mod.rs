//! The agent's controllers: loops that follow API objects someone else
//! writes and bring the node in step with them. [`config`] follows the
//! `VigilConfig` objects that target this node (its plan is
//! `config::assignment`); `pulls` follows the `VigilPolicy` objects and
//! links the versions this node serves (its plan is `distribution::plan`);
//! `shadow` runs the versions a rollout puts in shadow beside the serving
//! ones and judges them (its plan is `shadow::board`); `trial` rolls back a
//! version on trial that took part in more evictions than its
//! `VigilPolicy` allows; `unknown` warns of policies the config names that
//! nothing loads. Each is a thin shell around its plan: the watches, the
//! I/O and the logs are here, every decision below, on explicit time.
//!
//! The agent's other loops go the other way — they write what the node
//! itself decided — so they live with what they write, not here: the
//! eviction loop in `eviction::runner`; the publishers of its Events,
//! conditions and taints in `cluster::publisher` (one writer of the Node's
//! status, beside the client that talks to the API server); the
//! reconciler of the `VigilNodeStatus`/`VigilPolicyStatus` objects in
//! `fleet::reconcile`, beside the views it publishes (it follows only the
//! agent's own reports and owns the objects it writes, so nothing there is
//! another writer's to follow).

pub mod config;
pub(crate) mod pulls;
pub(crate) mod shadow;
pub(crate) mod trial;
pub(crate) mod unknown;

/// Puts `new` in `shown`; answers whether that changed it (for a watch's
/// `send_if_modified`: its readers wake only on a change).
pub(crate) fn replaced<T: PartialEq>(shown: &mut T, new: T) -> bool {
    let changed = *shown != new;
    *shown = new;
    changed
}
