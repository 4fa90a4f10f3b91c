//! `vigil own-state`: gives the state directory, and everything in it, to
//! the agent's user, so that only this step runs as root. The kubelet makes
//! a `hostPath` directory root's, and an agent before 0.2 ran as root and
//! left root's files there; the DaemonSet's init container runs this with
//! no capability but `CHOWN` and `DAC_READ_SEARCH`, then the agent runs as
//! its own user.
//!
//! Links are never followed (a link is given away itself, not its target)
//! and the walk stays on the directory's filesystem: nothing outside the
//! state directory changes owner.

use rustix::fs::{AtFlags, CWD, Gid, Uid, chownat};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why the state directory could not be given to the agent's user.
#[derive(Debug, Error)]
pub enum OwnershipError {
    /// An entry could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The entry.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An entry's owner could not be changed (the process lacks `CAP_CHOWN`?).
    #[error("cannot give {path} to {uid}:{gid}")]
    Chown {
        /// The entry.
        path: PathBuf,
        /// The user it was to be given to.
        uid: u32,
        /// The group.
        gid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Gives `dir` and everything under it on its filesystem to `uid:gid`;
/// answers how many entries changed owner.
///
/// # Errors
/// An entry cannot be read or given away.
pub fn give(dir: &Path, uid: u32, gid: u32) -> Result<usize, OwnershipError> {
    let device = metadata(dir)?.dev();
    let mut changed = 0;
    give_entry(dir, device, (uid, gid), &mut changed)?;
    Ok(changed)
}

fn metadata(path: &Path) -> Result<std::fs::Metadata, OwnershipError> {
    std::fs::symlink_metadata(path).map_err(|source| OwnershipError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Gives `path`'s entries first, then `path`: once given away, a directory
/// may no longer be readable by this process.
fn give_entry(
    path: &Path,
    device: u64,
    (uid, gid): (u32, u32),
    changed: &mut usize,
) -> Result<(), OwnershipError> {
    let meta = metadata(path)?;
    if meta.is_dir() && meta.dev() == device {
        let read = |source| OwnershipError::Read {
            path: path.to_owned(),
            source,
        };
        for entry in std::fs::read_dir(path).map_err(read)? {
            give_entry(&entry.map_err(read)?.path(), device, (uid, gid), changed)?;
        }
    }
    if meta.dev() != device || (meta.uid(), meta.gid()) == (uid, gid) {
        return Ok(());
    }
    chownat(
        CWD,
        path,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|errno| OwnershipError::Chown {
        path: path.to_owned(),
        uid,
        gid,
        source: errno.into(),
    })?;
    *changed += 1;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(path: &Path) -> (u32, u32) {
        let meta = std::fs::symlink_metadata(path).unwrap();
        (meta.uid(), meta.gid())
    }

    /// Root (CI) gives the tree away; anyone else is refused, saying who
    /// the entry was to go to.
    #[test]
    fn the_tree_goes_to_the_user_and_no_link_is_followed() {
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let dir = state.path();
        std::fs::create_dir_all(dir.join("config")).unwrap();
        std::fs::write(dir.join("config/checkpoint.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("lkg")).unwrap();
        std::fs::write(outside.path().join("theirs"), "not vigil's").unwrap();
        std::os::unix::fs::symlink(outside.path().join("theirs"), dir.join("lkg/link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.join("dir-link")).unwrap();
        let before = owner(outside.path());

        let agent = (65532, 65532);
        match give(dir, agent.0, agent.1) {
            Ok(changed) => {
                assert_eq!(
                    changed, 6,
                    "the directory, its 2 directories, a file, 2 links"
                );
                for entry in ["", "config", "config/checkpoint.json", "lkg", "lkg/link"] {
                    assert_eq!(owner(&dir.join(entry)), agent, "{entry}");
                }
                assert_eq!(owner(&dir.join("dir-link")), agent);
                assert_eq!(
                    owner(outside.path()),
                    before,
                    "a link's target is untouched"
                );
                assert_eq!(owner(&outside.path().join("theirs")), before);
                assert_eq!(give(dir, agent.0, agent.1).unwrap(), 0, "done once");
            }
            Err(error @ OwnershipError::Chown { .. }) => {
                assert_ne!(rustix::process::geteuid().as_raw(), 0, "{error}");
                assert!(error.to_string().contains("to 65532:65532"), "{error}");
            }
            Err(error) => panic!("{error}"),
        }
    }

    /// A state directory that is not there (the kubelet did not make it):
    /// an error naming it, nothing changed.
    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let parent = tempfile::tempdir().unwrap();
        let missing = parent.path().join("vigil");
        let error = give(&missing, 65532, 65532).unwrap_err();
        assert!(matches!(error, OwnershipError::Read { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!("cannot read {}", missing.display())
        );
    }
}
