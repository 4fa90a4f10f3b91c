//! Injected time: every piece of logic that depends on time takes a [`Clock`],
//! so the agent uses the system clock while tests and `vigil simulate` use a
//! [`ManualClock`] they advance themselves.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Sleeps `wait` (on tokio's clock, paused in tests); pending forever
/// without one, so a `select!` arm without a deadline never fires.
pub async fn sleep_or_pending(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: SystemTime) -> Self {
        Self(Mutex::new(start))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.0.lock().expect("clock lock poisoned") += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().expect("clock lock poisoned")
    }
}
