//! Cpu usage as a rate: cgroups report cumulative cpu time, pods are judged
//! by millicores, so the rate is taken between two samples of each pod.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The last cpu-time sample of each pod, to turn the next one into a rate.
#[derive(Debug, Default)]
pub struct CpuRates {
    last: HashMap<String, (SystemTime, Duration)>,
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

    /// Forgets pods not in `present` (they are gone).
    pub fn retain(&mut self, present: impl Fn(&str) -> bool) {
        self.last.retain(|uid, _| present(uid));
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
}
