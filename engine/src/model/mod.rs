//! The data model of the whole engine, at the bottom of the house: the
//! records of the `vigil:policy` contract (pods, signals, thresholds,
//! evictions…), generated from `wit/` ([`bindings`]; the previous contract's in `v0_1`), the forms they take as
//! data ([`SnapshotData`], [`PartialPod`], [`Rejections`]…), and one way to
//! build a sample pod ([`fixture`]).
//!
//! Signals, the policy host, the eviction loop, the cluster side and the
//! simulation all speak these types; this module imports none of them.

pub mod bindings;
pub mod fixture;
mod forms;
pub(crate) mod v0_1;

pub use forms::{PartialCandidate, PartialPod, Rejections, SnapshotData, partial_candidates};

/// Why a candidate is proposed, as the sorter is told (the eviction loop's
/// own urgency orders the kill queue).
pub use bindings::Urgency as CandidateUrgency;
pub use bindings::{
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
