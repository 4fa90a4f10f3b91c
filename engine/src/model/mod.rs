//! The data model of the whole engine, at the bottom of the house: the
//! records of the `vigil:policy` contract (pods, signals, thresholds,
//! evictions…), generated from `wit/` ([`bindings`]; the earlier contracts' in `v0_2` and `v0_1`), the forms they take as
//! data ([`SnapshotData`], [`PartialPod`], [`Rejections`]…), and one way to
//! build a sample pod ([`fixture`]).
//!
//! Signals, the policy host, the eviction loop, the cluster side and the
//! simulation all speak these types; this module imports none of them.

pub mod bindings;
pub mod fixture;
mod forms;
pub(crate) mod v0_1;
pub(crate) mod v0_2;

pub use forms::{PartialCandidate, PartialPod, Rejections, SnapshotData, partial_candidates};

/// Why a candidate is proposed, as the sorter is told (the eviction loop's
/// own urgency orders the kill queue).
pub use bindings::Urgency as CandidateUrgency;
pub use bindings::{
    Amount, Candidate, Condition, CpuThrottling, Decision, Eviction, Interest, KeyValue, Layer,
    Level, MergeRejection, MetLevel, NumaMemory, OwnerKind, Pod, PodFact, Pressure, QosClass,
    Resources, ScopeMet, Signal, Snapshot, SortRejection, Sorted, Threshold, Usage, WritableLayers,
};

impl Usage {
    /// A pod's usage before its cgroup was read: every value absent.
    pub fn unread() -> Self {
        Self {
            memory_working_set_bytes: None,
            memory_rss_bytes: None,
            memory_usage_bytes: None,
            numa_memory: Vec::new(),
            cpu_millis: None,
            cpu_throttling: None,
            memory_pressure: None,
            ephemeral_storage_bytes: None,
            pids: None,
            age_ms: None,
            facts_age_ms: None,
        }
    }
}

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
