//! What the eviction loop did lately, kept from its reports for the node's
//! status object: the pressure conditions that hold and since when, the
//! last [`LAST_EVICTIONS`] eviction calls, and counts by result. [`follow`]
//! subscribes to the runner's reports and keeps it current.

use super::kinds::{Eviction, PressureCondition};
use crate::base::clock::Clock;
use crate::eviction::runner::{LoopReport, next_report};
use crate::eviction::tracker::transitions;
use crate::eviction::{ActiveCondition, Settled};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{broadcast, watch};

/// How many eviction calls the node's status object lists.
pub(crate) const LAST_EVICTIONS: usize = 10;

/// The loop's recent activity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    /// Conditions that hold, in the order they started.
    pub conditions: Vec<PressureCondition>,
    /// Thresholds out of their place beside the kubelet, in words.
    pub beside_kubelet: Vec<String>,
    /// The last eviction calls, oldest first.
    pub last_evictions: VecDeque<Eviction>,
    /// Eviction calls ended, by result.
    pub evictions: BTreeMap<String, u64>,
}

impl Activity {
    /// Takes the conditions a cycle found at `at`; returns the names of
    /// those that started and of those that ended.
    pub fn conditions(
        &mut self,
        found: &[ActiveCondition],
        at: SystemTime,
    ) -> (Vec<String>, Vec<String>) {
        let before: Vec<String> = self.conditions.iter().map(|c| c.type_.clone()).collect();
        let (started, ended) = transitions(&before, found);
        self.conditions.retain(|c| !ended.contains(&c.type_));
        for name in &started {
            self.conditions.push(PressureCondition {
                type_: name.clone(),
                since: time(at),
            });
        }
        (started, ended)
    }

    /// Records an eviction call that ended at `at`.
    pub fn settled(&mut self, settled: &Settled, at: SystemTime) {
        let (victim, result) = settled.result();
        let message = match settled {
            Settled::Refused(_, why)
            | Settled::NotEvictable(_, why)
            | Settled::Throttled(_, why)
            | Settled::Waiting(_, why) => Some(why.clone()),
            Settled::Accepted(_) | Settled::Gone(_) => None,
        };
        *self.evictions.entry(result.to_owned()).or_default() += 1;
        if self.last_evictions.len() == LAST_EVICTIONS {
            self.last_evictions.pop_front();
        }
        self.last_evictions.push_back(Eviction {
            pod: format!("{}/{}", victim.pod.namespace, victim.pod.name),
            strategy: victim.strategy.clone(),
            urgency: victim.urgency.as_str().to_owned(),
            reason: victim.reason.clone(),
            result: result.to_owned(),
            message,
            time: time(at),
            why: Some(victim.why.words(&victim.strategy)),
        });
    }
}

/// `at` as the API's time (to the second, as the API server keeps it).
pub(crate) fn time(at: SystemTime) -> Time {
    let stamp = Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH);
    Time(Timestamp::from_second(stamp.as_second()).unwrap_or(stamp))
}

/// Keeps `activity` current from the runner's `reports` (timed by `clock`)
/// until the runner is gone; a reader that fell behind skips what it missed.
pub(crate) async fn follow(
    mut reports: broadcast::Receiver<Arc<LoopReport>>,
    activity: watch::Sender<Activity>,
    clock: Arc<dyn Clock>,
) {
    while let Some(report) = next_report(&mut reports, "the fleet view").await {
        match report.as_ref() {
            LoopReport::Cycle(cycle, _) => {
                activity.send_if_modified(|a| {
                    let (started, ended) = a.conditions(&cycle.conditions, clock.now());
                    let misplaced: Vec<String> =
                        cycle.misplaced.iter().map(ToString::to_string).collect();
                    let moved = a.beside_kubelet != misplaced;
                    a.beside_kubelet = misplaced;
                    !started.is_empty() || !ended.is_empty() || moved
                });
            }
            LoopReport::Settled { settled, .. } => {
                activity.send_modify(|a| a.settled(settled, clock.now()));
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::eviction::{Urgency, Victim};
    use std::time::Duration;

    fn condition(name: &str) -> ActiveCondition {
        ActiveCondition {
            name: name.into(),
            effects: Vec::new(),
            last_observed: SystemTime::UNIX_EPOCH,
        }
    }

    /// A hard-pressure victim `default/NAME` of the memory strategy.
    pub(in crate::fleet) fn victim(name: &str) -> Victim {
        Victim {
            pod: crate::model::fixture::pod(name).usage_mib(10).build(),
            strategy: "memory".into(),
            reason: "largest".into(),
            urgency: Urgency::Hard,
            scope: None,
            grace_period_seconds: None,
            dry_run: false,
            override_pdb: false,
            why: crate::eviction::Why::default(),
        }
    }

    #[test]
    fn a_condition_keeps_the_time_it_started_until_it_ends() {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let mut activity = Activity::default();
        let (started, ended) = activity.conditions(&[condition("MemoryPressure")], t(10));
        assert_eq!((started, ended), (vec!["MemoryPressure".into()], vec![]));
        let both = [condition("MemoryPressure"), condition("PIDPressure")];
        let (started, ended) = activity.conditions(&both, t(20));
        assert_eq!((started, ended), (vec!["PIDPressure".into()], vec![]));
        assert_eq!(activity.conditions[0].since, time(t(10)));
        let (started, ended) = activity.conditions(&[condition("PIDPressure")], t(30));
        assert_eq!((started, ended), (vec![], vec!["MemoryPressure".into()]));
        assert_eq!(activity.conditions.len(), 1);
        assert_eq!(activity.conditions[0].since, time(t(20)));
    }

    #[test]
    fn only_the_last_evictions_are_kept_and_every_one_is_counted() {
        let mut activity = Activity::default();
        for i in 0..15 {
            let settled = if i % 5 == 0 {
                Settled::Refused(victim(&format!("p{i}")), "budget".into())
            } else {
                Settled::Accepted(victim(&format!("p{i}")))
            };
            activity.settled(&settled, SystemTime::UNIX_EPOCH);
        }
        assert_eq!(activity.last_evictions.len(), LAST_EVICTIONS);
        assert_eq!(activity.last_evictions[0].pod, "default/p5");
        assert_eq!(
            activity.last_evictions[0].message.as_deref(),
            Some("budget")
        );
        assert_eq!(activity.last_evictions[9].pod, "default/p14");
        assert_eq!(activity.evictions["accepted"], 12);
        assert_eq!(activity.evictions["refused"], 3);
    }
}
