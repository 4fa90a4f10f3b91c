//! The killer: what actually evicts a pod. The manager hands it victims; it
//! only *starts* an eviction and returns — the pod is gone when it leaves the
//! pod list. Calls are asynchronous (the Eviction API is a network call); the
//! live runner bounds how many run at once and how long each may take, and
//! hands every outcome back to the manager.

use super::Victim;
use futures::future::BoxFuture;
use std::time::Duration;
use thiserror::Error;

/// Why an eviction did not start, as the API server meant its answer.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KillError {
    /// A PodDisruptionBudget allows no disruption now (a 429 whose Status
    /// carries a `DisruptionBudget` cause). The next candidate is tried at
    /// once; this pod again after a period. Only this counts towards the
    /// PDB override.
    #[error("eviction refused by a disruption budget: {0}")]
    Refused(String),
    /// The API server will not evict this pod for a reason of the pod's own
    /// (500 "more than one PodDisruptionBudget", 403 for a negative budget or
    /// a terminating namespace, 400 or 422). The pod is passed over with a
    /// per-pod exponential backoff and the next candidate is tried.
    #[error("the API server will not evict this pod: {0}")]
    NotEvictable(String),
    /// The API server is throttling (a 429 without a `DisruptionBudget`
    /// cause). No eviction starts before `retry_after` has passed; the victim
    /// keeps its place and nobody else is tried meanwhile.
    #[error("throttled by the API server for {retry_after:?}: {message}")]
    Throttled {
        /// How long to wait, `Retry-After` with jitter.
        retry_after: Duration,
        /// The API server's message.
        message: String,
    },
    /// Could not be asked (API error, timeout, outage, a call that panicked);
    /// the victim keeps its place and is tried again next cycle.
    #[error("eviction not started: {0}")]
    Unavailable(String),
    /// The pod no longer exists, or a new pod has its name (404, 409).
    #[error("pod is gone: {0}")]
    Gone(String),
}

/// Starts evictions.
pub trait Killer: Send + Sync {
    /// Starts evicting `victim` (or, for a dry-run victim, asks the API
    /// server to check the eviction without doing it); resolves once the
    /// eviction is accepted, not when the pod is gone.
    ///
    /// # Errors
    /// The eviction was refused for now, could not be asked, or the pod is gone.
    fn evict(&self, victim: &Victim) -> BoxFuture<'static, Result<(), KillError>>;
}
