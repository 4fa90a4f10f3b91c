//! The kill queue: victims waiting to be evicted, and victims being evicted.
//!
//! Unlike katalyst's, it is not wiped each cycle: victims already being
//! evicted are remembered until their pod is gone (or a timeout passes), so
//! they count as reclaim in progress and are never picked twice; waiting
//! victims keep their place while the decision that produced them still holds.
//! At most `burst` eviction calls run at once, most urgent first; a pod whose
//! eviction was refused (a PodDisruptionBudget) is passed over for a period,
//! and a pod the API server will not evict at all (several budgets, a
//! forbidden or invalid request) for a backoff that doubles with each
//! refusal, so the next candidate gets its turn. When the API server
//! throttles, no call starts until the wait it asked for is over, and the
//! victims keep their places: throttling is nobody's refusal.

use super::Victim;
use super::killer::KillError;
use crate::base::rate::Backoff;
use std::collections::{BTreeMap, HashMap, HashSet};
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

impl Urgency {
    /// `hard`, `force` or `soft`, as reports and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hard => "hard",
            Self::Force => "force",
            Self::Soft => "soft",
        }
    }
}

impl From<Urgency> for crate::model::CandidateUrgency {
    fn from(urgency: Urgency) -> Self {
        match urgency {
            Urgency::Hard => Self::Hard,
            Urgency::Force => Self::Force,
            Urgency::Soft => Self::Soft,
        }
    }
}

/// The longest a pod the API server will not evict is passed over.
pub(crate) const MAX_POD_BACKOFF: Duration = Duration::from_secs(300);

/// A pressure a victim relieves: the strategy, scope and urgency of a threshold.
type Relief = (String, String, Urgency);

/// A queued victim and the thresholds counting on its eviction.
#[derive(Debug, Clone)]
struct Queued {
    victim: Victim,
    relieves: Vec<Relief>,
}

/// A victim handed to the killer: its call is running (`accepted` false) or
/// the API server accepted the eviction and the pod is terminating.
#[derive(Debug, Clone)]
struct InFlight {
    queued: Queued,
    since: SystemTime,
    accepted: bool,
}

/// What one round of handing out evictions did.
#[derive(Debug, Default)]
pub(crate) struct Started {
    /// Victims handed to the killer now.
    pub requested: Vec<Victim>,
    /// Victims left waiting, and why.
    pub deferred: Vec<Deferred>,
}

/// A victim chosen and not evicted yet.
#[derive(Debug, Clone)]
pub struct Deferred {
    /// The victim.
    pub victim: Victim,
    /// Why it waits.
    pub why: Deferral,
}

/// Why a chosen victim is not evicted yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deferral {
    /// The API server throttles: no eviction call for this long.
    Throttled(Duration),
    /// As many eviction calls as the burst allows are running.
    Burst(usize),
    /// A PodDisruptionBudget refused it (the API server's words).
    Refused(String),
    /// The API server will not evict it (its words).
    NotEvictable(String),
    /// The call could not be made, or the API server asked to wait (why).
    Unanswered(String),
}

impl std::fmt::Display for Deferral {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Throttled(wait) => {
                write!(f, "the API server throttles; no eviction call for {wait:?}")
            }
            Self::Burst(at_most) => write!(f, "at most {at_most} evictions at once"),
            Self::Refused(why) => write!(f, "refused: {why}"),
            Self::NotEvictable(why) => write!(f, "not evictable: {why}"),
            Self::Unanswered(why) => f.write_str(why),
        }
    }
}

/// What became of an eviction call.
#[derive(Debug, Clone)]
pub enum Settled {
    /// Accepted: the pod is terminating.
    Accepted(Victim),
    /// Refused by a PodDisruptionBudget: passed over until the backoff ends.
    Refused(Victim, String),
    /// Not evictable as the API server sees it: passed over with a backoff
    /// that doubles with each refusal.
    NotEvictable(Victim, String),
    /// The API server throttles: waiting again, and no call starts until
    /// its wait is over.
    Throttled(Victim, String),
    /// Could not be asked: waiting again.
    Waiting(Victim, String),
    /// The pod is gone already.
    Gone(Victim),
}

impl Settled {
    /// What `result`, the answer of the call for `victim`, means for it.
    pub fn of(victim: Victim, result: Result<(), KillError>) -> Self {
        match result {
            Ok(()) => Self::Accepted(victim),
            Err(KillError::Refused(why)) => Self::Refused(victim, why),
            Err(KillError::NotEvictable(why)) => Self::NotEvictable(victim, why),
            Err(error @ KillError::Throttled { .. }) => Self::Throttled(victim, error.to_string()),
            Err(KillError::Unavailable(why)) => Self::Waiting(victim, why),
            Err(KillError::Gone(_)) => Self::Gone(victim),
        }
    }

    /// The victim, and the result as metrics and status objects name it:
    /// `accepted`, `dry-run`, `refused`, `not-evictable`, `throttled`,
    /// `failed` or `gone`.
    pub fn result(&self) -> (&Victim, &'static str) {
        match self {
            Self::Accepted(v) if v.dry_run => (v, "dry-run"),
            Self::Accepted(v) => (v, "accepted"),
            Self::Refused(v, _) => (v, "refused"),
            Self::NotEvictable(v, _) => (v, "not-evictable"),
            Self::Throttled(v, _) => (v, "throttled"),
            Self::Waiting(v, _) => (v, "failed"),
            Self::Gone(v) => (v, "gone"),
        }
    }
}

/// Waiting and in-flight victims, and pods recently refused.
#[derive(Debug, Default)]
pub(crate) struct KillQueue {
    waiting: Vec<Queued>,
    in_flight: BTreeMap<String, InFlight>,
    /// Pods passed over, until when, and whether a budget refused them.
    refused: HashMap<String, (SystemTime, bool)>,
    /// How often the API server said it will not evict each pod.
    strikes: HashMap<String, u32>,
    /// No call starts before this: the API server throttles.
    throttled_until: Option<SystemTime>,
}

impl KillQueue {
    /// Forgets in-flight victims whose pod is gone (evicted) or whose eviction
    /// has run longer than `timeout`, waiting victims whose pod is gone, and
    /// refusals that are over. Returns the victims whose pod is gone.
    pub(crate) fn settle(
        &mut self,
        now: SystemTime,
        present: &HashSet<&str>,
        timeout: Duration,
    ) -> Vec<Victim> {
        self.waiting
            .retain(|q| present.contains(q.victim.pod.uid.as_str()));
        self.refused
            .retain(|uid, (until, _)| *until > now && present.contains(uid.as_str()));
        self.strikes.retain(|uid, _| present.contains(uid.as_str()));
        self.throttled_until = self.throttled_until.filter(|until| *until > now);
        let mut gone = Vec::new();
        self.in_flight.retain(|uid, flight| {
            if !flight.accepted {
                // Its call is still running; the call's outcome settles it.
                return true;
            }
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

    /// How many victims are being evicted (their call runs, or they are terminating).
    pub(crate) fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether `uid` is being evicted (its call runs, or it is terminating).
    pub(crate) fn in_flight(&self, uid: &str) -> bool {
        self.in_flight.contains_key(uid)
    }

    /// Whether `uid` is waiting or being evicted.
    pub(crate) fn holds(&self, uid: &str) -> bool {
        self.in_flight(uid) || self.waiting.iter().any(|q| q.victim.pod.uid == uid)
    }

    /// Whether an eviction of `uid` was refused and its backoff is not over.
    pub(crate) fn refused(&self, uid: &str) -> bool {
        self.refused.contains_key(uid)
    }

    /// Whether `uid` is passed over because a PodDisruptionBudget refused it
    /// (not because the API server will not evict it at all).
    pub(crate) fn refused_by_budget(&self, uid: &str) -> bool {
        self.refused.get(uid).is_some_and(|(_, budget)| *budget)
    }

    /// Until when the API server asked for no eviction calls, if it did.
    pub(crate) fn throttled_until(&self) -> Option<SystemTime> {
        self.throttled_until
    }

    /// Whether a victim counted on by this strategy, scope and urgency is
    /// still waiting or being evicted: reclaim for that pressure is in progress.
    pub(crate) fn reclaiming(&self, strategy: &str, scope: &str, urgency: Urgency) -> bool {
        let counts = |q: &Queued| {
            q.relieves
                .iter()
                .any(|(s, sc, u)| s == strategy && sc == scope && *u == urgency)
        };
        self.waiting.iter().any(counts) || self.in_flight.values().any(|f| counts(&f.queued))
    }

    /// Queues `victim` unless its pod is already queued or being evicted.
    pub(crate) fn push(&mut self, victim: Victim) -> bool {
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
    pub(crate) fn share(&mut self, uid: &str, strategy: &str, scope: &str, urgency: Urgency) {
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
    pub(crate) fn retain_waiting(&mut self, wanted: impl Fn(&Victim) -> bool) {
        self.waiting.retain(|q| wanted(&q.victim));
    }

    /// Hands out waiting victims, most urgent first (first come first within
    /// an urgency), so that at most `burst` eviction calls run at once.
    pub(crate) fn start(&mut self, now: SystemTime, burst: usize) -> Started {
        let mut report = Started::default();
        if let Some(until) = self.throttled_until.filter(|until| *until > now) {
            let wait = until.duration_since(now).unwrap_or_default();
            for queued in &self.waiting {
                report.deferred.push(Deferred {
                    victim: queued.victim.clone(),
                    why: Deferral::Throttled(wait),
                });
            }
            return report;
        }
        let running = self.in_flight.values().filter(|f| !f.accepted).count();
        let mut slots = burst.saturating_sub(running);
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.sort_by_key(|q| q.victim.urgency);
        for queued in waiting {
            if slots == 0 {
                report.deferred.push(Deferred {
                    victim: queued.victim.clone(),
                    why: Deferral::Burst(burst),
                });
                self.waiting.push(queued);
                continue;
            }
            slots -= 1;
            report.requested.push(queued.victim.clone());
            let flight = InFlight {
                queued,
                since: now,
                accepted: false,
            };
            self.in_flight
                .insert(flight.queued.victim.pod.uid.clone(), flight);
        }
        report
    }

    /// Records the outcome of the eviction call for `uid`: a pod refused by
    /// a budget is passed over until `now + backoff`, one the API server will
    /// not evict for `backoff` doubled with each refusal (at most
    /// [`MAX_POD_BACKOFF`]); throttling holds every call back. `None` if no
    /// call for `uid` runs.
    pub(crate) fn outcome(
        &mut self,
        now: SystemTime,
        uid: &str,
        result: Result<(), KillError>,
        backoff: Duration,
    ) -> Option<Settled> {
        let flight = self.in_flight.get_mut(uid).filter(|f| !f.accepted)?;
        let victim = flight.queued.victim.clone();
        let Err(error) = result else {
            flight.accepted = true;
            flight.since = now;
            return Some(Settled::Accepted(victim));
        };
        let flight = self.in_flight.remove(uid)?;
        match &error {
            KillError::Refused(_) => {
                self.refused.insert(uid.to_owned(), (now + backoff, true));
            }
            KillError::NotEvictable(_) => {
                let strikes = self.strikes.entry(uid.to_owned()).or_default();
                *strikes = strikes.saturating_add(1);
                let until = now + Backoff::new(backoff, MAX_POD_BACKOFF).wait(*strikes);
                self.refused.insert(uid.to_owned(), (until, false));
            }
            KillError::Throttled { retry_after, .. } => {
                let until = now + *retry_after;
                self.throttled_until = Some(self.throttled_until.map_or(until, |u| u.max(until)));
                self.waiting.push(flight.queued);
            }
            KillError::Unavailable(_) => self.waiting.push(flight.queued),
            KillError::Gone(_) => {}
        }
        Some(Settled::of(victim, Err(error)))
    }
}
