//! Content digests: a policy version is the sha256 of its component bytes.
//! [`WasmBytes`] carries the bytes with their digest, computed once, from the
//! file read to the loaded policy.

use sha2::{Digest as _, Sha256};
use std::fmt;
use std::sync::Arc;

/// The sha256 of a component's bytes; identifies a policy version.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The digest whose raw bytes are `bytes` (a hash computed elsewhere).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Full lowercase hex form.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses the full hex form.
    pub fn from_hex(text: &str) -> Option<Self> {
        // Lowercase only, as OCI and vigil write them (`from_str_radix`
        // alone would take `B` and a `+` sign).
        if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(out))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// Short form (12 hex digits), enough to tell versions apart in logs.
impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex()[..12])
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// Component bytes and their digest, hashed once.
#[derive(Debug, Clone)]
pub struct WasmBytes {
    bytes: Arc<[u8]>,
    digest: Digest,
}

impl WasmBytes {
    /// The bytes, hashed.
    pub fn new(bytes: Arc<[u8]>) -> Self {
        let digest = Digest::of(&bytes);
        Self { bytes, digest }
    }

    /// The component's bytes, shared.
    pub fn bytes(&self) -> &Arc<[u8]> {
        &self.bytes
    }

    /// Their digest.
    pub fn digest(&self) -> Digest {
        self.digest
    }
}

impl From<Arc<[u8]>> for WasmBytes {
    fn from(bytes: Arc<[u8]>) -> Self {
        Self::new(bytes)
    }
}

impl From<&[u8]> for WasmBytes {
    fn from(bytes: &[u8]) -> Self {
        Self::new(bytes.into())
    }
}

impl From<Vec<u8>> for WasmBytes {
    fn from(bytes: Vec<u8>) -> Self {
        Self::new(bytes.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let d = Digest::of(b"policy");
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        assert_eq!(d.to_string().len(), 12);
        assert_eq!(Digest::from_hex("zz"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
    }
}
