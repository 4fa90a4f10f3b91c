//! The scenario format's JSON Schema, derived from the Rust types that read
//! it (`vigil scenario-schema`, `docs/scenario.schema.json` for editors), and
//! the field reference `docs/scenarios.md` carries, generated from the same
//! schema so the two cannot drift.

use super::scenario::Scenario;
use crate::base::schema_table::{Column, Property, Section, table};
use serde_json::Value;

/// The JSON Schema (draft 2020-12) of scenario files.
pub fn json_schema() -> Value {
    schemars::schema_for!(Scenario).to_value()
}

/// The reference table of every scenario field, as `docs/scenarios.md`
/// carries it.
pub fn reference() -> String {
    let schema = json_schema();
    let defs = &schema["$defs"];
    let section = |prefix, properties| Section {
        prefix,
        properties,
        defaults: None,
        nested: false,
    };
    let sections = [
        section("", &schema["properties"]),
        section("node.", &defs["NodeSpec"]["properties"]),
        section("pods[].", &defs["PodSpec"]["properties"]),
        section(
            "pods[].{requests,limits}.",
            &defs["ResourceSpec"]["properties"],
        ),
        section("configChanges[].", &defs["ConfigChange"]["properties"]),
        section("TIMELINE[].", &defs["Point"]["properties"]),
    ];
    let kind = |p: Property<'_>| kind(p.schema, p.defs);
    let columns = [Column::new("type", &kind), Column::meaning()];
    table(&columns, &sections, defs)
}

/// A property's type, in a word or two.
fn kind(property: &Value, defs: &Value) -> String {
    if let Some(reference) = property["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or_default();
        return match name {
            "Timeline" => "timeline".into(),
            "VigilConfig" => "config layer".into(),
            other => kind(&defs[other], defs),
        };
    }
    if property.get("pattern").is_some() && property["type"] == "string" {
        return "duration".into();
    }
    if property.get("anyOf").is_some() {
        let kinds: Vec<String> = property["anyOf"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| kind(k, defs))
            .filter(|k| k != "null")
            .collect();
        return if kinds == ["number", "duration"] {
            "amount".into()
        } else {
            kinds.join(" or ")
        };
    }
    if let Some(choices) = property["oneOf"].as_array() {
        let names: Vec<String> = choices
            .iter()
            .filter_map(|c| c["const"].as_str())
            .map(|c| format!("`{c}`"))
            .collect();
        return names.join(" or ");
    }
    if property["type"] == "object" {
        if let Some(values) = property
            .get("additionalProperties")
            .filter(|v| v.is_object())
        {
            return format!("map of name to {}", kind(values, defs));
        }
        // Keys by pattern: numbers, here (NUMA nodes).
        if let Some(values) =
            (property.get("patternProperties")).and_then(|p| p.as_object()?.values().next())
        {
            return format!("map of number to {}", kind(values, defs));
        }
        if property.get("properties").is_none() {
            return "map of name to string".into();
        }
    }
    match &property["type"] {
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .filter(|k| *k != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        Value::String(kind) if kind == "array" => {
            format!("list of {}", kind_of_items(property, defs))
        }
        Value::String(kind) => kind.clone(),
        _ => "any".into(),
    }
}

fn kind_of_items(property: &Value, defs: &Value) -> String {
    let items = &property["items"];
    match items["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
        Some("PodSpec") => "pods".into(),
        Some("ConfigChange") => "config changes".into(),
        Some("Point") => "points".into(),
        _ => kind(items, defs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_scenario_matches_the_schema_and_a_typo_does_not() {
        let validator = jsonschema::validator_for(&json_schema()).expect("a valid schema");
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/scenarios");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let value: Value = serde_norway::from_str(&text).unwrap();
            let problems: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(problems.is_empty(), "{}: {problems:?}", path.display());
            let mut typo = value.clone();
            typo["pods"][0]["memroy"] = Value::from("1Gi");
            assert!(!validator.is_valid(&typo), "an unknown pod field is caught");
            let mut bad_time = value;
            bad_time["duration"] = Value::from("2 minutes");
            assert!(
                !validator.is_valid(&bad_time),
                "a malformed duration is caught"
            );
            checked += 1;
        }
        assert!(checked >= 6, "the bundled scenarios were found");
    }

    #[test]
    fn the_committed_schema_is_the_current_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenario.schema.json");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        let current = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
        assert!(
            committed == current,
            "docs/scenario.schema.json is stale: run `vigil scenario-schema > docs/scenario.schema.json`"
        );
    }

    #[test]
    fn the_scenario_guide_carries_the_current_reference() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md");
        let guide = std::fs::read_to_string(path).unwrap_or_default();
        let table = reference();
        for row in [
            "| `duration` | duration |",
            "| `node.memory` | amount |",
            "| `pods[].memory` | timeline |",
            "| `pods[].age` | duration |",
            "| `configChanges[].config` | config layer |",
            "| `TIMELINE[].ramp` | boolean |",
        ] {
            assert!(table.contains(row), "{row}\n{table}");
        }
        assert!(
            guide.contains(&table),
            "docs/scenarios.md must carry this reference table, generated from the schema:\n{table}"
        );
    }
}
