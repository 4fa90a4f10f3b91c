//! The contract's records in the forms they take as data outside a call:
//! a strategy's node as `vigil simulate --snapshots` writes it and
//! `vigil policy test` reads it, and a merger's rejections as one line.

use super::bindings::{MergeRejection, MetLevel, Pod, Signal};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A node as a strategy sees it, as data: a snapshot without the strategy's
/// own config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotData {
    /// The time of the snapshot, in Unix milliseconds.
    pub now_ms: i64,
    /// Node signals.
    pub signals: Vec<Signal>,
    /// The pods on the node, with their usage.
    pub pods: Vec<Pod>,
    /// What the strategy reported last cycle (`NotMet` if absent).
    #[serde(default = "not_met")]
    pub last_met: MetLevel,
}

fn not_met() -> MetLevel {
    MetLevel::NotMet
}

/// A merger's rejections, written on one line, `; ` between them.
#[derive(Debug)]
pub struct Rejections(pub Vec<MergeRejection>);

impl fmt::Display for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            let source = if r.source.is_empty() {
                "merge"
            } else {
                &r.source
            };
            write!(f, "{sep}{} (from {source}): {}", r.field, r.reason)?;
        }
        Ok(())
    }
}
