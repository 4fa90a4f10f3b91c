//! The metrics as Prometheus sees them: names and help under `vigil_`, in
//! one registry the HTTP endpoint encodes.

use super::Metrics;
use prometheus_client::registry::Registry;
use std::sync::Arc;

impl Metrics {
    /// A Prometheus registry exporting these metrics under `vigil_`.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::with_prefix("vigil");
        eviction(&mut registry, self);
        policies(&mut registry, self);
        cluster(&mut registry, self);
        registry
    }
}

/// What the eviction loop decides and how its calls end.
fn eviction(registry: &mut Registry, m: &Metrics) {
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
        "refused_taint_effects",
        "Taint effects a strategy asked for that vigil refused, by strategy",
        m.refused_taint_effects.clone(),
    );
}

/// What the policies do, how they are pulled and compiled, and the build.
fn policies(registry: &mut Registry, m: &Metrics) {
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
        "policy_shadow",
        "Calls of a version in shadow compared with the serving version's, by result",
        m.policy_shadow.clone(),
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
    registry.register("build_info", "vigil's build", m.build_info.clone());
}

/// The config, the watches and the API server.
fn cluster(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "metrics_token_reviews",
        "Scrapers' tokens reviewed by the API server (--metrics-auth=kubernetes), by result",
        m.metrics_token_reviews.clone(),
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
        "config_checkpoint_loads",
        "Config checkpoints read at start-up, by what was found",
        m.config_checkpoint_loads.clone(),
    );
    registry.register(
        "config_state",
        "Why the running config runs (the VigilConfigOK reason)",
        m.config_state.clone(),
    );
    registry.register(
        "observing",
        "1 while every decision is a dry run: the node evicts and taints nothing",
        m.observing.clone(),
    );
    registry.register(
        "paused",
        "1 while a VigilConfig layer pauses the node: it evicts and taints nothing",
        m.paused.clone(),
    );
}
