//! The data model of the whole engine: the records of the `vigil:policy`
//! contract (pods, signals, thresholds, evictions…), generated from `wit/`.
//!
//! Signals, the eviction loop, the cluster side and the simulation all speak
//! these types; only the policy host knows they come from WIT bindings.

/// Why a candidate is proposed, as the sorter is told (the eviction loop's
/// own [`crate::eviction::Urgency`] orders the kill queue).
pub use crate::policy::bindings::Urgency as CandidateUrgency;
pub use crate::policy::bindings::{
    Candidate, Condition, Decision, Eviction, Interest, KeyValue, Layer, Level, MergeRejection,
    MetLevel, OwnerKind, Pod, QosClass, Resources, Signal, Snapshot, SortRejection, Sorted,
    Threshold, Usage,
};

/// A memory threshold met at `met`, with the `MemoryPressure` condition and
/// a `NoSchedule` taint: the usual answer of a memory strategy, for tests.
#[cfg(test)]
pub(crate) fn memory_threshold(met: MetLevel) -> Threshold {
    Threshold {
        met,
        scope: "memory".into(),
        signal: "memory.available".into(),
        observed: 1.0,
        threshold: 2.0,
        grace_period_seconds: 0,
        condition: Some(Condition {
            name: "MemoryPressure".into(),
            effects: vec!["NoSchedule".into()],
        }),
    }
}
