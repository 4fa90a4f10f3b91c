//! Crash-safe file writes (a reader sees the old file or the new one, never
//! half of one), private directories, and bounded reads of text files.

use std::fs::{self, DirBuilder, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Creates `dir` (and missing parents) readable and writable by this user
/// only, and refuses one that someone else could write: it is owned by
/// another user, or group or others may write it.
///
/// # Errors
/// It cannot be created, or others could write it (`PermissionDenied`,
/// naming its owner and mode).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = fs::metadata(dir)?;
    let mode = meta.mode() & 0o7777;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me || mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {} with mode {mode:o}; it must belong to uid {me} and be \
                 writable by it alone (chmod go-w), because whoever can write it can make \
                 this agent run native code",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same directory:
/// write, fsync, rename over `path`, then fsync the directory.
///
/// # Errors
/// Any I/O error; `path` is then left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The text of `path`, refused if it holds more than `max` bytes (read no
/// further than that).
///
/// # Errors
/// It cannot be read, is not UTF-8, or is larger (`FileTooLarge`, saying so).
pub fn read_text(path: &Path, max: u64) -> io::Result<String> {
    let mut text = String::new();
    File::open(path)?.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("the file is larger than {max} bytes"),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_text_file_is_read_up_to_its_bound_and_refused_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, "12345").unwrap();
        assert_eq!(read_text(&path, 5).unwrap(), "12345");
        let error = read_text(&path, 4).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(error.to_string(), "the file is larger than 4 bytes");
    }

    #[test]
    fn private_dirs_are_created_private_and_shared_ones_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state/cache");
        private_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let refused = private_dir(&dir).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert!(refused.to_string().contains("mode 777"), "{refused}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        private_dir(&dir).unwrap();
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
