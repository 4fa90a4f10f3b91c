//! The Eviction API as `vigil simulate` models it, so a simulation follows
//! the rules the agent meets on a cluster: a pod whose PodDisruptionBudget
//! allows no disruption is refused (the API server's 429), unless vigil
//! deletes it outright under a hard threshold after every candidate was
//! refused; a dry-run request is judged the same way and changes nothing.

use crate::eviction::{KillError, Killer, Victim};
use futures::future::{BoxFuture, FutureExt};

/// The simulated Eviction API.
#[derive(Debug, Default, Clone, Copy)]
pub struct EvictionModel;

impl Killer for EvictionModel {
    fn evict(&self, victim: &Victim) -> BoxFuture<'static, Result<(), KillError>> {
        let protected = victim.pod.pdb_disruptions_allowed == Some(0) && !victim.override_pdb;
        let answer = if protected {
            Err(KillError::Refused(
                "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            ))
        } else {
            Ok(())
        };
        futures::future::ready(answer).boxed()
    }
}
