//! `/proc` and cgroup files in their real formats (captured on a node),
//! one of them mutated per case: a reading of the node or of a pod's
//! cgroup answers values or gaps, never a panic, a NaN or an infinity.

use crate::base::mutated::mutated;
use crate::signals::cgroup::tests::hierarchy;
use crate::signals::tests::proc_root;
use crate::signals::{Cgroups, Driver, SignalFiles, Version};
use proptest::prelude::*;
use std::path::Path;

/// The procfs files a node reading opens, by path under `/proc`, with
/// what the node had in them.
const PROC: [(&str, &[u8]); 10] = [
    ("meminfo", include_bytes!("../../signals/fixtures/meminfo")),
    (
        "pressure/memory",
        include_bytes!("../../signals/fixtures/pressure-memory"),
    ),
    (
        "pressure/cpu",
        include_bytes!("../../signals/fixtures/pressure-cpu"),
    ),
    (
        "pressure/io",
        include_bytes!("../../signals/fixtures/pressure-io"),
    ),
    ("loadavg", include_bytes!("../../signals/fixtures/loadavg")),
    (
        "zoneinfo",
        include_bytes!("../../signals/fixtures/zoneinfo"),
    ),
    ("vmstat", include_bytes!("../../signals/fixtures/vmstat")),
    ("stat", include_bytes!("../../signals/fixtures/stat")),
    ("sys/vm/watermark_scale_factor", b"10\n"),
    ("sys/kernel/pid_max", b"32768\n"),
];

/// A pod cgroup's files, by version, controller directory (v1) and name.
const CGROUP: [(Version, &str, &str, &[u8]); 13] = [
    (
        Version::V2,
        "",
        "memory.current",
        include_bytes!("../../signals/fixtures/v2-memory.current"),
    ),
    (
        Version::V2,
        "",
        "memory.stat",
        include_bytes!("../../signals/fixtures/v2-memory.stat"),
    ),
    (
        Version::V2,
        "",
        "memory.max",
        include_bytes!("../../signals/fixtures/v2-memory.max"),
    ),
    (
        Version::V2,
        "",
        "memory.pressure",
        include_bytes!("../../signals/fixtures/pressure-memory"),
    ),
    (
        Version::V2,
        "",
        "cpu.stat",
        include_bytes!("../../signals/fixtures/v2-cpu.stat"),
    ),
    (Version::V2, "", "pids.current", b"42\n"),
    (
        Version::V1,
        "memory",
        "memory.usage_in_bytes",
        include_bytes!("../../signals/fixtures/v1-memory.usage_in_bytes"),
    ),
    (
        Version::V1,
        "memory",
        "memory.stat",
        include_bytes!("../../signals/fixtures/v1-memory.stat"),
    ),
    (
        Version::V1,
        "memory",
        "memory.limit_in_bytes",
        b"9223372036854771712\n",
    ),
    (
        Version::V1,
        "cpuacct",
        "cpuacct.usage",
        include_bytes!("../../signals/fixtures/v1-cpuacct.usage"),
    ),
    (
        Version::V1,
        "cpu",
        "cpu.stat",
        include_bytes!("../../signals/fixtures/v1-cpu.stat"),
    ),
    (
        Version::V1,
        "memory",
        "memory.numa_stat",
        include_bytes!("../../signals/fixtures/v1-memory.numa_stat"),
    ),
    (
        Version::V2,
        "",
        "memory.numa_stat",
        b"anon N0=1048576 N1=2097152\nfile N0=4096 N1=0\n",
    ),
];

fn one_proc_file() -> impl Strategy<Value = (usize, Vec<u8>)> {
    (0..PROC.len()).prop_flat_map(|i| (Just(i), mutated(PROC[i].1)))
}

fn one_cgroup_file() -> impl Strategy<Value = (usize, Vec<u8>)> {
    (0..CGROUP.len()).prop_flat_map(|i| (Just(i), mutated(CGROUP[i].3)))
}

proptest! {
    #![proptest_config(super::budget())]

    #[test]
    fn a_node_reading_of_a_mutated_proc_file_is_values_or_gaps((i, bytes) in one_proc_file()) {
        let proc = proc_root();
        std::fs::write(proc.path().join(PROC[i].0), &bytes).unwrap();
        let files = SignalFiles {
            proc_root: proc.path().into(),
            nodefs: proc.path().into(),
            allocatable_memory: Some(8 << 30),
            ..SignalFiles::default()
        };
        let reading = files.read_node(&["*".to_owned()]);
        for signal in &reading.signals {
            prop_assert!(signal.value.is_finite(), "{signal:?} from {}", PROC[i].0);
            prop_assert!(signal.capacity.is_none_or(f64::is_finite), "{signal:?}");
        }
    }

    #[test]
    fn a_pod_reading_of_a_mutated_cgroup_file_is_a_value_or_an_error((i, bytes) in one_cgroup_file()) {
        let (version, controller, file, _) = CGROUP[i];
        let relative = Path::new("kubepods/pod1");
        let root = hierarchy(version, relative);
        let dir = match version {
            Version::V2 => root.path().join(relative),
            Version::V1 => root.path().join(controller).join(relative),
        };
        std::fs::write(dir.join(file), &bytes).unwrap();
        let cgroups = Cgroups::detect(root.path(), Driver::Cgroupfs);
        if let Ok(memory) = cgroups.memory(relative) {
            prop_assert!(memory.working_set <= memory.usage, "{memory:?}");
        }
        let _ = cgroups.cpu_time(relative);
        let _ = cgroups.pids(relative);
        let _ = cgroups.memory_pressure(relative);
        let _ = cgroups.numa(relative);
    }
}
