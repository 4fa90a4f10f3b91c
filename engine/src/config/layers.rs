//! Which `VigilConfig` objects apply to this node, and in which order: the
//! agent matches every object against its own Node (no central
//! controller). Order, base first: cluster-wide layers, then node-selector
//! layers, then node-name layers (each group by priority ascending, then
//! name); a node-name layer past its `expiresAfter` is dropped, and so is a
//! layer whose `rollout.percent` does not reach this node's bucket. A
//! pausing layer is said apart, never merged.

use super::crd::ConfigLayer;
use crate::base::node_hash::bucket;
use crate::model::Layer;
use jiff::Timestamp;
use kube::core::{Selector, SelectorExt};
use std::collections::BTreeMap;

/// The layers that apply to one node, at one time.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    /// The layers, base first.
    pub layers: Vec<Layer>,
    /// When the selection changes by itself next (a layer expiring).
    pub next_expiry: Option<Timestamp>,
    /// Objects that could not be matched (an invalid selector), or whose
    /// config is not applied (a pausing layer's), with why.
    pub skipped: Vec<(String, String)>,
    /// The pausing layers (`spec.pause`), by source, never among `layers`:
    /// the node stops evicting and tainting while any applies.
    pub paused_by: Vec<String>,
}

/// How specific a layer is: later kinds apply later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Cluster,
    Selector,
    Names,
}

/// The layers among `objects` that apply to the node `name` with `labels`
/// at `now`.
pub(crate) fn select<'a>(
    objects: impl IntoIterator<Item = &'a ConfigLayer>,
    name: &str,
    labels: &BTreeMap<String, String>,
    now: Timestamp,
) -> Selection {
    let mut selection = Selection::default();
    let mut chosen: Vec<(Kind, i32, String, &ConfigLayer)> = Vec::new();
    for object in objects {
        if object.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let object_name = object.metadata.name.clone().unwrap_or_default();
        if let Some(rollout) = &object.spec.rollout
            && bucket(&object_name, name) >= rollout.percent
        {
            continue;
        }
        let target = object.spec.target.clone().unwrap_or_default();
        let kind = match (&target.node_selector, &target.node_names) {
            (Some(_), Some(_)) => {
                selection.skipped.push((
                    object.source(),
                    "sets both nodeSelector and nodeNames".into(),
                ));
                continue;
            }
            (Some(selector), None) => match Selector::try_from(selector.clone()) {
                Ok(selector) if selector.matches(labels) => Kind::Selector,
                Ok(_) => continue,
                Err(error) => {
                    selection.skipped.push((object.source(), error.to_string()));
                    continue;
                }
            },
            (None, Some(names)) => {
                if !names.iter().any(|n| n == name) {
                    continue;
                }
                if let Some(expiry) = &target.expires_after {
                    if expiry.0 <= now {
                        continue;
                    }
                    selection.next_expiry = Some(
                        selection
                            .next_expiry
                            .map_or(expiry.0, |next| next.min(expiry.0)),
                    );
                }
                Kind::Names
            }
            (None, None) => Kind::Cluster,
        };
        chosen.push((kind, object.spec.priority, object_name, object));
    }
    chosen.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
    // A brake is no config: merged, it would start a trial on every node.
    let (pausing, chosen): (Vec<_>, Vec<_>) = chosen
        .into_iter()
        .partition(|(.., object)| object.spec.pause);
    for (.., object) in pausing {
        let config = object.spec.config.as_object();
        if config.is_some_and(|c| !c.is_empty()) {
            let why = "pauses the node: its config is not applied".to_owned();
            selection.skipped.push((object.source(), why));
        }
        selection.paused_by.push(object.source());
    }
    selection.layers = chosen
        .into_iter()
        .map(|(.., object)| Layer {
            source: object.source(),
            json: object.spec.config.to_string(),
        })
        .collect();
    selection
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::crd::{ConfigLayerSpec, LayerRollout, Target};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector, LabelSelectorRequirement, Time,
    };

    fn object(name: &str, priority: i32, target: Option<Target>) -> ConfigLayer {
        let mut object = ConfigLayer::new(
            name,
            ConfigLayerSpec {
                target,
                priority,
                rollout: None,
                pause: false,
                config: serde_json::json!({"evictionBurst": priority.unsigned_abs().max(1)}),
            },
        );
        object.metadata.generation = Some(1);
        object
    }

    fn selector(key: &str, operator: &str, values: &[&str]) -> Option<Target> {
        Some(Target {
            node_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: key.into(),
                    operator: operator.into(),
                    values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
                }]),
                match_labels: None,
            }),
            ..Target::default()
        })
    }

    fn names(names: &[&str], expires: Option<&str>) -> Option<Target> {
        Some(Target {
            node_names: Some(names.iter().map(|v| (*v).to_owned()).collect()),
            expires_after: expires.map(|t| Time(t.parse().unwrap())),
            ..Target::default()
        })
    }

    fn sources(selection: &Selection) -> Vec<&str> {
        selection.layers.iter().map(|l| l.source.as_str()).collect()
    }

    const NOW: &str = "2026-11-23T12:00:00Z";

    #[test]
    fn layers_go_cluster_then_selector_then_names_each_by_priority_then_name() {
        let objects = [
            object("node-fix", 0, names(&["n1"], None)),
            object("gpu", 5, selector("pool", "In", &["gpu", "batch"])),
            object("everyone", 0, None),
            object("batch", 5, selector("pool", "In", &["batch"])),
            object("low", -1, selector("pool", "Exists", &[])),
            object("other-node", 0, names(&["n2"], None)),
            object("not-batch", 0, selector("pool", "NotIn", &["batch"])),
            object("also-everyone", 0, Some(Target::default())),
        ];
        let labels = [("pool".to_owned(), "batch".to_owned())].into();
        let selection = select(&objects, "n1", &labels, NOW.parse().unwrap());
        assert_eq!(
            sources(&selection),
            [
                "VigilConfig/also-everyone@1",
                "VigilConfig/everyone@1",
                "VigilConfig/low@1",
                "VigilConfig/batch@1",
                "VigilConfig/gpu@1",
                "VigilConfig/node-fix@1",
            ]
        );
        assert!(selection.skipped.is_empty() && selection.next_expiry.is_none());
    }

    #[test]
    fn a_node_name_layer_applies_until_it_expires() {
        let objects = [
            object("until-one", 0, names(&["n1"], Some("2026-11-23T13:00:00Z"))),
            object("until-two", 0, names(&["n1"], Some("2026-11-23T14:00:00Z"))),
            object("expired", 0, names(&["n1"], Some("2026-11-23T11:00:00Z"))),
        ];
        let labels = BTreeMap::new();
        let selection = select(&objects, "n1", &labels, NOW.parse().unwrap());
        assert_eq!(
            sources(&selection),
            ["VigilConfig/until-one@1", "VigilConfig/until-two@1"]
        );
        assert_eq!(
            selection.next_expiry,
            Some("2026-11-23T13:00:00Z".parse().unwrap())
        );
        let later = select(
            &objects,
            "n1",
            &labels,
            "2026-11-23T13:00:00Z".parse().unwrap(),
        );
        assert_eq!(sources(&later), ["VigilConfig/until-two@1"]);
    }

    #[test]
    fn an_invalid_selector_or_target_is_skipped_and_said() {
        let both = Some(Target {
            node_names: Some(vec!["n1".into()]),
            ..selector("pool", "In", &["a"]).unwrap()
        });
        let objects = [
            object("bad-operator", 0, selector("pool", "Near", &["a"])),
            object("both", 0, both),
        ];
        let selection = select(&objects, "n1", &BTreeMap::new(), NOW.parse().unwrap());
        assert!(selection.layers.is_empty());
        let skipped: Vec<&str> = selection.skipped.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            skipped,
            ["VigilConfig/bad-operator@1", "VigilConfig/both@1"]
        );
    }

    #[test]
    fn a_rollout_applies_a_layer_to_about_its_share_of_nodes_and_raising_it_only_adds() {
        let nodes: Vec<String> = (0..1000).map(|i| format!("node-{i}")).collect();
        let labels = BTreeMap::new();
        let mut before: Vec<&String> = Vec::new();
        for percent in [0, 10, 50, 100] {
            let mut layer = object("pool-a-v2", 0, None);
            layer.spec.rollout = Some(LayerRollout { percent });
            let taking: Vec<&String> = nodes
                .iter()
                .filter(|n| {
                    let selection = select([&layer], n, &labels, NOW.parse().unwrap());
                    !selection.layers.is_empty()
                })
                .collect();
            let expected = 10 * usize::from(percent);
            assert!(
                taking.len().abs_diff(expected) <= 60,
                "{percent}%: {} nodes",
                taking.len()
            );
            assert!(
                before.iter().all(|n| taking.contains(n)),
                "raising to {percent}% dropped a node"
            );
            before = taking;
        }
    }

    #[test]
    fn the_enforce_layer_goes_over_cluster_layers_and_under_pools_and_nodes() {
        let labels = BTreeMap::from([("pool".to_owned(), "batch".to_owned())]);
        let fleet = object("fleet", 0, None);
        let pool = object(
            "batch-observes",
            0,
            Some(Target {
                node_selector: Some(LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                }),
                ..Target::default()
            }),
        );
        let enforce = ConfigLayer::enforcing(100);
        let selection = select(
            [&pool, &enforce, &fleet],
            "node-1",
            &labels,
            NOW.parse().unwrap(),
        );
        let sources: Vec<&str> = selection.layers.iter().map(|l| l.source.as_str()).collect();
        assert_eq!(
            sources,
            [
                "VigilConfig/fleet@1",
                "VigilConfig/vigil-enforce@0",
                "VigilConfig/batch-observes@1"
            ]
        );
        let none = select(
            [&ConfigLayer::enforcing(0)],
            "node-1",
            &labels,
            NOW.parse().unwrap(),
        );
        assert!(none.layers.is_empty(), "0% enforces on no node");
    }

    #[test]
    fn a_pausing_layer_is_named_on_the_nodes_it_targets_only() {
        let labels = BTreeMap::new();
        let mut pool = object("pool-a-pause", 0, None);
        pool.spec.pause = true;
        pool.spec.target = Some(Target {
            node_names: Some(vec!["node-1".into()]),
            ..Target::default()
        });
        let fleet = object("fleet", 0, None);
        let at = |node: &str| select([&pool, &fleet], node, &labels, NOW.parse().unwrap());
        let paused = at("node-1");
        assert_eq!(paused.paused_by, ["VigilConfig/pool-a-pause@1"]);
        let merged: Vec<&str> = paused.layers.iter().map(|l| l.source.as_str()).collect();
        assert_eq!(merged, ["VigilConfig/fleet@1"], "a brake is not merged");
        assert_eq!(
            paused.skipped,
            [(
                "VigilConfig/pool-a-pause@1".to_owned(),
                "pauses the node: its config is not applied".to_owned()
            )]
        );
        assert!(at("node-2").paused_by.is_empty());
        let pause = ConfigLayer::pausing();
        assert_eq!(
            select([&pause], "node-2", &labels, NOW.parse().unwrap()).paused_by,
            ["VigilConfig/vigil-pause@0"]
        );
    }
}
