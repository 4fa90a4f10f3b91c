//! This build's identity, as precompiled artifacts and the fleet view name it.

/// The wasmtime this build links (a test checks it against `Cargo.lock`).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// The words after vigil's name that identify this build, as one literal.
macro_rules! version {
    () => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (",
            env!("VIGIL_BUILD_REVISION"),
            ") wasmtime 48.0.8"
        )
    };
}

/// What `vigil --version` prints after the name: the version, the source
/// revision (`VIGIL_BUILD_ID` at build time, else the git commit, else
/// `source`) and wasmtime's version.
pub const VERSION: &str = version!();

/// This vigil build, as precompiled artifacts are bound to it: `vigil`
/// and its [`VERSION`].
pub const BUILD: &str = concat!("vigil ", version!());

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

    #[test]
    fn the_version_names_the_release_and_the_revision_it_was_built_from() {
        let revision = env!("VIGIL_BUILD_REVISION");
        assert!(!revision.is_empty());
        assert_eq!(
            VERSION,
            format!(
                "{} ({revision}) wasmtime {WASMTIME_VERSION}",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(BUILD, format!("vigil {VERSION}"));
    }
}
