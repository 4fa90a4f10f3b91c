//! The default policies, built from `policies/` by `build.rs` and embedded in
//! the binary, so an empty policies directory still gives a working agent. A
//! file of the same name in the policies directory overrides one of these.

/// `(name, component bytes)` of every built-in policy.
pub const BUILTINS: [(&str, &[u8]); 6] = [
    (
        "memory-pressure",
        include_bytes!(env!("VIGIL_BUILTIN_MEMORY_PRESSURE")),
    ),
    (
        "disk-pressure",
        include_bytes!(env!("VIGIL_BUILTIN_DISK_PRESSURE")),
    ),
    (
        "pid-pressure",
        include_bytes!(env!("VIGIL_BUILTIN_PID_PRESSURE")),
    ),
    (
        "psi-pressure",
        include_bytes!(env!("VIGIL_BUILTIN_PSI_PRESSURE")),
    ),
    (
        "default-sorter",
        include_bytes!(env!("VIGIL_BUILTIN_DEFAULT_SORTER")),
    ),
    (
        "default-merger",
        include_bytes!(env!("VIGIL_BUILTIN_DEFAULT_MERGER")),
    ),
];
