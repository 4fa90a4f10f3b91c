//! The killer: what actually evicts a pod. The manager hands it victims; it
//! only *starts* an eviction and returns — the pod is gone when it leaves the
//! pod list. The simulation uses [`RecordingKiller`]; the Eviction API killer
//! (PodDisruptionBudgets honoured) implements the same trait.

use super::Victim;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;
use thiserror::Error;

/// Why an eviction did not start.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KillError {
    /// Not now (e.g. the Eviction API answered 429 because of a
    /// PodDisruptionBudget); the victim stays queued for a later cycle.
    #[error("eviction refused for now: {0}")]
    Retry(String),
    /// The eviction failed for good (e.g. the pod no longer exists).
    #[error("eviction failed: {0}")]
    Failed(String),
}

/// Starts evictions.
pub trait Killer: Send + Sync {
    /// Starts evicting `victim` at `now`; returns once the eviction is
    /// accepted, not when the pod is gone.
    ///
    /// # Errors
    /// The eviction was refused for now, or failed.
    fn evict(&self, now: SystemTime, victim: &Victim) -> Result<(), KillError>;
}

/// A killer that records every eviction it is asked for, and can be told to
/// refuse the next few (as a PodDisruptionBudget would).
#[derive(Debug, Default)]
pub struct RecordingKiller {
    evicted: Mutex<Vec<(SystemTime, Victim)>>,
    refusals: Mutex<VecDeque<KillError>>,
}

impl RecordingKiller {
    /// Makes the next eviction attempts fail with `errors`, in order.
    pub fn refuse_next(&self, errors: impl IntoIterator<Item = KillError>) {
        self.refusals
            .lock()
            .expect("killer lock poisoned")
            .extend(errors);
    }

    /// Every eviction started so far, with when.
    pub fn evicted(&self) -> Vec<(SystemTime, Victim)> {
        self.evicted.lock().expect("killer lock poisoned").clone()
    }
}

impl Killer for RecordingKiller {
    fn evict(&self, now: SystemTime, victim: &Victim) -> Result<(), KillError> {
        if let Some(error) = self
            .refusals
            .lock()
            .expect("killer lock poisoned")
            .pop_front()
        {
            return Err(error);
        }
        self.evicted
            .lock()
            .expect("killer lock poisoned")
            .push((now, victim.clone()));
        Ok(())
    }
}
