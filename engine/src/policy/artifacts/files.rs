//! Policy files are untrusted input: whoever can write the policies directory
//! (or the ConfigMap behind it) must not be able to hang or bloat the agent.
//!
//! A file is opened without blocking (a FIFO cannot stall the open) through
//! any symlinks (ConfigMap volumes are symlinks), then checked on the open
//! descriptor: only a regular file is read — never a directory, FIFO, device
//! or socket — and only up to the size cap, so neither a symlink to
//! `/dev/zero` nor a huge sparse file is ever read.

use crate::policy::LoadError;
use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default cap on a policy file: a little above the largest example
/// (a Python component of about 18 MiB).
pub const DEFAULT_MAX_POLICY_BYTES: u64 = 32 << 20;

/// What identifies one version of a file on disk without reading it: a
/// rename, a rewrite or a ConfigMap's swapped link all change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(meta: &Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Names what a non-regular file is.
fn kind(meta: &Metadata) -> &'static str {
    let ty = meta.file_type();
    if ty.is_dir() {
        "directory"
    } else if ty.is_fifo() {
        "FIFO"
    } else if ty.is_char_device() {
        "character device"
    } else if ty.is_block_device() {
        "block device"
    } else if ty.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Opens `path` for reading without blocking and checks it is a regular file
/// of at most `max` bytes.
///
/// # Errors
/// It cannot be opened, is not a regular file, or is too large.
pub(crate) fn open(path: &Path, max: u64) -> Result<(File, Stamp), LoadError> {
    let read_error = |source| LoadError::Read {
        path: PathBuf::from(path),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(LoadError::NotAFile {
            path: path.to_owned(),
            kind: kind(&meta),
        });
    }
    if meta.len() > max {
        return Err(LoadError::TooLarge {
            path: path.to_owned(),
            size: meta.len(),
            max,
        });
    }
    Ok((file, Stamp::of(&meta)))
}

/// Reads the rest of `file` (opened by [`open`]), refusing to go past `max`
/// bytes even if it grows while being read.
///
/// # Errors
/// A read error, or more than `max` bytes.
pub(crate) fn read(path: &Path, file: File, max: u64) -> Result<Vec<u8>, LoadError> {
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > max {
        return Err(LoadError::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// Reads the policy file at `path` as untrusted input (see the module docs).
///
/// # Errors
/// As `open` and `read`.
pub(crate) fn read_policy(path: &Path, max: u64) -> Result<Vec<u8>, LoadError> {
    let (file, _) = open(path, max)?;
    read(path, file, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_cap_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ok.wasm");
        std::fs::write(&file, b"\0asm").unwrap();
        assert_eq!(read_policy(&file, 4).unwrap(), b"\0asm");
        assert!(matches!(
            read_policy(&file, 3),
            Err(LoadError::TooLarge {
                size: 4,
                max: 3,
                ..
            })
        ));
        let link = dir.path().join("zero.wasm");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_policy(&link, 1 << 20),
            Err(LoadError::NotAFile {
                kind: "character device",
                ..
            })
        ));
        assert!(matches!(
            read_policy(dir.path(), 1 << 20),
            Err(LoadError::NotAFile {
                kind: "directory",
                ..
            })
        ));
        let fifo = dir.path().join("fifo.wasm");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        assert!(matches!(
            read_policy(&fifo, 1 << 20),
            Err(LoadError::NotAFile { kind: "FIFO", .. })
        ));
    }
}
