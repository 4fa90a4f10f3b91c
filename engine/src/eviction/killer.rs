//! The killer: what actually evicts a pod. The manager hands it victims; it
//! only *starts* an eviction and returns — the pod is gone when it leaves the
//! pod list. Calls are asynchronous (the Eviction API is a network call); the
//! live runner bounds how many run at once and how long each may take, and
//! hands every outcome back to the manager.

use super::Victim;
use futures::future::BoxFuture;
use thiserror::Error;

/// Why an eviction did not start.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KillError {
    /// Refused for now (the Eviction API answered 429: a PodDisruptionBudget
    /// allows no disruption). The next candidate is tried at once; this pod
    /// again in a later cycle.
    #[error("eviction refused: {0}")]
    Refused(String),
    /// Could not be asked (API error, timeout, outage); the victim keeps its
    /// place and is tried again next cycle.
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
