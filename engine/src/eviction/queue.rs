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

/// A pressure a victim relieves: the strategy, scope and urgency of a threshold.
type Relief = (String, String, Urgency);

/// A queued victim and the thresholds counting on its eviction.
#[derive(Debug, Clone)]
struct Queued {
    victim: Victim,
    relieves: Vec<Relief>,
}

#[derive(Debug, Clone)]
struct InFlight {
    queued: Queued,
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
    waiting: Vec<Queued>,
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
            .retain(|q| present.contains(q.victim.pod.uid.as_str()));
        let mut gone = Vec::new();
        self.in_flight.retain(|uid, flight| {
            if !present.contains(uid.as_str()) {
                gone.push(flight.queued.victim.clone());
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
        self.in_flight(uid) || self.waiting.iter().any(|q| q.victim.pod.uid == uid)
    }

    /// Whether a victim counted on by this strategy, scope and urgency is
    /// still waiting or being evicted: reclaim for that pressure is in progress.
    pub fn reclaiming(&self, strategy: &str, scope: &str, urgency: Urgency) -> bool {
        let counts = |q: &Queued| {
            q.relieves
                .iter()
                .any(|(s, sc, u)| s == strategy && sc == scope && *u == urgency)
        };
        self.waiting.iter().any(counts) || self.in_flight.values().any(|f| counts(&f.queued))
    }

    /// Queues `victim` unless its pod is already queued or being evicted.
    pub fn push(&mut self, victim: Victim) -> bool {
        if self.holds(&victim.pod.uid) {
            return false;
        }
        let relieves = victim
            .scope
            .iter()
            .map(|scope| (victim.strategy.clone(), scope.clone(), victim.urgency))
            .collect();
        self.waiting.push(Queued { victim, relieves });
        true
    }

    /// Counts the already queued or in-flight pod `uid` as the reclaim of
    /// another threshold too, so that threshold picks no second victim.
    pub fn share(&mut self, uid: &str, strategy: &str, scope: &str, urgency: Urgency) {
        let relief = (strategy.to_owned(), scope.to_owned(), urgency);
        let queued = match self.in_flight.get_mut(uid) {
            Some(flight) => Some(&mut flight.queued),
            None => self.waiting.iter_mut().find(|q| q.victim.pod.uid == uid),
        };
        if let Some(queued) = queued.filter(|q| !q.relieves.contains(&relief)) {
            queued.relieves.push(relief);
        }
    }

    /// Keeps only the waiting victims for which `wanted` holds.
    pub fn retain_waiting(&mut self, wanted: impl Fn(&Victim) -> bool) {
        self.waiting.retain(|q| wanted(&q.victim));
    }

    /// Starts at most `burst` evictions, most urgent first (first come first
    /// within an urgency).
    pub fn start(&mut self, now: SystemTime, burst: usize, killer: &dyn Killer) -> Started {
        let mut report = Started::default();
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.sort_by_key(|q| q.victim.urgency);
        let mut attempts = 0;
        for queued in waiting {
            let victim = queued.victim.clone();
            if attempts == burst {
                report.deferred.push((
                    victim,
                    format!("burst of {burst} evictions per cycle reached"),
                ));
                self.waiting.push(queued);
                continue;
            }
            attempts += 1;
            match killer.evict(now, &victim) {
                Ok(()) => {
                    self.in_flight
                        .insert(victim.pod.uid.clone(), InFlight { queued, since: now });
                    report.started.push(victim);
                }
                Err(KillError::Retry(why)) => {
                    report.deferred.push((victim, why));
                    self.waiting.push(queued);
                }
                Err(error) => report.failed.push((victim, error)),
            }
        }
        report
    }
}
