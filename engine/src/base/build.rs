//! This build's identity, as precompiled artifacts and the fleet view name it.

/// The wasmtime this build links (a test checks it against `Cargo.lock`).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// This vigil build, as precompiled artifacts are bound to it: its version,
/// its source revision (`VIGIL_BUILD_ID` at build time, else the git
/// commit, else `source`) and wasmtime's version.
pub const BUILD: &str = concat!(
    "vigil ",
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("VIGIL_BUILD_REVISION"),
    ") wasmtime 48.0.8"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wasmtime_version_is_the_one_locked() {
        let lock = include_str!("../../../Cargo.lock");
        let locked = lock
            .split("[[package]]")
            .find(|p| p.contains("name = \"wasmtime\"\n"))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
            .map(|v| v.trim_matches('"'));
        assert_eq!(locked, Some(WASMTIME_VERSION));
        assert!(BUILD.ends_with(WASMTIME_VERSION), "{BUILD}");
    }
}
