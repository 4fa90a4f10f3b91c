//! The Kubernetes side of the agent: everything that talks to the API server
//! (and to the kubelet's statistics).
//!
//! - `client` connects (kubeconfig, in-cluster) and counts requests;
//! - [`watches`] keeps this node's pods and this Node in local stores;
//! - `object_watches` watches each ConfigMap the config references;
//! - `budgets` watches PodDisruptionBudgets only in the namespaces with
//!   pods on this node;
//! - `pods` turns a Pod into the contract's record; `source` assembles
//!   the node for each cycle;
//! - `kubelet_stats` reads each pod's writable layers from the kubelet's
//!   statistics summary, while a policy asks for them;
//! - `katalyst_cnr` watches katalyst's CustomNodeResource of this node (what
//!   it offers reclaimed pods), while a strategy asks;
//! - `evict` evicts through the Eviction API;
//! - `node_status` writes conditions and taints, each through `latest`; `publisher` turns the
//!   loop's reports into Events (written off the critical path by
//!   `events`) and the node status.

pub(crate) mod budgets;
pub(crate) mod client;
pub(crate) mod events;
pub(crate) mod evict;
pub mod katalyst_cnr;
pub mod kubelet_stats;
pub(crate) mod latest;
pub(crate) mod node_status;
pub(crate) mod object_watches;
pub(crate) mod pods;
pub(crate) mod publisher;
pub(crate) mod source;
pub mod watches;
pub use budgets::Budgets;
pub use client::{ClientOptions, PodAccess, build};
pub use evict::EvictionApi;
pub use source::ClusterSource;
