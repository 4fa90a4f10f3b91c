//! Guardrails on volume: at most so many evictions per node and per
//! namespace in a sliding window, for what vigil decides beyond the kubelet
//! (soft and force evictions, stall signals, any strategy's own signal), as
//! the descheduler caps its evictions per node and per namespace.
//!
//! A hard threshold on a signal the kubelet also watches is never capped:
//! there the kubelet would evict anyway, and a capped vigil would only hand
//! the pod to the kubelet's harsher kill.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, SystemTime};

/// The caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeLimits {
    /// The sliding window the caps count in.
    pub window: Duration,
    /// Most capped evictions on this node per window (`None`: no cap).
    pub per_node: Option<usize>,
    /// Most capped evictions in one namespace per window (`None`: no cap).
    pub per_namespace: Option<usize>,
}

/// Which cap holds a victim back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The node's.
    Node,
    /// The victim's namespace's.
    Namespace,
}

impl Cap {
    /// The cap in a word: `node` or `namespace`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Namespace => "namespace",
        }
    }
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The capped evictions decided lately: when, and in which namespace.
#[derive(Debug, Default)]
pub(crate) struct Recent(VecDeque<(SystemTime, String)>);

impl Recent {
    /// The cap that holds an eviction in `namespace` back at `now`, if one does.
    pub(crate) fn full(
        &mut self,
        now: SystemTime,
        namespace: &str,
        limits: &VolumeLimits,
    ) -> Option<Cap> {
        while let Some((at, _)) = self.0.front() {
            if now.duration_since(*at).unwrap_or_default() < limits.window {
                break;
            }
            self.0.pop_front();
        }
        if limits.per_node.is_some_and(|max| self.0.len() >= max) {
            return Some(Cap::Node);
        }
        let here = self.0.iter().filter(|(_, ns)| ns == namespace).count();
        limits
            .per_namespace
            .is_some_and(|max| here >= max)
            .then_some(Cap::Namespace)
    }

    /// Counts an eviction in `namespace` decided at `now`.
    pub(crate) fn record(&mut self, now: SystemTime, namespace: &str) {
        self.0.push_back((now, namespace.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_count_in_a_sliding_window_per_node_and_per_namespace() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let limits = VolumeLimits {
            window: Duration::from_secs(600),
            per_node: Some(3),
            per_namespace: Some(2),
        };
        let mut recent = Recent::default();
        for s in [0, 10] {
            assert_eq!(recent.full(at(s), "shop", &limits), None);
            recent.record(at(s), "shop");
        }
        assert_eq!(recent.full(at(20), "shop", &limits), Some(Cap::Namespace));
        assert_eq!(recent.full(at(20), "batch", &limits), None);
        recent.record(at(20), "batch");
        assert_eq!(recent.full(at(30), "web", &limits), Some(Cap::Node));
        // The first falls out of the window at 600 s.
        assert_eq!(recent.full(at(600), "web", &limits), None);
        assert_eq!(recent.full(at(600), "shop", &limits), None);
        let unlimited = VolumeLimits {
            per_node: None,
            per_namespace: None,
            ..limits
        };
        assert_eq!(recent.full(at(601), "shop", &unlimited), None);
    }
}
