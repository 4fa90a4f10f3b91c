//! What wakes the eviction loop before its period ends, in one room (the
//! kubelet keeps its notifiers in its eviction package too). Each source
//! sends a unit on one channel, which the runner receives:
//!
//! - [`pressure`]: a PSI trigger on `/proc/pressure/memory`, or polling of
//!   that file by the trigger's rule where the kernel refuses triggers;
//! - [`memory_events`]: the kubepods cgroup's `memory.events` (cgroup v2),
//!   which the kernel touches on every high, max and oom event;
//! - [`memory_line`]: `/proc/meminfo` read every 100 ms, a wake at each
//!   fall of `memory.available` under the line the runner sets after each
//!   cycle (the strategies' highest threshold on it) — for nodes where
//!   neither of the above wakes the loop in time.
//!
//! The watches and report-driven wakes of the API objects (a refused
//! eviction, a throttling server's wait, new settings) are the runner's
//! own, in `eviction::runner`.

pub mod memory_events;
pub mod memory_line;
pub mod pressure;

pub use memory_line::MemoryLine;
pub use pressure::{TriggerSettings, Wake, Woke, forward_wakes};

use super::SignalFiles;
use std::time::Duration;
use tokio::sync::mpsc;

/// Every wake source of a node, armed: the runner takes `receiver` and
/// sets `line`; the sources stop once the receiver is dropped (keep the
/// whole value alive while the loop runs: it holds the `memory.events`
/// watch).
#[derive(Debug)]
pub struct Wakes {
    /// Where the wakes arrive.
    pub receiver: mpsc::Receiver<()>,
    /// The line the memory line's watcher wakes the loop under.
    pub line: MemoryLine,
    /// The `memory.events` watch, where there is one.
    pub memory_events: Option<notify::RecommendedWatcher>,
}

impl Wakes {
    /// Arms every source for the node whose files `files` name; `period`
    /// is the loop's (a polled PSI file is read at least that often).
    pub fn arm(files: &SignalFiles, period: Duration) -> Self {
        let (sender, receiver) = mpsc::channel(1);
        let psi = Wake::arm(
            &files.proc_root.join("pressure/memory"),
            &TriggerSettings::default(),
        );
        // The threads end by themselves once the receiver is gone.
        forward_wakes(psi, period, sender.clone());
        let line = MemoryLine::default();
        let meminfo = files.proc_root.join("meminfo");
        memory_line::watch_memory_line(
            meminfo,
            line.clone(),
            memory_line::INTERVAL,
            sender.clone(),
        );
        let memory_events = memory_events::watch_kubepods(files, sender);
        Self {
            receiver,
            line,
            memory_events,
        }
    }
}
