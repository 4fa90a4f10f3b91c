//! The eviction loop: turns node pressure into evictions, with decisions made
//! by policies and actions kept here.
//!
//! Start with [`EvictionManager::cycle`]. Around it:
//! - `tracker` carries first-observed and last-observed times between cycles
//!   (grace periods, condition transition periods);
//! - `queue` remembers waiting and in-flight victims and enforces the burst;
//! - `killer` is what starts an eviction (the Eviction API in the agent,
//!   a model of it in simulations);
//! - `policies` is what the manager asks its decisions of (the registry);
//! - `settings` are the manager's knobs;
//! - `shadow` asks a second version of a policy what the serving one is
//!   asked, and compares;
//! - `runner` drives the manager live: every period and on signal events.

pub(crate) mod killer;
pub(crate) mod kubelet;
pub(crate) mod limits;
mod manager;
pub(crate) mod policies;
pub(crate) mod queue;
pub(crate) mod runner;
pub(crate) mod settings;
pub mod shadow;
pub(crate) mod tracker;

pub use killer::{KillError, Killer};
pub use manager::{
    Call, CycleReport, Decision, EvictionManager, FOREIGN_TERMINATING_WAIT, HOST, KubeletEviction,
    NodeState, PodFacts, RankingFacts, Reclaim, Refusal, Skipped, Terminating, Victim, Wanted, Why,
    Withheld,
};
pub use policies::{Policies, Unanswered, Which};
pub use queue::{Deferral, Deferred, Settled, Urgency};
pub use runner::{Heartbeat, LoopReport, NodeSource, Runner};
pub use settings::{EvictionSettings, PolicySettings};
pub use tracker::{ActiveCondition, MetThreshold};
