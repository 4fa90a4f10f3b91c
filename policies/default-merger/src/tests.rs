use super::*;

fn layer(source: &str, json: &str) -> Layer {
    Layer {
        source: source.into(),
        json: json.into(),
    }
}

fn merged(layers: &[Layer]) -> Value {
    serde_json::from_str(&merge(layers).unwrap()).unwrap()
}

fn problems(layers: &[Layer]) -> Vec<(String, String, String)> {
    merge(layers)
        .unwrap_err()
        .into_iter()
        .map(|r| (r.source, r.field, r.reason))
        .collect()
}

#[test]
fn later_layers_patch_earlier_ones_as_rfc7386_says() {
    let result = merged(&[
        layer(
            "defaults",
            r#"{"evictionBurst":3,"dryRun":false,"policies":{"memory-pressure":{"deadlineMs":100,"config":{"hard":"100Mi","soft":"1Gi"}}}}"#,
        ),
        layer(
            "pool",
            r#"{"evictionBurst":1,"policies":{"memory-pressure":{"config":{"soft":null,"hard":"200Mi"}}}}"#,
        ),
        layer("node", r#"{"dryRun":true}"#),
    ]);
    assert_eq!(
        result,
        serde_json::json!({"evictionBurst":1,"dryRun":true,"policies":{"memory-pressure":{"deadlineMs":100,"config":{"hard":"200Mi"}}}})
    );
}

#[test]
fn a_patch_value_that_is_not_an_object_replaces_the_target() {
    let result = merged(&[
        layer("defaults", r#"{"policies":{"p":{"config":{"a":{"b":1}}}}}"#),
        layer("node", r#"{"policies":{"p":{"config":{"a":[1,2]}}}}"#),
    ]);
    assert_eq!(
        result["policies"]["p"]["config"]["a"],
        serde_json::json!([1, 2])
    );
}

#[test]
fn fields_are_not_checked_here_the_host_checks_them() {
    let result = merged(&[
        layer("defaults", r#"{"evictionBurst":3}"#),
        layer("pool-a", r#"{"evictionBurst":0,"evictionBursts":"x"}"#),
    ]);
    assert_eq!(
        result,
        serde_json::json!({"evictionBurst":0,"evictionBursts":"x"})
    );
}

#[test]
fn layers_that_are_not_objects_are_rejected_by_source() {
    let found = problems(&[
        layer("defaults", "{}"),
        layer("broken", "{\"a\":"),
        layer("list", "[1]"),
    ]);
    assert_eq!(found.len(), 2);
    assert_eq!((found[0].0.as_str(), found[0].1.as_str()), ("broken", "$"));
    assert!(found[0].2.starts_with("layer is not JSON"));
    assert_eq!(
        found[1],
        (
            "list".into(),
            "$".into(),
            "layer must be a JSON object".into()
        )
    );
}
