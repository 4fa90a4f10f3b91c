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
fn every_problem_is_reported_with_its_path_and_the_layer_that_set_it() {
    let found = problems(&[
        layer(
            "defaults",
            r#"{"evictionBurst":3,"policies":{"memory-pressure":{"deadlineMs":100}}}"#,
        ),
        layer(
            "pool-a",
            r#"{"evictionBurst":0,"policies":{"memory-pressure":{"deadlineMs":"fast"}}}"#,
        ),
        layer("node", r#"{"evictionBursts":2}"#),
    ]);
    assert_eq!(
        found,
        [
            (
                "pool-a".into(),
                "$.evictionBurst".into(),
                "must be a positive integer".into()
            ),
            (
                "node".into(),
                "$.evictionBursts".into(),
                "unknown field".into()
            ),
            (
                "pool-a".into(),
                "$.policies.memory-pressure.deadlineMs".into(),
                "must be a positive integer".into()
            ),
        ]
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

#[test]
fn wrong_types_are_named() {
    let found = problems(&[layer("d", r#"{"dryRun":"yes","sorter":7,"policies":[]}"#)]);
    let reasons: Vec<_> = found.iter().map(|(_, f, r)| format!("{f}: {r}")).collect();
    // Reported in key order, so the output is deterministic.
    assert_eq!(
        reasons,
        [
            "$.dryRun: must be true or false",
            "$.policies: must be an object",
            "$.sorter: must be a string"
        ]
    );
}
