//! The contract's records in the forms they take as data outside a call:
//! a strategy's node as `vigil simulate --snapshots` writes it and
//! `vigil policy test` reads it, pods and candidates written in part, and a
//! merger's rejections as one line.

use super::bindings::{Candidate, MergeRejection, Pod, ScopeMet, Signal, Urgency};
use super::fixture;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// A node as a strategy sees it, as data: a snapshot without the strategy's
/// own config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotData {
    /// The time of the snapshot, in Unix milliseconds.
    pub now_ms: i64,
    /// Node signals.
    pub signals: Vec<Signal>,
    /// The pods on the node, with their usage; each may be written in part
    /// (see [`PartialPod`]).
    #[serde(deserialize_with = "partial_pods")]
    pub pods: Vec<Pod>,
    /// How the strategy's thresholds were met last cycle, by scope (none
    /// met if absent; a threshold's `victim` is false if absent).
    #[serde(default, deserialize_with = "scopes_met")]
    pub last_met: Vec<ScopeMet>,
    /// What the strategy kept from its last call (nothing if absent).
    #[serde(default)]
    pub state: Vec<u8>,
}

/// A pod written in part: every field left out, in nested records too, is
/// the one of [`fixture::pod`] of its `name` — namespace `default`, UID
/// `uid-NAME`, best-effort, priority 0, no labels or annotations, zero
/// requests, limits and usage but one process, started at 0, no owner, not
/// static, mirror or critical, no budget. `name` defaults to `uid`; one of
/// them is needed. Labels and annotations may be written as a map.
#[derive(Debug, Clone)]
pub struct PartialPod(pub Pod);

impl<'de> Deserialize<'de> for PartialPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let given = Value::deserialize(deserializer)?;
        complete_pod(given)
            .map(PartialPod)
            .map_err(serde::de::Error::custom)
    }
}

/// A threshold's last cycle as written: without `victim`, none was chosen.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeMetForm {
    scope: String,
    met: super::bindings::MetLevel,
    #[serde(default)]
    victim: bool,
}

fn scopes_met<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ScopeMet>, D::Error> {
    let forms = Vec::<ScopeMetForm>::deserialize(deserializer)?;
    Ok(forms
        .into_iter()
        .map(|form| ScopeMet {
            scope: form.scope,
            met: form.met,
            victim: form.victim,
        })
        .collect())
}

fn partial_pods<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Pod>, D::Error> {
    let pods = Vec::<PartialPod>::deserialize(deserializer)?;
    Ok(pods.into_iter().map(|p| p.0).collect())
}

/// The pod `given` describes, its missing fields filled in.
fn complete_pod(given: Value) -> Result<Pod, String> {
    let Value::Object(mut given) = given else {
        return Err("a pod must be an object".into());
    };
    let text = |key: &str| given.get(key).and_then(Value::as_str).map(str::to_owned);
    let Some(name) = text("name").or_else(|| text("uid")) else {
        return Err("a pod needs a `name` (or a `uid`)".into());
    };
    for key in ["labels", "annotations"] {
        if let Some(Value::Object(map)) = given.get(key) {
            let pairs = map
                .iter()
                .map(|(key, value)| serde_json::json!({"key": key, "value": value}))
                .collect();
            given.insert(key.to_owned(), Value::Array(pairs));
        }
    }
    let mut pod = serde_json::to_value(fixture::pod(&name).build()).expect("a pod serialises");
    fill(&mut pod, given, "pod")?;
    serde_json::from_value(pod).map_err(|e| e.to_string())
}

/// Puts every field of `given` over `defaults`, object by object; a field
/// `defaults` does not have is an error naming it.
fn fill(defaults: &mut Value, given: Map<String, Value>, path: &str) -> Result<(), String> {
    let Value::Object(fields) = defaults else {
        return Err(format!("{path} is not an object"));
    };
    for (key, value) in given {
        let at = format!("{path}.{key}");
        match (fields.get_mut(&key), value) {
            (None, _) => {
                let known: Vec<&str> = fields.keys().map(String::as_str).collect();
                return Err(format!("{at}: unknown field (known: {})", known.join(", ")));
            }
            (Some(slot @ Value::Object(_)), Value::Object(inner)) => fill(slot, inner, &at)?,
            (Some(slot), value) => *slot = value,
        }
    }
    Ok(())
}

/// A sorter's candidate written in part: `pod` a [`PartialPod`], `strategy`
/// 0 and `urgency` `Hard` unless given.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialCandidate {
    /// The pod.
    pub pod: PartialPod,
    /// Index of the strategy that proposed it.
    #[serde(default)]
    pub strategy: u32,
    /// Why it is proposed.
    #[serde(default = "hard")]
    pub urgency: Urgency,
}

fn hard() -> Urgency {
    Urgency::Hard
}

/// Deserializes candidates written in part (see [`PartialCandidate`]), if given.
///
/// # Errors
/// A candidate or its pod is malformed, or names a field the contract does not have.
pub fn partial_candidates<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<Candidate>>, D::Error> {
    let given = Option::<Vec<PartialCandidate>>::deserialize(deserializer)?;
    Ok(given.map(|list| list.into_iter().map(Candidate::from).collect()))
}

impl From<PartialCandidate> for Candidate {
    fn from(given: PartialCandidate) -> Self {
        Candidate {
            pod: given.pod.0,
            strategy: given.strategy,
            urgency: given.urgency,
        }
    }
}

/// A merger's rejections, written on one line, `; ` between them.
#[derive(Debug)]
pub struct Rejections(pub Vec<MergeRejection>);

impl fmt::Display for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            let source = if r.source.is_empty() {
                "merge"
            } else {
                &r.source
            };
            write!(f, "{sep}{} (from {source}): {}", r.field, r.reason)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: &str) -> Result<Pod, String> {
        serde_json::from_str::<PartialPod>(json)
            .map(|p| p.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_pod_written_in_part_takes_the_fixtures_defaults_for_the_rest() {
        let given = pod(
            r#"{"name": "web", "usage": {"memory_working_set_bytes": 1024},
                           "labels": {"app": "web"}, "is_critical": true}"#,
        )
        .unwrap();
        let mut want = fixture::pod("web").build();
        want.usage.memory_working_set_bytes = Some(1024);
        want.labels = vec![crate::model::KeyValue {
            key: "app".into(),
            value: "web".into(),
        }];
        want.is_critical = true;
        let json = |pod: &Pod| serde_json::to_value(pod).unwrap();
        assert_eq!(json(&given), json(&want));
        assert_eq!(pod(r#"{"uid": "u1"}"#).unwrap().name, "u1");
    }

    #[test]
    fn a_threshold_written_without_its_victim_had_none() {
        let snapshot: SnapshotData = serde_json::from_str(
            r#"{"now_ms": 0, "signals": [], "pods": [],
                "last_met": [{"scope": "memory", "met": "Hard"},
                             {"scope": "numa.1", "met": "Hard", "victim": true}]}"#,
        )
        .unwrap();
        let victims: Vec<bool> = snapshot.last_met.iter().map(|s| s.victim).collect();
        assert_eq!(victims, [false, true]);
    }

    #[test]
    fn a_misspelt_or_missing_field_is_named() {
        let error = pod(r#"{"name": "web", "usage": {"memory": 1}}"#).unwrap_err();
        assert!(
            error.starts_with("pod.usage.memory: unknown field"),
            "{error}"
        );
        let error = pod(r#"{"namespace": "default"}"#).unwrap_err();
        assert!(error.contains("needs a `name`"), "{error}");
        let error = pod(r#"{"name": "web", "qos": "Gold"}"#).unwrap_err();
        assert!(error.contains("Gold"), "{error}");
    }
}
