//! What has happened since the trial under way began, from counters that
//! run for the agent's whole life: each policy's faults and the node's
//! accepted evictions, taken against what they were when the trial began.

use super::InTrial;
use jiff::Timestamp;
use std::collections::BTreeMap;

/// Each policy's version (its digest) and faults so far, by name.
pub(crate) type PolicyFaults = BTreeMap<String, (String, u64)>;

/// The counters as they were when the trial under way began.
#[derive(Debug, Default)]
pub(crate) struct TrialCounts {
    /// When that trial began, and the counters then.
    start: Option<(Timestamp, PolicyFaults, u64)>,
}

impl TrialCounts {
    /// What happened in the trial that began `since` (none: no trial
    /// runs), given each policy's `faults` and the node's `evicted` so
    /// far. A trial's first reading is its baseline; a policy replaced
    /// during the trial counts all of its faults.
    pub(crate) fn in_trial(
        &mut self,
        since: Option<Timestamp>,
        faults: PolicyFaults,
        evicted: u64,
    ) -> InTrial {
        let Some(since) = since else {
            self.start = None;
            return InTrial::default();
        };
        let (_, at_start, evicted_at_start) = match &self.start {
            Some(start) if start.0 == since => start,
            _ => self.start.insert((since, faults.clone(), evicted)),
        };
        let faults = faults
            .iter()
            .map(|(name, (digest, count))| match at_start.get(name) {
                Some((then, base)) if then == digest => count.saturating_sub(*base),
                _ => *count,
            })
            .sum();
        InTrial {
            faults,
            evictions: evicted.saturating_sub(*evicted_at_start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(of: &[(&str, &str, u64)]) -> PolicyFaults {
        of.iter()
            .map(|(name, digest, n)| ((*name).to_owned(), ((*digest).to_owned(), *n)))
            .collect()
    }

    #[test]
    fn a_trial_counts_from_its_own_start_and_a_replaced_policy_counts_whole() {
        let (t1, t2) = (
            Timestamp::from_second(100).unwrap(),
            Timestamp::from_second(200).unwrap(),
        );
        let mut counts = TrialCounts::default();
        let none = counts.in_trial(None, faults(&[("sorter", "a", 4)]), 9);
        assert_eq!(none, InTrial::default());
        // The first reading of a trial is its baseline.
        let start = counts.in_trial(Some(t1), faults(&[("sorter", "a", 4)]), 9);
        assert_eq!(start, InTrial::default());
        let later = counts.in_trial(
            Some(t1),
            faults(&[("sorter", "a", 6), ("merger", "m", 1)]),
            12,
        );
        assert_eq!(
            later,
            InTrial {
                faults: 3,
                evictions: 3
            }
        );
        // The sorter replaced during the trial: its new version's faults count whole.
        let replaced = counts.in_trial(Some(t1), faults(&[("sorter", "b", 1)]), 12);
        assert_eq!(
            replaced,
            InTrial {
                faults: 1,
                evictions: 3
            }
        );
        // A new trial starts from its own baseline, even without a tick between.
        let next = counts.in_trial(Some(t2), faults(&[("sorter", "b", 5)]), 20);
        assert_eq!(next, InTrial::default());
        let next = counts.in_trial(Some(t2), faults(&[("sorter", "b", 7)]), 21);
        assert_eq!(
            next,
            InTrial {
                faults: 2,
                evictions: 1
            }
        );
    }
}
