//! On-disk cache of precompiled components.
//!
//! An artifact is native code: loading one runs it. So an entry is bound to
//! what it claims to be and guarded against anyone but this agent:
//! - it is named `<component digest>-<engine key>.cwasm`, and its header
//!   records the component's digest and the engine configuration it was
//!   compiled for, both checked on every load — another policy's artifact
//!   copied under this name, or one built by another wasmtime or with other
//!   settings, is recompiled from the component, with a warning;
//! - header and artifact are authenticated with HMAC-SHA256 under a key kept
//!   in the cache directory (`key`, readable by this user only), so an
//!   artifact edited on disk — even with a checksum recomputed — fails the
//!   check and is discarded, never deserialised;
//! - the directory is created private to the agent's user, and one that
//!   others can write is refused (see [`crate::fsutil::private_dir`]).
//!
//! The trust boundary: whoever can write the cache (or state) directory *as
//! the agent's user* can read the key and run native code in the agent, like
//! any compiled-code cache. Keep it on a path only the agent can write.

use super::Digest;
use crate::fsutil::{private_dir, write_atomic};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// What the cache did for one load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A valid entry was loaded; nothing was compiled.
    Hit,
    /// No entry; the component was compiled (and stored, if the cache is writable).
    Miss,
    /// An entry existed but was damaged, foreign or for another component;
    /// it was discarded and rebuilt.
    Damaged,
    /// The host runs without a cache.
    Disabled,
}

/// Marks an entry of this format.
const MAGIC: &[u8; 8] = b"vigilc01";
/// Magic, component digest, engine key, MAC.
const HEADER: usize = 8 + 32 + 8 + 32;
/// Size of the authentication key.
const KEY_BYTES: usize = 32;

/// A directory of precompiled components for one engine configuration.
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_key: [u8; 8],
    key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for ArtifactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The cache's authentication key: read from `dir/key`, or made from the
/// system's randomness and written there (this user only) on first use. A
/// key file of the wrong size is replaced, which invalidates every entry.
fn key(dir: &Path) -> std::io::Result<[u8; KEY_BYTES]> {
    let path = dir.join("key");
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(key) = <[u8; KEY_BYTES]>::try_from(bytes.as_slice())
    {
        return Ok(key);
    }
    let mut key = [0; KEY_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    std::io::Write::write_all(&mut file, &key)?;
    file.sync_all()?;
    Ok(key)
}

impl ArtifactCache {
    /// A cache in `dir` (created private if missing) for `engine`.
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> std::io::Result<Self> {
        private_dir(&dir)?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            key: key(&dir)?,
            dir,
            engine_key: hasher.finish().to_be_bytes(),
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        let engine = self.engine_key.map(|b| format!("{b:02x}")).concat();
        self.dir.join(format!("{}-{engine}.cwasm", digest.hex()))
    }

    fn mac(&self, header: &[u8], artifact: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key size");
        mac.update(header);
        mac.update(artifact);
        mac
    }

    /// Why `entry` is not a valid artifact of component `digest` for this
    /// engine, or the artifact itself.
    fn verify<'e>(&self, digest: &Digest, entry: &'e [u8]) -> Result<&'e [u8], &'static str> {
        let (header, artifact) = entry.split_at_checked(HEADER).ok_or("truncated")?;
        let (magic, rest) = header.split_at(MAGIC.len());
        let (component, rest) = rest.split_at(32);
        let (engine, tag) = rest.split_at(self.engine_key.len());
        if magic != MAGIC {
            return Err("not an artifact of this format");
        }
        self.mac(&header[..HEADER - 32], artifact)
            .verify_slice(tag)
            .map_err(|_| "authentication failed: damaged, or not written by this agent")?;
        if component != digest.as_bytes() {
            return Err("compiled from another component");
        }
        if engine != self.engine_key {
            return Err("compiled for another engine configuration");
        }
        Ok(artifact)
    }

    /// The cached component for `digest`, if a valid entry exists. An entry
    /// that fails any check is removed and reported as [`CacheOutcome::Damaged`].
    pub(crate) fn load(&self, engine: &Engine, digest: &Digest) -> Result<Component, CacheOutcome> {
        let path = self.path(digest);
        let Ok(entry) = std::fs::read(&path) else {
            return Err(CacheOutcome::Miss);
        };
        let artifact = match self.verify(digest, &entry) {
            Ok(artifact) => artifact,
            Err(why) => return self.discard(path, why),
        };
        // SAFETY: the artifact is byte-for-byte what `Component::serialize`
        // produced for this component and this engine configuration: its
        // header says so and this agent's key authenticates header and
        // artifact together. That is what `deserialize` requires.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => Ok(component),
            Err(error) => self.discard(path, &format!("{error:#}")),
        }
    }

    fn discard(&self, path: PathBuf, why: &str) -> Result<Component, CacheOutcome> {
        tracing::warn!(path = %path.display(), why, "discarding precompiled artifact; compiling the component again");
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
        let mut entry = Vec::with_capacity(HEADER + artifact.len());
        entry.extend_from_slice(MAGIC);
        entry.extend_from_slice(digest.as_bytes());
        entry.extend_from_slice(&self.engine_key);
        let tag = self.mac(&entry, &artifact).finalize().into_bytes();
        entry.extend_from_slice(&tag);
        entry.extend_from_slice(&artifact);
        if let Err(error) = write_atomic(&self.path(digest), &entry) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot store precompiled artifact");
        }
    }
}
