//! Where two configs first differ, in words: what a merger in shadow is
//! judged by (the same layers, merged by the serving version and by the
//! shadow).

use serde_json::Value;

/// The first JSON path (in key order) at which `serving` and `shadow`
/// differ, as `serving sets PATH to A, shadow to B`; `None` when equal.
pub fn difference(serving: &Value, shadow: &Value) -> Option<String> {
    let (path, a, b) = first(String::new(), serving, shadow)?;
    let shown = |v: Option<&Value>| v.map_or_else(|| "nothing".to_owned(), Value::to_string);
    let path = if path.is_empty() { "the config" } else { &path };
    Some(format!(
        "serving sets {path} to {}, shadow to {}",
        shown(a),
        shown(b)
    ))
}

type Found<'a> = (String, Option<&'a Value>, Option<&'a Value>);

fn first<'a>(path: String, a: &'a Value, b: &'a Value) -> Option<Found<'a>> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|key| match (x.get(key), y.get(key)) {
                    (Some(u), Some(v)) => first(join(key), u, v),
                    (u, v) => Some((join(key), u, v)),
                })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => (x.iter().zip(y))
            .enumerate()
            .find_map(|(i, (u, v))| first(format!("{path}[{i}]"), u, v)),
        _ => (a != b).then_some((path, Some(a), Some(b))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_configs_have_no_difference() {
        let config = json!({"a": 1, "b": {"c": [1, 2]}});
        assert_eq!(difference(&config, &config.clone()), None);
    }

    #[test]
    fn the_first_path_in_key_order_is_named_with_both_values() {
        let serving = json!({"evictionBurst": 2, "policies": {"memory-pressure": {"config": {"hard": "500Mi"}}}});
        let shadow = json!({"evictionBurst": 3, "policies": {"memory-pressure": {"config": {"hard": "1Gi"}}}});
        assert_eq!(
            difference(&serving, &shadow).as_deref(),
            Some("serving sets evictionBurst to 2, shadow to 3")
        );
        let shadow = json!({"evictionBurst": 2, "policies": {"memory-pressure": {"config": {"hard": "1Gi"}}}});
        assert_eq!(
            difference(&serving, &shadow).as_deref(),
            Some(
                "serving sets policies.memory-pressure.config.hard to \"500Mi\", shadow to \"1Gi\""
            )
        );
    }

    #[test]
    fn a_key_one_side_lacks_and_lists_of_other_lengths_are_differences() {
        assert_eq!(
            difference(&json!({"a": 1}), &json!({})).as_deref(),
            Some("serving sets a to 1, shadow to nothing")
        );
        assert_eq!(
            difference(&json!({"l": [1, 2]}), &json!({"l": [1, 3]})).as_deref(),
            Some("serving sets l[1] to 2, shadow to 3")
        );
        assert_eq!(
            difference(&json!({"l": [1]}), &json!({"l": [1, 2]})).as_deref(),
            Some("serving sets l to [1], shadow to [1,2]")
        );
        assert_eq!(
            difference(&json!(1), &json!(2)).as_deref(),
            Some("serving sets the config to 1, shadow to 2")
        );
    }
}
