//! The config checkpoint: what the cluster assigned this node, when it was
//! fetched, the last-known-good, the trial under way and the configs
//! rejected — everything the node needs to run on while the API server is
//! unreachable. One file, `config/checkpoint.json` under `--state-dir`:
//! a `sha256:HEX` line over the JSON that follows, written atomically
//! (temporary file, fsync, rename). A file that is damaged, half-written by
//! hand, or fails its checksum is reported and ignored, never trusted.

use crate::base::digest::Digest;
use crate::base::fsutil::{private_dir, write_atomic};
use crate::model::Layer;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Rejected configs remembered (the newest).
pub(crate) const REJECTED_KEPT: usize = 16;
/// Largest checkpoint read.
const MAX_CHECKPOINT_BYTES: u64 = 8 << 20;

/// A config layer as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedLayer {
    /// `VigilConfig/NAME@GENERATION`.
    pub source: String,
    /// The layer's JSON.
    pub json: String,
}

/// An ordered set of layers and its hash: what "a config" is here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerSet {
    /// The layers, base first.
    pub layers: Vec<SavedLayer>,
    /// sha256 over every layer's source and JSON, in order.
    pub hash: String,
}

impl LayerSet {
    /// The set of `layers`, hashed.
    pub fn new(layers: Vec<Layer>) -> Self {
        let mut framed = Vec::new();
        for layer in &layers {
            for part in [&layer.source, &layer.json] {
                framed.extend_from_slice(&(part.len() as u64).to_le_bytes());
                framed.extend_from_slice(part.as_bytes());
            }
        }
        let hash = Digest::of(&framed).hex();
        let layers = layers
            .into_iter()
            .map(|l| SavedLayer {
                source: l.source,
                json: l.json,
            })
            .collect();
        Self { layers, hash }
    }

    /// The layers, for the merger.
    pub fn layers(&self) -> Vec<Layer> {
        self.layers
            .iter()
            .map(|l| Layer {
                source: l.source.clone(),
                json: l.json.clone(),
            })
            .collect()
    }

    /// Whether no layer applies (the defaults run).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The hash's first 12 digits, and the layers' names, for people.
    pub fn describe(&self) -> String {
        if self.layers.is_empty() {
            return "the defaults".into();
        }
        let names: Vec<&str> = self.layers.iter().map(|l| l.source.as_str()).collect();
        format!("{} ({})", names.join(", "), &self.hash[..12])
    }
}

/// What the cluster assigned, and when it was fetched from the API server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assigned {
    /// The layers.
    pub set: LayerSet,
    /// When they were last read from the API server (never from a checkpoint).
    pub fetched_at: Timestamp,
}

/// A config on trial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trial {
    /// The hash of the config on trial.
    pub hash: String,
    /// When the trial began.
    pub since: Timestamp,
    /// How many times the agent started while it ran (1 for the start that began it).
    pub starts: u32,
}

/// A config that was rejected, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// Its hash.
    pub hash: String,
    /// Why.
    pub reason: String,
}

/// Everything saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// What the cluster assigned last.
    pub assigned: Option<Assigned>,
    /// The last config that passed its trial.
    pub last_known_good: Option<LayerSet>,
    /// The trial under way.
    pub trial: Option<Trial>,
    /// Configs not to run again until they change, oldest first.
    pub rejected: Vec<Rejected>,
    /// The layers that paused the node when last seen: an agent that
    /// restarts stays paused until the cluster says otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paused_by: Vec<String>,
}

impl Checkpoint {
    /// Why the config with `hash` was rejected, if it was.
    pub fn rejection(&self, hash: &str) -> Option<&str> {
        self.rejected
            .iter()
            .find(|r| r.hash == hash)
            .map(|r| r.reason.as_str())
    }

    /// Remembers the config with `hash` as rejected (the newest `REJECTED_KEPT`).
    pub fn reject(&mut self, hash: &str, reason: String) {
        self.rejected.retain(|r| r.hash != hash);
        self.rejected.push(Rejected {
            hash: hash.to_owned(),
            reason,
        });
        let extra = self.rejected.len().saturating_sub(REJECTED_KEPT);
        self.rejected.drain(..extra);
    }

    /// Whether this is worth writing over `saved`, the checkpoint last
    /// written: something differs beside the fetch time, or the fetch time
    /// moved on by `confirm_every` or more (a watch confirming what it holds
    /// is not a write at every wake).
    pub fn worth_saving(&self, saved: Option<&Checkpoint>, confirm_every: Duration) -> bool {
        let Some(saved) = saved else { return true };
        let mut probe = self.clone();
        if let (Some(now), Some(then)) = (&mut probe.assigned, &saved.assigned)
            && now
                .fetched_at
                .duration_since(then.fetched_at)
                .unsigned_abs()
                < confirm_every
        {
            now.fetched_at = then.fetched_at;
        }
        probe != *saved
    }
}

/// Why a checkpoint could not be used.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// It could not be read.
    #[error("cannot read the config checkpoint {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not what was written: damaged, truncated, or edited.
    #[error("the config checkpoint {path} is damaged ({problem}); ignoring it")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// It could not be written.
    #[error("cannot write the config checkpoint {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The checkpoint file under a state directory.
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    path: PathBuf,
}

impl CheckpointFile {
    /// The checkpoint of state directory `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        Self {
            path: state_dir.join("config").join("checkpoint.json"),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved checkpoint; `None` if there is none yet.
    ///
    /// # Errors
    /// Unreadable, or damaged: the caller reports it and starts without one.
    pub fn load(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        use std::io::Read as _;
        let damaged = |problem: &str| CheckpointError::Damaged {
            path: self.path.clone(),
            problem: problem.into(),
        };
        let read = |source| CheckpointError::Read {
            path: self.path.clone(),
            source,
        };
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read(e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_CHECKPOINT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
            return Err(damaged("larger than any checkpoint vigil writes"));
        }
        let Some(newline) = bytes.iter().position(|b| *b == b'\n') else {
            return Err(damaged("no checksum line"));
        };
        let (head, body) = (&bytes[..newline], &bytes[newline + 1..]);
        let want = head
            .strip_prefix(b"sha256:")
            .ok_or_else(|| damaged("no checksum line"))?;
        if want != Digest::of(body).hex().as_bytes() {
            return Err(damaged("checksum mismatch"));
        }
        serde_json::from_slice(body)
            .map(Some)
            .map_err(|e| damaged(&e.to_string()))
    }

    /// Moves a damaged checkpoint aside (`checkpoint.json.damaged`) for
    /// inspection; the next save starts anew.
    pub fn set_aside(&self) {
        let aside = self.path.with_extension("json.damaged");
        if let Err(error) = std::fs::rename(&self.path, &aside) {
            tracing::warn!(path = %self.path.display(), %error, "cannot set the damaged checkpoint aside");
        }
    }

    /// Saves `checkpoint`, atomically.
    ///
    /// # Errors
    /// The directory or file could not be written; the old file is intact.
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        let write = |source| CheckpointError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            private_dir(dir).map_err(write)?;
        }
        let body = serde_json::to_vec_pretty(checkpoint).expect("a checkpoint serialises");
        let mut bytes = format!("sha256:{}\n", Digest::of(&body).hex()).into_bytes();
        bytes.extend_from_slice(&body);
        write_atomic(&self.path, &bytes).map_err(write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(source: &str, json: &str) -> Layer {
        Layer {
            source: source.into(),
            json: json.into(),
        }
    }

    fn sample() -> Checkpoint {
        let set = LayerSet::new(vec![layer("VigilConfig/a@1", r#"{"evictionBurst":2}"#)]);
        Checkpoint {
            trial: Some(Trial {
                hash: set.hash.clone(),
                since: "2026-11-23T10:00:00Z".parse().unwrap(),
                starts: 1,
            }),
            assigned: Some(Assigned {
                set,
                fetched_at: "2026-11-23T10:00:00Z".parse().unwrap(),
            }),
            paused_by: vec!["VigilConfig/vigil-pause@1".into()],
            ..Checkpoint::default()
        }
    }

    #[test]
    fn a_checkpoint_round_trips_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path());
        assert!(file.load().unwrap().is_none());
        file.save(&sample()).unwrap();
        assert_eq!(file.load().unwrap(), Some(sample()));
    }

    #[test]
    fn a_damaged_or_edited_checkpoint_is_never_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path());
        file.save(&sample()).unwrap();
        let good = std::fs::read(file.path()).unwrap();
        let edited = String::from_utf8(good.clone())
            .unwrap()
            .replace("\"starts\": 1", "\"starts\": 0");
        let cases: [(&str, Vec<u8>); 5] = [
            ("edited", edited.into_bytes()),
            ("truncated", good[..good.len() / 2].to_vec()),
            ("empty", Vec::new()),
            (
                "no checksum",
                good[good.iter().position(|b| *b == b'\n').unwrap() + 1..].to_vec(),
            ),
            ("garbage", vec![0xff; 100]),
        ];
        for (what, bytes) in cases {
            std::fs::write(file.path(), &bytes).unwrap();
            let error = file.load().unwrap_err();
            assert!(
                matches!(error, CheckpointError::Damaged { .. }),
                "{what}: {error}"
            );
        }
    }

    #[test]
    fn a_write_cut_short_leaves_the_previous_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path());
        file.save(&sample()).unwrap();
        // What a kill during a save leaves: a partial temporary file beside it.
        let partial = file.path().with_file_name(".checkpoint.json.tmp-99999");
        std::fs::write(&partial, b"sha256:00\n{\"assig").unwrap();
        assert_eq!(file.load().unwrap(), Some(sample()));
    }

    #[test]
    fn the_hash_depends_on_every_layer_in_order() {
        let a = layer("VigilConfig/a@1", "{}");
        let b = layer("VigilConfig/b@1", "{}");
        let ab = LayerSet::new(vec![a.clone(), b.clone()]);
        assert_ne!(ab.hash, LayerSet::new(vec![b, a.clone()]).hash);
        assert_ne!(
            LayerSet::new(vec![a]).hash,
            LayerSet::new(vec![layer("VigilConfig/a@2", "{}")]).hash
        );
    }

    #[test]
    fn a_newer_fetch_time_alone_is_saved_only_once_it_moved_on_enough() {
        let every = Duration::from_secs(300);
        let saved = sample();
        assert!(saved.worth_saving(None, every));
        assert!(!saved.worth_saving(Some(&saved), every));
        let mut confirmed = saved.clone();
        let assigned = confirmed.assigned.as_mut().unwrap();
        assigned.fetched_at += jiff::SignedDuration::from_secs(299);
        assert!(!confirmed.worth_saving(Some(&saved), every));
        let assigned = confirmed.assigned.as_mut().unwrap();
        assigned.fetched_at += jiff::SignedDuration::from_secs(1);
        assert!(confirmed.worth_saving(Some(&saved), every));
        let mut changed = saved.clone();
        changed.reject("h", "refused".into());
        assert!(changed.worth_saving(Some(&saved), every));
    }

    #[test]
    fn only_the_newest_rejections_are_kept() {
        let mut checkpoint = Checkpoint::default();
        for i in 0..REJECTED_KEPT + 3 {
            checkpoint.reject(&format!("h{i}"), "bad".into());
        }
        assert_eq!(checkpoint.rejected.len(), REJECTED_KEPT);
        assert!(checkpoint.rejection("h0").is_none());
        assert_eq!(
            checkpoint.rejection(&format!("h{}", REJECTED_KEPT + 2)),
            Some("bad")
        );
    }
}
