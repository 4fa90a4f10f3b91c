//! The eviction loop: turns node pressure into evictions, with decisions made
//! by policies and actions kept here.
//!
//! Start with [`EvictionManager::cycle`]. Around it:
//! - [`tracker`] carries first-observed and last-observed times between cycles
//!   (grace periods, condition transition periods);
//! - [`queue`] remembers waiting and in-flight victims and enforces the burst;
//! - [`killer`] is what starts an eviction ([`RecordingKiller`] for
//!   simulations and tests);
//! - [`settings`] are the manager's knobs;
//! - [`runner`] drives the manager live: every period and on signal events.

pub mod killer;
mod manager;
pub mod queue;
pub mod runner;
pub mod settings;
pub mod tracker;

pub use killer::{KillError, Killer, RecordingKiller};
pub use manager::{CycleReport, Decision, EvictionManager, NodeState, Victim};
pub use queue::Urgency;
pub use settings::{EvictionSettings, PolicySettings};
pub use tracker::{ActiveCondition, MetThreshold};
