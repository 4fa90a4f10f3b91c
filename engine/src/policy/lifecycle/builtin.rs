//! The default policies, built from `policies/` by `build.rs` and embedded in
//! the binary, so an empty policies directory still gives a working agent. A
//! file of the same name in the policies directory overrides one of these.

use crate::base::policy_name::{
    DEFAULT_MERGER, DEFAULT_SORTER, DISK_PRESSURE, MEMORY_PRESSURE, NUMA_PRESSURE, PID_PRESSURE,
    PSI_PRESSURE, RECLAIMED_RESOURCES, ROOTFS_PRESSURE, RSS_OVERUSE, SYSTEM_CPU_PRESSURE,
    SYSTEM_MEMORY_PRESSURE,
};

/// `(name, component bytes)` of every built-in policy.
pub const BUILTINS: [(&str, &[u8]); 12] = [
    (
        MEMORY_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_MEMORY_PRESSURE")),
    ),
    (
        DISK_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_DISK_PRESSURE")),
    ),
    (
        PID_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_PID_PRESSURE")),
    ),
    (
        PSI_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_PSI_PRESSURE")),
    ),
    (
        RSS_OVERUSE,
        include_bytes!(env!("VIGIL_BUILTIN_RSS_OVERUSE")),
    ),
    (
        NUMA_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_NUMA_PRESSURE")),
    ),
    (
        SYSTEM_MEMORY_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_SYSTEM_MEMORY_PRESSURE")),
    ),
    (
        SYSTEM_CPU_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_SYSTEM_CPU_PRESSURE")),
    ),
    (
        ROOTFS_PRESSURE,
        include_bytes!(env!("VIGIL_BUILTIN_ROOTFS_PRESSURE")),
    ),
    (
        RECLAIMED_RESOURCES,
        include_bytes!(env!("VIGIL_BUILTIN_RECLAIMED_RESOURCES")),
    ),
    (
        DEFAULT_SORTER,
        include_bytes!(env!("VIGIL_BUILTIN_DEFAULT_SORTER")),
    ),
    (
        DEFAULT_MERGER,
        include_bytes!(env!("VIGIL_BUILTIN_DEFAULT_MERGER")),
    ),
];

/// The component of the built-in policy `name`, if there is one.
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    BUILTINS
        .iter()
        .find(|(builtin, _)| *builtin == name)
        .map(|(_, bytes)| *bytes)
}
