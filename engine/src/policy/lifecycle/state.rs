//! The state directory: what must survive a restart.
//!
//! - `lkg/<name>@<sha256>.wasm`: the last-known-good bytes of each policy
//!   loaded from a file, copied from that file when a version graduates from
//!   its trial. The
//!   digest in the name is checked on load, so a damaged copy is reported and
//!   ignored, never trusted.
//! - `rejected.json`: digests of versions that failed their trial, so a
//!   restart does not load the same bad bytes again.
//!
//! Without a state directory (`vigil policy check`, tests) nothing persists.

use crate::base::digest::{Digest, WasmBytes};
use crate::base::fsutil::{private_dir, write_atomic};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// How many rejected versions are remembered.
const REJECTED_KEPT: usize = 256;

/// A last-known-good copy found in the state directory.
#[derive(Debug)]
pub(crate) struct SavedVersion {
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    pub(crate) wasm: WasmBytes,
}

/// Reads and writes the state directory.
#[derive(Debug)]
pub(crate) struct StateStore {
    dir: Option<PathBuf>,
}

impl StateStore {
    /// A store in `dir`, created private to this user if missing; `None`
    /// persists nothing.
    ///
    /// # Errors
    /// It cannot be created, or others could write it: whoever can write the
    /// state directory decides what the agent runs.
    pub(crate) fn open(dir: Option<PathBuf>) -> std::io::Result<Self> {
        if let Some(dir) = &dir {
            private_dir(dir)?;
            private_dir(&dir.join("lkg"))?;
        }
        Ok(Self { dir })
    }

    fn lkg_dir(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("lkg"))
    }

    /// Every saved last-known-good version whose bytes match its digest.
    pub(crate) fn last_known_good(&self) -> Vec<SavedVersion> {
        let Some(dir) = self.lkg_dir() else {
            return vec![];
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return vec![];
        };
        let mut found = Vec::new();
        for path in entries.flatten().map(|e| e.path()) {
            let Some((name, digest)) = parse_lkg_name(&path) else {
                continue;
            };
            match std::fs::read(&path) {
                Ok(bytes) => match WasmBytes::from(bytes) {
                    wasm if wasm.digest() == digest => {
                        found.push(SavedVersion { name, path, wasm })
                    }
                    _ => {
                        tracing::error!(path = %path.display(), "last-known-good copy is damaged (digest mismatch); ignoring it")
                    }
                },
                Err(error) => {
                    tracing::error!(path = %path.display(), %error, "cannot read last-known-good copy")
                }
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// Saves the version `digest` of `name`, read back from the file it was
    /// loaded from, as its last-known-good copy, replacing older ones. The
    /// bytes are not kept in memory while a version serves (JS and Python
    /// components are 12-18 MB each), so they are read again here and must
    /// still be that version.
    ///
    /// # Errors
    /// The file cannot be read, now holds other bytes (it changed after the
    /// version loaded: that version's copy is then not saved and the older
    /// one stays), or the copy cannot be written.
    pub(crate) fn save_last_known_good(
        &self,
        name: &str,
        digest: Digest,
        from: &Path,
    ) -> std::io::Result<()> {
        let Some(dir) = self.lkg_dir() else {
            return Ok(());
        };
        let bytes = std::fs::read(from)?;
        if Digest::of(&bytes) != digest {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} changed after this version loaded; keeping the older copy",
                    from.display()
                ),
            ));
        }
        let path = dir.join(format!("{name}@{}.wasm", digest.hex()));
        write_atomic(&path, &bytes)?;
        self.remove_last_known_good_except(name, Some(&path));
        Ok(())
    }

    /// Forgets the last-known-good version of `name` (its file was deleted).
    pub(crate) fn remove_last_known_good(&self, name: &str) {
        self.remove_last_known_good_except(name, None);
    }

    fn remove_last_known_good_except(&self, name: &str, keep: Option<&Path>) {
        let Some(Ok(entries)) = self.lkg_dir().map(std::fs::read_dir) else {
            return;
        };
        let stale = entries.flatten().map(|e| e.path()).filter(|p| {
            parse_lkg_name(p).is_some_and(|(n, _)| n == name) && Some(p.as_path()) != keep
        });
        for path in stale {
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "cannot remove old last-known-good copy");
            }
        }
    }

    /// The rejected digests, oldest first. A damaged file is reported and read as empty.
    pub(crate) fn rejected(&self) -> VecDeque<Digest> {
        let Some(path) = self.dir.as_ref().map(|d| d.join("rejected.json")) else {
            return VecDeque::new();
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return VecDeque::new(),
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "cannot read rejected versions");
                return VecDeque::new();
            }
        };
        let parsed: Option<VecDeque<Digest>> = serde_json::from_str::<Vec<String>>(&text)
            .ok()
            .and_then(|list| list.iter().map(|h| Digest::from_hex(h)).collect());
        parsed.unwrap_or_else(|| {
            tracing::error!(path = %path.display(), "rejected versions file is damaged; ignoring it");
            VecDeque::new()
        })
    }

    /// Remembers `digest` as rejected (keeping the newest [`REJECTED_KEPT`]).
    pub(crate) fn reject(&self, rejected: &mut VecDeque<Digest>, digest: Digest) {
        if !rejected.contains(&digest) {
            rejected.push_back(digest);
        }
        while rejected.len() > REJECTED_KEPT {
            rejected.pop_front();
        }
        let Some(path) = self.dir.as_ref().map(|d| d.join("rejected.json")) else {
            return;
        };
        let list: Vec<String> = rejected.iter().map(Digest::hex).collect();
        let json = serde_json::to_vec_pretty(&list).expect("a list of strings serialises");
        if let Err(error) = write_atomic(&path, &json) {
            tracing::error!(path = %path.display(), %error, "cannot persist rejected versions");
        }
    }
}

/// Splits `lkg/<name>@<hex>.wasm` into its name and digest.
fn parse_lkg_name(path: &Path) -> Option<(String, Digest)> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".wasm")?;
    let (name, hex) = stem.rsplit_once('@')?;
    Some((name.to_owned(), Digest::from_hex(hex)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_known_good_round_trips_and_damaged_copies_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(Some(dir.path().to_owned())).unwrap();
        let files = tempfile::tempdir().unwrap();
        let save = |name: &str, bytes: &[u8]| {
            let from = files.path().join(format!("{name}.wasm"));
            std::fs::write(&from, bytes).unwrap();
            store.save_last_known_good(name, Digest::of(bytes), &from)
        };
        save("sorter", b"v1").unwrap();
        save("sorter", b"v2").unwrap();
        save("merger", b"m").unwrap();
        let saved: Vec<_> = store
            .last_known_good()
            .into_iter()
            .map(|s| (s.name, s.wasm.bytes().to_vec()))
            .collect();
        assert_eq!(
            saved,
            [
                ("merger".to_owned(), b"m".to_vec()),
                ("sorter".to_owned(), b"v2".to_vec())
            ]
        );

        let merger = dir
            .path()
            .join(format!("lkg/merger@{}.wasm", Digest::of(b"m").hex()));
        std::fs::write(&merger, b"bit rot").unwrap();
        let names: Vec<_> = store
            .last_known_good()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["sorter"]);
        store.remove_last_known_good("sorter");
        assert_eq!(store.last_known_good().len(), 0);
    }

    #[test]
    fn a_file_changed_since_its_version_loaded_is_not_saved_under_that_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(Some(dir.path().to_owned())).unwrap();
        let from = dir.path().join("sorter.wasm");
        std::fs::write(&from, b"v1").unwrap();
        store
            .save_last_known_good("sorter", Digest::of(b"v1"), &from)
            .unwrap();
        std::fs::write(&from, b"v3").unwrap();
        let error = store
            .save_last_known_good("sorter", Digest::of(b"v2"), &from)
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            error
                .to_string()
                .contains("changed after this version loaded")
        );
        let saved: Vec<_> = store
            .last_known_good()
            .into_iter()
            .map(|s| s.wasm.digest())
            .collect();
        assert_eq!(saved, [Digest::of(b"v1")], "the older copy stays");
    }

    #[test]
    fn rejected_digests_persist_and_a_damaged_file_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(Some(dir.path().to_owned())).unwrap();
        let mut rejected = store.rejected();
        store.reject(&mut rejected, Digest::of(b"bad"));
        assert_eq!(store.rejected(), [Digest::of(b"bad")]);
        std::fs::write(dir.path().join("rejected.json"), b"{not json").unwrap();
        assert!(store.rejected().is_empty());
    }
}
