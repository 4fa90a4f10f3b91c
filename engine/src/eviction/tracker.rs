//! Bookkeeping across cycles: when each threshold (a strategy's scope) was
//! first seen met (for grace periods) and when each condition was last seen (for the transition
//! period during which it is still reported), and which strategy reported it
//! (once that strategy no longer runs, the condition is not reported at all).

use crate::model::{MetLevel, Threshold};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// A threshold a strategy reported met this cycle.
#[derive(Debug, Clone)]
pub struct MetThreshold {
    /// The strategy that reported it.
    pub strategy: String,
    /// What it reported.
    pub threshold: Threshold,
    /// When it was first seen met at this level, in an unbroken run of cycles.
    pub since: SystemTime,
    /// Whether it has held for its grace period.
    pub past_grace: bool,
}

/// A node condition currently reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveCondition {
    /// Condition type, e.g. `MemoryPressure`.
    pub name: String,
    /// Taint effects to apply while it holds.
    pub effects: Vec<String>,
    /// When it was last observed.
    pub last_observed: SystemTime,
}

/// First-observed and last-observed times, carried from cycle to cycle.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// By strategy, scope and level.
    first_met: BTreeMap<(String, String, u8), SystemTime>,
    conditions: BTreeMap<String, ActiveCondition>,
    /// The strategy that last reported each condition.
    reporters: BTreeMap<String, String>,
}

fn level_key(met: MetLevel) -> u8 {
    match met {
        MetLevel::NotMet => 0,
        MetLevel::Report => 1,
        MetLevel::Soft => 2,
        MetLevel::Hard => 3,
    }
}

impl Tracker {
    /// Records this cycle's thresholds (by strategy; a strategy may report
    /// one per scope, each graced on its own) and returns the met ones, hard
    /// before soft before report-only. A threshold not reported met this
    /// cycle starts its grace period afresh next time.
    pub(crate) fn observe(
        &mut self,
        now: SystemTime,
        thresholds: &[(String, Threshold)],
    ) -> Vec<MetThreshold> {
        let mut first_met = BTreeMap::new();
        let mut met = Vec::new();
        for (strategy, threshold) in thresholds.iter().filter(|(_, t)| t.met != MetLevel::NotMet) {
            let key = (
                strategy.clone(),
                threshold.scope.clone(),
                level_key(threshold.met),
            );
            let since = self.first_met.get(&key).copied().unwrap_or(now);
            first_met.insert(key, since);
            let held = now.duration_since(since).unwrap_or_default();
            met.push(MetThreshold {
                strategy: strategy.clone(),
                threshold: threshold.clone(),
                since,
                past_grace: held >= Duration::from_secs(threshold.grace_period_seconds),
            });
            if let Some(condition) = &threshold.condition {
                let active = ActiveCondition {
                    name: condition.name.clone(),
                    effects: condition.effects.clone(),
                    last_observed: now,
                };
                self.conditions.insert(condition.name.clone(), active);
                self.reporters
                    .insert(condition.name.clone(), strategy.clone());
            }
        }
        self.first_met = first_met;
        met.sort_by_key(|m| std::cmp::Reverse(level_key(m.threshold.met)));
        met
    }

    /// Forgets the conditions whose strategy is not among `strategies` (it
    /// was disabled or removed): they are no longer reported at all.
    pub(crate) fn forget_unless(&mut self, strategies: &[String]) {
        let reporters = &self.reporters;
        self.conditions.retain(|name, _| {
            reporters
                .get(name)
                .is_some_and(|strategy| strategies.contains(strategy))
        });
        let conditions = &self.conditions;
        self.reporters
            .retain(|name, _| conditions.contains_key(name));
    }

    /// The conditions seen before but not within the last `transition`
    /// before `now`, whose strategy still runs: reported as not holding.
    pub(crate) fn ended(&self, now: SystemTime, transition: Duration) -> Vec<String> {
        self.conditions
            .values()
            .filter(|c| now.duration_since(c.last_observed).unwrap_or_default() >= transition)
            .map(|c| c.name.clone())
            .collect()
    }

    /// The conditions observed within the last `transition` before `now`.
    pub(crate) fn conditions(&self, now: SystemTime, transition: Duration) -> Vec<ActiveCondition> {
        self.conditions
            .values()
            .filter(|c| now.duration_since(c.last_observed).unwrap_or_default() < transition)
            .cloned()
            .collect()
    }
}

/// How the conditions `found` now differ from the names shown `before`:
/// the names that started (in `found`'s order) and those that ended (in
/// `before`'s order).
pub(crate) fn transitions(
    before: &[String],
    found: &[ActiveCondition],
) -> (Vec<String>, Vec<String>) {
    let started = found
        .iter()
        .filter(|c| !before.contains(&c.name))
        .map(|c| c.name.clone())
        .collect();
    let ended = before
        .iter()
        .filter(|name| !found.iter().any(|c| &c.name == *name))
        .cloned()
        .collect();
    (started, ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threshold(met: MetLevel, grace: u64) -> Threshold {
        let mut threshold = crate::model::memory_threshold(met);
        threshold.grace_period_seconds = grace;
        if let Some(condition) = &mut threshold.condition {
            condition.effects.clear();
        }
        threshold
    }

    #[test]
    fn grace_counts_from_the_first_cycle_of_an_unbroken_run() {
        let t0 = SystemTime::UNIX_EPOCH;
        let at = |s| t0 + Duration::from_secs(s);
        let mut tracker = Tracker::default();
        let soft = vec![("mem".to_owned(), threshold(MetLevel::Soft, 30))];
        assert!(!tracker.observe(at(0), &soft)[0].past_grace);
        assert!(!tracker.observe(at(25), &soft)[0].past_grace);
        assert!(tracker.observe(at(30), &soft)[0].past_grace);
        // A cycle without the threshold resets its grace period.
        assert!(
            tracker
                .observe(
                    at(35),
                    &[("mem".to_owned(), threshold(MetLevel::NotMet, 0))]
                )
                .is_empty()
        );
        let again = tracker.observe(at(40), &soft);
        assert_eq!((again[0].since, again[0].past_grace), (at(40), false));
    }

    #[test]
    fn each_scope_of_a_strategy_is_graced_on_its_own() {
        let t0 = SystemTime::UNIX_EPOCH;
        let at = |s| t0 + Duration::from_secs(s);
        let numa = |node: u32| {
            let mut t = threshold(MetLevel::Soft, 30);
            t.scope = format!("numa.{node}");
            ("numa".to_owned(), t)
        };
        let mut tracker = Tracker::default();
        tracker.observe(at(0), &[numa(0)]);
        // Node 1 joins later: its grace starts then, node 0's carries on.
        let met = tracker.observe(at(20), &[numa(0), numa(1)]);
        assert_eq!((met[0].since, met[1].since), (at(0), at(20)));
        let met = tracker.observe(at(30), &[numa(0), numa(1)]);
        let past: Vec<_> = met.iter().map(|m| m.past_grace).collect();
        assert_eq!(past, [true, false]);
        // Node 0 clears: node 1 keeps its run.
        let met = tracker.observe(at(50), &[numa(1)]);
        assert_eq!((met.len(), met[0].past_grace), (1, true));
    }

    #[test]
    fn a_report_only_threshold_reports_its_condition_and_sorts_last() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut tracker = Tracker::default();
        let mut report = threshold(MetLevel::Report, 0);
        report.scope = "cpu".into();
        if let Some(c) = &mut report.condition {
            c.name = "VigilCPUPressure".into();
        }
        let met = tracker.observe(
            t0,
            &[
                ("cpu".to_owned(), report),
                ("mem".to_owned(), threshold(MetLevel::Soft, 0)),
            ],
        );
        let levels: Vec<_> = met.iter().map(|m| m.threshold.met).collect();
        assert_eq!(levels, [MetLevel::Soft, MetLevel::Report]);
        let names: Vec<_> = (tracker.conditions(t0, Duration::from_secs(1)).into_iter())
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["MemoryPressure", "VigilCPUPressure"]);
    }

    #[test]
    fn conditions_linger_for_the_transition_period() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut tracker = Tracker::default();
        tracker.observe(t0, &[("mem".to_owned(), threshold(MetLevel::Hard, 0))]);
        tracker.observe(t0 + Duration::from_secs(10), &[]);
        let period = Duration::from_secs(300);
        assert_eq!(
            tracker
                .conditions(t0 + Duration::from_secs(299), period)
                .len(),
            1
        );
        assert!(
            tracker
                .conditions(t0 + Duration::from_secs(300), period)
                .is_empty()
        );
        assert_eq!(
            tracker.ended(t0 + Duration::from_secs(300), period),
            ["MemoryPressure"]
        );
    }

    #[test]
    fn a_condition_whose_strategy_no_longer_runs_is_not_reported_at_all() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut tracker = Tracker::default();
        tracker.observe(t0, &[("mem".to_owned(), threshold(MetLevel::Hard, 0))]);
        tracker.forget_unless(&["mem".to_owned()]);
        assert_eq!(tracker.conditions(t0, Duration::from_secs(300)).len(), 1);
        tracker.forget_unless(&["disk".to_owned()]);
        let later = t0 + Duration::from_secs(600);
        assert!(tracker.conditions(t0, Duration::from_secs(300)).is_empty());
        assert!(tracker.ended(later, Duration::from_secs(300)).is_empty());
    }
}
