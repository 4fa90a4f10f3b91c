//! The `VigilConfig` custom resource (`vigil.dev/v1alpha1`, cluster-scoped):
//! one config layer and the nodes it applies to. Its `spec.config` has the
//! schema of [`VigilConfig`] itself, without defaults:
//! a layer sets only what it names, so the API server must not fill in the
//! rest. `vigil crd` prints its definition with the others
//! ([`crate::crds`]).

use super::VigilConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::{CustomResource, KubeSchema, Resource};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A layer of vigil's config for some nodes.
// Each printer column repeats `type_`, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "vigil.dev",
    version = "v1alpha1",
    kind = "VigilConfig",
    root = "ConfigLayer",
    plural = "vigilconfigs",
    shortname = "vc",
    category = "vigil",
    doc = "A layer of vigil's config, applied by every vigil agent whose node it targets",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(name = "Pause", type_ = "boolean", json_path = ".spec.pause"),
    printcolumn(
        name = "Selector",
        type_ = "string",
        json_path = ".spec.target.nodeSelector",
        priority = "1"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".spec.target.nodeNames"),
    printcolumn(
        name = "Rollout",
        type_ = "integer",
        json_path = ".spec.rollout.percent"
    ),
    printcolumn(
        name = "Expires",
        type_ = "date",
        json_path = ".spec.target.expiresAfter"
    ),
    printcolumn(
        name = "Generation",
        type_ = "integer",
        json_path = ".metadata.generation"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLayerSpec {
    /// The nodes this layer applies to; absent: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// Among the layers of one kind (node selector, node names) that apply
    /// to a node, a higher priority applies later and wins; equal
    /// priorities go by name.
    #[serde(default)]
    pub priority: i32,
    /// A staged rollout: the layer applies only to a share of the nodes its
    /// target selects; absent: to all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<LayerRollout>,
    /// The brake: the nodes this layer applies to stop evicting and
    /// tainting at once (no `--config-spread`, no trial), whatever any
    /// other layer says, until it is deleted or set `false`. A pausing
    /// layer is no config: its `config` is not applied (leave it empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause: bool,
    /// The settings this layer sets, in vigil's config shape; `null`
    /// removes a setting of an earlier layer.
    #[serde(default = "empty_object")]
    #[schemars(schema_with = "layer_schema")]
    pub config: Value,
}

/// Which nodes a layer applies to: those whose labels match a selector,
/// or those named (a per-node override, possibly temporary).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("!(has(self.nodeSelector) && has(self.nodeNames))").message("set nodeSelector or nodeNames, not both"),
    validation = Rule::new("!has(self.expiresAfter) || has(self.nodeNames)").message("expiresAfter applies to nodeNames only")
)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Nodes whose labels match (matchLabels, matchExpressions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Nodes by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub node_names: Option<Vec<String>>,
    /// When set, a `nodeNames` layer stops applying at this time (RFC 3339):
    /// a temporary override that undoes itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after: Option<Time>,
}

/// The share of the targeted nodes a layer applies to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LayerRollout {
    /// The share of nodes, by a stable hash of this object's name and the
    /// node's name (as `VigilPolicy` rollouts choose): raising it only adds
    /// nodes.
    #[schemars(range(min = 0, max = 100))]
    pub percent: u8,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// [`VigilConfig`]'s schema with every `default` removed.
fn layer_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = VigilConfig::json_schema(generator).to_value();
    strip_defaults(&mut schema);
    Schema::try_from(schema).expect("still a schema")
}

/// Removes the `default` keyword from `schema` and every schema inside it.
fn strip_defaults(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    object.remove("default");
    for (keyword, value) in object.iter_mut() {
        match (keyword.as_str(), value) {
            ("properties" | "$defs" | "definitions", Value::Object(schemas)) => {
                schemas.values_mut().for_each(strip_defaults);
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(schemas)) => {
                schemas.iter_mut().for_each(strip_defaults);
            }
            ("items" | "additionalProperties" | "not", value) => strip_defaults(value),
            _ => {}
        }
    }
}

/// The name of the layer `vigil pause` writes and `vigil resume` deletes.
pub const PAUSE_LAYER: &str = "vigil-pause";

/// The name of the layer `vigil enforce` writes.
pub const ENFORCE_LAYER: &str = "vigil-enforce";
/// Its priority: over the cluster-wide layers of lower priority (an
/// operator's `dryRun: true` among them), under every node-selector and
/// node-name layer (a pool or a node kept observing by a layer of its own).
pub const ENFORCE_PRIORITY: i32 = 1000;

impl ConfigLayer {
    /// The enforce step: a cluster-wide layer `dryRun: false` on `percent`
    /// of the nodes (a stable hash of the layer's and each node's name, so
    /// raising it only adds nodes), lifting the install's `--observe-first`.
    pub fn enforcing(percent: u8) -> Self {
        Self::new(
            ENFORCE_LAYER,
            ConfigLayerSpec {
                target: None,
                priority: ENFORCE_PRIORITY,
                rollout: Some(LayerRollout { percent }),
                pause: false,
                config: serde_json::json!({"dryRun": false}),
            },
        )
    }

    /// The fleet's brake: a cluster-wide layer that pauses every node.
    pub fn pausing() -> Self {
        Self::new(
            PAUSE_LAYER,
            ConfigLayerSpec {
                target: None,
                priority: 0,
                rollout: None,
                pause: true,
                config: empty_object(),
            },
        )
    }

    /// The layer's name as the merger and every report show it:
    /// `VigilConfig/NAME@GENERATION`.
    pub fn source(&self) -> String {
        format!(
            "{}/{}@{}",
            Self::kind(&()),
            self.metadata.name.as_deref().unwrap_or_default(),
            self.metadata.generation.unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_spec_config_carries_the_config_schema_without_defaults() {
        let crd = serde_json::to_value(ConfigLayer::crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        let config =
            &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"];
        assert_eq!(
            config["properties"]["evictionBurst"]["minimum"].as_f64(),
            Some(1.0)
        );
        let text = config["properties"].to_string();
        assert!(!text.contains("\"default\""), "{text}");
        let policy = &config["properties"]["policies"]["additionalProperties"];
        assert_eq!(
            policy["properties"]["config"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["kind"], "VigilConfig");
    }

    #[test]
    fn the_target_carries_its_cel_rules() {
        let crd = serde_json::to_value(ConfigLayer::crd()).unwrap();
        let target = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["target"];
        let rules: Vec<&str> = target["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["rule"].as_str().unwrap())
            .collect();
        assert_eq!(rules.len(), 2, "{target}");
    }

    #[test]
    fn the_kustomization_installs_the_definitions_and_the_example_config_is_valid() {
        let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
        let text = std::fs::read_to_string(format!("{deploy}/kustomization.yaml")).unwrap();
        let kustomization: serde_json::Value = serde_norway::from_str(&text).unwrap();
        let resources: Vec<String> =
            serde_json::from_value(kustomization["resources"].clone()).unwrap();
        assert!(resources.iter().any(|r| r == "crds.yaml"), "{resources:?}");
        for resource in &resources {
            let path = format!("{deploy}/{resource}");
            assert!(std::path::Path::new(&path).is_file(), "{path} is missing");
        }
        let text = std::fs::read_to_string(format!("{deploy}/examples/vigilconfig.yaml")).unwrap();
        let example: ConfigLayer = serde_norway::from_str(&text).unwrap();
        let layer = crate::model::Layer {
            source: example.source(),
            json: example.spec.config.to_string(),
        };
        crate::config::schema::check_layer(&layer).unwrap();
    }

    #[test]
    fn a_layer_is_named_with_its_generation() {
        let mut layer = ConfigLayer::new(
            "pool-a",
            ConfigLayerSpec {
                target: None,
                priority: 0,
                rollout: None,
                pause: false,
                config: empty_object(),
            },
        );
        layer.metadata.generation = Some(4);
        assert_eq!(layer.source(), "VigilConfig/pool-a@4");
    }

    #[test]
    fn the_enforce_layer_is_a_valid_layer_that_lifts_the_dry_run_on_its_share() {
        let layer = serde_json::to_value(ConfigLayer::enforcing(10)).unwrap();
        assert_eq!(layer["apiVersion"], "vigil.dev/v1alpha1");
        assert_eq!(layer["kind"], "VigilConfig");
        assert_eq!(layer["metadata"]["name"], ENFORCE_LAYER);
        assert_eq!(layer["spec"]["priority"], ENFORCE_PRIORITY);
        assert_eq!(layer["spec"]["rollout"]["percent"], 10);
        assert_eq!(
            layer["spec"]["config"],
            serde_json::json!({"dryRun": false})
        );
        assert!(layer["spec"].get("target").is_none(), "every node: {layer}");
        let object: ConfigLayer = serde_json::from_value(layer).unwrap();
        let layer = crate::model::Layer {
            source: object.source(),
            json: object.spec.config.to_string(),
        };
        crate::config::schema::check_layer(&layer).unwrap();
    }
}
