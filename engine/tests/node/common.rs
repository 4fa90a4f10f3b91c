//! What the node suite and the node bench share: the repository's root and
//! the one way a step waits for the cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;
use vigil_testbed::wait::Polling;

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Polls `check` every 50 ms (the suite's measures read times no finer)
/// until it gives a value; `limit` bounds a broken test.
pub fn until<T>(what: &str, limit: Duration, check: impl FnMut() -> Option<T>) -> T {
    until_explained(what, limit, check, String::new)
}

/// [`until`], and on failure what `explain` says (the agent's log, say).
pub fn until_explained<T>(
    what: &str,
    limit: Duration,
    check: impl FnMut() -> Option<T>,
    explain: impl FnOnce() -> String,
) -> T {
    Polling::new(Duration::from_millis(50), limit).until(what, check, explain)
}
