//! A fast look at `memory.available` for nodes where nothing else wakes the
//! eviction loop in time: without PSI triggers (the DaemonSet's read-only
//! `/proc`, kernels that refuse them) and without `memory.events` (cgroup
//! v1), the loop would only see a threshold crossed at its next period.
//! A thread reads `/proc/meminfo` every [`INTERVAL`] and wakes the loop the
//! moment the reading falls under the line: the highest `memory.available`
//! threshold the strategies reported in the loop's last cycle. It wakes on
//! the fall only; while the node stays under the line, the period drives the
//! loop as before.

use crate::model::Threshold;
use crate::signals::MemInfo;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the watcher reads `/proc/meminfo`: one read costs tens of
/// microseconds, so ten a second cost a few hundredths of a percent of a
/// core.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// The line, in bytes of `memory.available`, shared between the runner
/// (which sets it after each cycle) and the watcher (which reads it); none
/// until a strategy reports a threshold on that signal.
#[derive(Debug, Clone, Default)]
pub struct MemoryLine(Arc<AtomicU64>);

impl MemoryLine {
    /// Sets the line (`None`: no threshold on `memory.available`).
    pub fn set(&self, bytes: Option<u64>) {
        self.0.store(bytes.unwrap_or(0), Ordering::Relaxed);
    }

    /// The line, if any.
    pub fn get(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&bytes| bytes > 0)
    }

    /// Sets the line to the highest threshold on `memory.available` among
    /// a cycle's `reported` ones.
    pub fn follow(&self, reported: &[(String, Threshold)]) {
        self.set(line_of(reported));
    }
}

/// The highest threshold on `memory.available` among `reported`, in bytes.
fn line_of(reported: &[(String, Threshold)]) -> Option<u64> {
    (reported.iter())
        .filter(|(_, threshold)| threshold.signal == "memory.available")
        .map(|(_, threshold)| threshold.threshold)
        .filter(|bytes| bytes.is_finite() && *bytes >= 1.0)
        .max_by(f64::total_cmp)
        .map(|bytes| bytes as u64)
}

/// Whether a reading of `now` is a fall under `line`: under it, where the
/// reading before (if any) was not.
fn fell_under(before: Option<u64>, now: u64, line: u64) -> bool {
    now < line && before.is_none_or(|before| before >= line)
}

/// Reads `memory.available` from `meminfo` every `interval` on a thread of
/// its own and sends a unit on `wakes` at each fall under `line`, until the
/// receiver is dropped. An unreadable file is no reading (and no wake).
pub fn watch_memory_line(
    meminfo: PathBuf,
    line: MemoryLine,
    interval: Duration,
    wakes: mpsc::Sender<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("vigil-memory-line".into())
        .spawn(move || {
            let mut before = None;
            while !wakes.is_closed() {
                std::thread::sleep(interval);
                let Ok(info) = MemInfo::read(&meminfo) else {
                    before = None;
                    continue;
                };
                let now = info.available();
                if line.get().is_some_and(|line| fell_under(before, now, line)) {
                    // A full channel already holds a wake.
                    let _ = wakes.try_send(());
                }
                before = Some(now);
            }
        })
        .expect("cannot spawn the memory line's thread")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MetLevel, memory_threshold};

    #[test]
    fn the_memory_line_is_the_highest_threshold_on_memory_available() {
        let on = |signal: &str, bytes: f64| Threshold {
            signal: signal.into(),
            threshold: bytes,
            ..memory_threshold(MetLevel::NotMet)
        };
        let reported = |thresholds: Vec<Threshold>| -> Vec<(String, Threshold)> {
            thresholds
                .into_iter()
                .map(|t| ("s".to_owned(), t))
                .collect()
        };
        let line = line_of(&reported(vec![
            on("memory.available", 300e6),
            on("memory.available", 500e6),
            on("nodefs.available", 9e12),
            on("memory.available", f64::NAN),
        ]));
        assert_eq!(line, Some(500_000_000));
        assert_eq!(line_of(&reported(vec![on("pid.available", 10.0)])), None);
        assert_eq!(line_of(&reported(vec![on("memory.available", 0.0)])), None);
    }

    #[test]
    fn only_a_fall_under_the_line_is_news() {
        assert!(fell_under(None, 90, 100), "the first reading, under");
        assert!(fell_under(Some(100), 99, 100), "from the line to under it");
        assert!(
            !fell_under(Some(99), 98, 100),
            "still under: the period's business"
        );
        assert!(!fell_under(Some(90), 100, 100), "back at the line");
        assert!(!fell_under(None, 100, 100), "at the line is not under it");
    }

    #[test]
    fn the_line_is_unset_until_a_threshold_is_reported() {
        let line = MemoryLine::default();
        assert_eq!(line.get(), None);
        line.set(Some(300 << 20));
        assert_eq!(line.clone().get(), Some(300 << 20), "clones share it");
        line.set(None);
        assert_eq!(line.get(), None);
    }

    /// `/proc/meminfo` with `free` kB free and nothing else reclaimable.
    fn meminfo(free_kib: u64) -> String {
        format!(
            "MemTotal: 1000000 kB\nMemFree: {free_kib} kB\nMemAvailable: {free_kib} kB\nInactive(file): 0 kB\n"
        )
    }

    #[tokio::test]
    async fn a_fall_under_the_line_wakes_the_loop_and_the_thread_ends_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("meminfo");
        std::fs::write(&file, meminfo(500_000)).unwrap();
        let line = MemoryLine::default();
        line.set(Some(400_000 * 1024));
        let (wakes, mut woken) = mpsc::channel(1);
        let thread = watch_memory_line(file.clone(), line, Duration::from_millis(5), wakes);
        // Then under it (read before or not, the first reading under the
        // line is a fall).
        let next = dir.path().join("next");
        std::fs::write(&next, meminfo(300_000)).unwrap();
        std::fs::rename(&next, &file).unwrap();
        tokio::time::timeout(Duration::from_secs(10), woken.recv())
            .await
            .expect("a wake after the fall")
            .expect("the watcher runs");
        drop(woken);
        thread
            .join()
            .expect("the thread ends once the loop is gone");
    }
}
