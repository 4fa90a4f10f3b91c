//! Cpu usage and throttling over a window: cgroups report cumulative cpu
//! time and CFS counters, pods are judged by millicores and by throttling
//! since the last cycle, so both are taken between two samples of each pod.

use super::cgroup::Throttling;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The last samples of each pod, to turn the next ones into a window.
#[derive(Debug, Default)]
pub struct CpuRates {
    last: HashMap<String, (SystemTime, Duration)>,
    throttling: HashMap<String, Throttling>,
}

impl CpuRates {
    /// Records `cpu_time` of pod `uid` sampled `at`, and returns its usage in
    /// millicores since the previous sample (none for a first sample, a clock
    /// that did not move, or a counter that went backwards, as after a restart).
    pub fn sample(&mut self, uid: &str, at: SystemTime, cpu_time: Duration) -> Option<u64> {
        let previous = self.last.insert(uid.to_owned(), (at, cpu_time));
        let (then, before) = previous?;
        let wall = at.duration_since(then).ok().filter(|w| !w.is_zero())?;
        let used = cpu_time.checked_sub(before)?;
        Some((used.as_secs_f64() / wall.as_secs_f64() * 1000.0).round() as u64)
    }

    /// Records the CFS counters of pod `uid` and returns what grew since
    /// its previous sample (none for a first sample or a counter that went
    /// backwards, as after its cgroup was made again).
    pub fn throttled(&mut self, uid: &str, counters: Throttling) -> Option<Throttling> {
        let before = self.throttling.insert(uid.to_owned(), counters)?;
        Some(Throttling {
            periods: counters.periods.checked_sub(before.periods)?,
            throttled_periods: (counters.throttled_periods)
                .checked_sub(before.throttled_periods)?,
            throttled: counters.throttled.checked_sub(before.throttled)?,
        })
    }

    /// Forgets pods not in `present` (they are gone).
    pub fn retain(&mut self, present: impl Fn(&str) -> bool) {
        self.last.retain(|uid, _| present(uid));
        self.throttling.retain(|uid, _| present(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_taken_between_samples() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut rates = CpuRates::default();
        assert_eq!(rates.sample("a", t0, Duration::from_secs(10)), None);
        // 1.5 s of cpu over 2 s of wall time: 750 millicores.
        let rate = rates.sample(
            "a",
            t0 + Duration::from_secs(2),
            Duration::from_millis(11_500),
        );
        assert_eq!(rate, Some(750));
        assert_eq!(
            rates.sample("a", t0 + Duration::from_secs(3), Duration::from_secs(1)),
            None,
            "counter reset"
        );
        rates.retain(|uid| uid != "a");
        assert_eq!(
            rates.sample("a", t0 + Duration::from_secs(4), Duration::from_secs(2)),
            None
        );
    }

    #[test]
    fn throttling_is_what_grew_between_samples() {
        let mut rates = CpuRates::default();
        let at = |periods, throttled_periods, millis| Throttling {
            periods,
            throttled_periods,
            throttled: Duration::from_millis(millis),
        };
        assert_eq!(rates.throttled("a", at(100, 10, 500)), None);
        assert_eq!(
            rates.throttled("a", at(150, 25, 1_250)),
            Some(at(50, 15, 750))
        );
        assert_eq!(rates.throttled("a", at(5, 0, 0)), None, "counter reset");
        rates.retain(|uid| uid != "a");
        assert_eq!(rates.throttled("a", at(10, 1, 1)), None, "forgotten");
    }
}
