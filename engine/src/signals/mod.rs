//! Node signals, read from the kernel's own files: `/proc/meminfo`,
//! `/proc/pressure/*`, the kubepods cgroup (v2, or v1 where memory is still
//! there), filesystem statistics and the pid count. Every root is
//! configurable so tests point them at temporary directories laid out with
//! files captured from a real machine.
//!
//! A signal that cannot be read is a reported [`Gap`]: absent from the
//! snapshot, never a zero and never a crash. `wake` holds everything that
//! tells the eviction loop to look again before its period ends.
//!
//! Signal names (what strategies see):
//! - `memory.available` (capacity: `MemTotal`): `MemTotal` minus the working
//!   set, usage (`MemTotal - MemFree`) minus `Inactive(file)`;
//! - `allocatable.memory.available` (capacity: allocatable): allocatable
//!   minus the kubepods cgroup's working set;
//! - `nodefs.available`, `nodefs.inodesFree`, `imagefs.available`,
//!   `imagefs.inodesFree` (capacity: the filesystem's size or inode count);
//! - `pid.available` (capacity: `pid_max`);
//! - `psi.{memory,cpu,io}.{some,full}.{avg10,avg60}` (capacity: 100).
//!
//! and, only while a strategy asks for them (each family is one file):
//! - `memory.free` (`MemFree`; capacity `MemTotal`);
//! - `memory.watermark.{min,low,high}`, the zones' watermarks summed, and
//!   per NUMA node `N` `numa.N.memory.free` (capacity: the node's memory)
//!   and `numa.N.zone.normal.{free,min,low,high,inactiveFile}` (capacity:
//!   the zone's),
//!   all in bytes, from `/proc/zoneinfo`; `vm.watermarkScaleFactor`;
//! - `vm.kswapd.steal`, `vm.kswapd.scan`, `vm.workingset.refault` (pages
//!   per second between cycles) and `vm.oomKill` (OOM kills since boot),
//!   from `/proc/vmstat`;
//! - `cpu.load1` (the 1-minute load average) and `cpu.usage` (cores busy
//!   between cycles), capacity the online CPUs.
//!
//! The cluster source adds `node.allocatable.<name>`, the Node's
//! `status.allocatable` by resource name without its domain, from its
//! watch of the Node, while a strategy asks.
//!
//! `catalogue` gives each of them its unit and family; `kept` keeps the
//! cgroup files open between cycles; `sampled` spreads the pod facts that
//! cost a file each over cycles.

mod activity;
pub(crate) mod catalogue;
pub(crate) mod cgroup;
mod cpu;
mod error;
mod kept;
mod meminfo;
mod pids;
mod psi;
mod sampled;
pub mod wake;
mod zoneinfo;

pub use activity::{Counters, CpuTicks, Rates, VmCounters};
pub use cgroup::{Cgroups, Driver, Memory, Throttling, Version};
pub use cpu::CpuRates;
pub use error::SignalError;
pub use kept::KeptFiles;
pub use meminfo::MemInfo;
pub use psi::{Pressure, PsiLine};
pub use sampled::{PER_CYCLE, SampledFacts};

use crate::model::{QosClass, Signal};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where the signals are read from.
#[derive(Debug, Clone)]
pub struct SignalFiles {
    /// procfs (`/proc`).
    pub proc_root: PathBuf,
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// The kubelet's cgroup driver (systemd).
    pub driver: Driver,
    /// A directory on the filesystem holding the kubelet's data
    /// (`/var/lib/kubelet`): only its filesystem's statistics are read.
    pub nodefs: PathBuf,
    /// A directory on the filesystem holding container images (none: no
    /// `imagefs.*` signal).
    pub imagefs: Option<PathBuf>,
    /// Allocatable memory, in bytes, if known (from the Node object).
    pub allocatable_memory: Option<u64>,
    /// The cgroup whose memory pressure is `psi.workload.memory.*`,
    /// relative to the cgroup mount (none: the kubepods cgroup).
    pub workload_cgroup: Option<PathBuf>,
    /// The cgroup files kept open between readings (shared by clones).
    pub kept: Arc<KeptFiles>,
}

impl Default for SignalFiles {
    fn default() -> Self {
        Self {
            proc_root: "/proc".into(),
            cgroup_root: "/sys/fs/cgroup".into(),
            driver: Driver::Systemd,
            nodefs: "/var/lib/kubelet".into(),
            imagefs: None,
            allocatable_memory: None,
            workload_cgroup: None,
            kept: Arc::new(KeptFiles::default()),
        }
    }
}

/// A signal that could not be read this time.
#[derive(Debug)]
pub struct Gap {
    /// The signal (or family of signals, e.g. `psi.io`).
    pub signal: String,
    /// Why.
    pub error: SignalError,
}

/// One reading of the node.
#[derive(Debug, Default)]
pub struct Reading {
    /// The signals read.
    pub signals: Vec<Signal>,
    /// The signals that could not be read.
    pub gaps: Vec<Gap>,
    /// The cumulative counters read, which [`Rates`] turns into signals.
    pub counters: Counters,
}

impl Reading {
    fn push(&mut self, name: &str, value: f64, capacity: Option<f64>) {
        self.signals.push(Signal {
            name: name.into(),
            value,
            capacity,
        });
    }

    fn gap(&mut self, signal: &str, error: SignalError) {
        self.gaps.push(Gap {
            signal: signal.into(),
            error,
        });
    }
}

/// Usage of one pod, from its cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodUsage {
    /// Memory usage with the page cache, in bytes.
    pub usage: u64,
    /// Memory working set, in bytes.
    pub working_set: u64,
    /// Anonymous memory, in bytes.
    pub rss: u64,
    /// Cumulative cpu time (turn it into millicores with [`CpuRates`]).
    pub cpu_time: Duration,
    /// Processes.
    pub pids: u64,
}

impl SignalFiles {
    /// Reads the kubelet's node signals and node PSI, and those of the
    /// others that `wanted` (names, or prefixes ending in `*`) asks for:
    /// a file no one asked for is not opened. What cannot be read is
    /// reported as a gap.
    pub fn read_node(&self, wanted: &[String]) -> Reading {
        let mut reading = Reading::default();
        let meminfo = self.read_memory(&mut reading);
        self.read_asked(wanted, meminfo, &mut reading);
        for (name, path) in [
            ("nodefs", Some(&self.nodefs)),
            ("imagefs", self.imagefs.as_ref()),
        ] {
            if let Some(path) = path {
                read_filesystem(name, path, &mut reading);
            }
        }
        match pids::read_pids(&self.proc_root) {
            Ok((max, tasks)) => reading.push(
                "pid.available",
                max.saturating_sub(tasks) as f64,
                Some(max as f64),
            ),
            Err(error) => reading.gap("pid.available", error),
        }
        for resource in ["memory", "cpu", "io"] {
            match self.parsed(
                self.proc_root.join("pressure").join(resource),
                Pressure::parse,
            ) {
                Ok(pressure) => push_pressure(&mut reading, &format!("psi.{resource}"), &pressure),
                Err(error) => reading.gap(&format!("psi.{resource}"), error),
            }
        }
        reading
    }

    fn read_memory(&self, reading: &mut Reading) -> Option<MemInfo> {
        let meminfo = match self.parsed(self.proc_root.join("meminfo"), MemInfo::parse) {
            Ok(info) => {
                let total = Some(info.total as f64);
                reading.push("memory.available", info.available() as f64, total);
                Some(info)
            }
            Err(error) => {
                reading.gap("memory.available", error);
                None
            }
        };
        let cgroups = self.cgroups();
        match cgroups.memory(&cgroups.kubepods()) {
            Ok(kubepods) => {
                let Some(allocatable) = self.allocatable_memory.or(kubepods.limit) else {
                    return meminfo;
                };
                let available = allocatable.saturating_sub(kubepods.working_set);
                reading.push(
                    "allocatable.memory.available",
                    available as f64,
                    Some(allocatable as f64),
                );
            }
            Err(error) => reading.gap("allocatable.memory.available", error),
        }
        meminfo
    }

    /// Reads the families of signals beyond the kubelet's that `wanted`
    /// asks for (see [`catalogue::family`]).
    fn read_asked(&self, wanted: &[String], meminfo: Option<MemInfo>, reading: &mut Reading) {
        use catalogue::{asks_for, family};
        if asks_for(wanted, &family::MEMINFO)
            && let Some(info) = meminfo
        {
            reading.push("memory.free", info.free as f64, Some(info.total as f64));
        }
        if asks_for(wanted, &family::ZONEINFO) {
            match self.parsed(self.proc_root.join("zoneinfo"), zoneinfo::parse) {
                Ok(zones) => push_zones(reading, &zones),
                Err(error) => reading.gap("numa", error),
            }
        }
        if asks_for(wanted, &family::SCALE_FACTOR) {
            let path = self.proc_root.join("sys/vm/watermark_scale_factor");
            match self.parsed(path, zoneinfo::watermark_scale_factor) {
                Ok(factor) => {
                    reading.push("vm.watermarkScaleFactor", factor as f64, Some(10_000.0))
                }
                Err(error) => reading.gap("vm.watermarkScaleFactor", error),
            }
        }
        if asks_for(wanted, &family::VMSTAT) {
            match self.parsed(self.proc_root.join("vmstat"), activity::vm_counters) {
                Ok(vm) => {
                    reading.push("vm.oomKill", vm.oom_kill as f64, None);
                    reading.counters.vm = Some(vm);
                }
                Err(error) => reading.gap("vm", error),
            }
        }
        let cpus = if asks_for(wanted, &family::STAT) || asks_for(wanted, &family::LOADAVG) {
            match self.parsed(self.proc_root.join("stat"), activity::cpu_ticks) {
                Ok(ticks) => {
                    reading.counters.cpu = Some(ticks);
                    Some(f64::from(ticks.cpus))
                }
                Err(error) => {
                    reading.gap("cpu.usage", error);
                    None
                }
            }
        } else {
            None
        };
        if asks_for(wanted, &family::LOADAVG) {
            match self.parsed(self.proc_root.join("loadavg"), activity::load1) {
                Ok(load) => reading.push("cpu.load1", load, cpus),
                Err(error) => reading.gap("cpu.load1", error),
            }
        }
        if asks_for(wanted, &family::WORKLOAD_PSI) {
            let cgroups = self.cgroups();
            let workload = (self.workload_cgroup.clone()).unwrap_or_else(|| cgroups.kubepods());
            match cgroups.memory_pressure(&workload) {
                Ok(pressure) => push_pressure(reading, "psi.workload.memory", &pressure),
                Err(error) => reading.gap("psi.workload.memory", error),
            }
        }
    }

    /// Node file `path`, read through the files kept open, as `parse` reads it.
    fn parsed<T>(
        &self,
        path: PathBuf,
        parse: impl FnOnce(&Path, &str) -> Result<T, SignalError>,
    ) -> Result<T, SignalError> {
        let text = (self.kept.read(&path)).map_err(|source| SignalError::Read {
            path: path.clone(),
            source,
        })?;
        parse(&path, &text)
    }

    /// The cgroup hierarchy.
    pub fn cgroups(&self) -> Cgroups {
        Cgroups::detect(&self.cgroup_root, self.driver).keeping(self.kept.clone())
    }

    /// Usage of the pod `uid` of class `qos`.
    ///
    /// # Errors
    /// Its cgroup is missing or unreadable.
    pub fn pod_usage(&self, uid: &str, qos: QosClass) -> Result<PodUsage, SignalError> {
        pod_usage(&self.cgroups(), uid, qos)
    }
}

/// Usage of the pod `uid` of class `qos` in `cgroups` (detect the hierarchy
/// once, then read many pods).
///
/// # Errors
/// Its cgroup is missing or unreadable.
pub fn pod_usage(cgroups: &Cgroups, uid: &str, qos: QosClass) -> Result<PodUsage, SignalError> {
    let relative = cgroups.pod(uid, qos);
    let memory = cgroups.memory(&relative)?;
    Ok(PodUsage {
        usage: memory.usage,
        working_set: memory.working_set,
        rss: memory.rss,
        cpu_time: cgroups.cpu_time(&relative)?,
        pids: cgroups.pids(&relative)?,
    })
}

/// The zones' watermarks summed, and each NUMA node's free memory and
/// Normal zone, in bytes.
fn push_zones(reading: &mut Reading, zones: &[zoneinfo::Zone]) {
    let page = rustix::param::page_size() as f64;
    let bytes = |pages: u64| pages as f64 * page;
    // Saturating: a zone's count is the kernel's, or a corrupt file's.
    let total = |pages: &mut dyn Iterator<Item = u64>| bytes(pages.fold(0, u64::saturating_add));
    let sum = |field: fn(&zoneinfo::Zone) -> u64| total(&mut zones.iter().map(field));
    reading.push("memory.watermark.min", sum(|z| z.min), None);
    reading.push("memory.watermark.low", sum(|z| z.low), None);
    reading.push("memory.watermark.high", sum(|z| z.high), None);
    let mut nodes: Vec<u32> = zones.iter().map(|z| z.node).collect();
    nodes.dedup();
    for node in nodes {
        let of_node = || zones.iter().filter(move |z| z.node == node);
        let free = total(&mut of_node().map(|z| z.free));
        let managed = total(&mut of_node().map(|z| z.managed));
        reading.push(&format!("numa.{node}.memory.free"), free, Some(managed));
        if let Some(normal) = of_node().find(|z| z.name == "Normal") {
            let managed = Some(bytes(normal.managed));
            for (level, pages) in [
                ("free", normal.free),
                ("min", normal.min),
                ("low", normal.low),
                ("high", normal.high),
                ("inactiveFile", normal.inactive_file),
            ] {
                let name = format!("numa.{node}.zone.normal.{level}");
                reading.push(&name, bytes(pages), managed);
            }
        }
    }
}

fn push_pressure(reading: &mut Reading, prefix: &str, pressure: &Pressure) {
    let lines = [("some", Some(pressure.some)), ("full", pressure.full)];
    for (kind, line) in lines {
        let Some(line) = line else { continue };
        reading.push(&format!("{prefix}.{kind}.avg10"), line.avg10, Some(100.0));
        reading.push(&format!("{prefix}.{kind}.avg60"), line.avg60, Some(100.0));
    }
}

fn read_filesystem(name: &str, path: &Path, reading: &mut Reading) {
    match rustix::fs::statvfs(path) {
        Ok(stat) => {
            let bytes = |blocks: u64| (blocks * stat.f_frsize) as f64;
            reading.push(
                &format!("{name}.available"),
                bytes(stat.f_bavail),
                Some(bytes(stat.f_blocks)),
            );
            reading.push(
                &format!("{name}.inodesFree"),
                stat.f_favail as f64,
                Some(stat.f_files as f64),
            );
        }
        Err(errno) => {
            let error = SignalError::Read {
                path: path.to_owned(),
                source: errno.into(),
            };
            reading.gap(&format!("{name}.available"), error);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
