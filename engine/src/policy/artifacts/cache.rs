//! On-disk cache of precompiled components.
//!
//! An artifact is native code: loading one runs it. So an entry is bound to
//! what it claims to be and guarded against anyone but this agent:
//! - it is two files, `<component digest>-<engine key>.cwasm` (the artifact
//!   exactly as wasmtime serialised it) and `.mac` beside it (magic, the
//!   component's digest, the engine configuration's key, whether it was
//!   compiled here or imported, and a tag); the claims are checked on every
//!   load — another policy's artifact copied under this name, or one built
//!   by another wasmtime or with other settings, is recompiled from the
//!   component, with a warning;
//! - the tag is HMAC-SHA256 over the claims and the artifact under a key kept
//!   in the cache directory (`key`, readable by this user only), so an
//!   artifact edited on disk — even with a checksum recomputed — fails the
//!   check and is discarded, never deserialised;
//! - the directory is created private to the agent's user, and one that
//!   others can write is refused (see [`crate::base::fsutil::private_dir`]).
//!
//! A valid artifact is mapped, not read: its code pages are file-backed and
//! shared by every process that maps it, rather than an anonymous copy per
//! agent. The file that is mapped is the open file that was authenticated
//! (through `/proc/self/fd`), so a rename in between cannot swap it; the
//! cache only ever replaces entries by rename, never writes one in place.
//!
//! Entries no serving version needs are removed by [`ArtifactCache::retain`]
//! (the agent's reloader runs it; the author's shared cache is left alone).
//!
//! An artifact compiled elsewhere enters only through
//! [`ArtifactCache::import`], which the agent calls once a signature under
//! its native-code key has vouched for the file (see
//! `crate::agent::pulled`); from then on it is authenticated like any entry,
//! and marked imported so that an agent told to compile everything itself
//! ignores it.
//!
//! The trust boundary: whoever can write the cache (or state) directory *as
//! the agent's user* can read the key and run native code in the agent, like
//! any compiled-code cache. Keep it on a path only the agent can write.

use crate::base::digest::Digest;
use crate::base::fsutil::{private_dir, write_atomic};
use crate::policy::artifacts::engine::EngineKey;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// What a garbage collection removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collected {
    /// Files removed.
    pub files: usize,
    /// Their size, in bytes.
    pub bytes: u64,
}

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

/// Marks a `.mac` file of this format.
const MAGIC: &[u8; 8] = b"vigilc03";
/// The claims the tag covers: magic, component digest, engine key, origin.
const CLAIMS: usize = 8 + 32 + 16 + 1;
/// A whole `.mac` file: the claims and the tag.
const MAC_FILE: usize = CLAIMS + 32;
/// Size of the authentication key.
const KEY_BYTES: usize = 32;
/// How much of an artifact is read at a time to authenticate it.
const CHUNK: usize = 64 << 10;

/// Where an entry's artifact was compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// By this agent (or its child compiler).
    Here = 0,
    /// Elsewhere, and imported once its signature verified.
    Imported = 1,
}

/// A directory of precompiled components for one engine configuration.
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_key: EngineKey,
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
    /// A cache in `dir` (created private if missing) for the engine of
    /// `engine_key`.
    pub(crate) fn new(dir: PathBuf, engine_key: EngineKey) -> std::io::Result<Self> {
        private_dir(&dir)?;
        Ok(Self {
            key: key(&dir)?,
            dir,
            engine_key,
        })
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry's two files: the artifact and its `.mac`.
    fn paths(&self, digest: &Digest) -> (PathBuf, PathBuf) {
        let stem = self
            .dir
            .join(format!("{}-{}", digest.hex(), self.engine_key));
        (stem.with_extension("cwasm"), stem.with_extension("mac"))
    }

    /// Whether the file `name` is an entry of the cache that is not kept: a
    /// half-written file, or an artifact or `.mac` of a component not in
    /// `keep` or of another engine configuration.
    fn is_garbage(&self, name: &str, keep: &HashSet<Digest>) -> bool {
        if name.starts_with('.') {
            return name
                .rsplit_once(".tmp-")
                .is_some_and(|(_, writer)| !writer_alive(writer));
        }
        let Some(stem) = name
            .strip_suffix(".cwasm")
            .or_else(|| name.strip_suffix(".mac"))
        else {
            return false;
        };
        let Some((digest, engine)) = stem.split_once('-') else {
            return false;
        };
        Digest::from_hex(digest)
            .is_some_and(|digest| engine != self.engine_key.hex() || !keep.contains(&digest))
    }

    fn claims(&self, digest: &Digest, origin: Origin) -> [u8; CLAIMS] {
        let mut claims = [0; CLAIMS];
        let (magic, rest) = claims.split_at_mut(MAGIC.len());
        let (component, rest) = rest.split_at_mut(32);
        let (engine, from) = rest.split_at_mut(16);
        magic.copy_from_slice(MAGIC);
        component.copy_from_slice(digest.as_bytes());
        engine.copy_from_slice(self.engine_key.as_bytes());
        from[0] = origin as u8;
        claims
    }

    fn mac(&self, claims: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key size");
        mac.update(claims);
        mac
    }

    /// Why `artifact`, with the `.mac` file `mac`, is not a valid artifact of
    /// component `digest` for this engine; else where it was compiled.
    /// Reads the artifact to its end.
    fn verify(&self, digest: &Digest, mac: &[u8], artifact: &mut File) -> Result<Origin, String> {
        if mac.len() != MAC_FILE {
            return Err(format!(
                "its .mac file is {} bytes, not {MAC_FILE} ({})",
                mac.len(),
                if mac.len() < MAC_FILE {
                    "truncated"
                } else {
                    "not of this format"
                }
            ));
        }
        let (claims, tag) = mac.split_at(CLAIMS);
        if &claims[..MAGIC.len()] != MAGIC {
            return Err("its .mac file is not of this format".into());
        }
        read_into(self.mac(claims), artifact)
            .map_err(|error| format!("cannot read it: {error}"))?
            .verify_slice(tag)
            .map_err(|_| "authentication failed: damaged, or not written by this agent")?;
        let expected = self.claims(digest, Origin::Here);
        let (component, engine) = (MAGIC.len()..MAGIC.len() + 32, MAGIC.len() + 32..CLAIMS - 1);
        if claims[component.clone()] != expected[component] {
            return Err("compiled from another component".into());
        }
        if claims[engine.clone()] != expected[engine] {
            return Err("compiled for another engine configuration".into());
        }
        match claims[CLAIMS - 1] {
            0 => Ok(Origin::Here),
            1 => Ok(Origin::Imported),
            other => Err(format!("unknown origin {other}")),
        }
    }

    /// Whether an entry for `digest` exists (its checks come at load).
    pub(crate) fn holds(&self, digest: &Digest) -> bool {
        let (path, mac) = self.paths(digest);
        path.is_file() && mac.is_file()
    }

    /// The cached component for `digest`, mapped from its file, if a valid
    /// entry exists (an imported one only if `imported` is accepted). An
    /// entry that fails any check is removed and reported as
    /// [`CacheOutcome::Damaged`].
    pub(crate) fn load(
        &self,
        engine: &Engine,
        digest: &Digest,
        imported: bool,
    ) -> Result<Component, CacheOutcome> {
        let (path, mac_path) = self.paths(digest);
        let (Ok(mac), Ok(mut artifact)) = (std::fs::read(&mac_path), File::open(&path)) else {
            return Err(CacheOutcome::Miss);
        };
        match self.verify(digest, &mac, &mut artifact) {
            Err(why) => return self.discard(digest, &why),
            Ok(Origin::Imported) if !imported => return Err(CacheOutcome::Miss),
            Ok(_) => {}
        }
        // The open file just authenticated, not whatever the name holds now.
        let verified = PathBuf::from(format!("/proc/self/fd/{}", artifact.as_raw_fd()));
        // SAFETY: the file is byte-for-byte what `Component::serialize`
        // produced for this component and this engine configuration (here,
        // or elsewhere under a signature of the native-code key): its claims
        // say so and this agent's key authenticates claims and artifact
        // together. That is what `deserialize_file` requires; its
        // other requirement, that the file never changes while mapped, holds
        // because the cache replaces entries by rename, never in place.
        match unsafe { Component::deserialize_file(engine, &verified) } {
            Ok(component) => Ok(component),
            Err(error) => self.discard(digest, &format!("{error:#}")),
        }
    }

    fn discard(&self, digest: &Digest, why: &str) -> Result<Component, CacheOutcome> {
        let (path, mac) = self.paths(digest);
        tracing::warn!(path = %path.display(), why, "discarding precompiled artifact; compiling the component again");
        let _ = std::fs::remove_file(&mac);
        let _ = std::fs::remove_file(&path);
        Err(CacheOutcome::Damaged)
    }

    /// Removes every entry but those of `keep` for this engine: entries of
    /// other components, of other engine configurations (another vigil or
    /// wasmtime) and temporary files whose writer is gone. The key, files
    /// the cache does not name and a live process's temporary file (a
    /// compile for a version in shadow may be storing into the cache) are
    /// left alone.
    ///
    /// # Errors
    /// The directory cannot be listed; a file that cannot be removed is skipped.
    pub(crate) fn retain(&self, keep: &HashSet<Digest>) -> std::io::Result<Collected> {
        let mut collected = Collected::default();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let garbage = entry
                .file_name()
                .to_str()
                .is_some_and(|name| self.is_garbage(name, keep));
            if !garbage {
                continue;
            }
            let size = entry.metadata().map_or(0, |m| m.len());
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    collected.files += 1;
                    collected.bytes += size;
                }
                Err(error) => {
                    tracing::warn!(path = %entry.path().display(), %error, "cannot remove an unused precompiled artifact");
                }
            }
        }
        Ok(collected)
    }

    /// Stores `component` under `digest`.
    ///
    /// # Errors
    /// It cannot be serialised or written; the next load just compiles again.
    pub(crate) fn store(&self, digest: &Digest, component: &Component) -> Result<(), String> {
        let artifact = component
            .serialize()
            .map_err(|error| format!("cannot serialise precompiled artifact: {error:#}"))?;
        let (path, mac_path) = self.paths(digest);
        let mac = self.mac_file(digest, Origin::Here, &mut artifact.as_slice());
        // The artifact first: a `.mac` never vouches for a file not yet written.
        write_atomic(&path, &artifact)
            .and_then(|()| write_atomic(&mac_path, &mac?))
            .map_err(|error| {
                format!(
                    "cannot store precompiled artifact in {}: {error}",
                    self.dir.display()
                )
            })
    }

    /// The `.mac` file vouching that `artifact` is component `digest`'s.
    fn mac_file(
        &self,
        digest: &Digest,
        origin: Origin,
        artifact: &mut impl Read,
    ) -> std::io::Result<Vec<u8>> {
        let claims = self.claims(digest, origin);
        let mac = read_into(self.mac(&claims), artifact)?;
        let mut file = Vec::with_capacity(MAC_FILE);
        file.extend_from_slice(&claims);
        file.extend_from_slice(&mac.finalize().into_bytes());
        Ok(file)
    }

    /// Takes the artifact at `artifact` as component `digest`'s, compiled
    /// elsewhere: hard-linked into the cache (copied across filesystems),
    /// then vouched for. The caller has verified where it comes from: from
    /// here on it is deserialised like an artifact compiled here. The file
    /// must never change in place (the blob store only renames).
    ///
    /// # Errors
    /// It cannot be linked, copied or read.
    pub(crate) fn import(&self, digest: &Digest, artifact: &Path) -> std::io::Result<()> {
        let (path, mac_path) = self.paths(digest);
        let tmp = self
            .dir
            .join(format!(".{}.tmp-{}", digest.hex(), std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        if std::fs::hard_link(artifact, &tmp).is_err() {
            std::fs::copy(artifact, &tmp)?;
        }
        // Vouch for what was linked, read through the new name.
        let mac = self.mac_file(digest, Origin::Imported, &mut File::open(&tmp)?);
        let placed = mac.and_then(|mac| {
            std::fs::rename(&tmp, &path)?;
            write_atomic(&mac_path, &mac)
        });
        if placed.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        placed
    }
}

/// Whether the process that names a temporary file (`.….tmp-PID`) still
/// runs: a compiler child or this agent may be writing it now, and its
/// rename must not find it gone. A file whose writer died is half-written
/// for good.
fn writer_alive(pid: &str) -> bool {
    pid.parse::<u32>()
        .is_ok_and(|pid| Path::new("/proc").join(pid.to_string()).exists())
}

/// `mac` updated with everything `reader` gives until its end.
fn read_into(mut mac: Hmac<Sha256>, reader: &mut impl Read) -> std::io::Result<Hmac<Sha256>> {
    let mut chunk = vec![0; CHUNK];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => return Ok(mac),
            Ok(n) => mac.update(&chunk[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_file_of_the_wrong_size_says_which_way_it_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let key = super::super::engine::engine_key(super::super::engine::Baseline::host()).unwrap();
        let cache = ArtifactCache::new(dir.path().join("cache"), key).unwrap();
        let artifact = dir.path().join("artifact");
        std::fs::write(&artifact, b"not compiled code").unwrap();
        let why = |mac: &[u8]| {
            let mut file = File::open(&artifact).unwrap();
            cache
                .verify(&Digest::of(b"component"), mac, &mut file)
                .unwrap_err()
        };
        assert_eq!(
            why(&[0; MAC_FILE - 1]),
            "its .mac file is 88 bytes, not 89 (truncated)"
        );
        assert_eq!(
            why(&[0; MAC_FILE + 1]),
            "its .mac file is 90 bytes, not 89 (not of this format)"
        );
        assert_eq!(why(&[0; MAC_FILE]), "its .mac file is not of this format");
    }
}
