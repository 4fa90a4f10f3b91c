//! A stable number for a node under a key, uniform over the fleet's nodes:
//! what rollouts pick nodes by (a `VigilPolicy`'s or a `VigilConfig`'s
//! percentage) and where in a window a node applies a change. The same in
//! every process and release, so every agent decides alone.

use sha2::{Digest as _, Sha256};

/// The bucket of `node` under `key` (a policy's or a config's name), in
/// `0..100`: a rollout reaches the node when its bucket is under the
/// percentage.
pub fn bucket(key: &str, node: &str) -> u8 {
    u8::try_from(node_hash(key, node) % 100).expect("under 100")
}

/// A stable number for `node` under `key`, uniform over the fleet's nodes
/// (the head of a SHA-256): what rollouts and spreads pick nodes by.
pub fn node_hash(key: &str, node: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update([0]);
    hasher.update(node.as_bytes());
    let hash = hasher.finalize();
    u64::from_be_bytes(hash[..8].try_into().expect("eight bytes"))
}
