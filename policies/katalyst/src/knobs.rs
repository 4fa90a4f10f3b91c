//! What every strategy here reads the same way: its config's JSON object,
//! a grace period, its kept state's JSON, and the cool-down after a victim
//! (katalyst's strategies wait after evicting; vigil's runs from the cycle
//! that chose the victim, which `last-met` tells).

use crate::ScopeMet;
use serde_json::{Map, Value};

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
