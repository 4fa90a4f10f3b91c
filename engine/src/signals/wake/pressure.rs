//! A PSI trigger on `/proc/pressure/memory`: the kernel wakes a `poll` for
//! `POLLPRI` when tasks stalled on memory for `stall` within `window`. Some
//! kernels refuse triggers (`EINVAL`, e.g. without `CONFIG_PSI` or for
//! unprivileged writers): then vigil polls the same file at an interval and
//! wakes when the `some` stall total grew by the trigger's stall since the
//! last look — the trigger's rule, emulated — and says so once in the log.
//! A calm node is not woken at every interval.

use crate::signals::Pressure;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

/// How the PSI trigger is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerSettings {
    /// Stall time within `window` that fires the trigger (150 ms).
    pub stall: Duration,
    /// The window (1 s; the kernel allows 0.5 s to 10 s).
    pub window: Duration,
    /// Polling interval when the kernel refuses triggers (1 s).
    pub poll_interval: Duration,
}

impl Default for TriggerSettings {
    fn default() -> Self {
        Self {
            stall: Duration::from_millis(150),
            window: Duration::from_secs(1),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// An armed PSI trigger.
#[derive(Debug)]
pub struct Trigger {
    fd: OwnedFd,
}

/// Why the loop woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// The PSI trigger fired: pressure right now.
    Pressure,
    /// Time is up: the period, or the polling interval.
    Timeout,
}

/// The wake-up source in use.
#[derive(Debug)]
pub enum Wake {
    /// The kernel accepted a PSI trigger.
    Trigger(Trigger),
    /// The kernel refused; poll at `interval`.
    Poll {
        /// How often to look.
        interval: Duration,
        /// Why there is no trigger.
        reason: String,
        /// The pressure file to read.
        file: PathBuf,
        /// Stall growth within one interval that counts as pressure.
        stall: Duration,
        /// The `some` stall total at the last look, in microseconds.
        last_total: Mutex<Option<u64>>,
    },
}

impl Trigger {
    fn arm(path: &Path, settings: &TriggerSettings) -> std::io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // Only procfs turns the write below into a trigger: on any other
        // file it would overwrite the file and `poll` would never wait.
        if rustix::fs::fstatfs(&fd)?.f_type != rustix::fs::PROC_SUPER_MAGIC {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a procfs pressure file",
            ));
        }
        let spec = format!(
            "some {} {}\0",
            settings.stall.as_micros(),
            settings.window.as_micros()
        );
        rustix::io::write(&fd, spec.as_bytes())?;
        Ok(Self { fd })
    }

    /// Waits at most `timeout` for the trigger to fire.
    fn wait(&self, timeout: Duration) -> std::io::Result<Woke> {
        let mut fds = [PollFd::new(&self.fd, PollFlags::PRI)];
        let timeout = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let ready = rustix::event::poll(&mut fds, Some(&timeout))?;
        let revents = fds[0].revents();
        if revents.contains(PollFlags::ERR) {
            return Err(std::io::Error::other("the PSI trigger was torn down"));
        }
        Ok(if ready > 0 && revents.contains(PollFlags::PRI) {
            Woke::Pressure
        } else {
            Woke::Timeout
        })
    }
}

impl Wake {
    /// Arms a trigger on `pressure_file` (normally `/proc/pressure/memory`),
    /// or falls back to polling, saying why once in the log.
    pub fn arm(pressure_file: &Path, settings: &TriggerSettings) -> Self {
        match Trigger::arm(pressure_file, settings) {
            Ok(trigger) => {
                tracing::info!(file = %pressure_file.display(), "PSI trigger armed");
                Self::Trigger(trigger)
            }
            Err(error) => {
                let reason = format!("{}: {error}", pressure_file.display());
                let interval = settings.poll_interval;
                tracing::warn!(%reason, ?interval, "the kernel refused a PSI trigger; polling instead");
                Self::poll(pressure_file, settings, reason)
            }
        }
    }

    /// Polling of `pressure_file` with the trigger's `settings`, for `reason`.
    pub fn poll(pressure_file: &Path, settings: &TriggerSettings, reason: String) -> Self {
        Self::Poll {
            interval: settings.poll_interval,
            reason,
            file: pressure_file.to_owned(),
            stall: settings.stall,
            last_total: Mutex::new(None),
        }
    }

    /// Blocks until it is time to look again: the trigger fired (or, when
    /// polling, the stall grew enough since the last look), or `period`
    /// passed (with polling, the shorter of `period` and the interval). An
    /// unreadable pressure file while polling is never pressure.
    ///
    /// # Errors
    /// The trigger failed; the caller should arm again or poll.
    pub fn wait(&self, period: Duration) -> std::io::Result<Woke> {
        match self {
            Self::Trigger(trigger) => trigger.wait(period),
            Self::Poll {
                interval,
                file,
                stall,
                last_total,
                ..
            } => {
                std::thread::sleep(period.min(*interval));
                let total = Pressure::read(file).ok().map(|p| p.some.total);
                let mut last = last_total.lock().expect("wake lock poisoned");
                let grown = match (*last, total) {
                    (Some(before), Some(now)) => {
                        u128::from(now.saturating_sub(before)) >= stall.as_micros()
                    }
                    _ => false,
                };
                *last = total;
                Ok(if grown { Woke::Pressure } else { Woke::Timeout })
            }
        }
    }
}

/// Turns a blocking wake source into events on `wakes`, on a thread of its
/// own, until the receiver is dropped: an event each time the PSI trigger
/// fires (or, when polling, the stall grew as much as it would have to).
pub fn forward_wakes(
    wake: Wake,
    period: Duration,
    wakes: mpsc::Sender<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("vigil-wake".into())
        .spawn(move || {
            loop {
                let send = match wake.wait(period) {
                    Ok(Woke::Pressure) => true,
                    Ok(Woke::Timeout) => false,
                    Err(error) => {
                        tracing::error!(%error, "the PSI trigger failed; the period alone drives evictions now");
                        return;
                    }
                };
                if (send && wakes.blocking_send(()).is_err()) || wakes.is_closed() {
                    return;
                }
            }
        })
        .expect("cannot spawn the wake thread")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pressure_file_outside_procfs_gets_polling_and_stays_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory");
        let text = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        std::fs::write(&file, text).unwrap();
        match Wake::arm(&file, &TriggerSettings::default()) {
            Wake::Poll { reason, .. } => assert!(reason.contains("not a procfs"), "{reason}"),
            Wake::Trigger(_) => panic!("a regular file cannot hold a trigger"),
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }

    #[test]
    fn polling_wakes_only_when_the_stall_grew_as_the_trigger_would_require() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory");
        let write = |total: u64| {
            let text = format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n");
            std::fs::write(&file, text).unwrap();
        };
        write(1_000_000);
        let settings = TriggerSettings {
            poll_interval: Duration::from_millis(1),
            ..TriggerSettings::default()
        };
        let poll = Wake::poll(&file, &settings, "test".into());
        let period = Duration::from_secs(5);
        assert_eq!(
            poll.wait(period).unwrap(),
            Woke::Timeout,
            "the first look only sets the baseline"
        );
        assert_eq!(
            poll.wait(period).unwrap(),
            Woke::Timeout,
            "a calm node is not woken"
        );
        write(1_100_000);
        assert_eq!(
            poll.wait(period).unwrap(),
            Woke::Timeout,
            "100 ms is under the 150 ms stall"
        );
        write(1_250_000);
        assert_eq!(
            poll.wait(period).unwrap(),
            Woke::Pressure,
            "150 ms of stall since the last look"
        );
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            poll.wait(period).unwrap(),
            Woke::Timeout,
            "no file, no pressure"
        );
    }

    #[test]
    fn a_refused_trigger_falls_back_to_polling_and_says_why() {
        let missing = Path::new("/nonexistent/pressure/memory");
        match Wake::arm(missing, &TriggerSettings::default()) {
            Wake::Poll {
                interval, reason, ..
            } => {
                assert_eq!(interval, Duration::from_secs(1));
                assert!(
                    reason.starts_with("/nonexistent/pressure/memory: "),
                    "{reason}"
                );
            }
            Wake::Trigger(_) => panic!("a missing file cannot hold a trigger"),
        }
    }

    #[test]
    fn this_kernels_pressure_file_gives_a_usable_wake_source() {
        // This machine's kernel answers EINVAL; others arm the trigger. Both must work.
        let wake = Wake::arm(
            Path::new("/proc/pressure/memory"),
            &TriggerSettings::default(),
        );
        if let Wake::Poll { reason, .. } = &wake {
            assert!(reason.contains("/proc/pressure/memory"), "{reason}");
        }
        assert!(wake.wait(Duration::from_millis(1)).is_ok());
    }
}
