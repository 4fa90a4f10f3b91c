//! How scenarios write durations, ages and amounts: their parsers (for
//! serde's `deserialize_with`) and their JSON Schemas (for schemars'
//! `schema_with`), in one place below the scenario, its timelines and the
//! schema that all use them.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde::Deserializer;
use std::time::Duration;

/// Deserialises a duration written as `500ms`, `30s`, `2m` or `1h`, of at
/// most [`MAX_DURATION`].
pub(crate) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_str(DurationVisitor {
        limit: MAX_DURATION,
        expected: "a duration such as 30s, 2m or 500ms, of at most 24h",
    })
}

/// As [`duration`], for an optional field.
pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// Deserialises a pod's age: as [`duration`], up to [`MAX_AGE`], days too.
pub(super) fn age<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_str(DurationVisitor {
        limit: MAX_AGE,
        expected: "an age such as 90s, 2h or 30d, of at most 365d",
    })
}

/// Reads a duration of at most `limit`; errors raised inside the visitor
/// carry the line and column.
struct DurationVisitor {
    limit: Duration,
    expected: &'static str,
}

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.expected)
    }
    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text)
            .filter(|d| *d <= self.limit)
            .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(text), &self))
    }
}

/// The longest duration or time a scenario may name: a simulation covers at
/// most a day.
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);
/// The oldest a pod may be at the scenario's start.
pub(super) const MAX_AGE: Duration = Duration::from_secs(365 * 86_400);

/// `text` as a duration (`ms`, `s`, `m`, `h` or `d`), if it is one.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// An amount standing alone, e.g. a map's value (see [`amount`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Amount(
    #[serde(deserialize_with = "amount")]
    #[schemars(schema_with = "amount_schema")]
    pub f64,
);

/// Deserialises an amount: a number, or a quantity such as `512Mi` or `500m` (millicores).
pub(crate) fn amount<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = f64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a finite, non-negative number or a quantity such as 512Mi, 1G or 500m")
        }
        fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<f64, E> {
            if value.is_finite() && value >= 0.0 {
                Ok(value)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(value), &self))
            }
        }
        fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<f64, E> {
            Ok(value as f64)
        }
        fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<f64, E> {
            if value >= 0 {
                Ok(value as f64)
            } else {
                Err(E::invalid_value(
                    serde::de::Unexpected::Signed(value),
                    &self,
                ))
            }
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<f64, E> {
            let millicores = text.strip_suffix('m').and_then(|m| m.parse::<u64>().ok());
            let quantity = || crate::base::quantity::parse(text);
            millicores
                .map(|m| m as f64)
                .or_else(quantity)
                .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(text), &self))
        }
    }
    deserializer.deserialize_any(Visitor)
}

/// A duration as scenarios write it.
pub(super) fn duration_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d)$",
        "description": "A duration: a number and a unit, ms, s, m, h (or d), e.g. 500ms, 30s, 2m, 1.5h; at most 24h.",
    })
}

/// A pod's age: a duration of up to a year.
pub(super) fn age_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d)$",
        "description": "An age: a number and a unit, ms, s, m, h or d, e.g. 90s, 2h, 30d; at most 365d.",
    })
}

/// An amount: a number, a Kubernetes quantity, or millicores.
pub(super) fn amount_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [
            {"type": "number", "minimum": 0},
            {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?([eE][0-9]+|[KMGTPE]i|[mkMGTPE])?$"},
        ],
        "description": "A non-negative number, or a quantity such as 512Mi, 1G or 500m (millicores).",
    })
}

/// A vigil config layer: the config schema itself.
pub(super) fn config_layer_schema(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<crate::config::VigilConfig>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("5 days"), None);
        assert_eq!(parse_duration("24h"), Some(MAX_DURATION));
        assert_eq!(
            parse_duration("30d"),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(parse_duration("99999999999999999999999999999h"), None);
        assert_eq!(parse_duration("1.7976931348623157e308s"), None);
        assert_eq!(parse_duration("..5s"), None);
    }
}
