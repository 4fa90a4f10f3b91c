//! `default-merger`: vigil's built-in config merger.
//!
//! Applies each layer over the previous ones as a JSON merge patch (RFC 7386:
//! objects merge key by key, `null` deletes, anything else replaces), then
//! validates the known fields of vigil's configuration, reporting every
//! problem with its JSON path and the layer that set it.
//!
//! vigil's configuration (every field optional):
//! ```json
//! { "evictionPeriodSeconds": 5, "evictionBurst": 3, "conditionTransitionSeconds": 300,
//!   "dryRun": false, "pdbOverrideAfterSeconds": 60, "sorter": "default-sorter",
//!   "policies": { "<name>": { "enabled": true, "dryRun": false, "deadlineMs": 100,
//!                             "memoryLimitMiB": 64, "trialSeconds": 300, "config": {} } } }
//! ```

/// Bindings generated from the `config-merger` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "config-merger" });
}

pub use bindings::exports::vigil::policy::merger::{Layer, Rejection};
use serde_json::{Map, Value};

/// The shape a config value must have.
enum Shape {
    PositiveInt,
    NonNegativeInt,
    Bool,
    Text,
    Anything,
    Object(&'static [(&'static str, Shape)]),
    MapOf(&'static Shape),
}

const POLICY: Shape = Shape::Object(&[
    ("enabled", Shape::Bool),
    ("dryRun", Shape::Bool),
    ("deadlineMs", Shape::PositiveInt),
    ("memoryLimitMiB", Shape::PositiveInt),
    ("trialSeconds", Shape::NonNegativeInt),
    ("config", Shape::Anything),
]);

const VIGIL_CONFIG: Shape = Shape::Object(&[
    ("evictionPeriodSeconds", Shape::PositiveInt),
    ("evictionBurst", Shape::PositiveInt),
    ("conditionTransitionSeconds", Shape::NonNegativeInt),
    ("dryRun", Shape::Bool),
    ("pdbOverrideAfterSeconds", Shape::NonNegativeInt),
    ("sorter", Shape::Text),
    ("policies", Shape::MapOf(&POLICY)),
]);

/// Applies `patch` to `target` as an RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Appends to `problems` every way `value` at `path` differs from `shape`.
fn check(
    value: &Value,
    shape: &Shape,
    path: &mut Vec<String>,
    problems: &mut Vec<(Vec<String>, String)>,
) {
    let mut problem = |reason: &str| problems.push((path.clone(), reason.to_owned()));
    match shape {
        Shape::PositiveInt if value.as_u64().is_none_or(|v| v == 0) => {
            problem("must be a positive integer")
        }
        Shape::NonNegativeInt if value.as_u64().is_none() => {
            problem("must be a non-negative integer")
        }
        Shape::Bool if !value.is_boolean() => problem("must be true or false"),
        Shape::Text if !value.is_string() => problem("must be a string"),
        Shape::Object(_) | Shape::MapOf(_) if !value.is_object() => problem("must be an object"),
        Shape::Object(fields) => {
            for (key, field) in value.as_object().expect("checked above") {
                path.push(key.clone());
                match fields.iter().find(|(name, _)| name == key) {
                    Some((_, shape)) => check(field, shape, path, problems),
                    None => problems.push((path.clone(), "unknown field".into())),
                }
                path.pop();
            }
        }
        Shape::MapOf(shape) => {
            for (key, field) in value.as_object().expect("checked above") {
                path.push(key.clone());
                check(field, shape, path, problems);
                path.pop();
            }
        }
        _ => {}
    }
}

fn json_path(path: &[String]) -> String {
    path.iter()
        .fold("$".to_owned(), |acc, key| format!("{acc}.{key}"))
}

/// Whether `value` holds something at `path`.
fn sets(value: &Value, path: &[String]) -> bool {
    path.iter().try_fold(value, |v, key| v.get(key)).is_some()
}

/// Merges `layers` into vigil's effective configuration.
///
/// # Errors
/// Every layer that is not a JSON object, and every unknown or mistyped field
/// of the merged result, attributed to the last layer that set it.
pub fn merge(layers: &[Layer]) -> Result<String, Vec<Rejection>> {
    let mut merged = Value::Object(Map::new());
    let mut parsed = Vec::with_capacity(layers.len());
    let mut rejections = Vec::new();
    for layer in layers {
        match serde_json::from_str::<Value>(&layer.json) {
            Ok(value @ Value::Object(_)) => {
                merge_patch(&mut merged, &value);
                parsed.push((layer, value));
            }
            Ok(_) => rejections.push(rejection(&layer.source, "$", "layer must be a JSON object")),
            Err(e) => rejections.push(rejection(
                &layer.source,
                "$",
                &format!("layer is not JSON: {e}"),
            )),
        }
    }
    let mut problems = Vec::new();
    check(&merged, &VIGIL_CONFIG, &mut Vec::new(), &mut problems);
    for (path, reason) in problems {
        let source = parsed
            .iter()
            .rev()
            .find(|(_, v)| sets(v, &path))
            .map_or("", |(l, _)| &l.source);
        rejections.push(rejection(source, &json_path(&path), &reason));
    }
    if rejections.is_empty() {
        Ok(merged.to_string())
    } else {
        Err(rejections)
    }
}

fn rejection(source: &str, field: &str, reason: &str) -> Rejection {
    Rejection {
        source: source.into(),
        field: field.into(),
        reason: reason.into(),
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use super::{Layer, Rejection};

    struct DefaultMerger;

    impl crate::bindings::exports::vigil::policy::merger::Guest for DefaultMerger {
        fn merge(layers: Vec<Layer>) -> Result<String, Vec<Rejection>> {
            super::merge(&layers)
        }
    }

    crate::bindings::export!(DefaultMerger with_types_in crate::bindings);
}

#[cfg(test)]
mod tests;
