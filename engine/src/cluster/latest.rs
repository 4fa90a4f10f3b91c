//! Writing to the API server what only its latest value matters for (a
//! node's conditions and taints, its `VigilConfigOK` condition): one task per
//! object writes the newest value whenever it changes, retries with backoff
//! while the API server is unreachable, and writes again on the writer's
//! heartbeat.

use crate::base::clock::sleep_or_pending;
use crate::base::rate::Backoff;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// The waits between two attempts at a write: 250 ms doubling to 30 s.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));

/// Something written to the API server that only its latest value matters for.
pub(crate) trait LatestWriter<T> {
    /// Writes `value`.
    fn write(&mut self, value: &T) -> impl Future<Output = Result<(), kube::Error>> + Send;

    /// How soon `value`, once written, must be written again though it did
    /// not change (a heartbeat); never by default.
    fn refresh(&self, _value: &T) -> Option<Duration> {
        None
    }
}

/// Writes the latest value of `latest` with `writer` whenever it changes
/// (and again after the writer's refresh interval, if it has one for that
/// value), retrying with exponential backoff (`BACKOFF`) while
/// writes fail, until the sender is gone; `what` names it in logs.
pub(crate) async fn write_latest<T: Clone + Send + Sync>(
    mut writer: impl LatestWriter<T>,
    mut latest: watch::Receiver<T>,
    what: &str,
) {
    let mut failures = 0;
    loop {
        let current = latest.borrow_and_update().clone();
        match writer.write(&current).await {
            Ok(()) => {
                failures = 0;
                let refresh = writer.refresh(&current);
                tokio::select! {
                    changed = latest.changed() => if changed.is_err() { return },
                    () = sleep_or_pending(refresh) => {}
                }
            }
            Err(error) => {
                failures += 1;
                let backoff = BACKOFF.wait(failures);
                tracing::warn!(error = %crate::base::report::Chain(&error), retry_in = ?backoff, "cannot write {what}");
                tokio::select! {
                    changed = latest.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
}
