//! Waits that poll what has no change feed (a process's endpoints, a real
//! API server through kubectl, a node's files): each asks its check at a
//! stated interval and ends on the first answer; its limit bounds a broken
//! test and says what it assumes, it is never a wait for time to pass.
//! (The test API server's own waits end on its change feed:
//! `ApiServer::until`.)

use std::time::{Duration, Instant};

/// How a wait polls.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// How often the check is asked.
    pub every: Duration,
    /// The bound of a broken test.
    pub limit: Duration,
}

impl Polling {
    /// Asking every `every`, for at most `limit`.
    pub const fn new(every: Duration, limit: Duration) -> Self {
        Self { every, limit }
    }

    /// Asks `check` until it gives a value, on this thread.
    ///
    /// # Panics
    /// If it gives none within the limit: the panic names `what` and adds
    /// what `explain` says (a log, say).
    pub fn until<T>(
        self,
        what: &str,
        mut check: impl FnMut() -> Option<T>,
        explain: impl FnOnce() -> String,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            if start.elapsed() >= self.limit {
                self.expired(what, explain);
            }
            std::thread::sleep(self.every);
        }
    }

    /// [`Polling::until`] on the async runtime (the thread stays free).
    ///
    /// # Panics
    /// As [`Polling::until`].
    pub async fn until_async<T>(
        self,
        what: &str,
        mut check: impl FnMut() -> Option<T>,
        explain: impl FnOnce() -> String,
    ) -> T {
        let start = tokio::time::Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            if start.elapsed() >= self.limit {
                self.expired(what, explain);
            }
            tokio::time::sleep(self.every).await;
        }
    }

    fn expired(self, what: &str, explain: impl FnOnce() -> String) -> ! {
        panic!(
            "timed out after {:?} waiting for: {what}\n{}",
            self.limit,
            explain()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_on_the_first_answer_and_a_broken_one_says_what_it_waited_for() {
        let polling = Polling::new(Duration::from_millis(1), Duration::from_secs(60));
        let mut asked = 0;
        let found = polling.until(
            "the third ask",
            || {
                asked += 1;
                (asked == 3).then_some(asked)
            },
            String::new,
        );
        assert_eq!(found, 3);
        let broken = Polling::new(Duration::from_millis(1), Duration::from_millis(5));
        let panic = std::panic::catch_unwind(|| {
            broken.until("nothing", || None::<()>, || "the log".to_owned());
        })
        .unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("waiting for: nothing\nthe log"),
            "{message}"
        );
    }
}
