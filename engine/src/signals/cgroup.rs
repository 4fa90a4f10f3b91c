//! The kubepods cgroup hierarchy: where a pod's cgroup is, and its memory,
//! cpu and pid usage, on cgroup v2 or (where the memory controller is still
//! mounted on v1) cgroup v1, with either kubelet cgroup driver.

use super::error::{SignalError, malformed, parse_u64, stat_value};
use super::kept::KeptFiles;
use super::psi::Pressure;
use crate::model::QosClass;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Which cgroup hierarchy holds the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy.
    V2,
    /// Per-controller hierarchies (`memory/`, `cpuacct/`, `pids/`).
    V1,
}

/// How the kubelet names pod cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Driver {
    /// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`.
    #[default]
    Systemd,
    /// `kubepods/burstable/pod<uid>`.
    Cgroupfs,
}

/// Memory usage of one cgroup, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Total usage (`memory.current` / `memory.usage_in_bytes`).
    pub usage: u64,
    /// Usage minus inactive file pages: what the kubelet evicts by.
    pub working_set: u64,
    /// Anonymous memory (`anon` / `total_rss`).
    pub rss: u64,
    /// The cgroup's limit, if it has one.
    pub limit: Option<u64>,
}

/// CFS bandwidth counters of one cgroup, cumulative since it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Throttling {
    /// Enforcement periods that elapsed (`nr_periods`).
    pub periods: u64,
    /// Of those, the periods in which it was throttled (`nr_throttled`).
    pub throttled_periods: u64,
    /// Time spent throttled (`throttled_time`, `throttled_usec`).
    pub throttled: Duration,
}

/// The cgroup hierarchy under a root (normally `/sys/fs/cgroup`).
#[derive(Debug, Clone)]
pub struct Cgroups {
    root: PathBuf,
    version: Version,
    driver: Driver,
    /// Where its files are read (kept open between cycles, or not).
    files: Arc<KeptFiles>,
}

/// v1 reports "no limit" as a huge page-aligned number.
const V1_UNLIMITED: u64 = 1 << 62;

impl Cgroups {
    /// Detects the version under `root`: v1 if a `memory` controller
    /// directory is mounted there (hybrid nodes included), v2 otherwise.
    /// Each read opens its file; see [`Cgroups::keeping`].
    pub fn detect(root: &Path, driver: Driver) -> Self {
        let version = if root.join("memory").join("memory.stat").exists() {
            Version::V1
        } else {
            Version::V2
        };
        Self {
            root: root.to_owned(),
            version,
            driver,
            files: Arc::new(KeptFiles::new(0)),
        }
    }

    /// The same hierarchy, its files read through `files` (kept open
    /// between cycles).
    pub fn keeping(self, files: Arc<KeptFiles>) -> Self {
        Self { files, ..self }
    }

    /// The text of `path`.
    fn read(&self, path: &Path) -> Result<String, SignalError> {
        self.files.read(path).map_err(|source| SignalError::Read {
            path: path.to_owned(),
            source,
        })
    }

    /// The number `path` holds.
    fn read_u64(&self, path: &Path) -> Result<u64, SignalError> {
        parse_u64(path, &self.read(path)?)
    }

    /// The version in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The directory of `controller` for the cgroup at `relative`.
    fn dir(&self, controller: &str, relative: &Path) -> PathBuf {
        match self.version {
            Version::V2 => self.root.join(relative),
            Version::V1 => self.root.join(controller).join(relative),
        }
    }

    /// The kubepods cgroup, relative to the root.
    pub fn kubepods(&self) -> PathBuf {
        PathBuf::from(match self.driver {
            Driver::Systemd => "kubepods.slice",
            Driver::Cgroupfs => "kubepods",
        })
    }

    /// The cgroup of the pod `uid` of class `qos`, relative to the root.
    pub fn pod(&self, uid: &str, qos: QosClass) -> PathBuf {
        let class = match qos {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        };
        let kubepods = self.kubepods();
        match (self.driver, class) {
            (Driver::Cgroupfs, None) => kubepods.join(format!("pod{uid}")),
            (Driver::Cgroupfs, Some(class)) => kubepods.join(class).join(format!("pod{uid}")),
            (Driver::Systemd, None) => {
                kubepods.join(format!("kubepods-pod{}.slice", uid.replace('-', "_")))
            }
            (Driver::Systemd, Some(class)) => kubepods
                .join(format!("kubepods-{class}.slice"))
                .join(format!(
                    "kubepods-{class}-pod{}.slice",
                    uid.replace('-', "_")
                )),
        }
    }

    /// Memory usage of the cgroup at `relative`.
    ///
    /// # Errors
    /// A file is missing or malformed.
    pub fn memory(&self, relative: &Path) -> Result<Memory, SignalError> {
        let dir = self.dir("memory", relative);
        let (usage_file, limit_file, inactive_key, rss_key) = match self.version {
            Version::V2 => ("memory.current", "memory.max", "inactive_file", "anon"),
            Version::V1 => (
                "memory.usage_in_bytes",
                "memory.limit_in_bytes",
                "total_inactive_file",
                "total_rss",
            ),
        };
        let usage = self.read_u64(&dir.join(usage_file))?;
        let stat_path = dir.join("memory.stat");
        let stat = self.read(&stat_path)?;
        let inactive_file = stat_value(&stat_path, &stat, inactive_key)?;
        let limit = match self
            .read(&dir.join(limit_file))
            .map(|t| t.trim().to_owned())
        {
            Ok(text) if text == "max" => None,
            Ok(text) => text.parse().ok().filter(|&l| l < V1_UNLIMITED),
            Err(_) => None,
        };
        Ok(Memory {
            usage,
            working_set: usage.saturating_sub(inactive_file),
            rss: stat_value(&stat_path, &stat, rss_key)?,
            limit,
        })
    }

    /// Cumulative cpu time of the cgroup at `relative`.
    ///
    /// # Errors
    /// The file is missing or malformed.
    pub fn cpu_time(&self, relative: &Path) -> Result<Duration, SignalError> {
        match self.version {
            Version::V2 => {
                let path = self.dir("cpu", relative).join("cpu.stat");
                let micros = stat_value(&path, &self.read(&path)?, "usage_usec")?;
                Ok(Duration::from_micros(micros))
            }
            Version::V1 => self
                .read_u64(&self.dir("cpuacct", relative).join("cpuacct.usage"))
                .map(Duration::from_nanos),
        }
    }

    /// CFS bandwidth counters of the cgroup at `relative` (v1's `cpu`
    /// controller; v2 writes them only where the controller is enabled).
    ///
    /// # Errors
    /// The file or a counter is missing, or malformed.
    pub fn throttling(&self, relative: &Path) -> Result<Throttling, SignalError> {
        let path = self.dir("cpu", relative).join("cpu.stat");
        let text = self.read(&path)?;
        let periods = stat_value(&path, &text, "nr_periods")?;
        let throttled_periods = stat_value(&path, &text, "nr_throttled")?;
        let throttled = match self.version {
            Version::V2 => Duration::from_micros(stat_value(&path, &text, "throttled_usec")?),
            Version::V1 => Duration::from_nanos(stat_value(&path, &text, "throttled_time")?),
        };
        Ok(Throttling {
            periods,
            throttled_periods,
            throttled,
        })
    }

    /// Processes in the cgroup at `relative`.
    ///
    /// # Errors
    /// The file is missing or malformed.
    pub fn pids(&self, relative: &Path) -> Result<u64, SignalError> {
        self.read_u64(&self.dir("pids", relative).join("pids.current"))
    }

    /// Memory of the cgroup at `relative` (its descendants included) per
    /// NUMA node, in bytes: v1's `hierarchical_total` (pages; `total` where
    /// the kernel has no hierarchical line), v2's `anon` plus `file`.
    ///
    /// # Errors
    /// The file is missing or malformed.
    pub fn numa(&self, relative: &Path) -> Result<Vec<(u32, u64)>, SignalError> {
        let path = self.dir("memory", relative).join("memory.numa_stat");
        let text = self.read(&path)?;
        let line = |key: &str| -> Option<&str> {
            text.lines().find_map(|l| {
                let (name, rest) = l.split_once([' ', '='])?;
                (name == key).then_some(rest)
            })
        };
        let (lines, unit) = match self.version {
            Version::V1 => {
                let line = line("hierarchical_total").or_else(|| line("total"));
                (vec![line], rustix::param::page_size() as u64)
            }
            Version::V2 => (vec![line("anon"), line("file")], 1),
        };
        let mut nodes: Vec<(u32, u64)> = Vec::new();
        for line in lines {
            let line = line.ok_or_else(|| malformed(&path, "no total, anon or file line"))?;
            // v1 starts with its own total (`1234 N0=…` once the key is cut).
            for field in line.split_whitespace().filter(|f| f.starts_with('N')) {
                let parsed = field[1..].split_once('=').and_then(|(node, value)| {
                    Some((node.parse::<u32>().ok()?, value.parse::<u64>().ok()?))
                });
                let (node, value) = parsed
                    .ok_or_else(|| malformed(&path, format!("{field:?} is not N<node>=<count>")))?;
                // Saturating: a corrupt file's counts must not overflow.
                let bytes = value.saturating_mul(unit);
                match nodes.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, sum)) => *sum = sum.saturating_add(bytes),
                    None => nodes.push((node, bytes)),
                }
            }
        }
        Ok(nodes)
    }

    /// Memory pressure of the cgroup at `relative` (cgroup v2 only: on v1
    /// no file is opened).
    ///
    /// # Errors
    /// The node runs v1, or the file is missing or malformed.
    pub fn memory_pressure(&self, relative: &Path) -> Result<Pressure, SignalError> {
        let path = self.dir("memory", relative).join("memory.pressure");
        match self.version {
            Version::V1 => Err(SignalError::OnlyOnV2 { path }),
            Version::V2 => Pressure::parse(&path, &self.read(&path)?),
        }
    }

    /// The file whose changes signal memory events (`memory.events` on v2,
    /// `memory.usage_in_bytes` on v1, which has no such file).
    pub fn memory_events(&self, relative: &Path) -> PathBuf {
        match self.version {
            Version::V2 => self.dir("memory", relative).join("memory.events"),
            Version::V1 => self.dir("memory", relative).join("memory.usage_in_bytes"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Lays the captured fixture files out as a v1 or v2 hierarchy under a
    /// temporary root, with the cgroup at `relative`.
    pub(crate) fn hierarchy(version: Version, relative: &Path) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let put = |controller: &str, file: &str, text: &str| {
            let dir = match version {
                Version::V2 => root.path().join(relative),
                Version::V1 => root.path().join(controller).join(relative),
            };
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), text).unwrap();
        };
        match version {
            Version::V2 => {
                put(
                    "",
                    "memory.current",
                    include_str!("fixtures/v2-memory.current"),
                );
                put("", "memory.stat", include_str!("fixtures/v2-memory.stat"));
                put("", "memory.max", include_str!("fixtures/v2-memory.max"));
                put(
                    "",
                    "memory.events",
                    include_str!("fixtures/v2-memory.events"),
                );
                put(
                    "",
                    "memory.pressure",
                    include_str!("fixtures/pressure-memory"),
                );
                put("", "cpu.stat", include_str!("fixtures/v2-cpu.stat"));
                put("", "pids.current", "42\n");
                // v2's format (no v2 node here to capture one from).
                put(
                    "",
                    "memory.numa_stat",
                    "anon N0=1048576 N1=2097152\nfile N0=4096 N1=0\nkernel_stack N0=16384 N1=0\n",
                );
            }
            Version::V1 => {
                put(
                    "memory",
                    "memory.usage_in_bytes",
                    include_str!("fixtures/v1-memory.usage_in_bytes"),
                );
                put(
                    "memory",
                    "memory.stat",
                    include_str!("fixtures/v1-memory.stat"),
                );
                put("memory", "memory.limit_in_bytes", "9223372036854771712\n");
                put(
                    "cpuacct",
                    "cpuacct.usage",
                    include_str!("fixtures/v1-cpuacct.usage"),
                );
                put("pids", "pids.current", "42\n");
                put("cpu", "cpu.stat", include_str!("fixtures/v1-cpu.stat"));
                put(
                    "memory",
                    "memory.numa_stat",
                    include_str!("fixtures/v1-memory.numa_stat"),
                );
                // The root-level file `detect` looks for.
                put(
                    "memory",
                    "../memory.stat",
                    include_str!("fixtures/v1-memory.stat"),
                );
            }
        }
        root
    }

    #[test]
    fn pod_cgroups_are_named_as_each_driver_names_them() {
        let root = Path::new("/sys/fs/cgroup");
        let systemd = Cgroups {
            root: root.into(),
            version: Version::V2,
            driver: Driver::Systemd,
            files: Arc::new(KeptFiles::new(0)),
        };
        let cgroupfs = Cgroups {
            root: root.into(),
            version: Version::V2,
            driver: Driver::Cgroupfs,
            files: Arc::new(KeptFiles::new(0)),
        };
        let uid = "6f1c-22";
        assert_eq!(
            systemd.pod(uid, QosClass::Burstable),
            Path::new(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c_22.slice"
            )
        );
        assert_eq!(
            systemd.pod(uid, QosClass::Guaranteed),
            Path::new("kubepods.slice/kubepods-pod6f1c_22.slice")
        );
        assert_eq!(
            cgroupfs.pod(uid, QosClass::BestEffort),
            Path::new("kubepods/besteffort/pod6f1c-22")
        );
        assert_eq!(
            cgroupfs.pod(uid, QosClass::Guaranteed),
            Path::new("kubepods/pod6f1c-22")
        );
    }

    #[test]
    fn v2_usage_reads_the_unified_files() {
        let relative = Path::new("kubepods.slice");
        let root = hierarchy(Version::V2, relative);
        let cgroups = Cgroups::detect(root.path(), Driver::Systemd);
        assert_eq!(cgroups.version(), Version::V2);
        let memory = cgroups.memory(relative).unwrap();
        assert_eq!(memory.usage, 4_102_553_600);
        assert_eq!(memory.working_set, 4_102_553_600 - 1_843_224_576);
        assert_eq!((memory.rss, memory.limit), (1_642_496_000, None));
        assert_eq!(
            cgroups.cpu_time(relative).unwrap(),
            Duration::from_micros(4_615_731_660)
        );
        assert_eq!(cgroups.pids(relative).unwrap(), 42);
        assert!(cgroups.memory_pressure(relative).is_ok());
    }

    #[test]
    fn v1_usage_reads_the_per_controller_files_captured_here() {
        let relative = Path::new("kubepods");
        let root = hierarchy(Version::V1, relative);
        let cgroups = Cgroups::detect(root.path(), Driver::Cgroupfs);
        assert_eq!(cgroups.version(), Version::V1);
        let memory = cgroups.memory(relative).unwrap();
        let usage: u64 = include_str!("fixtures/v1-memory.usage_in_bytes")
            .trim()
            .parse()
            .unwrap();
        assert_eq!(memory.usage, usage);
        // total_inactive_file and total_rss as captured in the fixture.
        assert_eq!(memory.working_set, usage - 4_190_765_056);
        assert_eq!((memory.rss, memory.limit), (6_348_800, None));
        assert!(cgroups.cpu_time(relative).unwrap() > Duration::ZERO);
        assert!(
            matches!(
                cgroups.memory_pressure(relative),
                Err(SignalError::OnlyOnV2 { .. })
            ),
            "v1 has no pressure files"
        );
        // The hierarchical total, in pages, on this machine's one node.
        let page = rustix::param::page_size() as u64;
        assert_eq!(cgroups.numa(relative).unwrap(), [(0, 1_908_183 * page)]);
        // A 10 ms quota per 100 ms period, busy for a second.
        let throttling = Throttling {
            periods: 11,
            throttled_periods: 11,
            throttled: Duration::from_nanos(876_872_733),
        };
        assert_eq!(cgroups.throttling(relative).unwrap(), throttling);
    }

    #[test]
    fn v2_throttling_is_read_where_the_cpu_controller_writes_it() {
        let relative = Path::new("kubepods.slice");
        let root = hierarchy(Version::V2, relative);
        let cgroups = Cgroups::detect(root.path(), Driver::Systemd);
        // The captured file is of a cgroup without the cpu controller: no
        // bandwidth counters, so no throttling (absent, not zero).
        let error = cgroups.throttling(relative).unwrap_err().to_string();
        assert!(error.contains("nr_periods"), "{error}");
        // The kernel's format where the controller is enabled.
        let stat = format!(
            "{}nr_periods 40\nnr_throttled 3\nthrottled_usec 25000\nnr_bursts 0\nburst_usec 0\n",
            include_str!("fixtures/v2-cpu.stat")
        );
        std::fs::write(root.path().join(relative).join("cpu.stat"), stat).unwrap();
        let throttling = Throttling {
            periods: 40,
            throttled_periods: 3,
            throttled: Duration::from_millis(25),
        };
        assert_eq!(cgroups.throttling(relative).unwrap(), throttling);
    }

    #[test]
    fn v2_numa_memory_is_anon_and_file_per_node_in_bytes() {
        let relative = Path::new("kubepods.slice");
        let root = hierarchy(Version::V2, relative);
        let cgroups = Cgroups::detect(root.path(), Driver::Systemd);
        assert_eq!(
            cgroups.numa(relative).unwrap(),
            [(0, 1_048_576 + 4096), (1, 2_097_152)]
        );
        let bad = root.path().join(relative).join("memory.numa_stat");
        std::fs::write(&bad, "anon N0=x\nfile N0=1\n").unwrap();
        assert!(
            cgroups
                .numa(relative)
                .unwrap_err()
                .to_string()
                .contains("\"N0=x\"")
        );
    }

    #[test]
    fn a_missing_or_malformed_file_is_an_error_not_a_zero() {
        let relative = Path::new("kubepods.slice");
        let root = hierarchy(Version::V2, relative);
        let cgroups = Cgroups::detect(root.path(), Driver::Systemd);
        std::fs::write(root.path().join(relative).join("memory.current"), "lots\n").unwrap();
        let error = cgroups.memory(relative).unwrap_err().to_string();
        assert!(
            error.ends_with("memory.current: expected a number, found \"lots\""),
            "{error}"
        );
        std::fs::remove_file(root.path().join(relative).join("cpu.stat")).unwrap();
        assert!(matches!(
            cgroups.cpu_time(relative),
            Err(SignalError::Read { .. })
        ));
    }
}
