//! The kill queue: victims waiting to be evicted, and victims being evicted.
//!
//! Unlike katalyst's, it is not wiped each cycle: victims already being
//! evicted are remembered until their pod is gone (or a timeout passes), so
//! they count as reclaim in progress and are never picked twice; waiting
//! victims keep their place while the decision that produced them still holds.
//! At most `burst` evictions start per cycle, most urgent first.

use super::Victim;
use super::killer::{KillError, Killer};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

/// How urgent an eviction is; hard evictions never wait behind soft ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Urgency {
    /// A hard threshold past its grace period.
    Hard,
    /// A strategy's force eviction.
    Force,
    /// A soft threshold past its grace period, or a soft candidate.
    Soft,
}

#[derive(Debug, Clone)]
struct InFlight {
    victim: Victim,
    since: SystemTime,
}

/// What one round of starting evictions did.
#[derive(Debug, Default)]
pub struct Started {
    /// Evictions the killer accepted.
    pub started: Vec<Victim>,
    /// Victims left waiting: refused for now, or over the burst.
    pub deferred: Vec<(Victim, String)>,
    /// Victims dropped because their eviction failed for good.
    pub failed: Vec<(Victim, KillError)>,
}

/// Waiting and in-flight victims.
#[derive(Debug, Default)]
pub struct KillQueue {
    waiting: Vec<Victim>,
    in_flight: BTreeMap<String, InFlight>,
}

impl KillQueue {
    /// Forgets in-flight victims whose pod is gone (evicted) or whose eviction
    /// has run longer than `timeout`, and waiting victims whose pod is gone.
    /// Returns the victims whose pod is gone.
    pub fn settle(
        &mut self,
        now: SystemTime,
        present: &HashSet<&str>,
        timeout: Duration,
    ) -> Vec<Victim> {
        self.waiting
            .retain(|v| present.contains(v.pod.uid.as_str()));
        let mut gone = Vec::new();
        self.in_flight.retain(|uid, flight| {
            if !present.contains(uid.as_str()) {
                gone.push(flight.victim.clone());
                return false;
            }
            let stuck = now.duration_since(flight.since).unwrap_or_default() >= timeout;
            if stuck {
                tracing::warn!(pod = %uid, "eviction still not done after the in-flight timeout; the pod may be picked again");
            }
            !stuck
        });
        gone
    }

    /// Whether `uid` is being evicted.
    pub fn in_flight(&self, uid: &str) -> bool {
        self.in_flight.contains_key(uid)
    }

    /// Whether `uid` is waiting or being evicted.
    pub fn holds(&self, uid: &str) -> bool {
        self.in_flight(uid) || self.waiting.iter().any(|v| v.pod.uid == uid)
    }

    /// Whether a victim chosen for this strategy, scope and urgency is still
    /// waiting or being evicted: reclaim for that pressure is in progress.
    pub fn reclaiming(&self, strategy: &str, scope: &str, urgency: Urgency) -> bool {
        let same = |v: &Victim| {
            v.strategy == strategy && v.scope.as_deref() == Some(scope) && v.urgency == urgency
        };
        self.waiting.iter().any(same) || self.in_flight.values().any(|f| same(&f.victim))
    }

    /// Queues `victim` unless its pod is already queued or being evicted.
    pub fn push(&mut self, victim: Victim) -> bool {
        if self.holds(&victim.pod.uid) {
            return false;
        }
        self.waiting.push(victim);
        true
    }

    /// Keeps only the waiting victims for which `wanted` holds.
    pub fn retain_waiting(&mut self, wanted: impl Fn(&Victim) -> bool) {
        self.waiting.retain(wanted);
    }

    /// Starts at most `burst` evictions, most urgent first (first come first
    /// within an urgency).
    pub fn start(&mut self, now: SystemTime, burst: usize, killer: &dyn Killer) -> Started {
        let mut report = Started::default();
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.sort_by_key(|v| v.urgency);
        let mut attempts = 0;
        for victim in waiting {
            if attempts == burst {
                report.deferred.push((
                    victim.clone(),
                    format!("burst of {burst} evictions per cycle reached"),
                ));
                self.waiting.push(victim);
                continue;
            }
            attempts += 1;
            match killer.evict(now, &victim) {
                Ok(()) => {
                    let flight = InFlight {
                        victim: victim.clone(),
                        since: now,
                    };
                    self.in_flight.insert(victim.pod.uid.clone(), flight);
                    report.started.push(victim);
                }
                Err(KillError::Retry(why)) => {
                    report.deferred.push((victim.clone(), why));
                    self.waiting.push(victim);
                }
                Err(error) => report.failed.push((victim, error)),
            }
        }
        report
    }
}
