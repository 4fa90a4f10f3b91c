//! The node's content-addressed store of pulled artifacts, under the state
//! directory: `blobs/sha256/<hex>` holds exactly the bytes whose sha256 is
//! `<hex>` — manifests and components alike. A blob enters only through
//! [`BlobWriter`], which streams into a temporary file beside it, counts
//! and hashes every byte, refuses more than was declared, and only then
//! fsyncs and renames it into place: a crash or a lying registry leaves a
//! temporary file that [`BlobStore::retain`] removes, never a wrong blob.
//! Beside the blobs, `signatures/<hex>.json` keeps the signatures an
//! artifact was accepted with, so a restart checks them again without a
//! request.

use super::signature::Signed;
use crate::base::digest::Digest;
use crate::base::fsutil::{private_dir, read_text, write_atomic};
use sha2::{Digest as _, Sha256};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a blob was not stored.
#[derive(Debug, Error)]
pub enum StoreError {
    /// More bytes arrived than the blob declared.
    #[error("more than the declared {declared} bytes arrived")]
    Oversized {
        /// The declared size.
        declared: u64,
    },
    /// The bytes do not match the digest or size they were pulled by.
    #[error("the bytes are not the blob pinned: expected sha256:{} ({declared} bytes), got sha256:{} ({received} bytes)", expected.hex(), actual.hex())]
    Mismatch {
        /// The digest pulled by.
        expected: Digest,
        /// The digest of what arrived.
        actual: Digest,
        /// The declared size.
        declared: u64,
        /// How many bytes arrived.
        received: u64,
    },
    /// The store could not be written.
    #[error("cannot write the blob store: {0}")]
    Io(#[from] io::Error),
}

/// What [`BlobStore::retain`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Files removed.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// The store.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
    signatures: PathBuf,
}

impl BlobStore {
    /// The store under `root` (created private to this user).
    ///
    /// # Errors
    /// It cannot be created, or others could write it.
    pub fn open(root: &Path) -> io::Result<Self> {
        let dir = root.join("blobs/sha256");
        private_dir(&dir)?;
        let signatures = root.join("signatures");
        private_dir(&signatures)?;
        Ok(Self { dir, signatures })
    }

    /// Where the blob `digest` is (or would be).
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    /// Whether the store holds `digest`.
    pub fn contains(&self, digest: &Digest) -> bool {
        self.path(digest).is_file()
    }

    /// The bytes of `digest`, read no further than `max` and checked against
    /// the digest (a blob changed on disk is not the one pinned).
    ///
    /// # Errors
    /// Not held (`NotFound`), larger than `max`, or not matching.
    pub fn read(&self, digest: &Digest, max: u64) -> Result<Vec<u8>, StoreError> {
        let mut bytes = Vec::new();
        File::open(self.path(digest))?
            .take(max + 1)
            .read_to_end(&mut bytes)?;
        let received = bytes.len() as u64;
        if received > max {
            return Err(StoreError::Oversized { declared: max });
        }
        let actual = Digest::of(&bytes);
        if actual != *digest {
            return Err(StoreError::Mismatch {
                expected: *digest,
                actual,
                declared: received,
                received,
            });
        }
        Ok(bytes)
    }

    /// Stores `bytes` (small ones, such as a manifest) under their digest.
    ///
    /// # Errors
    /// The store could not be written.
    pub fn insert(&self, bytes: &[u8]) -> io::Result<Digest> {
        let digest = Digest::of(bytes);
        if !self.contains(&digest) {
            write_atomic(&self.path(&digest), bytes)?;
        }
        Ok(digest)
    }

    /// Keeps the signatures `manifest` was accepted with.
    ///
    /// # Errors
    /// The store could not be written.
    pub fn save_signatures(&self, manifest: &Digest, signed: &[Signed]) -> io::Result<()> {
        let json = serde_json::to_vec(signed).map_err(io::Error::other)?;
        write_atomic(&self.signature_path(manifest), &json)
    }

    /// The signatures `manifest` was accepted with, if kept.
    pub fn signatures(&self, manifest: &Digest) -> Option<Vec<Signed>> {
        let text = read_text(&self.signature_path(manifest), 1 << 20).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The manifests whose signatures are kept.
    pub fn signed_manifests(&self) -> Vec<Digest> {
        let Ok(entries) = fs::read_dir(&self.signatures) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Digest::from_hex(name.strip_suffix(".json")?)
            })
            .collect()
    }

    fn signature_path(&self, manifest: &Digest) -> PathBuf {
        self.signatures.join(format!("{}.json", manifest.hex()))
    }

    /// A writer for the blob `expected` of `declared` bytes.
    ///
    /// # Errors
    /// Its temporary file cannot be created.
    pub fn writer(&self, expected: Digest, declared: u64) -> io::Result<BlobWriter> {
        let tmp = self
            .dir
            .join(format!(".{}.tmp-{}", expected.hex(), std::process::id()));
        let file = File::create(&tmp)?;
        Ok(BlobWriter {
            store: self.dir.clone(),
            tmp,
            file,
            hasher: Sha256::new(),
            expected,
            declared,
            received: 0,
        })
    }

    /// Removes every blob but those in `keep`, the signatures of manifests
    /// not in `keep`, and temporary files.
    ///
    /// # Errors
    /// The store cannot be listed; a file that cannot be removed is left.
    pub fn retain(&self, keep: &HashSet<Digest>) -> io::Result<Removed> {
        let mut removed = Removed::default();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let held = Digest::from_hex(&name.to_string_lossy()).is_some_and(|d| keep.contains(&d));
            if held {
                continue;
            }
            let bytes = entry.metadata().map_or(0, |m| m.len());
            if fs::remove_file(entry.path()).is_ok() {
                removed.files += 1;
                removed.bytes += bytes;
            }
        }
        for entry in fs::read_dir(&self.signatures)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let manifest = name.strip_suffix(".json").and_then(Digest::from_hex);
            if !manifest.is_some_and(|d| keep.contains(&d)) {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(removed)
    }
}

/// A blob being written: see the module's docs. Dropped before
/// [`BlobWriter::finish`], it removes its temporary file.
#[derive(Debug)]
pub struct BlobWriter {
    store: PathBuf,
    tmp: PathBuf,
    file: File,
    hasher: Sha256,
    expected: Digest,
    declared: u64,
    received: u64,
}

impl BlobWriter {
    /// Appends `chunk`.
    ///
    /// # Errors
    /// It would exceed the declared size, or the file cannot be written.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        self.received += chunk.len() as u64;
        if self.received > self.declared {
            return Err(StoreError::Oversized {
                declared: self.declared,
            });
        }
        self.hasher.update(chunk);
        self.file.write_all(chunk)?;
        Ok(())
    }

    /// Checks what arrived against the digest and size, then fsyncs it and
    /// renames it into the store; answers its path.
    ///
    /// # Errors
    /// The bytes are not the blob pinned, or the store cannot be written.
    pub fn finish(mut self) -> Result<PathBuf, StoreError> {
        let actual = Digest::from_bytes(self.hasher.clone().finalize().into());
        if actual != self.expected || self.received != self.declared {
            return Err(StoreError::Mismatch {
                expected: self.expected,
                actual,
                declared: self.declared,
                received: self.received,
            });
        }
        self.file.sync_all()?;
        let path = self.store.join(self.expected.hex());
        fs::rename(&self.tmp, &path)?;
        File::open(&self.store)?.sync_all()?;
        self.tmp = PathBuf::new();
        Ok(path)
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_enters_only_whole_and_matching() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let bytes = b"a component's bytes";
        let digest = Digest::of(bytes);

        let mut writer = store.writer(digest, bytes.len() as u64).unwrap();
        writer.write(&bytes[..5]).unwrap();
        writer.write(&bytes[5..]).unwrap();
        let path = writer.finish().unwrap();
        assert_eq!(fs::read(&path).unwrap(), bytes);
        assert_eq!(store.read(&digest, 1024).unwrap(), bytes);

        // Other bytes of the same size under the same digest: refused, nothing left.
        let other = Digest::of(b"something else");
        let mut writer = store.writer(other, bytes.len() as u64).unwrap();
        writer.write(bytes).unwrap();
        let error = writer.finish().unwrap_err();
        assert!(matches!(error, StoreError::Mismatch { .. }), "{error}");
        assert!(!store.contains(&other));

        // More than declared: refused at the first byte too many.
        let mut writer = store.writer(other, 3).unwrap();
        let error = writer.write(b"four").unwrap_err();
        assert!(
            matches!(error, StoreError::Oversized { declared: 3 }),
            "{error}"
        );
        drop(writer);

        // Fewer than declared: refused.
        let mut writer = store.writer(digest, bytes.len() as u64 + 1).unwrap();
        writer.write(bytes).unwrap();
        assert!(matches!(writer.finish(), Err(StoreError::Mismatch { .. })));

        // No temporary file survives a refusal.
        let names: Vec<_> = fs::read_dir(dir.path().join("blobs/sha256"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [digest.hex()]);
    }

    #[test]
    fn a_blob_changed_on_disk_is_not_read_as_the_one_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let digest = store.insert(b"manifest").unwrap();
        fs::write(store.path(&digest), b"tampered").unwrap();
        assert!(matches!(
            store.read(&digest, 1024),
            Err(StoreError::Mismatch { .. })
        ));
        assert!(matches!(
            store.read(&Digest::of(b"absent"), 1024),
            Err(StoreError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
    }

    #[test]
    fn retain_keeps_what_is_named_and_removes_the_rest_and_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path()).unwrap();
        let kept = store.insert(b"kept").unwrap();
        let dropped = store.insert(b"dropped").unwrap();
        let half = store.writer(Digest::of(b"half"), 4).unwrap();
        std::mem::forget(half);
        let removed = store.retain(&HashSet::from([kept])).unwrap();
        assert_eq!(removed.files, 2);
        assert!(store.contains(&kept) && !store.contains(&dropped));
    }
}
