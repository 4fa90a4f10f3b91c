//! A JSON Schema as the docs' reference table: a row per property, in
//! sections (a prefix each), with the columns the caller names. The one
//! generator of `docs/configuration.md`'s and `docs/scenarios.md`'s tables.

use serde_json::Value;
use std::fmt::Write as _;

/// One property, as a column sees it.
#[derive(Debug, Clone, Copy)]
pub struct Property<'a> {
    /// Its schema.
    pub schema: &'a Value,
    /// Its default, if its section has defaults.
    pub default: Option<&'a Value>,
    /// The schema's `$defs`.
    pub defs: &'a Value,
}

impl Property<'_> {
    /// Its description, on one line.
    pub fn meaning(self) -> String {
        self.schema["description"]
            .as_str()
            .unwrap_or_default()
            .replace('\n', " ")
    }
}

/// One column after the field's: its heading and how a property fills it.
pub struct Column<'a> {
    /// The heading.
    pub heading: &'a str,
    /// The cell of a property.
    pub cell: &'a dyn Fn(Property<'_>) -> String,
}

impl<'a> Column<'a> {
    /// A column headed `heading` whose cells `cell` fills.
    pub fn new(heading: &'a str, cell: &'a dyn Fn(Property<'_>) -> String) -> Self {
        Self { heading, cell }
    }

    /// The column every table ends with: each property's description.
    pub fn meaning() -> Self {
        Self::new("meaning", &meaning)
    }
}

fn meaning(property: Property<'_>) -> String {
    property.meaning()
}

/// A group of rows: the properties of one object, each field prefixed.
#[derive(Debug, Clone, Copy)]
pub struct Section<'a> {
    /// What each field's path starts with (`policies.NAME.`, `pods[].`).
    pub prefix: &'a str,
    /// The object's `properties`.
    pub properties: &'a Value,
    /// The object's defaults, by field, if it has any.
    pub defaults: Option<&'a Value>,
    /// Whether a property that is a `$ref` to an object is followed by a row
    /// per field of that object.
    pub nested: bool,
}

/// The table: a header, then for each section a row per property.
pub fn table(columns: &[Column<'_>], sections: &[Section<'_>], defs: &Value) -> String {
    let mut out = String::from("| field |");
    for column in columns {
        let _ = write!(out, " {} |", column.heading);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
    for section in sections {
        rows(&mut out, columns, *section, section.prefix, defs);
    }
    out
}

fn rows(
    out: &mut String,
    columns: &[Column<'_>],
    section: Section<'_>,
    prefix: &str,
    defs: &Value,
) {
    let Some(properties) = section.properties.as_object() else {
        return;
    };
    for (name, schema) in properties {
        let default = section.defaults.and_then(|d| d.get(name));
        let property = Property {
            schema,
            default,
            defs,
        };
        let _ = write!(out, "| `{prefix}{name}` |");
        for column in columns {
            let _ = write!(out, " {} |", (column.cell)(property));
        }
        out.push('\n');
        let nested = schema["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .filter(|_| section.nested);
        if let Some(def) = nested {
            let inner = Section {
                properties: &defs[def]["properties"],
                defaults: Some(default.unwrap_or(&Value::Null)),
                ..section
            };
            rows(out, columns, inner, &format!("{prefix}{name}."), defs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_sections_and_nested_objects_with_the_callers_columns() {
        let schema = serde_json::json!({
            "properties": {
                "a": {"type": "integer", "description": "the a\nof it"},
                "b": {"$ref": "#/$defs/B"}
            },
            "$defs": {"B": {"properties": {"c": {"type": "string"}}}}
        });
        let defaults = serde_json::json!({"a": 3, "b": {"c": "x"}});
        let kind = |p: Property<'_>| p.schema["type"].as_str().unwrap_or("object").to_owned();
        let default = |p: Property<'_>| p.default.map_or_else(String::new, |d| format!("`{d}`"));
        let columns = [
            Column::new("type", &kind),
            Column::new("default", &default),
            Column::meaning(),
        ];
        let section = Section {
            prefix: "",
            properties: &schema["properties"],
            defaults: Some(&defaults),
            nested: true,
        };
        assert_eq!(
            table(&columns, &[section], &schema["$defs"]),
            "| field | type | default | meaning |\n|---|---|---|---|\n\
             | `a` | integer | `3` | the a of it |\n\
             | `b` | object | `{\"c\":\"x\"}` |  |\n\
             | `b.c` | string | `\"x\"` |  |\n"
        );
        let flat = Section {
            nested: false,
            defaults: None,
            ..section
        };
        let table = table(&columns[..1], &[flat], &schema["$defs"]);
        assert_eq!(
            table,
            "| field | type |\n|---|---|\n| `a` | integer |\n| `b` | object |\n"
        );
    }
}
