//! The per-node targets every simulated fleet is held to, whichever API
//! server it ran against: the phases by name, every LIST from the watch
//! cache, quiet at rest, a config change written once or twice per node and
//! never before the node's turn.

use super::Phase;
use std::time::Duration;

/// The phase `name` of `phases`.
///
/// # Panics
/// If it did not run.
pub fn phase<'a>(phases: &'a [Phase], name: &str) -> &'a Phase {
    phases
        .iter()
        .find(|p| p.name == name)
        .expect("the phase ran")
}

impl Phase {
    /// Every LIST came from the watch cache, and every node listed.
    ///
    /// # Panics
    /// If not, naming the consistent reads.
    pub fn assert_lists_from_the_cache(&self) {
        let consistent: Vec<&str> = (self.lists())
            .filter(|r| !r.from_cache())
            .map(|r| r.uri.as_str())
            .collect();
        assert!(
            consistent.is_empty(),
            "{}: consistent reads {consistent:?}",
            self.name
        );
        assert!(self.lists().count() >= self.nodes, "{}: lists", self.name);
    }

    /// At most 0.1 non-watch requests per node a minute, and at most 4
    /// watches open per node.
    ///
    /// # Panics
    /// If not, with the requests.
    pub fn assert_at_rest(&self) {
        let quiet: Vec<_> = (self.non_watch())
            .map(|r| (&r.method, r.status, &r.uri, &r.body))
            .collect();
        assert!(
            self.per_node_minute(quiet.len()) <= 0.1,
            "{}: {quiet:?}",
            self.name
        );
        let open = self.open_watches.expect("counted at rest");
        assert!(
            open <= 4 * self.nodes,
            "{open} watches open for {} nodes",
            self.nodes
        );
    }

    /// Each of `nodes` wrote once or twice, not before its turn (`turn`:
    /// its offset in the config spread), and every write was a node's own.
    ///
    /// # Panics
    /// If not, naming the node.
    pub fn assert_config_change(&self, nodes: &[String], turn: impl Fn(&str) -> Duration) {
        for node in nodes {
            let writes: Vec<_> = self.writes_of(node).collect();
            assert!(
                (1..=2).contains(&writes.len()),
                "{node}: {:?}",
                writes
                    .iter()
                    .map(|r| (&r.method, &r.uri))
                    .collect::<Vec<_>>()
            );
            let due = self.began + turn(node);
            assert!(
                writes.iter().all(|w| w.at >= due),
                "{node} wrote before its turn"
            );
        }
        assert_eq!(
            self.writes().count(),
            nodes
                .iter()
                .map(|n| self.writes_of(n).count())
                .sum::<usize>(),
            "every write is a node's own"
        );
    }

    /// A pause or resume costs no read: no LIST and no GET, and at most one
    /// write of each node's `VigilNodeStatus` (its mode).
    ///
    /// # Panics
    /// If not, with the requests.
    pub fn assert_brake(&self, nodes: &[String]) {
        let reads: Vec<&str> = (self.non_watch())
            .filter(|r| r.method == "GET")
            .map(|r| r.uri.as_str())
            .collect();
        assert!(reads.is_empty(), "{}: reads {reads:?}", self.name);
        for node in nodes {
            let own = format!("/vigilnodestatuses/{node}");
            let writes = (self.writes_of(node))
                .filter(|r| r.uri.split('?').next().is_some_and(|p| p.ends_with(&own)))
                .count();
            assert!(
                writes <= 1,
                "{}: {node} wrote its status {writes} times",
                self.name
            );
        }
    }
}
