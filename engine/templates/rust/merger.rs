//! __NAME__: a config merger for vigil.
//!
//! Each layer applies over the ones before it as a JSON merge patch (RFC
//! 7386: objects merge key by key, `null` deletes, anything else replaces).
//! A merger decides merge rules only; vigil checks every layer and the
//! result against its config schema. It serves under the name
//! `default-merger`.

wit_bindgen::generate!({ path: "wit", world: "config-merger" });

use exports::vigil::policy::merger::{Guest, Layer, Rejection};
use serde_json::{Map, Value};

fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

struct Policy;

impl Guest for Policy {
    fn merge(layers: Vec<Layer>) -> Result<String, Vec<Rejection>> {
        let mut merged = Value::Object(Map::new());
        let mut rejections = vec![];
        for layer in &layers {
            match serde_json::from_str::<Value>(&layer.json) {
                Ok(value @ Value::Object(_)) => merge_patch(&mut merged, &value),
                _ => rejections.push(Rejection {
                    source: layer.source.clone(),
                    field: "$".into(),
                    reason: "layer must be a JSON object".into(),
                }),
            }
        }
        if rejections.is_empty() {
            Ok(merged.to_string())
        } else {
            Err(rejections)
        }
    }
}

export!(Policy);
