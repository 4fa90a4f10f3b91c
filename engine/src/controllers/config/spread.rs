//! When a node applies a changed selection of config layers: a stable
//! turn of its own in the `--config-spread` window, so a fleet applies one
//! `VigilConfig` edit over the window rather than in the same second.

use crate::config::references::Unresolved;
use crate::model::Layer;
use std::collections::BTreeMap;
use std::time::Duration;

/// When this node applies a changed selection of layers: at once for the
/// first one (the agent starting), else `offset` after it first saw the
/// change. A further change while waiting keeps the turn; going back to
/// what applies cancels it.
#[derive(Debug, Default)]
pub(super) struct Spread {
    pub(super) offset: Duration,
    /// The fingerprint of the selection last applied.
    applied: Option<u64>,
    /// A changed selection and when it is applied.
    pending: Option<(u64, tokio::time::Instant)>,
}

impl Spread {
    /// `None` when `selected` (a [`fingerprint`]) may be applied `now`,
    /// else when.
    pub(super) fn wait(
        &mut self,
        selected: u64,
        now: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        if self.applied.is_some_and(|applied| applied != selected) {
            let due = self.pending.map_or(now + self.offset, |(_, due)| due);
            self.pending = Some((selected, due));
            if now < due {
                return Some(due);
            }
        }
        self.applied = Some(selected);
        self.pending = None;
        None
    }
}

/// This node's offset in a window of `spread`: stable (a hash of its name),
/// and spread evenly over a fleet.
pub fn turn(node: &str, spread: Duration) -> Duration {
    let head = crate::base::node_hash::node_hash("config-spread", node);
    // The top 53 bits, as a fraction in [0, 1).
    spread.mul_f64((head >> 11) as f64 / (1u64 << 53) as f64)
}

/// What identifies a selection: its layers and the references they could not resolve.
pub(super) fn fingerprint(layers: &[Layer], problems: &BTreeMap<String, Unresolved>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for layer in layers {
        (&layer.source, &layer.json).hash(&mut hasher);
    }
    for (source, problem) in problems {
        (source, &problem.why, problem.transient).hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn a_changed_selection_waits_for_the_nodes_turn() {
        let start = Instant::now();
        let offset = Duration::from_secs(12);
        let mut spread = Spread {
            offset,
            ..Spread::default()
        };
        assert_eq!(
            spread.wait(1, start),
            None,
            "the first selection applies at once"
        );
        assert_eq!(spread.wait(1, start), None, "unchanged");
        let due = start + Duration::from_secs(5) + offset;
        let at = start + Duration::from_secs(5);
        assert_eq!(spread.wait(2, at), Some(due), "a change waits");
        let later = at + Duration::from_secs(6);
        assert_eq!(
            spread.wait(3, later),
            Some(due),
            "another change keeps the turn"
        );
        assert_eq!(spread.wait(3, due), None, "applied at its turn");
        assert_eq!(spread.wait(4, due), Some(due + offset));
        assert_eq!(spread.wait(3, due), None, "back to what applies: no wait");
        assert_eq!(
            spread.wait(4, due + offset),
            Some(due + offset * 2),
            "a new wait"
        );
    }

    #[test]
    fn turns_are_stable_and_cover_the_window() {
        let spread = Duration::from_secs(30);
        let turns: Vec<Duration> = (0..1000)
            .map(|i| turn(&format!("node-{i}"), spread))
            .collect();
        assert!(turns.iter().all(|t| *t < spread));
        assert_eq!(turn("node-7", spread), turns[7]);
        // About a tenth of the fleet in each tenth of the window.
        for tenth in 0..10u32 {
            let (from, to) = (spread * tenth / 10, spread * (tenth + 1) / 10);
            let count = turns.iter().filter(|t| (from..to).contains(*t)).count();
            assert!((60..=140).contains(&count), "{count} in [{from:?}, {to:?})");
        }
        assert_eq!(turn("node-7", Duration::ZERO), Duration::ZERO);
    }
}
