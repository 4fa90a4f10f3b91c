//! The agent's Prometheus metrics (`/metrics`, text exposition format), in one
//! registry: evictions, thresholds and conditions, cycle and
//! signal-to-eviction latency, policy calls, faults and state, config
//! updates, checkpoint loads and state, watch restarts, API requests, build
//! info.
//!
//! Everything here is cheap to update from any thread; nothing blocks.

mod export;
mod labels;
mod record;

pub use labels::{
    ApiLabels, BuildLabels, CappedLabels, CheckpointLabels, ConfigChange, ConfigStateLabels,
    ConfigUpdateLabels, EvictionLabels, MisplacedLabels, NameLabel, PolicyLabels,
    PolicyStateLabels, PrecompiledLabels, PrecompiledResult, PullLabels, PullResult, ShadowLabels,
    ThresholdLabels, TokenReviewLabels, TokenReviewResult, WaitingLabels,
};

use crate::policy::Policy;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use std::sync::{Mutex, Weak};

/// One policy version's counts when they were last added to the counters.
#[derive(Debug)]
struct Counted {
    version: Weak<Policy>,
    counts: [u64; 3],
}

/// Every metric the agent exports.
#[derive(Debug)]
pub struct Metrics {
    /// Eviction calls ended, by strategy, urgency and result.
    pub evictions: Family<EvictionLabels, Counter>,
    /// Victims being evicted at the last cycle (calls running, pods terminating).
    pub evictions_in_flight: Gauge,
    /// Thresholds met in the last cycle.
    pub thresholds_met: Family<ThresholdLabels, Gauge>,
    /// Thresholds met in the last cycle that waited for reclaim in progress
    /// instead of taking a victim.
    pub thresholds_waiting: Family<WaitingLabels, Gauge>,
    /// Thresholds reported in the last cycle out of their place beside the kubelet.
    pub thresholds_misplaced: Family<MisplacedLabels, Gauge>,
    /// Victims the last cycle held back by a cap on volume.
    pub evictions_held_back: Family<CappedLabels, Gauge>,
    /// Node conditions reported (1) or not (0).
    pub conditions: Family<NameLabel, Gauge>,
    /// How long one decision cycle takes, in seconds.
    pub cycle_seconds: Histogram,
    /// From a signal event to an accepted eviction, in seconds.
    pub signal_to_eviction_seconds: Histogram,
    /// Policy calls, by policy and version.
    pub policy_calls: Family<PolicyLabels, Counter>,
    /// Policy calls that faulted, by policy and version.
    pub policy_faults: Family<PolicyLabels, Counter>,
    /// Log lines dropped because a call went over its budget, by policy
    /// and version.
    pub policy_log_lines_dropped: Family<PolicyLabels, Counter>,
    /// Every policy version counted that still exists (serving, or kept as
    /// a last-known-good or built-in that may serve again), and its counts
    /// then.
    policy_counted: Mutex<Vec<Counted>>,
    /// Lifecycle state of each serving policy (1 for its current state).
    pub policy_state: Family<PolicyStateLabels, Gauge>,
    /// Calls of a version in shadow compared with the serving version's,
    /// by policy, version and result.
    pub policy_shadow: Family<ShadowLabels, Counter>,
    /// Candidates a sorter refused, by sorter (once per cycle it refused them).
    pub sorter_refusals: Family<NameLabel, Counter>,
    /// Policy names the config in force uses that are not loaded.
    pub config_unknown_policies: Gauge,
    /// Watches that had to start over (dropped stream, error, `410 Gone`).
    pub watch_restarts: Family<NameLabel, Counter>,
    /// API requests, by verb and status code.
    pub api_requests: Family<ApiLabels, Counter>,
    /// API requests kube's retry layer sent again, by verb and the status
    /// code that made it retry.
    pub api_retries: Family<ApiLabels, Counter>,
    /// Taint effects a strategy asked for that the host refused, by strategy.
    pub refused_taint_effects: Family<NameLabel, Counter>,
    /// Events not written, by why (`queue-full`, `repeated`).
    pub events_dropped: Family<NameLabel, Counter>,
    /// Configs assigned by the cluster, by what became of them.
    pub config_updates: Family<ConfigUpdateLabels, Counter>,
    /// Policy artifacts pulled from registries, by result.
    pub policy_pulls: Family<PullLabels, Counter>,
    /// Bytes of policy components pulled from registries.
    pub policy_pull_bytes: Counter,
    /// Precompiled policies sought for this node's engine, by result.
    pub policy_precompiled: Family<PrecompiledLabels, Counter>,
    /// Policy components compiled on this node (not loaded precompiled),
    /// built-ins aside.
    pub policy_compiles: Counter,
    /// Scrapers' tokens reviewed by the API server, by result.
    pub metrics_token_reviews: Family<TokenReviewLabels, Counter>,
    /// Config checkpoints read at start-up, by what was found.
    pub config_checkpoint_loads: Family<CheckpointLabels, Counter>,
    /// Why the running config runs (1 for the current reason).
    pub config_state: Family<ConfigStateLabels, Gauge>,
    /// 1 while every decision is a dry run (the node observes), else 0.
    pub observing: Gauge,
    /// 1 while a `VigilConfig` layer pauses the node, else 0.
    pub paused: Gauge,
    /// Always 1, labelled with the build.
    pub build_info: Family<BuildLabels, Gauge>,
}

impl Default for Metrics {
    /// The metrics, with histograms set up and build info filled in.
    fn default() -> Self {
        let metrics = Self {
            evictions: Family::default(),
            evictions_in_flight: Gauge::default(),
            thresholds_met: Family::default(),
            thresholds_waiting: Family::default(),
            thresholds_misplaced: Family::default(),
            evictions_held_back: Family::default(),
            conditions: Family::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.0001, 4.0, 10)),
            signal_to_eviction_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 10)),
            policy_calls: Family::default(),
            policy_faults: Family::default(),
            policy_log_lines_dropped: Family::default(),
            policy_counted: Mutex::default(),
            policy_state: Family::default(),
            policy_shadow: Family::default(),
            sorter_refusals: Family::default(),
            config_unknown_policies: Gauge::default(),
            watch_restarts: Family::default(),
            api_requests: Family::default(),
            api_retries: Family::default(),
            refused_taint_effects: Family::default(),
            events_dropped: Family::default(),
            config_updates: Family::default(),
            policy_pulls: Family::default(),
            policy_pull_bytes: Counter::default(),
            policy_precompiled: Family::default(),
            metrics_token_reviews: Family::default(),
            policy_compiles: Counter::default(),
            config_checkpoint_loads: Family::default(),
            config_state: Family::default(),
            observing: Gauge::default(),
            paused: Gauge::default(),
            build_info: Family::default(),
        };
        metrics
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: env!("VIGIL_BUILD_REVISION").into(),
                contract: crate::policy::CONTRACT_VERSION.into(),
            })
            .set(1);
        metrics
    }
}

impl Metrics {
    /// Counts a config update that ended with `result`.
    pub fn config_updated(&self, result: ConfigChange) {
        self.config_updates
            .get_or_create(&ConfigUpdateLabels { result })
            .inc();
    }

    /// Shows `reason` as the config state, and no other.
    pub fn config_reason(&self, reason: &str) {
        self.config_state.clear();
        self.config_state
            .get_or_create(&ConfigStateLabels {
                reason: reason.into(),
            })
            .set(1);
    }

    /// Counts a comparison of `policy`'s `version` in shadow that ended
    /// with `result` (`agree`, `differ` or `fault`).
    pub fn shadow_compared(&self, policy: &str, version: &str, result: &str) {
        self.policy_shadow
            .get_or_create(&ShadowLabels {
                policy: policy.into(),
                version: version.into(),
                result: result.into(),
            })
            .inc();
    }

    /// Counts a policy pull that ended with `result`, having fetched `bytes`.
    pub fn policy_pulled(&self, result: PullResult, bytes: u64) {
        self.policy_pulls
            .get_or_create(&PullLabels { result })
            .inc();
        self.policy_pull_bytes.inc_by(bytes);
    }

    /// Counts a precompiled policy sought with `result`.
    pub fn policy_precompiled(&self, result: PrecompiledResult) {
        self.policy_precompiled
            .get_or_create(&PrecompiledLabels { result })
            .inc();
    }

    /// Counts a scraper's token reviewed with `result`.
    pub fn metrics_token_reviewed(&self, result: TokenReviewResult) {
        self.metrics_token_reviews
            .get_or_create(&TokenReviewLabels { result })
            .inc();
    }

    /// Counts a watch that had to start over.
    pub fn watch_restarted(&self, watch: &str) {
        self.watch_restarts
            .get_or_create(&NameLabel { name: watch.into() })
            .inc();
    }
}

#[cfg(test)]
mod tests;
