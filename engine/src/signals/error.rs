//! Why a signal could not be read, and the helpers every reader shares.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why one signal could not be read. The signal is then a reported gap in
/// the snapshot: absent, never zero.
#[derive(Debug, Error)]
pub enum SignalError {
    /// The file could not be read (missing, permission...).
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists only on cgroup v2, and the node runs v1 (nothing is
    /// opened to find out).
    #[error("cgroup v1 keeps no {path}")]
    OnlyOnV2 {
        /// The file as v2 would name it.
        path: PathBuf,
    },
    /// The file does not have the expected format.
    #[error("{path}: {what}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// Reads a whole file.
pub(crate) fn read(path: &Path) -> Result<String, SignalError> {
    std::fs::read_to_string(path).map_err(|source| SignalError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A malformed-file error for `path`.
pub(crate) fn malformed(path: &Path, what: impl Into<String>) -> SignalError {
    SignalError::Malformed {
        path: path.to_owned(),
        what: what.into(),
    }
}

/// Reads a file holding one unsigned integer.
pub(crate) fn read_u64(path: &Path) -> Result<u64, SignalError> {
    parse_u64(path, &read(path)?)
}

/// The unsigned integer `text`, read from `path`, holds.
pub(crate) fn parse_u64(path: &Path, text: &str) -> Result<u64, SignalError> {
    text.trim()
        .parse()
        .map_err(|_| malformed(path, format!("expected a number, found {:?}", text.trim())))
}

/// The value of `key` in a flat `key value` file such as `memory.stat`.
pub(crate) fn stat_value(path: &Path, text: &str, key: &str) -> Result<u64, SignalError> {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .ok_or_else(|| malformed(path, format!("no `{key}` line")))?
        .trim()
        .parse()
        .map_err(|_| malformed(path, format!("`{key}` is not a number")))
}
