//! vigil's configuration: one Rust type, [`VigilConfig`], that is also the
//! one schema of it — the JSON Schema that validates every layer on the host
//! ([`schema`]), the schema of the `VigilConfig` custom resource's
//! `spec.config` (`crd`) and the reference in `docs/configuration.md`.
//!
//! Layers go base first: the defaults below, then overlays in increasing
//! specificity (a scenario's `config`, a `--config` file, the `VigilConfig`
//! objects that select this node: see `layers`). Each layer is checked
//! against the schema, the config-merger policy combines them (its rules
//! decide which layer wins and how maps combine, nothing else), and the
//! result is checked against the schema again and parsed strictly.

pub(crate) mod assignment;
pub(crate) mod checkpoint;
pub mod compare;
// kube's `KubeSchema` derive adds a copy of each type for its schema, which
// is never reachable: its types are reached through the re-exports below.
#[allow(unreachable_pub)]
pub(crate) mod crd;
pub mod katalyst;
pub(crate) mod kubelet;
pub(crate) mod layers;
pub(crate) mod names;
pub(crate) mod references;
pub mod schema;

pub use assignment::{ConfigView, Reason, Status};
pub use checkpoint::{Assigned, Checkpoint, CheckpointFile, LayerSet};
pub use crd::{
    ConfigLayer, ConfigLayerSpec, ENFORCE_LAYER, ENFORCE_PRIORITY, LayerRollout, PAUSE_LAYER,
    Target,
};

use crate::base::policy_name::{
    DEFAULT_MERGER, DEFAULT_SORTER, DISK_PRESSURE, MEMORY_PRESSURE, NUMA_PRESSURE, PID_PRESSURE,
    PSI_PRESSURE, RECLAIMED_RESOURCES, ROOTFS_PRESSURE, RSS_OVERUSE, SYSTEM_CPU_PRESSURE,
    SYSTEM_MEMORY_PRESSURE,
};
use crate::model::{Layer, Rejections};
use crate::policy::{Fault, Limits, LimitsTable, Merger, Registry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use thiserror::Error;

/// Largest config layer accepted, in bytes of JSON.
pub const MAX_LAYER_BYTES: usize = 256 << 10;
/// Deepest nesting of objects and arrays a layer may have.
pub const MAX_LAYER_DEPTH: usize = 32;

const DAY: u64 = 86_400;

/// The least grace period of any request vigil sends: to the API server a
/// grace period of 0 is a force delete (the pod object is removed at once,
/// before its containers stop, as `kubectl delete --force --grace-period=0`
/// does), so a replacement of the same identity may start beside it.
pub const MIN_GRACE_PERIOD_SECONDS: u64 = 1;

/// Settings of one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Whether a strategy takes part in cycles.
    pub enabled: bool,
    /// Log, count and show this strategy's decisions, carry none out. True
    /// unless a layer says otherwise, but for the built-in memory and disk
    /// strategies: a strategy evicts only once enabled.
    pub dry_run: bool,
    /// Deadline of one call, in milliseconds (unset: the host's 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60_000))]
    pub deadline_ms: Option<u64>,
    /// Memory cap of one call, in MiB (unset: the host's 64).
    #[serde(rename = "memoryLimitMiB", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub memory_limit_mib: Option<u64>,
    /// Trial of a new version of the policy, in seconds (unset: the host's 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 604_800))]
    pub trial_seconds: Option<u64>,
    /// The policy's own configuration, a JSON object it reads itself.
    #[schemars(schema_with = "schema::free_form")]
    pub config: serde_json::Value,
    /// ConfigMap keys whose objects are merged under `config`, in order
    /// (`config` itself wins); only `vigil agent` reads them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub config_from: Vec<references::ConfigRef>,
    /// Whether this strategy's hard thresholds may delete a pod despite its
    /// PodDisruptionBudget once `pdbOverrideAfterSeconds` is set (never for
    /// a threshold on a stall signal, whatever this says).
    pub pdb_override: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dry_run: true,
            deadline_ms: None,
            memory_limit_mib: None,
            trial_seconds: None,
            config: serde_json::json!({}),
            config_from: Vec::new(),
            pdb_override: false,
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

/// Caps on evictions per node and per namespace in a sliding window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EvictionLimits {
    /// The window the caps count in, in seconds.
    #[schemars(range(min = 1, max = 86_400))]
    pub window_seconds: u64,
    /// Most capped evictions on one node per window; `null`: no cap.
    #[schemars(range(min = 1, max = 10_000))]
    pub per_node: Option<u32>,
    /// Most capped evictions in one namespace on one node per window;
    /// `null`: no cap.
    #[schemars(range(min = 1, max = 10_000))]
    pub per_namespace: Option<u32>,
}

impl Default for EvictionLimits {
    /// Ten per node and five per namespace in ten minutes.
    fn default() -> Self {
        Self {
            window_seconds: 600,
            per_node: Some(10),
            per_namespace: Some(5),
        }
    }
}

/// vigil's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct VigilConfig {
    /// Seconds between eviction cycles when no signal event comes first.
    #[schemars(range(min = 1, max = 3600))]
    pub eviction_period_seconds: u64,
    /// Most evictions started in one cycle.
    #[schemars(range(min = 1, max = 1000))]
    pub eviction_burst: usize,
    /// Seconds a node condition is still reported after it was last seen.
    #[schemars(range(max = 86_400))]
    pub condition_transition_seconds: u64,
    /// Log and count every decision, carry none out.
    pub dry_run: bool,
    /// Seconds every candidate of a hard threshold may be refused by
    /// PodDisruptionBudgets before vigil deletes the top one anyway, for the
    /// strategies whose `pdbOverride` allows it; unset or `null`: never
    /// (the default). At least 30 when set.
    #[serde(default)]
    #[schemars(range(min = 30, max = 604_800))]
    pub pdb_override_after_seconds: Option<u64>,
    /// At most one PDB override per PodDisruptionBudget in this many seconds.
    #[schemars(range(min = 1, max = 604_800))]
    pub pdb_override_window_seconds: u64,
    /// Grace period of a hard threshold's eviction whose strategy asks none
    /// (one that asks gets its own, within the pod's own and the maximum).
    /// At least 1: to the API server 0 means a force delete (the pod object
    /// goes before its containers stop), never what vigil sends.
    #[schemars(range(min = 1, max = 3600))]
    pub hard_grace_period_seconds: u64,
    /// The longest grace period any eviction gets, whatever a strategy or
    /// the pod asks (at least 1, as above).
    #[schemars(range(min = 1, max = 86_400))]
    pub max_pod_grace_period_seconds: u64,
    /// Whether strategies may taint the node `NoExecute` (which evicts every
    /// pod without a toleration); otherwise such an answer is refused. The
    /// API server also needs the agent's ServiceAccount annotated
    /// `vigil.dev/allow-no-execute: "true"` (`deploy/admission.yaml`).
    pub allow_no_execute_taints: bool,
    /// Name of the candidate sorter policy.
    #[schemars(length(min = 1, max = 63))]
    pub sorter: String,
    /// A newly assigned config from the cluster runs on trial this many
    /// seconds before it becomes the last-known-good.
    #[schemars(range(max = 604_800))]
    pub config_trial_seconds: u64,
    /// Most evictions on the node while a newly assigned config is on
    /// trial: one more rolls it back to the last-known-good. Unset or
    /// `null`: no bound (the default).
    #[serde(default)]
    #[schemars(range(max = 10_000))]
    pub config_trial_max_evictions: Option<u32>,
    /// Settings by policy name.
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Caps on what vigil evicts beyond the kubelet (soft and force
    /// evictions, stall signals, signals of a policy's own); never on a hard
    /// threshold on a signal the kubelet also watches.
    pub eviction_limits: EvictionLimits,
    /// The kubelet beside vigil on the node (unset: its defaults): every
    /// threshold a strategy reports is held against it and reported when it
    /// is not ahead of the kubelet's.
    pub kubelet: kubelet::KubeletConfig,
}

impl Default for VigilConfig {
    /// vigil's defaults, the one place each is written: the eviction loop's
    /// settings are made from them.
    fn default() -> Self {
        Self {
            eviction_period_seconds: 5,
            eviction_burst: 3,
            condition_transition_seconds: 300,
            dry_run: false,
            pdb_override_after_seconds: None,
            pdb_override_window_seconds: 600,
            hard_grace_period_seconds: MIN_GRACE_PERIOD_SECONDS,
            max_pod_grace_period_seconds: 300,
            allow_no_execute_taints: false,
            sorter: DEFAULT_SORTER.into(),
            config_trial_seconds: 600,
            config_trial_max_evictions: None,
            policies: default_policies(),
            eviction_limits: EvictionLimits::default(),
            kubelet: kubelet::KubeletConfig::default(),
        }
    }
}

/// The built-in strategies the kubelet also has (memory and disk) enforce:
/// their thresholds sit ahead of the kubelet's, which would evict anyway;
/// running out of memory or disk is also what a budget may yield to (once
/// the operator sets `pdbOverrideAfterSeconds`). Those that go beyond the
/// kubelet (PSI stalls; pid, which the kubelet watches only when told to)
/// observe, as every strategy a policy adds does: they decide, and are
/// counted and shown, and evict nothing until a layer sets `dryRun: false`.
/// katalyst's strategies ship off, as katalyst's own switches do: on most
/// nodes some pod uses more than it requests, and each would cost a dry
/// run; `enabled: true` makes them observe.
fn default_policies() -> BTreeMap<String, PolicyConfig> {
    let enforced = PolicyConfig {
        dry_run: false,
        pdb_override: true,
        ..PolicyConfig::default()
    };
    let observed = PolicyConfig::default();
    let off = PolicyConfig {
        enabled: false,
        ..PolicyConfig::default()
    };
    [
        (MEMORY_PRESSURE, enforced.clone()),
        (DISK_PRESSURE, enforced),
        (PID_PRESSURE, observed.clone()),
        (PSI_PRESSURE, observed),
        (RSS_OVERUSE, off.clone()),
        (NUMA_PRESSURE, off.clone()),
        (SYSTEM_MEMORY_PRESSURE, off.clone()),
        (SYSTEM_CPU_PRESSURE, off.clone()),
        (ROOTFS_PRESSURE, off.clone()),
        (RECLAIMED_RESOURCES, off),
    ]
    .into_iter()
    .map(|(name, config)| (name.to_owned(), config))
    .collect()
}

/// Why the layers do not make a configuration.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// No merger policy is loaded.
    #[error("the config merger {DEFAULT_MERGER} is not loaded")]
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
    /// A layer is not JSON, too large or too deeply nested to be merged at all.
    #[error("config layer {layer}: {problem}")]
    Layer {
        /// The layer's source.
        layer: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A policy's `configFrom` names a ConfigMap key that could not be read.
    #[error("policy {policy}: configFrom {reference}: {problem}")]
    Reference {
        /// The policy whose `configFrom` names it.
        policy: String,
        /// The ConfigMap key.
        reference: String,
        /// Why it could not be read.
        problem: String,
        /// It could not be read now; a later pass may.
        transient: bool,
    },
    /// A layer, or the merged result, does not match vigil's config schema.
    #[error("config layer {layer} does not match the config schema: {}", .problems.join("; "))]
    Schema {
        /// The layer's source (`merged` for the merger's answer).
        layer: String,
        /// Each problem, with its JSON path.
        problems: Vec<String>,
    },
}

impl ConfigError {
    /// Whether the error says nothing about the layers themselves (the
    /// merger faulted or is missing, a referenced object could not be read
    /// now): such a config is tried again, never rejected for good.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::NoMerger | Self::MergerFault(_) => true,
            Self::Reference { transient, .. } => *transient,
            _ => false,
        }
    }
}

impl VigilConfig {
    /// Merges `overlays` over the defaults with the merger policy: each
    /// overlay is checked against the schema first, the merger's answer
    /// after, so a rejection names the layer and the JSON path.
    ///
    /// # Errors
    /// See [`ConfigError`]; nothing partial is returned.
    pub fn merge(registry: &Registry, overlays: Vec<Layer>) -> Result<Self, ConfigError> {
        let policy = registry.get(DEFAULT_MERGER).ok_or(ConfigError::NoMerger)?;
        let merger = registry.merger(&policy).ok_or(ConfigError::NoMerger)?;
        Self::merge_by(&merger, overlays)
    }

    /// [`VigilConfig::merge`] by `merger`, whichever serves (a version in
    /// shadow, say).
    ///
    /// # Errors
    /// As [`VigilConfig::merge`].
    pub fn merge_by(merger: &Merger<'_>, overlays: Vec<Layer>) -> Result<Self, ConfigError> {
        for layer in &overlays {
            schema::check_layer(layer)?;
        }
        let defaults = serde_json::to_string(&Self::default()).expect("the defaults serialise");
        let mut layers = vec![Layer {
            source: "defaults".into(),
            json: defaults,
        }];
        layers.extend(overlays);
        let merged = serde_json::Value::Object(
            merger
                .merge(&layers)
                .map_err(ConfigError::MergerFault)?
                .map_err(|rejections| ConfigError::Rejected(Rejections(rejections)))?,
        );
        let problems = schema::violations(&merged);
        if !problems.is_empty() {
            return Err(ConfigError::Schema {
                layer: "merged".into(),
                problems,
            });
        }
        serde_json::from_value(merged).map_err(ConfigError::Invalid)
    }

    /// Every way this config differs from the schema, with its JSON path
    /// (none for a config that came out of [`VigilConfig::merge`]).
    pub fn problems(&self) -> Vec<String> {
        schema::violations(&serde_json::to_value(self).expect("a config serialises"))
    }

    /// How long a newly assigned config runs on trial.
    pub fn config_trial(&self) -> Duration {
        Duration::from_secs(self.config_trial_seconds.min(7 * DAY))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_match_the_schema_and_values_out_of_range_do_not() {
        assert!(VigilConfig::default().problems().is_empty());
        let config: VigilConfig = serde_json::from_value(serde_json::json!({
            "evictionPeriodSeconds": 0,
            "pdbOverrideAfterSeconds": u64::MAX,
            "policies": {"js-sorter": {"memoryLimitMiB": 5000}},
        }))
        .unwrap();
        assert_eq!(
            config.problems(),
            [
                "$.evictionPeriodSeconds: 0 is less than the minimum of 1".to_owned(),
                format!(
                    "$.pdbOverrideAfterSeconds: {} is greater than the maximum of 604800",
                    u64::MAX
                ),
                "$.policies.js-sorter.memoryLimitMiB: 5000 is greater than the maximum of 4096"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn a_grace_period_of_zero_is_refused_by_the_schema() {
        assert_eq!(VigilConfig::default().hard_grace_period_seconds, 1);
        let config: VigilConfig = serde_json::from_value(serde_json::json!({
            "hardGracePeriodSeconds": 0,
            "maxPodGracePeriodSeconds": 0,
        }))
        .unwrap();
        assert_eq!(
            config.problems(),
            [
                "$.hardGracePeriodSeconds: 0 is less than the minimum of 1",
                "$.maxPodGracePeriodSeconds: 0 is less than the minimum of 1",
            ]
        );
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
