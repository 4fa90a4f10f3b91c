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
/// Largest config layer accepted, in bytes of JSON.
pub const MAX_LAYER_BYTES: usize = 256 << 10;
/// Deepest nesting of objects and arrays a layer may have.
pub const MAX_LAYER_DEPTH: usize = 32;

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
    /// A layer is too large or too deeply nested to be merged at all.
    #[error("config layer {layer}: {problem}")]
    Layer {
        /// The layer's source.
        layer: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Values out of their range, each with its JSON path.
    #[error("the merged config has values out of range: {}", .0.join("; "))]
    OutOfRange(Vec<String>),
}

/// How deeply `json` nests objects and arrays, in one pass without
/// recursion; brackets inside strings do not count.
fn depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        match (in_string, byte) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'{' | b'[') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, b'}' | b']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Refuses a layer too large or too deep to hand to the merger: its cost
/// must be bounded whatever the merger does with it.
fn check_layer(layer: &Layer) -> Result<(), ConfigError> {
    let problem = if layer.json.len() > MAX_LAYER_BYTES {
        format!("{} bytes; at most {MAX_LAYER_BYTES}", layer.json.len())
    } else if depth(&layer.json) > MAX_LAYER_DEPTH {
        format!("nested more than {MAX_LAYER_DEPTH} levels deep")
    } else {
        return Ok(());
    };
    Err(ConfigError::Layer {
        layer: layer.source.clone(),
        problem,
    })
}

/// `value` at `path`, unless it lies outside `range`.
fn in_range(
    problems: &mut Vec<String>,
    path: &str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
) {
    if !range.contains(&value) {
        problems.push(format!(
            "{path}: {value} is outside {}..={}",
            range.start(),
            range.end()
        ));
    }
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
        for layer in &overlays {
            check_layer(layer)?;
        }
        layers.extend(overlays);
        let merged = registry
            .call(&policy, |_| merger.merge(&layers))
            .map_err(ConfigError::MergerFault)?
            .map_err(|rejections| ConfigError::Rejected(Rejections(rejections)))?;
        let config: Self = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(ConfigError::Invalid)?;
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::OutOfRange(problems))
        }
    }

    /// Every value out of the range vigil can act on, with its JSON path.
    /// The merger checks shapes; the host checks ranges whatever merger runs.
    pub fn problems(&self) -> Vec<String> {
        const DAY: u64 = 86_400;
        let mut problems = Vec::new();
        let p = &mut problems;
        in_range(
            p,
            "$.evictionPeriodSeconds",
            self.eviction_period_seconds,
            1..=3600,
        );
        in_range(p, "$.evictionBurst", self.eviction_burst as u64, 1..=1000);
        in_range(
            p,
            "$.conditionTransitionSeconds",
            self.condition_transition_seconds,
            0..=DAY,
        );
        if let Some(after) = self.pdb_override_after_seconds {
            in_range(p, "$.pdbOverrideAfterSeconds", after, 0..=7 * DAY);
        }
        for (name, policy) in &self.policies {
            let at = |field: &str| format!("$.policies.{name}.{field}");
            if let Some(ms) = policy.deadline_ms {
                in_range(p, &at("deadlineMs"), ms, 1..=60_000);
            }
            if let Some(mib) = policy.memory_limit_mib {
                in_range(p, &at("memoryLimitMiB"), mib, 1..=4096);
            }
            if let Some(seconds) = policy.trial_seconds {
                in_range(p, &at("trialSeconds"), seconds, 0..=7 * DAY);
            }
        }
        problems
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
    fn values_out_of_range_are_listed_with_their_paths() {
        let config: VigilConfig = serde_json::from_value(serde_json::json!({
            "evictionPeriodSeconds": 0,
            "evictionBurst": 3,
            "pdbOverrideAfterSeconds": u64::MAX,
            "policies": {"js-sorter": {"deadlineMs": 0, "memoryLimitMiB": u64::MAX, "trialSeconds": u64::MAX}},
        }))
        .unwrap();
        assert_eq!(
            config.problems(),
            [
                "$.evictionPeriodSeconds: 0 is outside 1..=3600".to_owned(),
                format!(
                    "$.pdbOverrideAfterSeconds: {} is outside 0..=604800",
                    u64::MAX
                ),
                "$.policies.js-sorter.deadlineMs: 0 is outside 1..=60000".to_owned(),
                format!(
                    "$.policies.js-sorter.memoryLimitMiB: {} is outside 1..=4096",
                    u64::MAX
                ),
                format!(
                    "$.policies.js-sorter.trialSeconds: {} is outside 0..=604800",
                    u64::MAX
                ),
            ]
        );
        assert!(VigilConfig::default().problems().is_empty());
    }

    #[test]
    fn depth_is_counted_outside_strings_in_one_pass() {
        assert_eq!(depth(r#"{"a": [1, {"b": "[[[{{"}]}"#), 3);
        assert_eq!(depth(r#"{"a": "\"[["}"#), 1);
        let deep = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
        assert_eq!(depth(&deep), 1_000_000);
        let layer = |json: String| Layer {
            source: "test".into(),
            json,
        };
        assert!(check_layer(&layer(deep)).is_err());
        let too_deep = format!(
            "{}{}",
            "[".repeat(MAX_LAYER_DEPTH + 1),
            "]".repeat(MAX_LAYER_DEPTH + 1)
        );
        assert!(check_layer(&layer(too_deep)).is_err());
        assert!(check_layer(&layer("x".repeat(MAX_LAYER_BYTES + 1))).is_err());
        assert!(check_layer(&layer(r#"{"a": {"b": 1}}"#.into())).is_ok());
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
