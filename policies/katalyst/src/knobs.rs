//! What every strategy here reads the same way: what a cycle sees of the
//! snapshot, a signal by name, its config's JSON object, a grace period, its
//! kept state's JSON, and the cool-down after a victim
//! (katalyst's strategies wait after evicting; vigil's runs from the cycle
//! that chose the victim, which `last-met` tells).

use crate::{Pod, ScopeMet, Signal, Snapshot};
use serde_json::{Map, Value};

/// What a cycle sees: the snapshot's parts a strategy reads.
pub struct Seen<'a> {
    /// The snapshot's time (ms since the epoch).
    pub now_ms: i64,
    /// Node signals.
    pub signals: &'a [Signal],
    /// Pods (empty for a strategy that reads none in `evaluate`).
    pub pods: &'a [Pod],
    /// How its thresholds were met last cycle.
    pub last_met: &'a [ScopeMet],
}

impl<'a> Seen<'a> {
    /// What `snapshot` shows.
    pub fn of(snapshot: &'a Snapshot) -> Self {
        Self {
            now_ms: snapshot.now_ms,
            signals: &snapshot.signals,
            pods: &snapshot.pods,
            last_met: &snapshot.last_met,
        }
    }
}

/// The signal `name`, if the snapshot has it.
pub fn signal<'a>(signals: &'a [Signal], name: &str) -> Option<&'a Signal> {
    signals.iter().find(|s| s.name == name)
}

/// The fields of config `text`; none when it is empty (katalyst's defaults).
///
/// # Errors
/// It is not a JSON object.
pub fn fields(text: &str) -> Result<Option<Map<String, Value>>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("config is not JSON: {e}"))?;
    match value {
        Value::Object(fields) => Ok(Some(fields)),
        _ => Err("config is not a JSON object".into()),
    }
}

/// A grace period in whole seconds, or `null` for the pod's own.
///
/// # Errors
/// Neither.
pub fn grace(field: &Value, name: &str) -> Result<Option<u64>, String> {
    match field {
        Value::Null => Ok(None),
        field => (field.as_u64().filter(|g| *g > 0).map(Some)).ok_or(format!(
            "{name} must be a positive number of seconds, or null"
        )),
    }
}

/// Kept state `bytes` as JSON; none on a fresh start.
///
/// # Errors
/// The bytes are not JSON.
pub fn kept(bytes: &[u8]) -> Result<Option<Value>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| format!("kept state is not JSON: {e}"))
}

/// When the last victim was chosen, as a strategy keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoolDown {
    /// The last cycle's time (ms since the epoch).
    pub previous_ms: Option<i64>,
    /// When the last victim was chosen.
    pub last_victim_ms: Option<i64>,
}

impl CoolDown {
    /// Reads the two times from kept state `value`.
    pub fn of(value: &Value) -> Self {
        Self {
            previous_ms: value["previousMs"].as_i64(),
            last_victim_ms: value["lastVictimMs"].as_i64(),
        }
    }

    /// Writes the two times into kept state `value`.
    pub fn write(&self, value: &mut Value) {
        value["previousMs"] = self.previous_ms.into();
        value["lastVictimMs"] = self.last_victim_ms.into();
    }

    /// Moves to the cycle at `now_ms`: a threshold of `scope` (any, if
    /// none) that got a victim last cycle starts the cool-down then.
    pub fn advance(&mut self, last_met: &[ScopeMet], scope: Option<&str>, now_ms: i64) {
        let chosen =
            (last_met.iter()).any(|m| m.victim && scope.is_none_or(|scope| m.scope == scope));
        if chosen {
            self.last_victim_ms = self.previous_ms;
        }
        self.previous_ms = Some(now_ms);
    }

    /// Whether `seconds` have not yet passed since the last victim.
    pub fn cooling(&self, now_ms: i64, seconds: u64) -> bool {
        self.last_victim_ms
            .is_some_and(|at| u64::try_from(now_ms - at).unwrap_or(0) < seconds * 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_that_is_not_an_object_and_a_kept_state_that_is_not_json_are_refused() {
        assert_eq!(fields("  ").unwrap(), None, "empty: the defaults");
        assert!(fields("[1]").unwrap_err().contains("not a JSON object"));
        assert!(fields("{").unwrap_err().contains("not JSON"));
        assert_eq!(kept(b"").unwrap(), None, "empty: a fresh start");
        assert!(
            kept(b"\xff")
                .unwrap_err()
                .contains("kept state is not JSON")
        );
        assert!(
            grace(&Value::from(0), "g")
                .unwrap_err()
                .contains("positive")
        );
        assert_eq!(grace(&Value::Null, "g").unwrap(), None);
    }

    #[test]
    fn the_cool_down_runs_from_the_cycle_that_chose_a_victim_of_its_scope() {
        let chosen = |scope: &str| ScopeMet {
            scope: scope.into(),
            met: crate::MetLevel::Hard,
            victim: true,
        };
        let mut cool = CoolDown::default();
        cool.advance(&[], Some("memory"), 1_000);
        cool.advance(&[chosen("other")], Some("memory"), 6_000);
        assert!(!cool.cooling(6_000, 30), "another scope's victim");
        cool.advance(&[chosen("memory")], Some("memory"), 11_000);
        assert!(
            cool.cooling(11_000, 30),
            "from 6 s, the cycle that chose it"
        );
        assert!(!cool.cooling(36_000, 30));
    }
}
