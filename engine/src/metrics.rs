//! The agent's Prometheus metrics (`/metrics`, text exposition format), in one
//! registry: evictions, thresholds and conditions, cycle and
//! signal-to-eviction latency, policy calls, faults and state, config
//! updates, checkpoint loads and state, watch restarts, API requests, build
//! info.
//!
//! Everything here is cheap to update from any thread; nothing blocks.

use crate::eviction::runner::Report;
use crate::eviction::{CycleReport, Skipped, Victim};
use crate::model::MetLevel;
use crate::policy::{Phase, Policy, Registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry as PromRegistry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Labels of an eviction.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// The strategy that chose the victim.
    pub strategy: String,
    /// `hard`, `force` or `soft`.
    pub urgency: String,
    /// `accepted`, `refused`, `not-evictable`, `throttled`, `failed`,
    /// `gone` or `dry-run`.
    pub result: String,
}

/// Labels naming one thing.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The name (a strategy, condition, policy or watch).
    pub name: String,
}

/// Labels of a threshold.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThresholdLabels {
    /// The strategy that chose the victim.
    pub strategy: String,
    /// `soft` or `hard`.
    pub level: String,
}

/// Labels of a threshold waiting for reclaim in progress.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WaitingLabels {
    /// The strategy that reported the threshold.
    pub strategy: String,
    /// Whose reclaim it waits for: `own`, `shared`, `terminating` or `kubelet`.
    pub reclaim: String,
}

/// Labels of a threshold out of its place beside the kubelet.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MisplacedLabels {
    /// The strategy that reported it.
    pub strategy: String,
    /// The signal it watches.
    pub signal: String,
    /// `BehindKubelet` or `BeforeImageGC`.
    pub place: String,
}

/// Labels of a victim held back by a cap on volume.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CappedLabels {
    /// The strategy that chose it.
    pub strategy: String,
    /// `node` or `namespace`.
    pub cap: String,
}

/// Labels of a policy's state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyStateLabels {
    /// The policy, by name.
    pub policy: String,
    /// `trial`, `active` or `rolled-back`.
    pub state: String,
}

/// Labels of an API request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// The HTTP method.
    pub verb: String,
    /// The status code, or `error` when no answer came.
    pub code: String,
}

/// Labels of a config update.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigUpdateLabels {
    /// `applied`, `rejected`, `skipped`, `deferred`, `graduated` or `rolled-back`.
    pub result: String,
}

/// Labels of a policy pull.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PullLabels {
    /// `pulled`, `held` (the store had it), or why it failed
    /// ([`crate::distribution::pull::PullError::reason`]).
    pub result: String,
}

/// Labels of a checkpoint load.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckpointLabels {
    /// `missing`, `fresh`, `expired` or `corrupt`.
    pub status: String,
}

/// Labels of the config state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigStateLabels {
    /// The `VigilConfigOK` condition's reason.
    pub reason: String,
}

/// Labels of the build.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// vigil's version.
    pub version: String,
    /// The policy contract's version.
    pub contract: String,
}

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
    /// Policy calls, by policy (every version of it this process served).
    pub policy_calls: Family<NameLabel, Counter>,
    /// Policy calls that faulted, by policy.
    pub policy_faults: Family<NameLabel, Counter>,
    /// Log lines dropped because a call went over its budget, by policy.
    pub policy_log_lines_dropped: Family<NameLabel, Counter>,
    /// The version of each policy last counted, and its counts then.
    policy_counted: Mutex<HashMap<String, Counted>>,
    /// Lifecycle state of each serving policy (1 for its current state).
    pub policy_state: Family<PolicyStateLabels, Gauge>,
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
    pub policy_precompiled: Family<PullLabels, Counter>,
    /// Policy components compiled on this node (not loaded precompiled),
    /// built-ins aside.
    pub policy_compiles: Counter,
    /// Config checkpoints read at start-up, by what was found.
    pub config_checkpoint_loads: Family<CheckpointLabels, Counter>,
    /// Why the running config runs (1 for the current reason).
    pub config_state: Family<ConfigStateLabels, Gauge>,
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
            policy_compiles: Counter::default(),
            config_checkpoint_loads: Family::default(),
            config_state: Family::default(),
            build_info: Family::default(),
        };
        metrics
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                contract: crate::policy::CONTRACT_VERSION.into(),
            })
            .set(1);
        metrics
    }
}

impl Metrics {
    /// A Prometheus registry exporting these metrics under `vigil_`.
    pub fn registry(self: &Arc<Self>) -> PromRegistry {
        let mut registry = PromRegistry::with_prefix("vigil");
        let m = self.as_ref();
        registry.register(
            "evictions",
            "Eviction calls ended, by strategy, urgency and result",
            m.evictions.clone(),
        );
        registry.register(
            "evictions_in_flight",
            "Evictions asked and not yet gone",
            m.evictions_in_flight.clone(),
        );
        registry.register(
            "thresholds_met",
            "Thresholds met in the last cycle",
            m.thresholds_met.clone(),
        );
        registry.register(
            "thresholds_waiting",
            "Thresholds met in the last cycle that waited for reclaim in progress, by whose",
            m.thresholds_waiting.clone(),
        );
        registry.register(
            "thresholds_misplaced",
            "Thresholds reported in the last cycle that are not ahead of the kubelet's, or come before its image GC",
            m.thresholds_misplaced.clone(),
        );
        registry.register(
            "evictions_held_back",
            "Victims the last cycle held back by a cap on evictions per node or namespace",
            m.evictions_held_back.clone(),
        );
        registry.register(
            "conditions",
            "Node conditions reported",
            m.conditions.clone(),
        );
        registry.register(
            "cycle_seconds",
            "Duration of one decision cycle",
            m.cycle_seconds.clone(),
        );
        registry.register(
            "signal_to_eviction_seconds",
            "From a signal event to an accepted eviction",
            m.signal_to_eviction_seconds.clone(),
        );
        registry.register(
            "policy_calls",
            "Policy calls, by policy",
            m.policy_calls.clone(),
        );
        registry.register(
            "policy_faults",
            "Policy calls that faulted, by policy",
            m.policy_faults.clone(),
        );
        registry.register(
            "policy_log_lines_dropped",
            "Log lines dropped because a call went over its budget, by policy",
            m.policy_log_lines_dropped.clone(),
        );
        registry.register(
            "policy_state",
            "Lifecycle state of each serving policy",
            m.policy_state.clone(),
        );
        registry.register(
            "sorter_refusals",
            "Candidates a sorter refused, by sorter",
            m.sorter_refusals.clone(),
        );
        registry.register(
            "config_unknown_policies",
            "Policy names the config in force uses that are not loaded",
            m.config_unknown_policies.clone(),
        );
        registry.register(
            "watch_restarts",
            "Watches that started over",
            m.watch_restarts.clone(),
        );
        registry.register(
            "api_requests",
            "API server requests, by verb and code",
            m.api_requests.clone(),
        );
        registry.register(
            "api_retries",
            "API server requests sent again by the retry layer, by verb and code",
            m.api_retries.clone(),
        );
        registry.register(
            "refused_taint_effects",
            "Taint effects a strategy asked for that vigil refused, by strategy",
            m.refused_taint_effects.clone(),
        );
        registry.register(
            "events_dropped",
            "Kubernetes Events not written, by why",
            m.events_dropped.clone(),
        );
        registry.register(
            "config_updates",
            "Configs assigned by the cluster, by what became of them",
            m.config_updates.clone(),
        );
        registry.register(
            "policy_pulls",
            "Policy artifacts pulled from registries, by result",
            m.policy_pulls.clone(),
        );
        registry.register(
            "policy_pull_bytes",
            "Bytes of policy components pulled from registries",
            m.policy_pull_bytes.clone(),
        );
        registry.register(
            "policy_precompiled",
            "Precompiled policies sought for this node's engine, by result",
            m.policy_precompiled.clone(),
        );
        registry.register(
            "policy_compiles",
            "Policy components compiled on this node rather than loaded precompiled",
            m.policy_compiles.clone(),
        );
        registry.register(
            "config_checkpoint_loads",
            "Config checkpoints read at start-up, by what was found",
            m.config_checkpoint_loads.clone(),
        );
        registry.register(
            "config_state",
            "Why the running config runs (the VigilConfigOK reason)",
            m.config_state.clone(),
        );
        registry.register("build_info", "vigil's build", m.build_info.clone());
        registry
    }

    /// Counts a config update that ended with `result`.
    pub fn config_updated(&self, result: &str) {
        self.config_updates
            .get_or_create(&ConfigUpdateLabels {
                result: result.into(),
            })
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

    /// Counts a policy pull that ended with `result`, having fetched `bytes`.
    pub fn policy_pulled(&self, result: &str, bytes: u64) {
        self.policy_pulls
            .get_or_create(&PullLabels {
                result: result.into(),
            })
            .inc();
        self.policy_pull_bytes.inc_by(bytes);
    }

    /// Counts a precompiled policy sought with `result`: `imported`,
    /// `held` (the cache had it), `none` (no artifact for this node's
    /// engine), or why it was refused
    /// ([`crate::distribution::pull::PullError::reason`]).
    pub fn policy_precompiled(&self, result: &str) {
        self.policy_precompiled
            .get_or_create(&PullLabels {
                result: result.into(),
            })
            .inc();
    }

    /// Counts a watch that had to start over.
    pub fn watch_restarted(&self, watch: &str) {
        self.watch_restarts
            .get_or_create(&NameLabel { name: watch.into() })
            .inc();
    }

    /// Updates the metrics from one of the runner's reports.
    pub fn record(&self, report: &Report) {
        match report {
            Report::Cycle(cycle, took) => self.cycle(cycle, took.as_secs_f64()),
            Report::Settled { settled, latency } => {
                let (victim, result) = settled.result();
                self.eviction(victim, result);
                if let Some(latency) = latency {
                    self.signal_to_eviction_seconds
                        .observe(latency.as_secs_f64());
                }
            }
        }
    }

    fn eviction(&self, victim: &Victim, result: &str) {
        self.evictions
            .get_or_create(&EvictionLabels {
                strategy: victim.strategy.clone(),
                urgency: victim.urgency.as_str().into(),
                result: result.into(),
            })
            .inc();
    }

    fn cycle(&self, report: &CycleReport, seconds: f64) {
        self.cycle_seconds.observe(seconds);
        self.evictions_in_flight
            .set(i64::try_from(report.in_flight).unwrap_or(i64::MAX));
        self.thresholds_met.clear();
        for met in &report.thresholds {
            let level = match met.threshold.met {
                MetLevel::Hard => "hard",
                _ => "soft",
            };
            self.thresholds_met
                .get_or_create(&ThresholdLabels {
                    strategy: met.strategy.clone(),
                    level: level.into(),
                })
                .inc();
        }
        self.thresholds_misplaced.clear();
        for misplaced in &report.misplaced {
            self.thresholds_misplaced
                .get_or_create(&MisplacedLabels {
                    strategy: misplaced.strategy.clone(),
                    signal: misplaced.signal.clone(),
                    place: misplaced.place.reason().into(),
                })
                .set(1);
        }
        self.thresholds_waiting.clear();
        self.evictions_held_back.clear();
        for skipped in &report.skipped {
            match skipped {
                Skipped::Reclaiming { strategy, by, .. } => {
                    self.thresholds_waiting
                        .get_or_create(&WaitingLabels {
                            strategy: strategy.clone(),
                            reclaim: by.kind().into(),
                        })
                        .inc();
                }
                Skipped::Capped { strategy, cap, .. } => {
                    self.evictions_held_back
                        .get_or_create(&CappedLabels {
                            strategy: strategy.clone(),
                            cap: cap.as_str().into(),
                        })
                        .inc();
                }
                _ => {}
            }
        }
        for (strategy, _) in report.refused_effects() {
            self.refused_taint_effects
                .get_or_create(&NameLabel {
                    name: strategy.to_owned(),
                })
                .inc();
        }
        for refusal in &report.refusals {
            self.sorter_refusals
                .get_or_create(&NameLabel {
                    name: refusal.sorter.clone(),
                })
                .inc();
        }
        self.conditions.clear();
        for condition in &report.conditions {
            self.conditions
                .get_or_create(&NameLabel {
                    name: condition.name.clone(),
                })
                .set(1);
        }
    }

    /// Updates the policy metrics from the registry.
    pub fn policies(&self, registry: &Registry) {
        let compiles = registry.host().compiles();
        self.policy_compiles
            .inc_by(compiles.saturating_sub(self.policy_compiles.get()));
        self.policy_state.clear();
        for status in registry.status() {
            let state = match status.phase {
                Phase::Trial { .. } => "trial",
                Phase::Active => "active",
                Phase::RolledBack { .. } => "rolled-back",
            };
            self.policy_state
                .get_or_create(&PolicyStateLabels {
                    policy: status.name.clone(),
                    state: state.into(),
                })
                .set(1);
        }
        let serving = registry.serving();
        let mut counted = self
            .policy_counted
            .lock()
            .expect("policy counts lock poisoned");
        counted.retain(|name, _| serving.iter().any(|p| p.name() == name));
        for policy in serving {
            let counts = [policy.calls(), policy.faults(), policy.log_lines_dropped()];
            // A version counts from zero: what a new one did is all new.
            let before = match counted.get(policy.name()) {
                Some(seen) if Weak::ptr_eq(&seen.version, &Arc::downgrade(&policy)) => seen.counts,
                _ => [0; 3],
            };
            let name = NameLabel {
                name: policy.name().to_owned(),
            };
            let families = [
                &self.policy_calls,
                &self.policy_faults,
                &self.policy_log_lines_dropped,
            ];
            for ((family, now), before) in families.into_iter().zip(counts).zip(before) {
                family
                    .get_or_create(&name)
                    .inc_by(now.saturating_sub(before));
            }
            let version = Arc::downgrade(&policy);
            counted.insert(policy.name().to_owned(), Counted { version, counts });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The names of the samples the agent exports (`vigil_evictions_total`,
    /// `vigil_cycle_seconds_bucket`, …).
    fn exported() -> BTreeSet<String> {
        // A family without a sample is not exported: give each one.
        let m = Arc::new(Metrics::default());
        let text = |t: &str| t.to_owned();
        let name = NameLabel { name: text("p") };
        let eviction = EvictionLabels {
            strategy: text("s"),
            urgency: text("hard"),
            result: text("accepted"),
        };
        m.evictions.get_or_create(&eviction).inc();
        let threshold = ThresholdLabels {
            strategy: text("s"),
            level: text("hard"),
        };
        m.thresholds_met.get_or_create(&threshold).set(1);
        m.conditions.get_or_create(&name).set(1);
        for family in [
            &m.policy_calls,
            &m.policy_faults,
            &m.policy_log_lines_dropped,
        ] {
            family.get_or_create(&name).inc();
        }
        let state = PolicyStateLabels {
            policy: text("p"),
            state: text("trial"),
        };
        m.policy_state.get_or_create(&state).set(1);
        m.watch_restarted("pods");
        let api = ApiLabels {
            verb: text("GET"),
            code: text("200"),
        };
        m.api_requests.get_or_create(&api).inc();
        m.config_updated("applied");
        let load = CheckpointLabels {
            status: text("fresh"),
        };
        m.config_checkpoint_loads.get_or_create(&load).inc();
        m.config_reason("Active");

        let mut text = String::new();
        let registry = m.registry();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let mut names = BTreeSet::new();
        for line in text.lines() {
            let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|t| t.split_once(' '))
            else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_count", "_sum"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        }
        names
    }

    /// Every `vigil_…` metric name in `expr`.
    fn named(expr: &str) -> Vec<&str> {
        let mut found = Vec::new();
        let mut rest = expr;
        while let Some(at) = rest.find("vigil_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            found.push(&tail[..end]);
            rest = &tail[end..];
        }
        found
    }

    /// Parses `expr` as PromQL (Grafana's variables replaced by values) and
    /// checks that it names only exported metrics.
    fn check(expr: &str, exported: &BTreeSet<String>, whence: &str) {
        let plain = expr
            .replace("$__rate_interval", "5m")
            .replace("$instance", ".*");
        if let Err(error) = promql_parser::parser::parse(&plain) {
            panic!("{whence}: {expr}: {error}");
        }
        let names = named(expr);
        assert!(!names.is_empty(), "{whence}: {expr} names no vigil metric");
        for name in names {
            assert!(
                exported.contains(name),
                "{whence}: {name} is not exported; the agent exports {exported:?}"
            );
        }
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rules {
        groups: Vec<Group>,
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Group {
        name: String,
        rules: Vec<Rule>,
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rule {
        alert: String,
        expr: String,
        #[serde(rename = "for")]
        for_: Option<String>,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    }

    /// Calls, faults and dropped lines are counters: a new version of a
    /// policy (counting from zero) adds to them rather than resetting them.
    #[test]
    fn policy_calls_count_on_across_a_new_version() {
        use crate::clock::{Clock, ManualClock};
        use crate::policy::{Host, LimitsTable, Source};
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(std::time::UNIX_EPOCH));
        let host = Arc::new(Host::with_clock(None, Arc::clone(&clock)).unwrap());
        let registry = Registry::new(Arc::clone(&host), clock, LimitsTable::default(), None);
        let registry = registry.unwrap();
        let m = Metrics::default();
        let name = NameLabel {
            name: "default-merger".into(),
        };
        let calls = || m.policy_calls.get_or_create(&name).get();
        let call = |policy: &Policy| crate::policy::canary::run(policy, "{}").unwrap();

        let first = registry.get("default-merger").unwrap();
        call(&first);
        call(&first);
        m.policies(&registry);
        assert_eq!(calls(), 2);
        call(&first);
        m.policies(&registry);
        m.policies(&registry);
        assert_eq!(calls(), 3, "a scrape counts only what is new");

        let (merger, bytes) = crate::policy::builtin::BUILTINS[5];
        assert_eq!(merger, "default-merger");
        // Another version: the same component with a custom section `v2`.
        let changed = [bytes, &[0, 3, 2, b'v', b'2']].concat();
        let limits = registry.limits().for_policy(merger);
        let second = host.load(merger, changed, Source::Builtin, limits);
        let second = Arc::new(second.unwrap());
        registry.install(Arc::clone(&second));
        call(&second);
        m.policies(&registry);
        assert_eq!(second.calls(), 1);
        assert_eq!(calls(), 4, "the new version's call adds to the old ones'");
        assert_eq!(m.policy_faults.get_or_create(&name).get(), 0);
    }

    const OBSERVABILITY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/observability");

    #[test]
    fn the_alert_rules_parse_and_name_only_exported_metrics() {
        let exported = exported();
        let text = std::fs::read_to_string(format!("{OBSERVABILITY}/alerts.yaml")).unwrap();
        let rules: Rules = serde_norway::from_str(&text).unwrap();
        let rules: Vec<(&str, &Rule)> = rules
            .groups
            .iter()
            .flat_map(|g| g.rules.iter().map(|r| (g.name.as_str(), r)))
            .collect();
        assert!(rules.len() >= 5);
        for (group, rule) in rules {
            check(&rule.expr, &exported, &format!("{group}/{}", rule.alert));
            if let Some(wait) = &rule.for_ {
                let parsed: jiff::SignedDuration = wait.parse().unwrap();
                assert!(parsed.is_positive(), "{}: for {wait}", rule.alert);
            }
            assert!(rule.labels.contains_key("severity"), "{}", rule.alert);
            assert!(rule.annotations.contains_key("summary"), "{}", rule.alert);
        }
    }

    #[test]
    fn the_dashboard_queries_parse_and_name_only_exported_metrics() {
        let exported = exported();
        let text = std::fs::read_to_string(format!("{OBSERVABILITY}/dashboard.json")).unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
        let panels = dashboard["panels"].as_array().unwrap();
        assert!(panels.len() >= 6);
        for panel in panels {
            let title = panel["title"].as_str().unwrap();
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{title}");
            for target in targets {
                check(target["expr"].as_str().unwrap(), &exported, title);
            }
        }
    }
}
