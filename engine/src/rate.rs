//! A token bucket: at most `burst` things at once, then `per_second` on
//! average. Time is given, never read, so callers decide the clock (tokio's,
//! paused in tests).

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

#[cfg(test)]
mod tests {
    use super::*;

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
