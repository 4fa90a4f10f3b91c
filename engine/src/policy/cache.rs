//! On-disk cache of precompiled components.
//!
//! An entry is keyed by the component's sha256 and the engine's compatibility
//! hash (`<digest>-<engine>.cwasm`), so a different wasmtime or different
//! engine settings never load an incompatible artifact. Each entry starts with
//! the sha256 of the artifact that follows; an entry whose checksum does not
//! match (a torn write, bit rot, tampering) is discarded and rebuilt, never
//! deserialised.

use super::Digest;
use crate::fsutil::write_atomic;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use wasmtime::Engine;
use wasmtime::component::Component;

/// What the cache did for one load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A valid entry was loaded; nothing was compiled.
    Hit,
    /// No entry; the component was compiled (and stored, if the cache is writable).
    Miss,
    /// An entry existed but was damaged; it was discarded and rebuilt.
    Damaged,
    /// The host runs without a cache.
    Disabled,
}

/// A directory of precompiled components for one engine configuration.
#[derive(Debug)]
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_key: String,
}

impl ArtifactCache {
    /// A cache in `dir` (created if missing) for `engine`.
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{}-{}.cwasm", digest.hex(), self.engine_key))
    }

    /// The cached component for `digest`, if a valid entry exists.
    /// A damaged entry is removed and reported as [`CacheOutcome::Damaged`].
    pub(crate) fn load(&self, engine: &Engine, digest: &Digest) -> Result<Component, CacheOutcome> {
        let path = self.path(digest);
        let Ok(entry) = std::fs::read(&path) else {
            return Err(CacheOutcome::Miss);
        };
        let artifact = entry
            .split_at_checked(32)
            .filter(|(sum, artifact)| Digest::of(artifact).as_bytes() == *sum)
            .map(|(_, artifact)| artifact);
        // SAFETY: the artifact is byte-for-byte what `Component::serialize`
        // produced for this engine configuration (its checksum matches and the
        // file name carries the engine's compatibility hash), which is what
        // `deserialize` requires.
        let loaded = artifact.map(|a| unsafe { Component::deserialize(engine, a) });
        match loaded {
            Some(Ok(component)) => Ok(component),
            Some(Err(error)) => self.discard(path, &format!("{error:#}")),
            None => self.discard(path, "checksum mismatch"),
        }
    }

    fn discard(&self, path: PathBuf, why: &str) -> Result<Component, CacheOutcome> {
        tracing::warn!(path = %path.display(), why, "discarding damaged precompiled artifact");
        let _ = std::fs::remove_file(&path);
        Err(CacheOutcome::Damaged)
    }

    /// Stores `component` under `digest`. A failure is logged, never fatal:
    /// the next load just compiles again.
    pub(crate) fn store(&self, digest: &Digest, component: &Component) {
        let artifact = match component.serialize() {
            Ok(artifact) => artifact,
            Err(error) => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "cannot serialise precompiled artifact"
                );
                return;
            }
        };
        let mut entry = Digest::of(&artifact).as_bytes().to_vec();
        entry.extend_from_slice(&artifact);
        if let Err(error) = write_atomic(&self.path(digest), &entry) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot store precompiled artifact");
        }
    }
}
