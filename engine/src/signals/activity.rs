//! Reclaim and CPU activity: the kernel's cumulative counters
//! (`/proc/vmstat`'s kswapd steal and scan, workingset refaults and OOM
//! kills; `/proc/stat`'s CPU time) and the load average (`/proc/loadavg`).
//! [`Rates`] turns the counters into per-second rates between two readings,
//! so a rate is absent on the first reading, never a guess.

use super::error::{SignalError, malformed};
use crate::model::Signal;
use std::path::Path;
use std::time::SystemTime;

/// What `/proc/vmstat` counts, since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmCounters {
    /// Pages kswapd reclaimed (every `pgsteal_kswapd*` line).
    pub kswapd_steal: u64,
    /// Pages kswapd scanned (every `pgscan_kswapd*` line).
    pub kswapd_scan: u64,
    /// Refaults of pages evicted lately (`workingset_refault`, or its anon
    /// and file halves).
    pub refault: u64,
    /// Processes the OOM killer killed (`oom_kill`).
    pub oom_kill: u64,
}

/// Parses `text`, read from `path` (normally `/proc/vmstat`).
///
/// # Errors
/// A value is not a number, or it has no `oom_kill` line.
pub(super) fn vm_counters(path: &Path, text: &str) -> Result<VmCounters, SignalError> {
    let mut counters = VmCounters {
        kswapd_steal: 0,
        kswapd_scan: 0,
        refault: 0,
        oom_kill: 0,
    };
    let mut oom_kill = false;
    for line in text.lines() {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let value = || -> Result<u64, SignalError> {
            value
                .trim()
                .parse()
                .map_err(|_| malformed(path, format!("`{name}` is not a number")))
        };
        // Saturating: a corrupt file's counts must not overflow the sums.
        if name.starts_with("pgsteal_kswapd") {
            counters.kswapd_steal = counters.kswapd_steal.saturating_add(value()?);
        } else if name.starts_with("pgscan_kswapd") {
            counters.kswapd_scan = counters.kswapd_scan.saturating_add(value()?);
        } else if matches!(
            name,
            "workingset_refault" | "workingset_refault_anon" | "workingset_refault_file"
        ) {
            counters.refault = counters.refault.saturating_add(value()?);
        } else if name == "oom_kill" {
            counters.oom_kill = value()?;
            oom_kill = true;
        }
    }
    if !oom_kill {
        return Err(malformed(path, "no `oom_kill` line"));
    }
    Ok(counters)
}

/// CPU time since boot, from `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// Ticks spent busy (all but idle and iowait).
    pub busy: u64,
    /// All ticks.
    pub total: u64,
    /// Online CPUs (the `cpuN` lines).
    pub cpus: u32,
}

/// Parses `text`, read from `path` (normally `/proc/stat`).
///
/// # Errors
/// Its `cpu` line is missing or malformed.
pub(super) fn cpu_ticks(path: &Path, text: &str) -> Result<CpuTicks, SignalError> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .ok_or_else(|| malformed(path, "no `cpu` line"))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| malformed(path, "the `cpu` line is not numbers"))?;
    if ticks.len() < 5 {
        return Err(malformed(path, "the `cpu` line is too short"));
    }
    // user nice system idle iowait irq softirq steal (guest time is
    // counted in user already).
    let total = ticks.iter().take(8).copied().fold(0, u64::saturating_add);
    let idle = ticks[3].saturating_add(ticks[4]);
    let cpus = text
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Ok(CpuTicks {
        busy: total - idle,
        total,
        cpus: u32::try_from(cpus).unwrap_or(u32::MAX),
    })
}

/// The 1-minute load average, from `text` read from `path` (normally
/// `/proc/loadavg`).
///
/// # Errors
/// It does not start with a number.
pub(super) fn load1(path: &Path, text: &str) -> Result<f64, SignalError> {
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .filter(|load: &f64| load.is_finite() && *load >= 0.0)
        .ok_or_else(|| malformed(path, "no load average"))
}

/// The counters of one reading, where they could be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `/proc/vmstat`'s.
    pub vm: Option<VmCounters>,
    /// `/proc/stat`'s.
    pub cpu: Option<CpuTicks>,
}

/// The last counters read, and when: what a rate is measured from.
#[derive(Debug, Default)]
pub struct Rates {
    last: Option<(SystemTime, Counters)>,
}

impl Rates {
    /// The rates between the last reading and `counters`, read at `now`:
    /// `vm.kswapd.steal`, `vm.kswapd.scan`, `vm.workingset.refault` (pages
    /// per second) and `cpu.usage` (cores busy; capacity: the online CPUs).
    /// None on the first reading, for a counter that went back (a restart)
    /// or was not read both times, or when no time passed.
    pub fn signals(&mut self, now: SystemTime, counters: Counters) -> Vec<Signal> {
        let last = self.last.replace((now, counters));
        let Some((then, before)) = last else {
            return Vec::new();
        };
        let seconds = now.duration_since(then).unwrap_or_default().as_secs_f64();
        if seconds <= 0.0 {
            return Vec::new();
        }
        let per_second =
            |now: u64, before: u64| (now >= before).then(|| (now - before) as f64 / seconds);
        let mut signals = Vec::new();
        let mut push = |name: &str, value: Option<f64>, capacity: Option<f64>| {
            if let Some(value) = value {
                signals.push(Signal {
                    name: name.into(),
                    value,
                    capacity,
                });
            }
        };
        if let (Some(vm), Some(before)) = (counters.vm, before.vm) {
            push(
                "vm.kswapd.steal",
                per_second(vm.kswapd_steal, before.kswapd_steal),
                None,
            );
            push(
                "vm.kswapd.scan",
                per_second(vm.kswapd_scan, before.kswapd_scan),
                None,
            );
            push(
                "vm.workingset.refault",
                per_second(vm.refault, before.refault),
                None,
            );
        }
        if let (Some(cpu), Some(before)) = (counters.cpu, before.cpu)
            && cpu.total > before.total
            && cpu.busy >= before.busy
        {
            let share = (cpu.busy - before.busy) as f64 / (cpu.total - before.total) as f64;
            let cpus = f64::from(cpu.cpus);
            push("cpu.usage", Some(share * cpus), Some(cpus));
        }
        signals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn contents(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    fn fixture(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn reads_this_machines_counters_and_load() {
        let (_dir, vmstat) = fixture("vmstat", include_str!("fixtures/vmstat"));
        let vm = vm_counters(&vmstat, &contents(&vmstat)).unwrap();
        assert_eq!(
            (vm.kswapd_steal, vm.kswapd_scan, vm.refault, vm.oom_kill),
            (0, 0, 2_926_474, 0)
        );
        let (_dir, stat) = fixture("stat", include_str!("fixtures/stat"));
        let cpu = cpu_ticks(&stat, &contents(&stat)).unwrap();
        assert_eq!(cpu.cpus, 2);
        assert!(cpu.busy < cpu.total);
        let (_dir, loadavg) = fixture("loadavg", include_str!("fixtures/loadavg"));
        assert_eq!(load1(&loadavg, &contents(&loadavg)).unwrap(), 0.79);
        let (_dir, bad) = fixture("vmstat", "nr_free_pages 3\n");
        assert_eq!(
            vm_counters(&bad, &contents(&bad)).unwrap_err().to_string(),
            format!("{}: no `oom_kill` line", bad.display())
        );
    }

    #[test]
    fn a_malformed_cpu_or_load_file_is_an_error_naming_it() {
        for (text, why) in [
            ("intr 1 2\n", "no `cpu` line"),
            ("cpu  1 2 3\n", "the `cpu` line is too short"),
            ("cpu  1 x 3 4 5\n", "the `cpu` line is not numbers"),
        ] {
            let (_dir, stat) = fixture("stat", text);
            let error = cpu_ticks(&stat, &contents(&stat)).unwrap_err().to_string();
            assert!(error.ends_with(why), "{error}");
        }
        let (_dir, loadavg) = fixture("loadavg", "\n");
        assert!(
            load1(&loadavg, &contents(&loadavg))
                .unwrap_err()
                .to_string()
                .ends_with("no load average")
        );
        // A counter read one time and not the next gives no rate.
        let mut rates = Rates::default();
        let t0 = SystemTime::UNIX_EPOCH;
        let ticks = CpuTicks {
            busy: 1,
            total: 2,
            cpus: 1,
        };
        rates.signals(
            t0,
            Counters {
                vm: None,
                cpu: Some(ticks),
            },
        );
        let later = Counters {
            vm: None,
            cpu: None,
        };
        assert!(rates.signals(t0 + Duration::from_secs(1), later).is_empty());
    }

    #[test]
    fn rates_are_per_second_between_two_readings_and_absent_before() {
        let t0 = SystemTime::UNIX_EPOCH;
        let counters = |steal: u64, busy: u64, total: u64| Counters {
            vm: Some(VmCounters {
                kswapd_steal: steal,
                kswapd_scan: 2 * steal,
                refault: 7,
                oom_kill: 1,
            }),
            cpu: Some(CpuTicks {
                busy,
                total,
                cpus: 4,
            }),
        };
        let mut rates = Rates::default();
        assert!(rates.signals(t0, counters(100, 10, 100)).is_empty());
        let later = rates.signals(t0 + Duration::from_secs(5), counters(600, 60, 200));
        let got: Vec<(&str, f64, Option<f64>)> = (later.iter())
            .map(|s| (s.name.as_str(), s.value, s.capacity))
            .collect();
        assert_eq!(
            got,
            [
                ("vm.kswapd.steal", 100.0, None),
                ("vm.kswapd.scan", 200.0, None),
                ("vm.workingset.refault", 0.0, None),
                ("cpu.usage", 2.0, Some(4.0)),
            ]
        );
        // A counter that went back (the machine rebooted under a kept
        // reading) gives no rate rather than a negative one.
        let back = rates.signals(t0 + Duration::from_secs(10), counters(1, 70, 300));
        assert!(
            back.iter().all(|s| !s.name.starts_with("vm.kswapd")),
            "{back:?}"
        );
    }
}
