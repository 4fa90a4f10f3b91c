//! A work queue keyed by object, in the manner of client-go's rate-limited
//! queue, for a single worker:
//!
//! - a key added again before it is handed out is handed out once: the
//!   sync reads the state current then, so a newer change supersedes a
//!   pending one;
//! - a key whose sync wrote is not handed out again for `spacing`: however
//!   fast its source changes, its object is written at most once per
//!   `spacing`;
//! - a key whose sync failed comes back after a jittered exponential
//!   backoff, and starts afresh once a sync succeeds.

use crate::base::rate::Backoff;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The first retry's delay (before jitter).
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The delay before a key's retry: doubling from [`BACKOFF_BASE`] up to
/// 120 s, times a random factor in [0.5, 1.5) so that the agents of a fleet
/// do not retry in step.
const BACKOFF: Backoff = Backoff::new(BACKOFF_BASE, Duration::from_secs(120)).jittered(0.5, 1.5);

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    /// Nothing needed writing.
    Unchanged,
    /// The object was written.
    Wrote,
    /// The sync failed: try again later.
    Failed,
}

#[derive(Debug)]
struct State<K> {
    /// Keys to sync.
    dirty: BTreeSet<K>,
    /// When each key may be handed out next.
    not_before: BTreeMap<K, Instant>,
    /// Failed syncs in a row, by key.
    failures: BTreeMap<K, u32>,
}

/// The queue.
#[derive(Debug)]
pub(crate) struct WorkQueue<K> {
    state: Mutex<State<K>>,
    wake: Notify,
    spacing: Duration,
}

impl<K: Ord + Clone> WorkQueue<K> {
    /// A queue writing each key at most once per `spacing`.
    pub(crate) fn new(spacing: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                dirty: BTreeSet::new(),
                not_before: BTreeMap::new(),
                failures: BTreeMap::new(),
            }),
            wake: Notify::new(),
            spacing,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().expect("queue lock poisoned")
    }

    /// Asks for `key` to be synced.
    pub(crate) fn add(&self, key: K) {
        if self.lock().dirty.insert(key) {
            self.wake.notify_one();
        }
    }

    /// The next key due, waiting for one. Cancel-safe: a key is taken
    /// only when it is returned.
    pub(crate) async fn next(&self) -> K {
        loop {
            let wait = {
                let mut state = self.lock();
                let now = Instant::now();
                let due = |key: &K| state.not_before.get(key).is_none_or(|at| *at <= now);
                if let Some(key) = state.dirty.iter().find(|k| due(k)).cloned() {
                    state.dirty.remove(&key);
                    return key;
                }
                state
                    .dirty
                    .iter()
                    .filter_map(|k| state.not_before.get(k))
                    .min()
                    .copied()
            };
            match wait {
                Some(at) => {
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// Reports how the sync of `key` (handed out by [`WorkQueue::next`]) ended.
    pub(crate) fn done(&self, key: &K, done: Done) {
        let mut state = self.lock();
        let now = Instant::now();
        match done {
            Done::Unchanged => {
                state.failures.remove(key);
            }
            Done::Wrote => {
                state.failures.remove(key);
                state.not_before.insert(key.clone(), now + self.spacing);
            }
            Done::Failed => {
                let failures = state.failures.entry(key.clone()).or_default();
                *failures += 1;
                let delay = BACKOFF.wait(*failures);
                let at = (now + delay).max(state.not_before.get(key).copied().unwrap_or(now));
                state.not_before.insert(key.clone(), at);
                state.dirty.insert(key.clone());
            }
        }
        let expired: Vec<K> = state
            .not_before
            .iter()
            .filter(|(k, at)| **at <= now && !state.dirty.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            state.not_before.remove(&key);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// How many syncs of `key` failed in a row.
    pub(crate) fn failures(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPACING: Duration = Duration::from_secs(10);

    /// The keys handed out (and reported done as `done`) until none is due
    /// within `within`.
    async fn drain(
        queue: &WorkQueue<&'static str>,
        done: Done,
        within: Duration,
    ) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Ok(key) = tokio::time::timeout(within, queue.next()).await {
            queue.done(&key, done);
            out.push(key);
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_many_times_is_synced_once() {
        let queue = WorkQueue::new(SPACING);
        for _ in 0..1000 {
            queue.add("a");
        }
        queue.add("b");
        assert_eq!(
            drain(&queue, Done::Unchanged, Duration::ZERO).await,
            ["a", "b"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_that_wrote_waits_out_its_spacing_and_changes_meanwhile_coalesce() {
        let queue = WorkQueue::new(SPACING);
        let start = Instant::now();
        queue.add("a");
        assert_eq!(queue.next().await, "a");
        queue.done(&"a", Done::Wrote);
        for _ in 0..1000 {
            queue.add("a");
        }
        queue.add("b");
        assert_eq!(queue.next().await, "b", "another key is not held up");
        queue.done(&"b", Done::Wrote);
        assert_eq!(queue.next().await, "a");
        assert_eq!(start.elapsed(), SPACING);
        queue.done(&"a", Done::Wrote);
        assert!(drain(&queue, Done::Wrote, SPACING * 10).await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sync_is_retried_with_a_growing_jittered_backoff() {
        let queue = WorkQueue::new(SPACING);
        queue.add("a");
        let mut waits = Vec::new();
        let mut last = Instant::now();
        for _ in 0..6 {
            assert_eq!(queue.next().await, "a");
            waits.push(last.elapsed());
            last = Instant::now();
            queue.done(&"a", Done::Failed);
        }
        assert_eq!(queue.failures(&"a"), 6);
        for (i, wait) in waits.iter().enumerate().skip(1) {
            let nominal = BACKOFF_BASE * (1 << (i - 1));
            assert!(
                *wait >= nominal / 2 && *wait < nominal * 3 / 2,
                "retry {i} after {wait:?}, nominal {nominal:?}"
            );
        }
        assert_eq!(queue.next().await, "a");
        queue.done(&"a", Done::Unchanged);
        assert_eq!(queue.failures(&"a"), 0);
    }
}
