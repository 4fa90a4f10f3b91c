//! Per-policy limits: how long one call may run, how much memory it may use,
//! and how long a new version stays on trial.

use std::collections::HashMap;
use std::time::Duration;

/// How often the engine's epoch advances; call deadlines are measured in
/// these ticks.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Limits for one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time one call may take before it is interrupted (epoch deadline).
    pub deadline: Duration,
    /// Linear memory one call's instance may grow to, in bytes.
    pub memory_bytes: u64,
    /// How long a newly loaded version is on trial before it becomes the last-known-good.
    pub trial: Duration,
}

impl Default for Limits {
    /// 100 ms per call, 64 MiB of memory, 5 minutes of trial.
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(100),
            memory_bytes: 64 << 20,
            trial: Duration::from_secs(300),
        }
    }
}

/// Default limits with per-policy overrides, keyed by policy name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitsTable {
    /// Limits for policies without an override.
    pub default: Limits,
    /// Overrides by policy name.
    pub overrides: HashMap<String, Limits>,
}

impl LimitsTable {
    /// The limits that apply to `name`.
    pub fn for_policy(&self, name: &str) -> Limits {
        self.overrides.get(name).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_applies_to_its_policy_only() {
        let tight = Limits {
            deadline: Duration::from_millis(10),
            ..Limits::default()
        };
        let table = LimitsTable {
            default: Limits::default(),
            overrides: [("js-sorter".to_owned(), tight)].into(),
        };
        assert_eq!(table.for_policy("js-sorter"), tight);
        assert_eq!(table.for_policy("default-sorter"), Limits::default());
    }
}
