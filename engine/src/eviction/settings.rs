//! Settings of the eviction manager: plain data with documented defaults.

use std::collections::BTreeMap;
use std::time::Duration;

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
    /// Enabled, not dry-run, empty config (`{}`).
    fn default() -> Self {
        Self {
            enabled: true,
            dry_run: false,
            config: "{}".into(),
            pdb_override: false,
        }
    }
}

/// What the eviction manager needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionSettings {
    /// Time between cycles when no signal event wakes the manager (5 s).
    pub period: Duration,
    /// Most evictions started in one cycle (3).
    pub burst: usize,
    /// How long a node condition is still reported after it was last seen (5 min).
    pub condition_transition: Duration,
    /// How long an accepted eviction may take before its pod may be picked again (5 min).
    pub in_flight_timeout: Duration,
    /// Every decision is logged and counted, none carried out (off).
    pub dry_run: bool,
    /// How long every candidate of a hard threshold may be refused by
    /// PodDisruptionBudgets before the top one is deleted anyway, for the
    /// strategies that allow it (`None`, the default: never).
    pub pdb_override_after: Option<Duration>,
    /// At most one override per PodDisruptionBudget in this window (10 min).
    pub pdb_override_window: Duration,
    /// Grace period of a hard threshold's eviction, whatever the strategy
    /// asked (0 s, as the kubelet's hard eviction).
    pub hard_grace_period: Duration,
    /// The longest grace period a soft or force eviction gets (5 min).
    pub max_pod_grace_period: Duration,
    /// Whether strategies may taint the node `NoExecute` (off).
    pub allow_no_execute: bool,
    /// How long one eviction call may take before it counts as not asked (10 s).
    pub call_timeout: Duration,
    /// Name of the candidate sorter policy (`default-sorter`).
    pub sorter: String,
    /// Settings by policy name; a policy without an entry gets the defaults.
    pub policies: BTreeMap<String, PolicySettings>,
}

impl Default for EvictionSettings {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(5),
            burst: 3,
            condition_transition: Duration::from_secs(300),
            in_flight_timeout: Duration::from_secs(300),
            dry_run: false,
            pdb_override_after: None,
            pdb_override_window: Duration::from_secs(600),
            hard_grace_period: Duration::ZERO,
            max_pod_grace_period: Duration::from_secs(300),
            allow_no_execute: false,
            call_timeout: Duration::from_secs(10),
            sorter: "default-sorter".into(),
            policies: BTreeMap::new(),
        }
    }
}

impl EvictionSettings {
    /// The settings of policy `name`.
    pub fn policy(&self, name: &str) -> PolicySettings {
        self.policies.get(name).cloned().unwrap_or_default()
    }
}
