//! Which version of a `VigilPolicy` one node serves: the canary nodes and
//! the nodes whose stable hash of (policy name, node name) falls under
//! `rollout.percent` take `source`; the others keep `rollout.previous` (or,
//! without one, no registry version at all). The hash is the same in every
//! process and release, so every agent decides alone and raising the
//! percentage only adds nodes. Of the nodes that do not serve `source`,
//! those under `rollout.shadow.percent` (same hash) run it in shadow.

use super::crd::{Rollout, VigilPolicySpec};
use crate::base::node_hash::bucket;
use kube::core::{Selector, SelectorExt};
use std::collections::BTreeMap;

/// The node a decision is made for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// Which reference of `spec` the node serves for `policy`, and whether it
/// is the newest (`source`): `None` when it serves no registry version.
pub(crate) fn choose<'a>(
    policy: &str,
    spec: &'a VigilPolicySpec,
    node: Node<'_>,
) -> Option<Choice<'a>> {
    let newest = Choice {
        reference: &spec.source.oci.reference,
        newest: true,
    };
    let Some(rollout) = &spec.rollout else {
        return Some(newest);
    };
    if is_canary(rollout, node) || bucket(policy, node.name) < rollout.percent {
        return Some(newest);
    }
    rollout.previous.as_deref().map(|reference| Choice {
        reference,
        newest: false,
    })
}

/// Whether the node runs `source` in shadow of `policy`: it does not serve
/// it (`serving`, from [`choose`]) and its hash falls under
/// `rollout.shadow.percent`. Answers the reference.
pub(crate) fn shadow<'a>(
    policy: &str,
    spec: &'a VigilPolicySpec,
    node: Node<'_>,
    serving: Option<Choice<'_>>,
) -> Option<&'a str> {
    let shadow = spec.rollout.as_ref()?.shadow.as_ref()?;
    let serves_newest = serving.is_some_and(|c| c.newest);
    (!serves_newest && bucket(policy, node.name) < shadow.percent)
        .then_some(spec.source.oci.reference.as_str())
}

/// A node's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice<'a> {
    /// The pinned reference it serves.
    pub reference: &'a str,
    /// Whether it is `source` (else `rollout.previous`).
    pub newest: bool,
}

/// Whether the node is in the rollout's canary stage.
fn is_canary(rollout: &Rollout, node: Node<'_>) -> bool {
    let Some(canary) = &rollout.canary else {
        return false;
    };
    let named = canary
        .node_names
        .as_ref()
        .is_some_and(|names| names.iter().any(|n| n == node.name));
    let selected = canary
        .node_selector
        .clone()
        .is_some_and(|selector| Selector::try_from(selector).is_ok_and(|s| s.matches(node.labels)));
    named || selected
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::crd::{Canary, OciSource, PolicySource, Shadow};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    const NEW: &str = "registry.example/vigil/sorter@sha256:new";
    const OLD: &str = "registry.example/vigil/sorter@sha256:old";

    fn spec(percent: u8, previous: Option<&str>, canary: Option<Canary>) -> VigilPolicySpec {
        VigilPolicySpec {
            source: PolicySource {
                oci: OciSource {
                    reference: NEW.into(),
                    pull_secret_ref: None,
                    insecure: false,
                    allow_unsigned: false,
                },
            },
            rollout: Some(Rollout {
                percent,
                previous: previous.map(String::from),
                canary,
                shadow: None,
            }),
            precompiled: Vec::new(),
            trial: None,
        }
    }

    fn nodes() -> Vec<String> {
        (0..1000).map(|i| format!("node-{i:04}")).collect()
    }

    fn taking_new(spec: &VigilPolicySpec, nodes: &[String]) -> Vec<String> {
        let labels = BTreeMap::new();
        nodes
            .iter()
            .filter(|name| {
                choose(
                    "sorter",
                    spec,
                    Node {
                        name,
                        labels: &labels,
                    },
                )
                .is_some_and(|c| c.newest)
            })
            .cloned()
            .collect()
    }

    #[test]
    fn a_percentage_takes_about_its_share_and_raising_it_only_adds_nodes() {
        let nodes = nodes();
        let mut before: Vec<String> = Vec::new();
        for percent in [0, 1, 10, 25, 50, 90, 100] {
            let taking = taking_new(&spec(percent, Some(OLD), None), &nodes);
            let expected = 10 * usize::from(percent);
            // Within 4 standard deviations of a binomial draw over 1000 nodes.
            let p = f64::from(percent) / 100.0;
            let slack = (4.0 * (1000.0 * p * (1.0 - p)).sqrt()).ceil() as usize;
            assert!(
                taking.len().abs_diff(expected) <= slack,
                "{percent}%: {} nodes",
                taking.len()
            );
            assert!(
                before.iter().all(|n| taking.contains(n)),
                "raising to {percent}% dropped a node"
            );
            before = taking;
        }
        assert_eq!(before.len(), 1000);
    }

    #[test]
    fn other_nodes_keep_the_previous_version_or_none() {
        let labels = BTreeMap::new();
        let node = Node {
            name: "node-0001",
            labels: &labels,
        };
        let keeping = spec(0, Some(OLD), None);
        let old = choose("sorter", &keeping, node).unwrap();
        assert_eq!((old.reference, old.newest), (OLD, false));
        assert_eq!(choose("sorter", &spec(0, None, None), node), None);
        let mut all = spec(0, None, None);
        all.rollout = None;
        assert_eq!(choose("sorter", &all, node).unwrap().reference, NEW);
    }

    #[test]
    fn canary_nodes_take_the_new_version_at_zero_percent() {
        let pool: BTreeMap<String, String> = [("pool".to_owned(), "canary".to_owned())].into();
        let other = BTreeMap::new();
        let canary = Canary {
            node_selector: Some(LabelSelector {
                match_labels: Some(pool.clone()),
                ..LabelSelector::default()
            }),
            node_names: Some(vec!["node-0007".into()]),
        };
        let spec = spec(0, Some(OLD), Some(canary));
        let newest = |name, labels| {
            choose("sorter", &spec, Node { name, labels })
                .unwrap()
                .newest
        };
        assert!(newest("node-0001", &pool));
        assert!(newest("node-0007", &other));
        assert!(!newest("node-0001", &other));
    }

    #[test]
    fn the_shadow_share_is_the_nodes_under_its_percent_that_do_not_serve_source() {
        let nodes = nodes();
        let labels = BTreeMap::new();
        let mut spec = spec(10, Some(OLD), None);
        spec.rollout.as_mut().unwrap().shadow = Some(Shadow {
            percent: 30,
            max_divergence_percent: None,
        });
        let newest = taking_new(&spec, &nodes);
        let shadowing: Vec<&String> = nodes
            .iter()
            .filter(|name| {
                let node = Node {
                    name,
                    labels: &labels,
                };
                let serving = choose("sorter", &spec, node);
                shadow("sorter", &spec, node, serving).is_some()
            })
            .collect();
        assert!(shadowing.iter().all(|n| !newest.contains(n)));
        // About a fifth: under 30 but not under 10, within 4 deviations.
        assert!(shadowing.len().abs_diff(200) <= 51, "{}", shadowing.len());
        // A shadow below the percentage has no node left to run on.
        spec.rollout.as_mut().unwrap().percent = 30;
        let none = nodes.iter().any(|name| {
            let node = Node {
                name,
                labels: &labels,
            };
            shadow("sorter", &spec, node, choose("sorter", &spec, node)).is_some()
        });
        assert!(!none);
    }

    #[test]
    fn the_hash_is_fixed_across_processes_and_releases() {
        // sha256("sorter\0node-000N"), its first 8 bytes big-endian, mod 100,
        // as Python's hashlib computes it: changing the hash would move
        // nodes between versions in the middle of a rollout.
        let buckets: Vec<u8> = (0..4)
            .map(|i| bucket("sorter", &format!("node-000{i}")))
            .collect();
        assert_eq!(buckets, [38, 82, 34, 10]);
    }
}
