//! The config schema: the JSON Schema of [`VigilConfig`], derived from the
//! Rust type, checks every layer before the merger sees it and the merger's
//! answer after; the same type gives the CRD its schema (`super::crd`) and
//! `docs/configuration.md` its reference table ([`reference()`]).

use super::{ConfigError, MAX_LAYER_BYTES, MAX_LAYER_DEPTH, PolicyConfig, VigilConfig};
use crate::base::schema_table::{Column, Property, Section, table};
use crate::base::text::bounded;
use crate::model::Layer;
use jsonschema::Validator;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::OnceLock;

/// Most problems reported for one layer.
const MAX_PROBLEMS: usize = 32;
/// Longest problem text kept (a problem quotes the offending value).
const MAX_PROBLEM_BYTES: usize = 256;

/// A policy's own configuration: any JSON object, kept as written (the
/// CRD keeps its unknown fields).
pub fn free_form(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The JSON Schema (draft 2020-12) of vigil's config.
pub fn json_schema() -> Value {
    schemars::schema_for!(VigilConfig).to_value()
}

fn validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::validator_for(&json_schema()).expect("the derived schema is a valid schema")
    })
}

/// Every way `config` differs from the schema, each with its JSON path
/// (`$.policies.NAME.deadlineMs: …`); at most `MAX_PROBLEMS`.
pub fn violations(config: &Value) -> Vec<String> {
    validator()
        .iter_errors(config)
        .take(MAX_PROBLEMS)
        .map(|error| {
            let path = error
                .instance_path()
                .iter()
                .fold("$".to_owned(), |mut path, segment| {
                    let _ = write!(path, ".{segment}");
                    path
                });
            bounded(&format!("{path}: {error}"), MAX_PROBLEM_BYTES)
        })
        .collect()
}

/// How deeply `json` nests objects and arrays, in one pass without
/// recursion; brackets inside strings do not count.
fn depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        match (in_string, byte) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'{' | b'[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `value` without its `null`s: in a layer, `null` removes a setting
/// (RFC 7386), which is always allowed.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Checks one layer before it reaches the merger: bounded in size and
/// depth (its cost must be bounded whatever the merger does with it), a
/// JSON object, and every field it sets as the schema says.
///
/// # Errors
/// [`ConfigError::Layer`] or [`ConfigError::Schema`], naming the layer.
pub fn check_layer(layer: &Layer) -> Result<(), ConfigError> {
    let refuse = |problem: String| ConfigError::Layer {
        layer: layer.source.clone(),
        problem,
    };
    if layer.json.len() > MAX_LAYER_BYTES {
        return Err(refuse(format!(
            "{} bytes; at most {MAX_LAYER_BYTES}",
            layer.json.len()
        )));
    }
    if depth(&layer.json) > MAX_LAYER_DEPTH {
        return Err(refuse(format!(
            "nested more than {MAX_LAYER_DEPTH} levels deep"
        )));
    }
    let value: Value =
        serde_json::from_str(&layer.json).map_err(|error| refuse(format!("not JSON: {error}")))?;
    if !value.is_object() {
        return Err(refuse("must be a JSON object".into()));
    }
    let problems = violations(&without_nulls(&value));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Schema {
            layer: layer.source.clone(),
            problems,
        })
    }
}

/// The reference table of every config field — type, default, allowed
/// values, meaning — as `docs/configuration.md` carries it.
pub fn reference() -> String {
    let schema = json_schema();
    let defs = &schema["$defs"];
    let defaults = serde_json::to_value(VigilConfig::default()).expect("defaults serialise");
    let policy = serde_json::to_value(PolicyConfig::default()).expect("defaults serialise");
    let default = |p: Property<'_>| {
        p.default
            .map_or_else(|| "unset".to_owned(), |v| format!("`{v}`"))
    };
    let columns = [
        Column::new("type", &kind),
        Column::new("default", &default),
        Column::new("allowed", &allowed),
        Column::meaning(),
    ];
    let sections = [
        Section {
            prefix: "",
            properties: &schema["properties"],
            defaults: Some(&defaults),
            nested: true,
        },
        Section {
            prefix: "policies.NAME.",
            properties: &defs[PolicyConfig::schema_name().as_ref()]["properties"],
            defaults: Some(&policy),
            nested: true,
        },
    ];
    table(&columns, &sections, defs)
}

/// A config field's type: its JSON types, or `object`.
fn kind(property: Property<'_>) -> String {
    match &property.schema["type"] {
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        Value::String(kind) => kind.clone(),
        _ if property.schema.get("$ref").is_some() => "object".into(),
        _ => "any".into(),
    }
}

/// A config field's bounds: a range, a least value, or lengths.
fn allowed(property: Property<'_>) -> String {
    let schema = property.schema;
    let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
    match (
        bound("minimum").or(bound("minLength")),
        bound("maximum").or(bound("maxLength")),
    ) {
        (Some(min), Some(max)) if schema.get("minLength").is_some() => {
            format!("{min}–{max} characters")
        }
        (Some(min), Some(max)) => format!("{min}–{max}"),
        (Some(min), None) => format!("≥ {min}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(json: &str) -> Layer {
        Layer {
            source: "VigilConfig/pool@3".into(),
            json: json.into(),
        }
    }

    fn problems(json: &str) -> Vec<String> {
        match check_layer(&layer(json)) {
            Err(ConfigError::Schema { layer, problems }) => {
                assert_eq!(layer, "VigilConfig/pool@3");
                problems
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_layer_is_checked_against_the_schema_with_each_path() {
        assert_eq!(
            problems(
                r#"{"evictionBurst": 0, "policies": {"js-sorter": {"deadlineMs": 70000, "config": 5}}}"#
            ),
            [
                "$.evictionBurst: 0 is less than the minimum of 1",
                "$.policies.js-sorter.config: 5 is not of type \"object\"",
                "$.policies.js-sorter.deadlineMs: 70000 is greater than the maximum of 60000",
            ]
        );
        let unknown = problems(r#"{"evictionBursts": 2}"#);
        assert!(
            unknown[0].starts_with("$: Additional properties are not allowed ('evictionBursts'"),
            "{unknown:?}"
        );
        assert_eq!(
            problems(r#"{"sorter": ""}"#),
            [r#"$.sorter: "" is shorter than 1 character"#]
        );
    }

    #[test]
    fn null_removes_a_setting_and_is_always_allowed() {
        for json in [
            r#"{"evictionBurst": null}"#,
            r#"{"pdbOverrideAfterSeconds": null, "policies": {"p": {"config": {"a": null}}}}"#,
            r#"{"policies": null}"#,
        ] {
            assert!(check_layer(&layer(json)).is_ok(), "{json}");
        }
    }

    #[test]
    fn a_layer_that_is_not_a_json_object_is_refused_before_the_schema() {
        for (json, problem) in [
            ("[1]", "must be a JSON object"),
            (r#"{"evictionBurst": "#, "not JSON"),
        ] {
            let error = check_layer(&layer(json)).unwrap_err().to_string();
            assert!(
                error.starts_with("config layer VigilConfig/pool@3: ") && error.contains(problem),
                "{error}"
            );
        }
    }

    #[test]
    fn a_problem_quoting_a_huge_value_is_cut() {
        let huge = format!(r#"{{"sorter": ["{}"]}}"#, "x".repeat(100_000));
        let found = problems(&huge);
        assert!(
            found[0].len() < MAX_PROBLEM_BYTES + 64,
            "{}",
            found[0].len()
        );
        assert!(found[0].contains("more bytes cut"));
    }

    #[test]
    fn depth_is_counted_outside_strings_in_one_pass() {
        assert_eq!(depth(r#"{"a": [1, {"b": "[[[{{"}]}"#), 3);
        assert_eq!(depth(r#"{"a": "\"[["}"#), 1);
        let deep = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
        assert_eq!(depth(&deep), 1_000_000);
        assert!(check_layer(&layer(&deep)).is_err());
        let too_deep = format!(
            "{{\"policies\": {{\"p\": {{\"config\": {}{}}}}}}}",
            "[".repeat(MAX_LAYER_DEPTH),
            "]".repeat(MAX_LAYER_DEPTH)
        );
        assert!(matches!(
            check_layer(&layer(&too_deep)),
            Err(ConfigError::Layer { .. })
        ));
        assert!(check_layer(&layer(&"x".repeat(MAX_LAYER_BYTES + 1))).is_err());
        assert!(check_layer(&layer(r#"{"policies": {"p": {"config": {"b": 1}}}}"#)).is_ok());
    }

    #[test]
    fn the_operator_guide_carries_the_current_reference() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let guide = std::fs::read_to_string(path).unwrap();
        let table = reference();
        assert!(
            guide.contains(&table),
            "docs/configuration.md must carry this reference table, generated from the schema:\n{table}"
        );
    }

    #[test]
    fn the_reference_names_every_field_with_its_default() {
        let table = reference();
        for row in [
            "| `evictionPeriodSeconds` | integer | `5` | 1–3600 |",
            "| `pdbOverrideAfterSeconds` | integer or null | `null` | 30–604800 |",
            "| `policies.NAME.deadlineMs` | integer or null | unset | 1–60000 |",
            "| `configTrialSeconds` | integer | `600` | 0–604800 |",
        ] {
            assert!(table.contains(row), "{row}\n{table}");
        }
    }
}
