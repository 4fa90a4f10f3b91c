//! `default-merger`: vigil's built-in config merger.
//!
//! Decides how config layers combine, nothing else: each layer applies over
//! the previous ones as a JSON merge patch (RFC 7386: objects merge key by
//! key, `null` deletes, anything else — lists included — replaces). What a
//! config may contain is vigil's schema, checked by the host on every layer
//! before the merge and on the result after it.

/// Bindings generated from the `config-merger` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "config-merger" });
}

pub use bindings::exports::vigil::policy::merger::{Layer, Rejection};
use serde_json::{Map, Value};

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

/// Merges `layers`, base first, into vigil's effective configuration.
///
/// # Errors
/// Every layer that is not a JSON object, by its source (nothing can be
/// merged from it).
pub fn merge(layers: &[Layer]) -> Result<String, Vec<Rejection>> {
    let mut merged = Value::Object(Map::new());
    let mut rejections = Vec::new();
    for layer in layers {
        match serde_json::from_str::<Value>(&layer.json) {
            Ok(value @ Value::Object(_)) => merge_patch(&mut merged, &value),
            Ok(_) => rejections.push(rejection(&layer.source, "$", "layer must be a JSON object")),
            Err(e) => rejections.push(rejection(
                &layer.source,
                "$",
                &format!("layer is not JSON: {e}"),
            )),
        }
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
