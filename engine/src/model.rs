//! The data model of the whole engine: the records of the `vigil:policy`
//! contract (pods, signals, thresholds, evictions…), generated from `wit/`.
//!
//! Signals, the eviction loop, the cluster side and the simulation all speak
//! these types; only the policy host knows they come from WIT bindings.

pub use crate::policy::bindings::{
    Candidate, Condition, Decision, Eviction, KeyValue, Layer, Level, MergeRejection, MetLevel,
    Pod, QosClass, Resources, Signal, Snapshot, SortRejection, Sorted, Threshold, Usage,
};
