//! The default policies, built from `policies/` by `build.rs` and embedded in
//! the binary, so an empty policies directory still gives a working agent. A
//! file of the same name in the policies directory overrides one of these.

/// `(name, component bytes)` of every built-in policy.
pub const BUILTINS: [(&str, &[u8]); 3] = [
    (
        "memory-pressure",
        include_bytes!(env!("VIGIL_BUILTIN_MEMORY_PRESSURE")),
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
