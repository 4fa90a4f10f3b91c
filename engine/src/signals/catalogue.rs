//! What each node signal measures: the one place that knows a signal's unit
//! from its name, for whoever shows or bounds a signal (the simulation's
//! text and chart, the capacity of a scenario's own PSI signal). The names
//! are the ones [`super::Sources::read_node`] reports.

/// What a signal's value counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes: memory and filesystem space.
    Bytes,
    /// Whole things: inodes, process ids.
    Count,
    /// A share of time in percent, 0 to 100: pressure stall information.
    Percent,
    /// A signal vigil does not read itself (a scenario's own, say).
    Unknown,
}

/// The signals measured in bytes.
const BYTES: [&str; 4] = [
    "memory.available",
    "allocatable.memory.available",
    "nodefs.available",
    "imagefs.available",
];

/// The signals that count things.
const COUNTS: [&str; 3] = ["nodefs.inodesFree", "imagefs.inodesFree", "pid.available"];

/// The unit of the signal `name`.
pub fn unit(name: &str) -> Unit {
    if BYTES.contains(&name) {
        Unit::Bytes
    } else if COUNTS.contains(&name) {
        Unit::Count
    } else if is_pressure(name) {
        Unit::Percent
    } else {
        Unit::Unknown
    }
}

/// Whether the signal `name` measures stalls (pressure stall information,
/// `psi.…`) rather than a resource running out: waiting is what it
/// measures, so no budget is ever overridden for it.
pub fn is_stall(name: &str) -> bool {
    name.starts_with("psi.")
}

/// `psi.{memory,cpu,io}.{some,full}.{avg10,avg60}`.
fn is_pressure(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    matches!(
        parts.as_slice(),
        [
            "psi",
            "memory" | "cpu" | "io",
            "some" | "full",
            "avg10" | "avg60"
        ]
    )
}

impl Unit {
    /// The most a signal of this unit can be, where the unit alone says.
    pub fn capacity(self) -> Option<f64> {
        (self == Unit::Percent).then_some(100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
