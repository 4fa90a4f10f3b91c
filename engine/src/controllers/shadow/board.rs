//! What the shadow controller decides, as data on explicit time: which
//! version in shadow each policy has and in what state (from the pulls and
//! the loads), the tally of its comparisons, when a divergence is worth an
//! Event (the first of a pressure episode), when a version diverged more
//! than its bound allows, and when the fleet view should be told. No I/O
//! and no clock here.

use crate::controllers::pulls::ShadowPull;
use crate::distribution::crd::MIN_JUDGED;
use crate::eviction::shadow::{CallKind, Comparison, Verdict};
use crate::fleet::activity::time;
use crate::fleet::kinds::{Divergence, ShadowView};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// The longest the fleet view's counts wait for a write of their own:
/// a comparison every cycle must not be a status write every cycle.
pub(crate) const REFRESH: Duration = Duration::from_secs(600);

/// Where a version in shadow stands on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not pulled yet.
    Pulling,
    /// Its pulls fail.
    PullFailed,
    /// Loaded and asked beside the serving version.
    Comparing,
    /// It does not load, or is no version of what serves.
    Refused,
    /// It diverged more than `maxDivergencePercent` allows.
    Rejected,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            Self::Pulling => "Pulling",
            Self::PullFailed => "PullFailed",
            Self::Comparing => "Comparing",
            Self::Refused => "Refused",
            Self::Rejected => "Rejected",
        }
    }
}

/// One policy's version in shadow.
#[derive(Debug, Clone)]
struct Entry {
    reference: String,
    max_divergence: Option<u8>,
    version: Option<String>,
    state: State,
    since: SystemTime,
    message: Option<String>,
    comparisons: u64,
    agreements: u64,
    differences: u64,
    faults: u64,
    last_divergence: Option<(SystemTime, CallKind, String)>,
    /// Its first divergence of the episode under way was told.
    told: bool,
}

impl Entry {
    fn new(pull: &ShadowPull, now: SystemTime) -> Self {
        Self {
            reference: pull.reference.clone(),
            max_divergence: pull.max_divergence,
            version: None,
            state: State::Pulling,
            since: now,
            message: None,
            comparisons: 0,
            agreements: 0,
            differences: 0,
            faults: 0,
            last_divergence: None,
            told: false,
        }
    }

    fn enter(&mut self, state: State, message: Option<String>, now: SystemTime) {
        if self.state != state {
            self.since = now;
        }
        self.state = state;
        self.message = message;
    }

    /// Why it must stop, if it diverged more than its bound allows.
    fn over_bound(&self) -> Option<String> {
        let max = self.max_divergence?;
        let diverged = self.differences + self.faults;
        let over =
            self.comparisons >= MIN_JUDGED && diverged * 100 > u64::from(max) * self.comparisons;
        over.then(|| {
            format!(
                "{diverged} of {} comparisons diverged ({} differed, {} faulted), above maxDivergencePercent {max}",
                self.comparisons, self.differences, self.faults
            )
        })
    }

    fn view(&self) -> ShadowView {
        ShadowView {
            reference: self.reference.clone(),
            version: self.version.clone(),
            state: self.state.name().to_owned(),
            since: time(self.since),
            message: self.message.clone(),
            comparisons: self.comparisons,
            agreements: self.agreements,
            faults: self.faults,
            last_divergence: (self.last_divergence.as_ref()).map(|(at, call, words)| Divergence {
                time: time(*at),
                call: call.to_string(),
                message: words.clone(),
            }),
        }
    }
}

/// What the shell should do after comparisons were recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The first divergence of `policy`'s version in this episode.
    Differs {
        /// The policy.
        policy: String,
        /// The version in shadow.
        version: String,
        /// Where the decisions part.
        words: String,
    },
    /// `policy`'s version diverged past its bound: stop asking it.
    Rejected {
        /// The policy.
        policy: String,
        /// The version in shadow.
        version: String,
        /// Why.
        message: String,
    },
}

/// One comparison counted, for the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counted {
    /// The policy.
    pub policy: String,
    /// The version in shadow.
    pub version: String,
    /// `agree`, `differ` or `fault`.
    pub result: &'static str,
}

/// The versions in shadow on one node.
#[derive(Debug, Default)]
pub(crate) struct Board {
    entries: BTreeMap<String, Entry>,
    /// A pressure episode (or a run of divergences) is under way.
    episode: bool,
    /// When the views were last handed out.
    published: Option<SystemTime>,
    /// A state changed, or a divergence was told, since then.
    changed: bool,
    /// Counts changed since then.
    counted: bool,
}

impl Board {
    /// Follows the pulls: forgets the policies they no longer have, starts
    /// afresh where the reference changed, and answers the components to
    /// load (pulled and linked, not loaded yet).
    pub(crate) fn follow(
        &mut self,
        pulls: &BTreeMap<String, ShadowPull>,
        now: SystemTime,
    ) -> Vec<(String, PathBuf)> {
        let before = self.entries.len();
        self.entries.retain(|name, _| pulls.contains_key(name));
        self.changed |= self.entries.len() != before;
        let mut loads = Vec::new();
        for (name, pull) in pulls {
            let entry = self
                .entries
                .entry(name.clone())
                .or_insert_with(|| Entry::new(pull, now));
            if entry.reference != pull.reference {
                *entry = Entry::new(pull, now);
                self.changed = true;
            }
            entry.max_divergence = pull.max_divergence;
            if !matches!(entry.state, State::Pulling | State::PullFailed) {
                continue;
            }
            let failed = pull.pull.as_ref().filter(|p| p.state == "PullFailed");
            match (&pull.component, failed) {
                (Some(component), _) => loads.push((name.clone(), component.clone())),
                (None, Some(view)) => {
                    self.changed |= entry.state != State::PullFailed;
                    entry.enter(State::PullFailed, view.message.clone(), now);
                }
                (None, None) => {}
            }
        }
        loads
    }

    /// `policy`'s component loaded as `version`, or was refused for `why`.
    pub(crate) fn loaded(&mut self, policy: &str, loaded: Result<String, String>, now: SystemTime) {
        let Some(entry) = self.entries.get_mut(policy) else {
            return;
        };
        match loaded {
            Ok(version) => {
                entry.version = Some(version);
                entry.enter(State::Comparing, None, now);
            }
            Err(why) => entry.enter(State::Refused, Some(why), now),
        }
        self.changed = true;
    }

    /// The policies whose version in shadow is asked.
    pub(crate) fn comparing(&self) -> BTreeSet<String> {
        (self.entries.iter())
            .filter(|(_, e)| e.state == State::Comparing)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Counts `comparisons`, made after a cycle that found pressure or
    /// not; answers what to count in the metric and what to tell.
    pub(crate) fn record(
        &mut self,
        comparisons: Vec<Comparison>,
        pressure: bool,
        now: SystemTime,
    ) -> (Vec<Counted>, Vec<Notice>) {
        let diverging = (comparisons.iter()).any(|c| matches!(c.verdict, Verdict::Differ(_)));
        if !pressure && !diverging {
            self.episode = false;
            self.entries.values_mut().for_each(|e| e.told = false);
        } else {
            self.episode = true;
        }
        let mut counted = Vec::new();
        let mut notices = Vec::new();
        for Comparison {
            policy,
            call,
            verdict,
        } in comparisons
        {
            let Some(entry) = self.entries.get_mut(&policy) else {
                continue;
            };
            if entry.state != State::Comparing {
                continue;
            }
            let version = entry.version.clone().unwrap_or_default();
            entry.comparisons += 1;
            self.counted = true;
            let result = match verdict {
                Verdict::Agree => {
                    entry.agreements += 1;
                    "agree"
                }
                Verdict::Fault(_) => {
                    entry.faults += 1;
                    "fault"
                }
                Verdict::Differ(words) => {
                    entry.differences += 1;
                    if !entry.told {
                        entry.told = true;
                        self.changed = true;
                        let (policy, version) = (policy.clone(), version.clone());
                        let words = words.clone();
                        notices.push(Notice::Differs {
                            policy,
                            version,
                            words,
                        });
                    }
                    entry.last_divergence = Some((now, call, words));
                    "differ"
                }
            };
            counted.push(Counted {
                policy: policy.clone(),
                version: version.clone(),
                result,
            });
            if let Some(message) = entry.over_bound() {
                entry.enter(State::Rejected, Some(message.clone()), now);
                self.changed = true;
                notices.push(Notice::Rejected {
                    policy,
                    version,
                    message,
                });
            }
        }
        (counted, notices)
    }

    /// The views to hand the fleet view, if they are due at `now`: at once
    /// after a change of state or a told divergence, and counts at most
    /// every [`REFRESH`].
    pub(crate) fn publish(&mut self, now: SystemTime) -> Option<BTreeMap<String, ShadowView>> {
        let refresh = self
            .published
            .is_none_or(|at| self.counted && now.duration_since(at).unwrap_or_default() >= REFRESH);
        if !(self.changed || refresh) {
            return None;
        }
        self.published = Some(now);
        (self.changed, self.counted) = (false, false);
        Some(
            (self.entries.iter())
                .map(|(name, e)| (name.clone(), e.view()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests;
