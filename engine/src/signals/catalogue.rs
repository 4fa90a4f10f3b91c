//! What each node signal measures: the one place that knows a signal's
//! names, its unit, which file family it comes from and whether the kubelet
//! watches it, for whoever reads, shows or bounds a signal (the reader that
//! reads only what strategies ask, the simulation's text and chart, the
//! capacity of a scenario's own PSI signal). The names are the ones
//! [`super::SignalFiles::read_node`] reports.

/// What a signal's value counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Bytes: memory and filesystem space.
    Bytes,
    /// Whole things: inodes, process ids.
    Count,
    /// A share of time in percent, 0 to 100: pressure stall information.
    Percent,
    /// A signal vigil does not read itself (a scenario's own, say).
    Unknown,
}

/// The kubelet's signals measured in bytes.
const BYTES: [&str; 4] = [
    "memory.available",
    "allocatable.memory.available",
    "nodefs.available",
    "imagefs.available",
];

/// The kubelet's signals that count things.
const COUNTS: [&str; 3] = ["nodefs.inodesFree", "imagefs.inodesFree", "pid.available"];

/// Signals beyond the kubelet's, read only while a strategy asks for them,
/// by the file they come from: each family is one file (or two) read once.
pub(crate) mod family {
    /// `/proc/meminfo`'s `MemFree`.
    pub(crate) const MEMINFO: [&str; 1] = ["memory.free"];
    /// `/proc/zoneinfo`: the watermarks summed over every zone, and per NUMA
    /// node `N` its free memory and its Normal zone's free pages and
    /// watermarks and inactive file pages (`numa.N.memory.free`,
    /// `numa.N.zone.normal.{free,min,low,high,inactiveFile}`).
    pub(crate) const ZONEINFO: [&str; 4] = [
        "memory.watermark.min",
        "memory.watermark.low",
        "memory.watermark.high",
        "numa.",
    ];
    /// `/proc/sys/vm/watermark_scale_factor`.
    pub(crate) const SCALE_FACTOR: [&str; 1] = ["vm.watermarkScaleFactor"];
    /// `/proc/vmstat`: rates between cycles, and the OOM-kill count.
    pub(crate) const VMSTAT: [&str; 4] = [
        "vm.kswapd.steal",
        "vm.kswapd.scan",
        "vm.workingset.refault",
        "vm.oomKill",
    ];
    /// `/proc/loadavg`.
    pub(crate) const LOADAVG: [&str; 1] = ["cpu.load1"];
    /// `/proc/stat`: the CPU busy between cycles, in cores.
    pub(crate) const STAT: [&str; 1] = ["cpu.usage"];
    /// The workload cgroup's `memory.pressure` (cgroup v2):
    /// `psi.workload.memory.{some,full}.{avg10,avg60}`.
    pub(crate) const WORKLOAD_PSI: [&str; 1] = ["psi.workload."];
    /// The Node's `status.allocatable`, every resource by its name without
    /// its domain (`node.allocatable.reclaimed_millicpu` for
    /// `resource.katalyst.kubewharf.io/reclaimed_millicpu`), in the
    /// resource's own unit (cores for cpu, bytes for memory, a count for an
    /// extended resource); the agent's watch of its Node, no file.
    pub(crate) const NODE_ALLOCATABLE: [&str; 1] = ["node.allocatable."];
    /// katalyst's CustomNodeResource of this node, its
    /// `status.resources.allocatable` by the same names
    /// (`cnr.allocatable.<name>`); a watch while asked for, no file.
    pub(crate) const KATALYST_CNR: [&str; 1] = ["cnr.allocatable."];
}

/// Whether any of `wanted` (names, or prefixes ending in `*`) asks for a
/// signal of `family` (names, or prefixes ending in `.`).
pub(crate) fn asks_for(wanted: &[String], family: &[&str]) -> bool {
    wanted.iter().any(|entry| {
        family.iter().any(|name| match entry.strip_suffix('*') {
            Some(prefix) => {
                name.starts_with(prefix) || prefix.starts_with(name) && name.ends_with('.')
            }
            None if name.ends_with('.') => entry.starts_with(name),
            None => entry == name,
        })
    })
}

/// The unit of the signal `name`.
pub(crate) fn unit(name: &str) -> Unit {
    let per_numa_node =
        name.starts_with("numa.") && (name.ends_with(".memory.free") || name.contains(".zone."));
    if BYTES.contains(&name)
        || family::MEMINFO.contains(&name)
        || family::ZONEINFO[..3].contains(&name)
        || per_numa_node
    {
        Unit::Bytes
    } else if COUNTS.contains(&name) || name == "vm.oomKill" || name == "vm.watermarkScaleFactor" {
        Unit::Count
    } else if is_pressure(name)
        || name
            .strip_prefix("psi.workload.")
            .is_some_and(is_pressure_of)
    {
        Unit::Percent
    } else {
        Unit::Unknown
    }
}

/// Whether every strategy gets the signal `name` without declaring it: the
/// kubelet's (memory, filesystems, pids) and the node's pressure stall
/// information, which the host reads whatever the strategies ask.
pub(crate) fn every_strategy_reads(name: &str) -> bool {
    is_kubelets(name) || is_pressure(name)
}

/// Whether `name` is one of the kubelet's own eviction signals.
fn is_kubelets(name: &str) -> bool {
    BYTES.contains(&name) || COUNTS.contains(&name)
}

/// Whether the signal `name` measures stalls (pressure stall information,
/// `psi.…`) rather than a resource running out: waiting is what it
/// measures, so no budget is ever overridden for it.
pub(crate) fn is_stall(name: &str) -> bool {
    name.starts_with("psi.")
}

/// What running out of a resource the kubelet also watches means: the
/// pressure a signal measures, and the one a kubelet eviction reclaims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Memory (`memory.available`, its allocatable form, memory stalls).
    Memory,
    /// The node's or the image filesystem's space or inodes.
    Disk,
    /// Process ids.
    Pids,
}

/// The resource the signal `name` watches, if any.
pub(crate) fn resource(name: &str) -> Option<Resource> {
    let (head, _) = name.split_once('.')?;
    match head {
        "memory" | "allocatable" | "numa" => Some(Resource::Memory),
        "psi" if name.starts_with("psi.memory.") || name.starts_with("psi.workload.memory.") => {
            Some(Resource::Memory)
        }
        "nodefs" | "imagefs" => Some(Resource::Disk),
        "pid" => Some(Resource::Pids),
        _ => None,
    }
}

/// Whether the kubelet evicts on the signal `name` too (when its config
/// sets a threshold on it): memory, filesystem and pid availability, never
/// stalls, nor the signals beyond its own (free memory, watermarks, NUMA).
pub(crate) fn kubelet_watches(name: &str) -> bool {
    is_kubelets(name)
}

impl Resource {
    /// The resource named in a kubelet eviction's message ("The node was low
    /// on resource: memory. …"): the kubelet's names for what it reclaims.
    pub fn from_kubelet(name: &str) -> Option<Self> {
        match name {
            "memory" => Some(Self::Memory),
            "ephemeral-storage" | "inodes" => Some(Self::Disk),
            "pids" => Some(Self::Pids),
            _ => None,
        }
    }
}

/// `1.5 GiB`, `480.0 MiB`, `12.0 KiB`, `7 B`.
pub(crate) fn bytes(value: f64) -> String {
    const UNITS: [(&str, f64); 3] = [("GiB", 1073741824.0), ("MiB", 1048576.0), ("KiB", 1024.0)];
    UNITS
        .iter()
        .find(|(_, size)| value.abs() >= *size)
        .map_or_else(
            || format!("{value:.0} B"),
            |(unit, size)| format!("{:.1} {unit}", value / size),
        )
}

/// A signal's value in its natural unit.
pub(crate) fn signal_value(name: &str, value: f64) -> String {
    match unit(name) {
        Unit::Bytes => bytes(value),
        Unit::Count => format!("{value:.0}"),
        Unit::Percent | Unit::Unknown => format!("{value:.1}"),
    }
}

/// `psi.{memory,cpu,io}.{some,full}.{avg10,avg60}`: the node's.
fn is_pressure(name: &str) -> bool {
    name.strip_prefix("psi.").is_some_and(is_pressure_of)
}

/// `{memory,cpu,io}.{some,full}.{avg10,avg60}`: one cgroup's or the node's
/// pressure without its prefix.
fn is_pressure_of(rest: &str) -> bool {
    let parts: Vec<&str> = rest.split('.').collect();
    matches!(
        parts.as_slice(),
        ["memory" | "cpu" | "io", "some" | "full", "avg10" | "avg60"]
    )
}

impl Unit {
    /// The most a signal of this unit can be, where the unit alone says.
    pub(crate) fn capacity(self) -> Option<f64> {
        (self == Unit::Percent).then_some(100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_and_kubelet_messages_name_the_same_resources() {
        assert_eq!(resource("memory.available"), Some(Resource::Memory));
        assert_eq!(
            resource("allocatable.memory.available"),
            Some(Resource::Memory)
        );
        assert_eq!(resource("psi.memory.some.avg10"), Some(Resource::Memory));
        assert_eq!(resource("psi.cpu.some.avg10"), None);
        assert_eq!(resource("imagefs.inodesFree"), Some(Resource::Disk));
        assert_eq!(resource("pid.available"), Some(Resource::Pids));
        assert_eq!(resource("custom"), None);
        assert_eq!(
            Resource::from_kubelet("ephemeral-storage"),
            Some(Resource::Disk)
        );
        assert_eq!(Resource::from_kubelet("inodes"), Some(Resource::Disk));
        assert_eq!(Resource::from_kubelet("pids"), Some(Resource::Pids));
        assert_eq!(Resource::from_kubelet("cpu"), None);
    }

    #[test]
    fn a_family_is_read_for_a_name_or_a_prefix_that_reaches_it() {
        let wanted = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert!(asks_for(&wanted(&["numa.*"]), &family::ZONEINFO));
        assert!(asks_for(
            &wanted(&["numa.1.zone.normal.free"]),
            &family::ZONEINFO
        ));
        assert!(asks_for(
            &wanted(&["memory.watermark.*"]),
            &family::ZONEINFO
        ));
        assert!(asks_for(&wanted(&["vm.*"]), &family::VMSTAT));
        assert!(asks_for(&wanted(&["*"]), &family::STAT));
        assert!(!asks_for(&wanted(&["memory.free"]), &family::ZONEINFO));
        assert!(!asks_for(&wanted(&["numa"]), &family::ZONEINFO));
        assert!(!asks_for(&wanted(&["vm.oomKills"]), &family::VMSTAT));
        assert!(!asks_for(&[], &family::MEMINFO));
        assert_eq!(unit("numa.0.zone.normal.min"), Unit::Bytes);
        assert_eq!(unit("memory.watermark.low"), Unit::Bytes);
        assert_eq!(unit("vm.oomKill"), Unit::Count);
        assert!(!kubelet_watches("memory.free") && kubelet_watches("memory.available"));
        assert_eq!(resource("numa.1.memory.free"), Some(Resource::Memory));
        let workload = "psi.workload.memory.full.avg10";
        assert!(asks_for(
            &wanted(&["psi.workload.*"]),
            &family::WORKLOAD_PSI
        ));
        assert!(asks_for(&wanted(&[workload]), &family::WORKLOAD_PSI));
        assert!(!asks_for(&wanted(&["psi.memory.*"]), &family::WORKLOAD_PSI));
        assert_eq!(
            (unit(workload), resource(workload)),
            (Unit::Percent, Some(Resource::Memory))
        );
        assert!(is_stall(workload) && !every_strategy_reads(workload));
        assert!(every_strategy_reads("psi.memory.full.avg10"));
    }

    #[test]
    fn a_name_is_matched_whole() {
        assert_eq!(unit("allocatable.memory.available"), Unit::Bytes);
        assert_eq!(unit("imagefs.inodesFree"), Unit::Count);
        assert_eq!(unit("psi.io.full.avg60"), Unit::Percent);
        assert_eq!(unit("psi.io.full"), Unit::Unknown);
        assert_eq!(unit("memory.availableish"), Unit::Unknown);
        assert_eq!(unit("queue.depth"), Unit::Unknown);
    }
}
