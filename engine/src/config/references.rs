//! ConfigMaps a policy's settings name (`configFrom`): each named key holds
//! a YAML or JSON object that is merged under the policy's own `config`.
//!
//! A resolved key becomes a layer of its own, `ConfigMap/NS/NAME[KEY] for
//! POLICY`, placed under the `VigilConfig` layers (so `config` written in a
//! `VigilConfig` wins) and merged by the merger like any layer. The
//! ConfigMap's content is thereby part of the config's hash and checkpoint:
//! a changed value is a new config on trial, and a node without the API
//! server runs the values it last fetched. A reference that cannot be
//! resolved refuses the config, naming the reference and why.

use super::{ConfigError, VigilConfig};
use crate::model::Layer;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A key of a ConfigMap that holds part of a policy's own config.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ConfigRef {
    /// The ConfigMap's namespace: vigil's own (the agent reads ConfigMaps in
    /// no other; a reference elsewhere refuses the config).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The ConfigMap's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key whose value, a YAML or JSON object, is merged under `config`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

impl fmt::Display for ConfigRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConfigMap/{}/{}[{}]",
            self.namespace, self.name, self.key
        )
    }
}

/// Every reference of `config`: by policy name, then in the order written.
pub(crate) fn wanted(config: &VigilConfig) -> Vec<(String, ConfigRef)> {
    config
        .policies
        .iter()
        .flat_map(|(policy, p)| p.config_from.iter().map(|r| (policy.clone(), r.clone())))
        .collect()
}

/// The source of the layer that resolves `reference` for `policy`.
pub(crate) fn source(policy: &str, reference: &ConfigRef) -> String {
    format!("{reference} for {policy}")
}

/// The layer that puts `value` (the key's text) under `policy`'s config.
///
/// # Errors
/// Why the text is not a YAML or JSON object.
pub(crate) fn layer(policy: &str, reference: &ConfigRef, value: &str) -> Result<Layer, String> {
    let parsed: serde_json::Value =
        serde_norway::from_str(value).map_err(|e| format!("not YAML or JSON: {e}"))?;
    if !parsed.is_object() {
        return Err("not a YAML or JSON object".into());
    }
    let json = serde_json::json!({"policies": {policy: {"config": parsed}}});
    Ok(Layer {
        source: source(policy, reference),
        json: json.to_string(),
    })
}

/// Why a reference could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unresolved {
    /// Why, for people.
    pub why: String,
    /// The object could not be read now (a passing fault, not a fault of the
    /// config): the config is tried again rather than refused.
    pub transient: bool,
}

impl Unresolved {
    /// A fault of the config (the object or key is missing, unparsable).
    pub(crate) fn lasting(why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            transient: false,
        }
    }
}

/// What reading a referenced ConfigMap found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read<'a> {
    /// Its watch has not listed it yet: wait for it.
    Pending,
    /// It cannot be read now (a passing fault), for this reason.
    Unavailable(&'a str),
    /// It does not exist.
    Missing,
    /// It exists; the value of the referenced key, if it has one.
    Found(Option<&'a str>),
}

/// Resolves `wanted` (each policy's references) into layers, those in
/// `namespace` as `read` finds them, and says by layer source why any
/// could not be; `None` while one is [`Read::Pending`]. The layers are in
/// the order written.
pub(crate) fn resolve<'a>(
    wanted: &[(String, ConfigRef)],
    namespace: &str,
    read: impl Fn(&ConfigRef) -> Read<'a>,
) -> Option<(Vec<Layer>, BTreeMap<String, Unresolved>)> {
    let mut resolved = Vec::new();
    let mut problems = BTreeMap::new();
    for (policy, reference) in wanted {
        let problem = if reference.namespace == namespace {
            match read(reference) {
                Read::Pending => return None,
                Read::Unavailable(why) => Unresolved {
                    why: format!("cannot be read: {why}"),
                    transient: true,
                },
                Read::Missing => Unresolved::lasting("the ConfigMap does not exist"),
                Read::Found(None) => Unresolved::lasting("the ConfigMap has no such key"),
                Read::Found(Some(value)) => match layer(policy, reference, value) {
                    Ok(layer) => {
                        resolved.push(layer);
                        continue;
                    }
                    Err(why) => Unresolved::lasting(why),
                },
            }
        } else {
            Unresolved::lasting(format!(
                "ConfigMaps are read only in vigil's namespace, {namespace}"
            ))
        };
        problems.insert(source(policy, reference), problem);
    }
    Some((resolved, problems))
}

/// Checks that every reference of `config` is resolved by one of `layers`;
/// `problems` says, by layer source, why one could not be.
///
/// # Errors
/// [`ConfigError::Reference`] for the first reference left unresolved.
pub(crate) fn check(
    config: &VigilConfig,
    layers: &[Layer],
    problems: &BTreeMap<String, Unresolved>,
) -> Result<(), ConfigError> {
    for (policy, reference) in wanted(config) {
        let source = source(&policy, &reference);
        if !layers.iter().any(|l| l.source == source) {
            let problem = problems.get(&source).cloned().unwrap_or_else(|| {
                Unresolved::lasting(
                    "not read (configFrom is resolved by `vigil agent` from the cluster)",
                )
            });
            return Err(ConfigError::Reference {
                policy,
                reference: reference.to_string(),
                problem: problem.why,
                transient: problem.transient,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> ConfigRef {
        ConfigRef {
            namespace: "ops".into(),
            name: "thresholds".into(),
            key: "memory.yaml".into(),
        }
    }

    fn config() -> VigilConfig {
        serde_json::from_value(serde_json::json!({
            "policies": {"memory-pressure": {"configFrom": [
                {"namespace": "ops", "name": "thresholds", "key": "memory.yaml"}
            ]}}
        }))
        .unwrap()
    }

    #[test]
    fn a_key_becomes_a_layer_under_the_policy_config() {
        let layer = layer("memory-pressure", &reference(), "hard: 1Gi\nsoft: 2Gi\n").unwrap();
        assert_eq!(
            layer.source,
            "ConfigMap/ops/thresholds[memory.yaml] for memory-pressure"
        );
        let json: serde_json::Value = serde_json::from_str(&layer.json).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"policies": {"memory-pressure": {"config": {"hard": "1Gi", "soft": "2Gi"}}}})
        );
    }

    #[test]
    fn a_key_that_is_not_an_object_is_refused() {
        assert_eq!(
            layer("p", &reference(), "- a\n- b\n").unwrap_err(),
            "not a YAML or JSON object"
        );
        assert!(
            layer("p", &reference(), "a: [")
                .unwrap_err()
                .starts_with("not YAML or JSON:")
        );
    }

    #[test]
    fn an_unresolved_reference_refuses_the_config_with_the_reason_given() {
        let config = config();
        let error = check(&config, &[], &BTreeMap::new()).unwrap_err();
        assert!(error.to_string().contains("not read"), "{error}");
        let source = source("memory-pressure", &reference());
        let problems = BTreeMap::from([(
            source.clone(),
            Unresolved::lasting("the ConfigMap does not exist"),
        )]);
        let error = check(&config, &[], &problems).unwrap_err();
        assert_eq!(
            error.to_string(),
            "policy memory-pressure: configFrom ConfigMap/ops/thresholds[memory.yaml]: the ConfigMap does not exist"
        );
        let resolved = Layer {
            source,
            json: "{}".into(),
        };
        check(&config, &[resolved], &BTreeMap::new()).unwrap();
    }

    #[test]
    fn only_an_object_that_could_not_be_read_now_makes_a_passing_error() {
        let config = config();
        let source = source("memory-pressure", &reference());
        let unreadable = Unresolved {
            why: "cannot be read: 503".into(),
            transient: true,
        };
        let problems = BTreeMap::from([(source.clone(), unreadable)]);
        assert!(check(&config, &[], &problems).unwrap_err().is_transient());
        let missing = BTreeMap::from([(source, Unresolved::lasting("no such key"))]);
        assert!(!check(&config, &[], &missing).unwrap_err().is_transient());
    }

    #[test]
    fn references_resolve_as_read_in_vigils_namespace_only() {
        let at = |namespace: &str, name: &str| ConfigRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: "k".to_owned(),
        };
        let wanted = [
            ("sorter".to_owned(), at("vigil", "good")),
            ("sorter".to_owned(), at("other", "good")),
            ("merger".to_owned(), at("vigil", "gone")),
            ("merger".to_owned(), at("vigil", "keyless")),
            ("merger".to_owned(), at("vigil", "down")),
            ("merger".to_owned(), at("vigil", "list")),
        ];
        let read = |r: &ConfigRef| match r.name.as_str() {
            "good" => Read::Found(Some("weight: 2")),
            "gone" => Read::Missing,
            "keyless" => Read::Found(None),
            "down" => Read::Unavailable("503"),
            "list" => Read::Found(Some("[1, 2]")),
            _ => Read::Pending,
        };
        let (layers, problems) = resolve(&wanted, "vigil", read).unwrap();
        let sources: Vec<&str> = layers.iter().map(|l| l.source.as_str()).collect();
        assert_eq!(sources, ["ConfigMap/vigil/good[k] for sorter"]);
        let why = |policy: &str, r: ConfigRef| problems[&source(policy, &r)].clone();
        assert!(
            why("sorter", at("other", "good"))
                .why
                .contains("only in vigil's namespace")
        );
        assert_eq!(
            why("merger", at("vigil", "gone")),
            Unresolved::lasting("the ConfigMap does not exist")
        );
        assert_eq!(
            why("merger", at("vigil", "keyless")),
            Unresolved::lasting("the ConfigMap has no such key")
        );
        let down = why("merger", at("vigil", "down"));
        assert!(
            down.transient && down.why == "cannot be read: 503",
            "{down:?}"
        );
        assert_eq!(
            why("merger", at("vigil", "list")),
            Unresolved::lasting("not a YAML or JSON object")
        );
        let pending = [("sorter".to_owned(), at("vigil", "unlisted"))];
        assert!(resolve(&pending, "vigil", read).is_none());
    }
}
