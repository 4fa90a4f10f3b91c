//! Settings of the eviction manager: plain data, made from vigil's config
//! (whose defaults are the only ones written: [`VigilConfig::default`]),
//! plus the loop's own fixed bounds.

use super::limits::VolumeLimits;
use crate::config::VigilConfig;
use crate::config::kubelet::KubeletConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long an accepted eviction may take before its pod may be picked again.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one eviction call may take before it counts as not asked.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Per-policy settings (strategies and the sorter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySettings {
    /// Whether a strategy takes part in cycles.
    pub enabled: bool,
    /// Decisions of this strategy are logged and counted, never carried out.
    pub dry_run: bool,
    /// The policy's own configuration, as JSON.
    pub config: String,
    /// A strategy whose hard thresholds may delete a pod despite its
    /// PodDisruptionBudget (see [`EvictionSettings::pdb_override_after`]);
    /// never for a threshold on a stall signal.
    pub pdb_override: bool,
}

impl Default for PolicySettings {
    /// Enabled, dry-run (a strategy the config does not name observes, see
    /// [`crate::config::PolicyConfig`]), empty config (`{}`).
    fn default() -> Self {
        Self {
            enabled: true,
            dry_run: true,
            config: "{}".into(),
            pdb_override: false,
        }
    }
}

impl PolicySettings {
    /// Enabled and carried out: what a layer's `dryRun: false` gives.
    pub fn enforced() -> Self {
        Self {
            dry_run: false,
            ..Self::default()
        }
    }
}

/// What the eviction manager needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionSettings {
    /// Time between cycles when no signal event wakes the manager.
    pub period: Duration,
    /// Most evictions started in one cycle.
    pub burst: usize,
    /// How long a node condition is still reported after it was last seen.
    pub condition_transition: Duration,
    /// How long an accepted eviction may take before its pod may be picked again.
    pub in_flight_timeout: Duration,
    /// Every decision is logged and counted, none carried out.
    pub dry_run: bool,
    /// How long every candidate of a hard threshold may be refused by
    /// PodDisruptionBudgets before the top one is deleted anyway, for the
    /// strategies that allow it (`None`: never).
    pub pdb_override_after: Option<Duration>,
    /// At most one override per PodDisruptionBudget in this window.
    pub pdb_override_window: Duration,
    /// Grace period of a hard threshold's eviction, whatever the strategy
    /// asked.
    pub hard_grace_period: Duration,
    /// The longest grace period a soft or force eviction gets.
    pub max_pod_grace_period: Duration,
    /// Whether strategies may taint the node `NoExecute`.
    pub allow_no_execute: bool,
    /// How long one eviction call may take before it counts as not asked.
    pub call_timeout: Duration,
    /// Name of the candidate sorter policy (`default-sorter`).
    pub sorter: String,
    /// Settings by policy name; a policy without an entry gets the defaults.
    pub policies: BTreeMap<String, PolicySettings>,
    /// The kubelet beside vigil, which thresholds are held against.
    pub kubelet: KubeletConfig,
    /// Caps on what vigil evicts beyond the kubelet.
    pub limits: VolumeLimits,
}

impl Default for EvictionSettings {
    /// The settings of [`VigilConfig::default`].
    fn default() -> Self {
        Self::from(&VigilConfig::default())
    }
}

impl From<&VigilConfig> for EvictionSettings {
    fn from(config: &VigilConfig) -> Self {
        let seconds = Duration::from_secs;
        let policies = config
            .policies
            .iter()
            .map(|(name, p)| {
                let settings = PolicySettings {
                    enabled: p.enabled,
                    dry_run: p.dry_run,
                    config: p.config.to_string(),
                    pdb_override: p.pdb_override,
                };
                (name.clone(), settings)
            })
            .collect();
        Self {
            period: seconds(config.eviction_period_seconds),
            burst: config.eviction_burst,
            condition_transition: seconds(config.condition_transition_seconds),
            in_flight_timeout: IN_FLIGHT_TIMEOUT,
            dry_run: config.dry_run,
            pdb_override_after: config.pdb_override_after_seconds.map(seconds),
            pdb_override_window: seconds(config.pdb_override_window_seconds),
            hard_grace_period: seconds(config.hard_grace_period_seconds),
            max_pod_grace_period: seconds(config.max_pod_grace_period_seconds),
            allow_no_execute: config.allow_no_execute_taints,
            call_timeout: CALL_TIMEOUT,
            sorter: config.sorter.clone(),
            policies,
            kubelet: config.kubelet.clone(),
            limits: VolumeLimits {
                window: seconds(config.eviction_limits.window_seconds),
                per_node: config.eviction_limits.per_node.map(|n| n as usize),
                per_namespace: config.eviction_limits.per_namespace.map(|n| n as usize),
            },
        }
    }
}

impl EvictionSettings {
    /// The settings of policy `name`.
    pub fn policy(&self, name: &str) -> PolicySettings {
        self.policies.get(name).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limits;

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
        let settings = EvictionSettings::from(&config);
        assert_eq!(settings.burst, 1);
        let memory = settings.policy("memory-pressure");
        assert!(memory.dry_run && memory.config == r#"{"hard":"1Gi"}"#);
    }

    #[test]
    fn the_pdb_override_is_off_by_default_and_allowed_for_memory_and_disk_once_set() {
        let defaults = serde_json::to_value(VigilConfig::default()).unwrap();
        assert!(defaults["pdbOverrideAfterSeconds"].is_null());
        let parsed: VigilConfig = serde_json::from_value(defaults).unwrap();
        let settings = EvictionSettings::from(&parsed);
        assert_eq!(settings.pdb_override_after, None);
        assert!(settings.policy("memory-pressure").pdb_override);
        assert!(settings.policy("disk-pressure").pdb_override);
        assert!(!settings.policy("psi-pressure").pdb_override);
        let set: VigilConfig = serde_json::from_str(r#"{"pdbOverrideAfterSeconds": 45}"#).unwrap();
        assert_eq!(
            EvictionSettings::from(&set).pdb_override_after,
            Some(Duration::from_secs(45))
        );
        let short: VigilConfig = serde_json::from_str(r#"{"pdbOverrideAfterSeconds": 5}"#).unwrap();
        assert_eq!(
            short.problems(),
            ["$.pdbOverrideAfterSeconds: 5 is less than the minimum of 30"]
        );
    }
}
