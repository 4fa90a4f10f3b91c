//! A node's kernel files as the agent reads them — `/proc/meminfo`,
//! `/proc/pressure/*`, `loadavg`, `pid_max`, the files of the signals a
//! strategy must declare (`zoneinfo`, `vmstat`, `stat`, the watermark scale
//! factor; captured from a real machine), and the kubepods cgroup v2
//! hierarchy with the cgroupfs driver's layout — in a temporary directory.
//! Files are replaced whole (temp file + rename), as the kernel never shows
//! half a file; `memory.events` is rewritten in place, as the kernel
//! touches it, so an inotify watch sees it.

use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;
const CALM_PSI: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

/// The files; removed when dropped.
#[derive(Debug)]
pub struct NodeFiles {
    dir: tempfile::TempDir,
    events: std::sync::atomic::AtomicU64,
}

impl Default for NodeFiles {
    /// A calm 8 GiB node: 4 GiB available, no stall, 81 tasks of 32768, the
    /// kubepods cgroup using 1 GiB; one NUMA node (the zones, reclaim
    /// counters and CPU times of the machine the fixtures come from).
    fn default() -> Self {
        let files = Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            events: Default::default(),
        };
        files.write("proc/pressure/memory", CALM_PSI);
        files.write("proc/pressure/cpu", CALM_PSI);
        files.write("proc/pressure/io", CALM_PSI);
        files.write("proc/loadavg", "0.79 1.27 1.41 1/81 18573\n");
        files.write("proc/sys/kernel/pid_max", "32768\n");
        files.write(
            "proc/zoneinfo",
            include_str!("../../../engine/src/signals/fixtures/zoneinfo"),
        );
        files.write(
            "proc/vmstat",
            include_str!("../../../engine/src/signals/fixtures/vmstat"),
        );
        files.write(
            "proc/stat",
            include_str!("../../../engine/src/signals/fixtures/stat"),
        );
        files.write("proc/sys/vm/watermark_scale_factor", "10\n");
        files.cgroup("kubepods", 1024);
        files.memory_available(4096);
        files
    }
}

impl NodeFiles {
    /// The directory everything is in.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `root/relative`.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Writes `root/relative` whole: a temp file renamed over it.
    pub fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
        let temp = path.with_extension("tmp");
        std::fs::write(&temp, text).expect("write");
        std::fs::rename(&temp, &path).expect("rename");
    }

    /// `/proc/meminfo` of an 8 GiB node with `available_mib` available
    /// (no inactive file pages, so the working set is total minus free).
    pub fn memory_available(&self, available_mib: u64) {
        self.meminfo(8 << 30, available_mib * MIB);
    }

    /// `/proc/meminfo` of a node of `total` bytes with `available` bytes
    /// available (free, no inactive file pages), to the kB.
    pub fn meminfo(&self, total: u64, available: u64) {
        self.meminfo_with_free(total, available, available);
    }

    /// `/proc/meminfo` with `free` bytes free and the rest of `available`
    /// in inactive page cache (the kubelet counts it reclaimable).
    pub fn meminfo_with_free(&self, total: u64, available: u64, free: u64) {
        let (total_kib, available_kib) = (total / 1024, available / 1024);
        let free_kib = free.min(available) / 1024;
        let cache_kib = available_kib - free_kib;
        self.write(
            "proc/meminfo",
            &format!(
                "MemTotal: {total_kib} kB\nMemFree: {free_kib} kB\nMemAvailable: {available_kib} kB\nInactive(file): {cache_kib} kB\n"
            ),
        );
    }

    /// A cgroup v2 directory at `cgroup/relative` using `usage_mib` of memory.
    pub fn cgroup(&self, relative: &str, usage_mib: u64) {
        self.cgroup_bytes(relative, usage_mib * MIB);
    }

    /// A cgroup v2 directory at `cgroup/relative` using `bytes` of memory.
    pub fn cgroup_bytes(&self, relative: &str, bytes: u64) {
        let dir = format!("cgroup/{relative}");
        self.write(&format!("{dir}/memory.current"), &format!("{bytes}\n"));
        self.write(
            &format!("{dir}/memory.stat"),
            &format!("anon {bytes}\nfile 0\ninactive_file 0\n"),
        );
        self.write(&format!("{dir}/memory.max"), "max\n");
        self.write(
            &format!("{dir}/memory.events"),
            "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
        );
        self.write(&format!("{dir}/cpu.stat"), "usage_usec 1000\n");
        self.write(&format!("{dir}/pids.current"), "3\n");
    }

    /// The cgroup of best-effort pod `uid` (cgroupfs driver) using `usage_mib`.
    pub fn best_effort_pod(&self, uid: &str, usage_mib: u64) {
        self.cgroup(&format!("kubepods/besteffort/pod{uid}"), usage_mib);
    }

    /// Removes the cgroup of best-effort pod `uid`, as the kubelet does once
    /// the pod's containers and volumes are cleaned up.
    pub fn remove_best_effort_pod(&self, uid: &str) {
        let dir = self.path(&format!("cgroup/kubepods/besteffort/pod{uid}"));
        std::fs::remove_dir_all(dir).expect("remove the pod's cgroup");
    }

    /// A `high` event on the kubepods cgroup: `memory.events` rewritten in place.
    pub fn memory_event(&self) {
        let n = self
            .events
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        std::fs::write(
            self.path("cgroup/kubepods/memory.events"),
            format!("low 0\nhigh {n}\nmax 0\noom 0\noom_kill 0\n"),
        )
        .expect("write memory.events");
    }
}
