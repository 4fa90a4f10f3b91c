//! How often to try: a token bucket (at most `burst` things at once, then
//! `per_second` on average) and an exponential backoff with jitter. Time is
//! given, never read, so callers decide the clock (tokio's, paused in
//! tests).

use std::time::Duration;
use tokio::time::Instant;

/// See the module docs.
#[derive(Debug)]
pub struct TokenBucket {
    tokens: f64,
    per_second: f64,
    burst: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least one), refilled at
    /// `per_second` (at least 0.01).
    pub fn new(per_second: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            tokens: burst,
            per_second: per_second.max(0.01),
            burst,
            last: now,
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    ///
    /// # Errors
    /// The bucket is empty: the wait until the next token.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let earned = now.duration_since(self.last).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.per_second,
            ))
        }
    }
}

/// The wait after the `n`th failure in a row: `first`, doubling up to `max`,
/// times a random factor in `[low, high)` so that the agents of a fleet do
/// not retry in step. The one backoff of the house.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    low: f64,
    high: f64,
}

impl Backoff {
    /// Doubling from `first` to `max`, without jitter.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            low: 1.0,
            high: 1.0,
        }
    }

    /// Each wait times a random factor in `[low, high)`.
    #[must_use]
    pub const fn jittered(self, low: f64, high: f64) -> Self {
        Self { low, high, ..self }
    }

    /// The wait after the `failures`th failure in a row (the first is 1).
    pub fn wait(&self, failures: u32) -> Duration {
        self.wait_rolled(failures, fastrand::f64())
    }

    /// [`Self::wait`] with the random draw `roll`, in `[0, 1)`, given.
    pub fn wait_rolled(&self, failures: u32, roll: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(16);
        let base = self.first.saturating_mul(1 << exponent).min(self.max);
        base.mul_f64(self.low + (self.high - self.low) * roll.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_ceiling_within_its_jitter() {
        let plain = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let waits: Vec<u64> = (1..=8).map(|n| plain.wait(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(plain.wait(0), Duration::from_secs(5));
        assert_eq!(plain.wait(u32::MAX), Duration::from_secs(300));
        let spread = plain.jittered(0.5, 1.5);
        assert_eq!(spread.wait_rolled(2, 0.0), Duration::from_secs(5));
        assert_eq!(spread.wait_rolled(2, 0.5), Duration::from_secs(10));
        for n in 1..=10 {
            let base = plain.wait(n);
            let wait = spread.wait(n);
            assert!(wait >= base / 2 && wait < base * 3 / 2, "{n}: {wait:?}");
        }
        let draws: std::collections::HashSet<Duration> = (0..100).map(|_| spread.wait(3)).collect();
        assert!(draws.len() > 20, "too little jitter: {draws:?}");
    }

    #[test]
    fn the_bucket_lets_a_burst_through_then_paces_to_its_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2.0, 3, start);
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        assert_eq!(bucket.take(start), Err(Duration::from_millis(500)));
        let later = start + Duration::from_millis(500);
        assert_eq!(bucket.take(later), Ok(()));
        assert!(bucket.take(later).is_err());
        // A long quiet time refills no more than the burst.
        let quiet = later + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.take(quiet), Ok(()));
        }
        assert!(bucket.take(quiet).is_err());
    }
}
