//! The node signals read from files in real formats, captured from this machine.

use super::*;

/// A procfs root with the files captured from this machine.
pub(crate) fn proc_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let put = |path: &str, text: &str| {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    put("meminfo", include_str!("fixtures/meminfo"));
    put("pressure/memory", include_str!("fixtures/pressure-memory"));
    put("pressure/cpu", include_str!("fixtures/pressure-cpu"));
    put("pressure/io", include_str!("fixtures/pressure-io"));
    put("loadavg", include_str!("fixtures/loadavg"));
    put("zoneinfo", include_str!("fixtures/zoneinfo"));
    put("vmstat", include_str!("fixtures/vmstat"));
    put("stat", include_str!("fixtures/stat"));
    put("sys/vm/watermark_scale_factor", "10\n");
    put("sys/kernel/pid_max", "32768\n");
    root
}

fn value(reading: &Reading, name: &str) -> Option<f64> {
    reading
        .signals
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.value)
}

/// Every node signal, read from real-format files (the imagefs too), and
/// the directories they were read from.
fn read_everything() -> (Reading, [tempfile::TempDir; 2]) {
    let proc = proc_root();
    let cgroup = cgroup::tests::hierarchy(Version::V2, Path::new("kubepods.slice"));
    let sources = SignalFiles {
        proc_root: proc.path().into(),
        cgroup_root: cgroup.path().into(),
        nodefs: proc.path().into(),
        imagefs: Some(cgroup.path().into()),
        allocatable_memory: Some(8 << 30),
        ..SignalFiles::default()
    };
    (sources.read_node(&[]), [proc, cgroup])
}

#[test]
fn every_node_signal_is_read_from_real_formats() {
    let (reading, [proc, _]) = read_everything();
    assert!(reading.gaps.is_empty(), "{:?}", reading.gaps);
    let info = MemInfo::read(&proc.path().join("meminfo")).unwrap();
    assert_eq!(
        value(&reading, "memory.available"),
        Some((info.total - info.working_set()) as f64)
    );
    let kubepods_working_set = 4_102_553_600u64 - 1_843_224_576;
    assert_eq!(
        value(&reading, "allocatable.memory.available"),
        Some(((8u64 << 30) - kubepods_working_set) as f64)
    );
    assert_eq!(value(&reading, "pid.available"), Some((32768 - 81) as f64));
    assert!(value(&reading, "nodefs.available").is_some_and(|v| v > 0.0));
    assert!(value(&reading, "psi.cpu.some.avg60").is_some_and(|v| (v - 5.23).abs() < 1e-9));
    assert!(value(&reading, "psi.memory.full.avg10").is_some());
    assert!(value(&reading, "imagefs.inodesFree").is_some());
}

#[test]
fn the_signals_beyond_the_kubelets_are_read_only_when_asked_for() {
    let (plain, _dirs) = read_everything();
    let names: Vec<&str> = plain.signals.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.iter().all(|n| catalogue::every_strategy_reads(n)),
        "nothing asked, nothing beyond the kubelet's and PSI: {names:?}"
    );
    assert_eq!(
        plain.counters,
        Counters::default(),
        "no counter file opened"
    );
    let proc = proc_root();
    let sources = SignalFiles {
        proc_root: proc.path().into(),
        cgroup_root: proc.path().join("no-cgroups"),
        nodefs: proc.path().into(),
        ..SignalFiles::default()
    };
    let wanted: Vec<String> = [
        "memory.free",
        "numa.*",
        "memory.watermark.min",
        "vm.*",
        "cpu.*",
    ]
    .map(String::from)
    .to_vec();
    let reading = sources.read_node(&wanted);
    let gaps: Vec<&str> = reading.gaps.iter().map(|g| g.signal.as_str()).collect();
    assert_eq!(gaps, ["allocatable.memory.available"], "no cgroup here");
    let page = rustix::param::page_size() as f64;
    let info = MemInfo::read(&proc.path().join("meminfo")).unwrap();
    assert_eq!(value(&reading, "memory.free"), Some(info.free as f64));
    // This machine's zoneinfo: one NUMA node, its Normal zone.
    assert_eq!(
        value(&reading, "numa.0.zone.normal.free"),
        Some(944_624.0 * page)
    );
    assert_eq!(
        value(&reading, "numa.0.zone.normal.min"),
        Some(13_464.0 * page)
    );
    assert_eq!(
        value(&reading, "numa.0.zone.normal.inactiveFile"),
        Some(1_114_981.0 * page)
    );
    let free_pages = 3_840.0 + 772_918.0 + 944_624.0;
    assert_eq!(
        value(&reading, "numa.0.memory.free"),
        Some(free_pages * page)
    );
    let min_pages = 16.0 + 3_414.0 + 13_464.0 + 32.0;
    assert_eq!(
        value(&reading, "memory.watermark.min"),
        Some(min_pages * page)
    );
    assert_eq!(value(&reading, "vm.watermarkScaleFactor"), Some(10.0));
    assert_eq!(value(&reading, "vm.oomKill"), Some(0.0));
    let load = reading
        .signals
        .iter()
        .find(|s| s.name == "cpu.load1")
        .unwrap();
    assert_eq!((load.value, load.capacity), (0.79, Some(2.0)));
    assert!(
        value(&reading, "numa.1.memory.free").is_none(),
        "one node only"
    );
    // The counters wait for a second reading to become rates.
    assert!(reading.counters.vm.is_some() && reading.counters.cpu.is_some());
    assert!(value(&reading, "cpu.usage").is_none());
    // A file that cannot be read is a gap of its family, not a zero.
    std::fs::remove_file(proc.path().join("zoneinfo")).unwrap();
    let reading = sources.read_node(&wanted);
    assert!(reading.gaps.iter().any(|g| g.signal == "numa"));
    assert!(reading.signals.iter().all(|s| !s.name.starts_with("numa.")));
}

#[test]
fn the_workload_cgroups_memory_pressure_is_read_where_configured() {
    let proc = proc_root();
    let cgroup = cgroup::tests::hierarchy(Version::V2, Path::new("kubepods.slice"));
    let mut sources = SignalFiles {
        proc_root: proc.path().into(),
        cgroup_root: cgroup.path().into(),
        nodefs: proc.path().into(),
        ..SignalFiles::default()
    };
    std::fs::write(
        cgroup.path().join("kubepods.slice/memory.pressure"),
        "some avg10=2.50 avg60=1.25 avg300=0.10 total=9\nfull avg10=0.75 avg60=0.50 avg300=0.00 total=3\n",
    )
    .unwrap();
    let wanted = ["psi.workload.*".to_owned()];
    let reading = sources.read_node(&wanted);
    assert_eq!(value(&reading, "psi.workload.memory.some.avg10"), Some(2.5));
    assert_eq!(value(&reading, "psi.workload.memory.full.avg60"), Some(0.5));
    assert_eq!(
        value(&reading, "psi.memory.some.avg10"),
        Some(0.0),
        "the node's"
    );
    assert!(
        sources
            .read_node(&[])
            .signals
            .iter()
            .all(|s| !s.name.contains("workload"))
    );
    // Another cgroup: one without the file (a v1 node's) is a gap.
    sources.workload_cgroup = Some("system.slice".into());
    let reading = sources.read_node(&wanted);
    assert!(value(&reading, "psi.workload.memory.some.avg10").is_none());
    let gap = reading
        .gaps
        .iter()
        .find(|g| g.signal == "psi.workload.memory");
    let error = gap.expect("a gap").error.to_string();
    assert!(error.contains("system.slice/memory.pressure"), "{error}");
}

/// The DaemonSet's narrow mounts: an empty directory made beside the
/// kubelet's data (and one beside the runtime's images) reads as the
/// whole filesystem, nothing of the kubelet's own directory needed.
#[test]
fn filesystem_statistics_come_from_an_empty_directory_on_it() {
    let node = tempfile::tempdir().unwrap();
    let kubelet = node.path().join("var/lib/kubelet");
    let images = node.path().join("var/lib/containerd");
    for dir in [&kubelet, &images] {
        std::fs::create_dir_all(dir.join("vigil-statfs")).unwrap();
    }
    std::fs::write(kubelet.join("kubelet.key"), "secret").unwrap();
    let proc = proc_root();
    let sources = SignalFiles {
        proc_root: proc.path().into(),
        cgroup_root: proc.path().join("no-cgroups"),
        nodefs: kubelet.join("vigil-statfs"),
        imagefs: Some(images.join("vigil-statfs")),
        ..SignalFiles::default()
    };
    let reading = sources.read_node(&[]);
    for (name, whole) in [("nodefs", &kubelet), ("imagefs", &images)] {
        let fs = rustix::fs::statvfs(whole.as_path()).unwrap();
        let found = |signal: &str| {
            let signal = format!("{name}.{signal}");
            let found = reading.signals.iter().find(|s| s.name == signal);
            found.unwrap_or_else(|| panic!("{signal}: {:?}", reading.gaps))
        };
        let size = (fs.f_blocks * fs.f_frsize) as f64;
        assert_eq!(found("available").capacity, Some(size), "{name}");
        assert!(found("available").value <= size, "{name}");
        assert_eq!(found("inodesFree").capacity, Some(fs.f_files as f64));
    }
    // Without the directory, a gap naming it rather than a zero.
    std::fs::remove_dir(kubelet.join("vigil-statfs")).unwrap();
    let gaps = sources.read_node(&[]).gaps;
    let nodefs = gaps.iter().find(|g| g.signal == "nodefs.available");
    let error = nodefs.expect("a gap for nodefs").error.to_string();
    assert!(error.contains("vigil-statfs"), "{error}");
}

#[test]
fn every_signal_read_has_its_unit_in_the_catalogue() {
    let (reading, _dirs) = read_everything();
    for signal in &reading.signals {
        let unit = catalogue::unit(&signal.name);
        assert_ne!(unit, catalogue::Unit::Unknown, "{}", signal.name);
        if let Some(capacity) = unit.capacity() {
            assert_eq!(signal.capacity, Some(capacity), "{}", signal.name);
        }
    }
}

#[test]
fn unreadable_signals_are_gaps_not_zeros() {
    let proc = proc_root();
    std::fs::write(proc.path().join("meminfo"), "MemTotal: garbage\n").unwrap();
    std::fs::remove_file(proc.path().join("pressure/io")).unwrap();
    let sources = SignalFiles {
        proc_root: proc.path().into(),
        cgroup_root: proc.path().join("no-cgroups"),
        nodefs: proc.path().join("missing"),
        ..SignalFiles::default()
    };
    let reading = sources.read_node(&[]);
    let gaps: Vec<&str> = reading.gaps.iter().map(|g| g.signal.as_str()).collect();
    assert_eq!(
        gaps,
        [
            "memory.available",
            "allocatable.memory.available",
            "nodefs.available",
            "psi.io"
        ]
    );
    assert_eq!(value(&reading, "memory.available"), None);
    assert!(
        value(&reading, "psi.memory.some.avg10").is_some(),
        "the rest is still read"
    );
}

#[test]
fn pod_usage_comes_from_the_pods_cgroup() {
    let sources = SignalFiles {
        driver: Driver::Cgroupfs,
        ..SignalFiles::default()
    };
    let relative = Cgroups::detect(Path::new("/nonexistent"), Driver::Cgroupfs)
        .pod("abc", QosClass::Burstable);
    let cgroup = cgroup::tests::hierarchy(Version::V2, &relative);
    let sources = SignalFiles {
        cgroup_root: cgroup.path().into(),
        ..sources
    };
    let usage = sources.pod_usage("abc", QosClass::Burstable).unwrap();
    assert_eq!((usage.rss, usage.pids), (1_642_496_000, 42));
    assert!(sources.pod_usage("other", QosClass::Burstable).is_err());
}
