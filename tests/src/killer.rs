//! A killer for tests: records every eviction it is asked for, can refuse
//! the next few (as a PodDisruptionBudget or an outage would), and can hold
//! calls open until released, to see how many run at once.

use futures::FutureExt;
use futures::future::BoxFuture;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use vigil::eviction::{KillError, Killer, Victim};

/// Records evictions; see the module docs.
#[derive(Debug, Default)]
pub struct RecordingKiller {
    asked: Mutex<Vec<Victim>>,
    refusals: Mutex<VecDeque<KillError>>,
    gate: Mutex<Option<Arc<Semaphore>>>,
    protect_all: std::sync::atomic::AtomicBool,
}

impl RecordingKiller {
    /// Makes the next eviction attempts fail with `errors`, in order.
    pub fn refuse_next(&self, errors: impl IntoIterator<Item = KillError>) {
        self.refusals.lock().unwrap().extend(errors);
    }

    /// Refuses every eviction from now on, as PodDisruptionBudgets allowing
    /// no disruption would; a deletion (`override_pdb`) still goes through.
    pub fn protect_all(&self) {
        self.protect_all
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Holds every call until [`RecordingKiller::release`] lets it through.
    pub fn hold(&self) {
        *self.gate.lock().unwrap() = Some(Arc::new(Semaphore::new(0)));
    }

    /// Lets `n` held calls through.
    pub fn release(&self, n: usize) {
        if let Some(gate) = &*self.gate.lock().unwrap() {
            gate.add_permits(n);
        }
    }

    /// Every eviction asked for so far (dry-run ones included), in order.
    pub fn asked(&self) -> Vec<Victim> {
        self.asked.lock().unwrap().clone()
    }

    /// Every real (not dry-run) eviction the killer accepted.
    pub fn evicted(&self) -> Vec<Victim> {
        self.asked().into_iter().filter(|v| !v.dry_run).collect()
    }
}

impl Killer for RecordingKiller {
    fn evict(&self, victim: &Victim) -> BoxFuture<'static, Result<(), KillError>> {
        let protected =
            self.protect_all.load(std::sync::atomic::Ordering::Relaxed) && !victim.override_pdb;
        let refusal = if protected {
            Some(KillError::Refused(
                "the disruption budget allows none".into(),
            ))
        } else {
            self.refusals.lock().unwrap().pop_front()
        };
        if refusal.is_none() {
            self.asked.lock().unwrap().push(victim.clone());
        }
        let gate = self.gate.lock().unwrap().clone();
        async move {
            if let Some(gate) = gate {
                gate.acquire().await.expect("the gate stays open").forget();
            }
            refusal.map_or(Ok(()), Err)
        }
        .boxed()
    }
}
