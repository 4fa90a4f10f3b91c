//! vigil's configuration: plain data with documented defaults, assembled from
//! layers by the config-merger policy and then parsed here once more, strictly.
//!
//! Layers go base first: the defaults below, then overlays in increasing
//! specificity (a scenario's `config`, later the config CRDs). The merger
//! policy merges and validates them; this module turns the result into
//! [`EvictionSettings`].

use crate::eviction::{EvictionSettings, PolicySettings};
use crate::model::{Layer, MergeRejection};
use crate::policy::{Fault, Limits, LimitsTable, Registry};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use thiserror::Error;

/// The merger policy that assembles the layers.
pub const MERGER: &str = "default-merger";

/// Settings of one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Whether a strategy takes part in cycles (true).
    pub enabled: bool,
    /// Log and count this strategy's decisions, carry none out (false).
    pub dry_run: bool,
    /// Deadline of one call, in milliseconds (the host default, 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Memory cap of one call, in MiB (the host default, 64).
    #[serde(rename = "memoryLimitMiB", skip_serializing_if = "Option::is_none")]
    pub memory_limit_mib: Option<u64>,
    /// Trial of a new version, in seconds (the host default, 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial_seconds: Option<u64>,
    /// The policy's own configuration (`{}`).
    pub config: serde_json::Value,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dry_run: false,
            deadline_ms: None,
            memory_limit_mib: None,
            trial_seconds: None,
            config: serde_json::json!({}),
        }
    }
}

impl PolicyConfig {
    /// `default` with this policy's overrides applied.
    fn limits(&self, default: Limits) -> Limits {
        Limits {
            deadline: self
                .deadline_ms
                .map_or(default.deadline, Duration::from_millis),
            memory_bytes: self
                .memory_limit_mib
                .map_or(default.memory_bytes, |m| m << 20),
            trial: self
                .trial_seconds
                .map_or(default.trial, Duration::from_secs),
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct VigilConfig {
    /// Seconds between eviction cycles (5).
    pub eviction_period_seconds: u64,
    /// Most evictions started per cycle (3).
    pub eviction_burst: usize,
    /// Seconds a node condition is still reported after it was last seen (300).
    pub condition_transition_seconds: u64,
    /// Log and count every decision, carry none out (false).
    pub dry_run: bool,
    /// Seconds every candidate of a hard threshold may be refused by
    /// PodDisruptionBudgets before vigil deletes the top one anyway (60 in
    /// the defaults layer). A layer that sets it to `null` removes it, and
    /// absent means never: the field's own default is `None`, not 60.
    #[serde(default)]
    pub pdb_override_after_seconds: Option<u64>,
    /// Name of the candidate sorter policy (`default-sorter`).
    pub sorter: String,
    /// Settings by policy name.
    pub policies: BTreeMap<String, PolicyConfig>,
}

impl Default for VigilConfig {
    fn default() -> Self {
        let settings = EvictionSettings::default();
        Self {
            eviction_period_seconds: settings.period.as_secs(),
            eviction_burst: settings.burst,
            condition_transition_seconds: settings.condition_transition.as_secs(),
            dry_run: settings.dry_run,
            pdb_override_after_seconds: settings.pdb_override_after.map(|d| d.as_secs()),
            sorter: settings.sorter,
            policies: BTreeMap::new(),
        }
    }
}

/// The merger's rejections, one per line.
#[derive(Debug)]
pub struct Rejections(pub Vec<MergeRejection>);

impl fmt::Display for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(
                f,
                "{sep}{} (from {}): {}",
                r.field,
                if r.source.is_empty() {
                    "merge"
                } else {
                    &r.source
                },
                r.reason
            )?;
        }
        Ok(())
    }
}

/// Why the layers do not make a configuration.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// No merger policy is loaded.
    #[error("the config merger {MERGER} is not loaded")]
    NoMerger,
    /// The merger faulted.
    #[error("the config merger faulted")]
    MergerFault(#[source] Fault),
    /// The merger rejected the layers.
    #[error("the config was rejected: {0}")]
    Rejected(Rejections),
    /// The merged config does not parse as vigil's config.
    #[error("the merged config is not a valid vigil config")]
    Invalid(#[source] serde_json::Error),
}

impl VigilConfig {
    /// Merges `overlays` over the defaults with the merger policy.
    ///
    /// # Errors
    /// See [`ConfigError`]; nothing partial is returned.
    pub fn merge(registry: &Registry, overlays: Vec<Layer>) -> Result<Self, ConfigError> {
        let policy = registry.get(MERGER).ok_or(ConfigError::NoMerger)?;
        let merger = policy.as_merger().ok_or(ConfigError::NoMerger)?;
        let defaults = serde_json::to_string(&Self::default()).expect("the defaults serialise");
        let mut layers = vec![Layer {
            source: "defaults".into(),
            json: defaults,
        }];
        layers.extend(overlays);
        let merged = registry
            .call(&policy, |_| merger.merge(&layers))
            .map_err(ConfigError::MergerFault)?
            .map_err(|rejections| ConfigError::Rejected(Rejections(rejections)))?;
        serde_json::from_value(serde_json::Value::Object(merged)).map_err(ConfigError::Invalid)
    }

    /// Call limits: the host defaults with every policy's overrides.
    pub fn limits(&self) -> LimitsTable {
        let default = Limits::default();
        let overrides = self
            .policies
            .iter()
            .map(|(name, p)| (name.clone(), p.limits(default)))
            .filter(|(_, limits)| *limits != default)
            .collect();
        LimitsTable { default, overrides }
    }

    /// The eviction manager's settings.
    pub fn eviction_settings(&self) -> EvictionSettings {
        let policies = self
            .policies
            .iter()
            .map(|(name, p)| {
                let settings = PolicySettings {
                    enabled: p.enabled,
                    dry_run: p.dry_run,
                    config: p.config.to_string(),
                };
                (name.clone(), settings)
            })
            .collect();
        EvictionSettings {
            period: Duration::from_secs(self.eviction_period_seconds),
            burst: self.eviction_burst,
            condition_transition: Duration::from_secs(self.condition_transition_seconds),
            dry_run: self.dry_run,
            pdb_override_after: self.pdb_override_after_seconds.map(Duration::from_secs),
            sorter: self.sorter.clone(),
            policies,
            ..EvictionSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_policy_limits_and_settings_come_from_the_config() {
        let config: VigilConfig = serde_json::from_value(serde_json::json!({
            "evictionBurst": 1,
            "policies": {
                "js-sorter": {"deadlineMs": 250, "trialSeconds": 60},
                "memory-pressure": {"dryRun": true, "config": {"hard": "1Gi"}},
            }
        }))
        .unwrap();
        let limits = config.limits();
        let js = limits.for_policy("js-sorter");
        assert_eq!(
            (js.deadline, js.trial),
            (Duration::from_millis(250), Duration::from_secs(60))
        );
        assert_eq!(js.memory_bytes, Limits::default().memory_bytes);
        assert_eq!(
            limits.overrides.len(),
            1,
            "a policy without limits gets no override"
        );
        let settings = config.eviction_settings();
        assert_eq!(settings.burst, 1);
        let memory = settings.policy("memory-pressure");
        assert!(memory.dry_run && memory.config == r#"{"hard":"1Gi"}"#);
    }

    #[test]
    fn the_pdb_override_is_60_seconds_by_default_and_never_once_removed() {
        let defaults = serde_json::to_value(VigilConfig::default()).unwrap();
        assert_eq!(defaults["pdbOverrideAfterSeconds"], 60);
        let parsed: VigilConfig = serde_json::from_value(defaults).unwrap();
        assert_eq!(
            parsed.eviction_settings().pdb_override_after,
            Some(Duration::from_secs(60))
        );
        let removed: VigilConfig = serde_json::from_str(r#"{"dryRun": false}"#).unwrap();
        assert_eq!(removed.eviction_settings().pdb_override_after, None);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let error = serde_json::from_str::<VigilConfig>(r#"{"evictionBursts": 2}"#).unwrap_err();
        assert!(
            error.to_string().contains("unknown field `evictionBursts`"),
            "{error}"
        );
    }
}
