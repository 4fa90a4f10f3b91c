//! The simulation: the real eviction manager with the real policies against a
//! scenario, on a virtual clock. Evicted pods leave after their grace period,
//! taking their usage with them, so the timeline shows recovery.

use super::api::EvictionModel;
use super::record::{
    DecisionRecord, EvictionRecord, PodUsage, PolicyRecord, Simulation, Step, ThresholdRecord,
};
use super::scenario::{ConfigChange, PodSpec, Scenario};
use super::shadow::{ShadowError, ShadowFile, Shadows};
use crate::base::clock::ManualClock;
use crate::base::report::Chain;
use crate::config::{ConfigError, VigilConfig, references};
use crate::eviction::kubelet::kubelet_acts;
use crate::eviction::{EvictionManager, EvictionSettings, NodeState};
use crate::model::SnapshotData;
use crate::model::{KeyValue, Layer, NumaMemory, OwnerKind, Pod, Resources, Signal, Usage};
use crate::policy::lifecycle::reload::Reloader;
use crate::policy::{Host, HostError, LimitsTable, Registry, RegistryError};
use crate::signals::catalogue;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use thiserror::Error;

/// Virtual time at which every simulation starts (2023-11-14T22:13:20Z).
const START: Duration = Duration::from_secs(1_700_000_000);

/// Why a simulation could not run.
#[derive(Debug, Error)]
pub enum SimulateError {
    /// The policy host could not start.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The policy registry could not start.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A version to run in shadow cannot.
    #[error(transparent)]
    Shadow(#[from] ShadowError),
    /// The scenario's config layer is rejected.
    #[error("the scenario's config")]
    Config(#[from] ConfigError),
}

/// A pod of the scenario while the simulation runs.
struct SimPod<'a> {
    spec: &'a PodSpec,
    uid: String,
    /// When it is gone: by itself (`leavesAt`), or after an eviction.
    leaves_at: Option<Duration>,
}

impl SimPod<'_> {
    /// Whether it is on the node at `t`.
    fn present(&self, t: Duration) -> bool {
        self.spec.arrives_at <= t && self.leaves_at.is_none_or(|at| at > t)
    }

    /// When it started: `age` before the scenario's start, or when it arrived.
    fn start_time_ms(&self) -> i64 {
        let start = START.as_millis() as i64;
        start - self.spec.age.as_millis() as i64 + self.spec.arrives_at.as_millis() as i64
    }
}

impl SimPod<'_> {
    fn record(&self, t: Duration) -> Pod {
        let spec = self.spec;
        let memory = spec.memory.at(t) as u64;
        let pairs = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(key, value)| KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect()
        };
        let resources = |r: &super::scenario::ResourceSpec| Resources {
            memory_bytes: r.memory as u64,
            cpu_millis: r.cpu as u64,
        };
        Pod {
            uid: self.uid.clone(),
            namespace: spec.namespace.clone(),
            name: spec.name.clone(),
            qos: spec.qos().into(),
            priority: spec.priority,
            labels: pairs(&spec.labels),
            annotations: pairs(&spec.annotations),
            requests: resources(&spec.requests),
            limits: resources(&spec.limits),
            usage: Usage {
                memory_working_set_bytes: Some(memory),
                memory_rss_bytes: Some(memory),
                memory_usage_bytes: Some(memory),
                cpu_millis: Some(spec.cpu.at(t) as u64),
                ephemeral_storage_bytes: Some(spec.disk.at(t) as u64),
                pids: Some(spec.pids.as_ref().map_or(1, |p| p.at(t) as u64)),
                age_ms: Some(0),
                numa_memory: (spec.numa_memory.iter())
                    .map(|(node, timeline)| NumaMemory {
                        node: *node,
                        bytes: timeline.at(t) as u64,
                    })
                    .collect(),
                // Simulated facts are read afresh at each step.
                facts_age_ms: (!spec.numa_memory.is_empty()).then_some(0),
                ..Usage::unread()
            },
            writable_layers: None,
            containers_without_memory_request: 0,
            extended_requests: (spec.extended_requests.iter())
                .map(|(name, value)| crate::model::Amount {
                    name: name.clone(),
                    value: *value,
                })
                .collect(),
            start_time_ms: self.start_time_ms(),
            owner_kind: Some(OwnerKind::ReplicaSet),
            is_static: spec.is_static,
            is_mirror: spec.mirror,
            is_critical: spec.critical,
            pdb_disruptions_allowed: spec.pdb_disruptions_allowed,
        }
    }
}

/// How to run a scenario, beyond what its file says.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// A policies directory to use instead of the scenario's `policiesDir`
    /// (relative to the working directory, not to the scenario).
    pub policies_dir: Option<PathBuf>,
    /// Where to keep precompiled components between runs: a JS or Python
    /// policy compiles for seconds and then loads in milliseconds.
    pub cache_dir: Option<PathBuf>,
    /// Record the node of every step ([`Step::snapshot`]).
    pub snapshots: bool,
    /// Versions to run in shadow of the serving policies of their names.
    pub shadows: Vec<ShadowFile>,
}

/// The policies and config a simulation starts with.
struct Loaded {
    registry: Arc<Registry>,
    config: VigilConfig,
    /// Policy files that did not load, as warnings: what served before them
    /// serves, as in the agent.
    failed: Vec<String>,
}

/// Loads the policies: the built-ins, then the policies directory over them
/// with the limits the scenario's config sets (merged by the built-in merger
/// first, so a file loads with its own limits from the start), then the
/// config merged again by whatever merger now serves.
async fn load(
    scenario: &Scenario,
    base: &Path,
    options: &RunOptions,
    clock: Arc<ManualClock>,
) -> Result<Loaded, SimulateError> {
    let host = Arc::new(Host::with_clock(options.cache_dir.clone(), clock.clone())?);
    let registry = Arc::new(Registry::new(host, clock, LimitsTable::default(), None)?);
    let layers = overlay(scenario.config.as_ref(), "scenario");
    registry.set_limits(VigilConfig::merge(&registry, layers)?.limits());
    let policies_dir = options
        .policies_dir
        .clone()
        .or_else(|| scenario.policies_dir.as_ref().map(|dir| base.join(dir)));
    let mut failed = Vec::new();
    if let Some(dir) = policies_dir {
        let report = Reloader::new(Arc::clone(&registry), dir).scan().await;
        for (name, error) in report.failed {
            let serving = if registry.status().iter().any(|p| p.name == name) {
                "the built-in serves instead"
            } else {
                "nothing of that name serves"
            };
            failed.push(format!(
                "policy {name} in the policies directory did not load; {serving}: {}",
                Chain(&error)
            ));
        }
    }
    let config = merged(&registry, scenario.config.as_ref(), "scenario")?;
    registry.set_limits(config.limits());
    Ok(Loaded {
        registry,
        config,
        failed,
    })
}

/// The scenario's config layer `json`, named `source`, if any.
fn overlay(json: Option<&serde_json::Value>, source: &str) -> Vec<Layer> {
    let layer = json.map(|c| Layer {
        source: source.into(),
        json: c.to_string(),
    });
    layer.into_iter().collect()
}

/// vigil's defaults with `json` merged over them by the serving merger, its
/// policy references checked.
fn merged(
    registry: &Registry,
    json: Option<&serde_json::Value>,
    source: &str,
) -> Result<VigilConfig, ConfigError> {
    checked(json, source, |layers| VigilConfig::merge(registry, layers))
}

/// The config `merge` makes of `json` over the defaults, its policy
/// references checked.
fn checked(
    json: Option<&serde_json::Value>,
    source: &str,
    merge: impl FnOnce(Vec<Layer>) -> Result<VigilConfig, ConfigError>,
) -> Result<VigilConfig, ConfigError> {
    let layers = overlay(json, source);
    let config = merge(layers.clone())?;
    references::check(&config, &layers, &BTreeMap::new())?;
    Ok(config)
}

/// `serving`, the config [`merged`] made of `json`, judged against what the
/// merger in shadow, if any, makes of it.
fn judge_merge(
    shadows: &mut Shadows,
    serving: &Result<VigilConfig, ConfigError>,
    json: Option<&serde_json::Value>,
    source: &str,
) {
    shadows.judge_merge(serving, |merger| {
        checked(json, source, |layers| VigilConfig::merge_by(merger, layers))
    });
}

/// Runs `scenario`; `base` is the directory its relative paths start from.
///
/// # Errors
/// The policies or the scenario's config do not load.
pub async fn run(
    scenario: &Scenario,
    base: &Path,
    options: &RunOptions,
) -> Result<Simulation, SimulateError> {
    let start = UNIX_EPOCH + START;
    let clock = Arc::new(ManualClock::new(start));
    let Loaded {
        registry,
        config,
        failed,
    } = load(scenario, base, options, Arc::clone(&clock)).await?;
    let settings = EvictionSettings::from(&config);
    let mut shadows = Shadows::load(&registry, &options.shadows)?;
    judge_merge(
        &mut shadows,
        &Ok(config.clone()),
        scenario.config.as_ref(),
        "scenario",
    );
    let mut manager = EvictionManager::new(shadows.policies(), settings.clone());
    let mut pods = sim_pods(scenario);
    let mut simulation = begun(scenario, &registry, &settings, failed);
    let loaded: Vec<String> = simulation.policies.iter().map(|p| p.name.clone()).collect();
    let mut serving = versions(&registry);
    let mut changes = scenario.config_changes.iter().enumerate().peekable();
    let mut t = Duration::ZERO;
    while t <= scenario.duration {
        let config_notes: Vec<String> = std::iter::from_fn(|| changes.next_if(|(_, c)| c.at <= t))
            .map(|(i, change)| {
                let mut simulated = Simulated {
                    registry: &registry,
                    manager: &mut manager,
                    simulation: &mut simulation,
                    shadows: &mut shadows,
                };
                apply_change(&mut simulated, &loaded, i, change)
            })
            .collect();
        let period = manager.settings().period;
        let present: Vec<&SimPod<'_>> = pods.iter().filter(|p| p.present(t)).collect();
        let node = node_state(scenario, &present, t);
        let report = manager
            .cycle_through(start + t, &node, &EvictionModel)
            .await;
        for victim in &report.started {
            let record = evict(&mut pods, victim, t);
            simulation.evictions.push(record);
        }
        simulation.capacities.extend(
            node.signals
                .iter()
                .filter_map(|s| Some((s.name.clone(), s.capacity?))),
        );
        let mut step = step(t, &node, &report);
        shadows.judge(&mut step);
        step.kubelet = kubelet_acts(&manager.settings().kubelet, &node.signals);
        // A version that faults in its trial is rolled back, as in the agent.
        let now_serving = versions(&registry);
        for note in rolled_back(&serving, &now_serving) {
            simulation.warn(note.clone());
            step.unanswered.push(note.clone());
            step.skipped.push(note);
        }
        serving = now_serving;
        step.config = config_notes;
        step.snapshot = options.snapshots.then(|| snapshot_at(t, node));
        simulation.steps.push(step);
        t += period;
        clock.advance(period);
    }
    simulation.shadows = shadows.into_records();
    Ok(simulation)
}

/// The scenario's pods, none evicted yet.
fn sim_pods(scenario: &Scenario) -> Vec<SimPod<'_>> {
    (scenario.pods.iter())
        .map(|spec| SimPod {
            spec,
            uid: format!("{}-{}", spec.namespace, spec.name),
            leaves_at: spec.leaves_at,
        })
        .collect()
}

/// The record of a simulation before its first step: the policies that
/// serve, the files that did not load and config for policies not loaded.
fn begun(
    scenario: &Scenario,
    registry: &Registry,
    settings: &EvictionSettings,
    failed: Vec<String>,
) -> Simulation {
    let mut simulation = Simulation::new(scenario, settings.period);
    simulation.policies = (registry.status().into_iter())
        .map(PolicyRecord::new)
        .collect();
    let loaded: Vec<String> = simulation.policies.iter().map(|p| p.name.clone()).collect();
    for warning in failed {
        simulation.warn(warning);
    }
    simulation.warn_unknown(settings, &loaded);
    simulation
}

/// The node at `t` as the strategies saw it, the input `vigil policy test` takes.
fn snapshot_at(t: Duration, node: NodeState) -> SnapshotData {
    SnapshotData {
        now_ms: (START + t).as_millis() as i64,
        signals: node.signals,
        pods: node.pods,
        last_met: Vec::new(),
        state: Vec::new(),
    }
}

/// The pod of `victim`, evicted at `t`, leaves once its grace period is
/// over (or earlier, if it was leaving anyway): the record of its eviction.
fn evict(pods: &mut [SimPod<'_>], victim: &crate::eviction::Victim, t: Duration) -> EvictionRecord {
    let pod = pods
        .iter_mut()
        .find(|p| p.uid == victim.pod.uid)
        .expect("victims are scenario pods");
    let grace = victim
        .grace_period_seconds
        .map_or(pod.spec.grace_period, Duration::from_secs);
    pod.leaves_at = Some(pod.leaves_at.map_or(t + grace, |at| at.min(t + grace)));
    EvictionRecord::new(victim, t, t + grace)
}

/// What a config change acts on.
struct Simulated<'a> {
    registry: &'a Registry,
    manager: &'a mut EvictionManager,
    simulation: &'a mut Simulation,
    shadows: &'a mut Shadows,
}

/// Puts the scenario's config change `i` in force from the cycle at its
/// time, as an edit of the config object would: the note for that step. A refused change
/// is also a warning, and the config before it stays.
fn apply_change(
    simulated: &mut Simulated<'_>,
    loaded: &[String],
    i: usize,
    change: &ConfigChange,
) -> String {
    let Simulated {
        registry,
        manager,
        simulation,
        shadows,
    } = simulated;
    let source = format!("configChanges[{i}]");
    let merged = merged(registry, Some(&change.config), &source);
    judge_merge(shadows, &merged, Some(&change.config), &source);
    match merged {
        Ok(config) => {
            registry.set_limits(config.limits());
            let settings = EvictionSettings::from(&config);
            simulation.warn_unknown(&settings, loaded);
            manager.set_settings(settings);
            format!("{source} applied")
        }
        Err(error) => {
            let note = format!(
                "{source} refused, the config before it stays: {}",
                Chain(&error)
            );
            simulation.warn(note.clone());
            note
        }
    }
}

/// What became of the policies serving `before` that no longer serve as
/// they did `after` a cycle: a version on trial that faulted is rolled back
/// to the one before it, or withdrawn if there is none.
fn rolled_back(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    before
        .iter()
        .filter_map(|(name, digest)| match after.get(name) {
            None => Some(format!(
                "policy {name} faulted in its trial and was withdrawn: nothing of that name serves"
            )),
            Some(now) if now != digest => Some(format!(
                "policy {name} faulted in its trial and was rolled back to the version before it"
            )),
            Some(_) => None,
        })
        .collect()
}

/// The digest of each serving policy, by name.
fn versions(registry: &Registry) -> BTreeMap<String, String> {
    registry
        .status()
        .into_iter()
        .map(|p| (p.name, p.digest.hex()))
        .collect()
}

/// The node at `t`: `memory.available`, `nodefs.available` and
/// `pid.available` are capacity minus what the system and the present pods
/// use; `psi.memory.some.avg10` is the present pods' memory stall (at most
/// 100); the scenario's own signals come on top and win.
fn node_state(scenario: &Scenario, present: &[&SimPod<'_>], t: Duration) -> NodeState {
    let stall: f64 = present
        .iter()
        .map(|p| p.spec.memory_stall.at(t))
        .sum::<f64>()
        .min(100.0);
    let pods: Vec<Pod> = present.iter().map(|p| p.record(t)).collect();
    let node = &scenario.node;
    let sum = |usage: fn(&Pod) -> Option<u64>| {
        (pods.iter())
            .map(|p| usage(p).unwrap_or(0) as f64)
            .sum::<f64>()
    };
    let available = |capacity: f64, used: f64| (capacity - used).max(0.0);
    let memory = node.system_memory.at(t) + sum(|p| p.usage.memory_working_set_bytes);
    let disk = node.system_disk.at(t) + sum(|p| p.usage.ephemeral_storage_bytes);
    let pids = node.system_pids.at(t) + sum(|p| p.usage.pids);
    let pid_max = node.pid_max as f64;
    let mut signals: BTreeMap<String, Signal> = [
        (
            "memory.available",
            available(node.memory, memory),
            Some(node.memory),
        ),
        (
            "nodefs.available",
            available(node.disk, disk),
            Some(node.disk),
        ),
        ("pid.available", available(pid_max, pids), Some(pid_max)),
        ("psi.memory.some.avg10", stall, Some(100.0)),
    ]
    .into_iter()
    .map(|(name, value, capacity)| {
        (
            name.to_owned(),
            Signal {
                name: name.into(),
                value,
                capacity,
            },
        )
    })
    .collect();
    for (name, timeline) in &scenario.signals {
        let capacity = (scenario.signal_capacities.get(name).map(|c| c.0))
            .or(signals.get(name).and_then(|s| s.capacity))
            .or(catalogue::unit(name).capacity());
        signals.insert(
            name.clone(),
            Signal {
                name: name.clone(),
                value: timeline.at(t),
                capacity,
            },
        );
    }
    NodeState {
        signals: signals.into_values().collect(),
        pods,
        ..NodeState::default()
    }
}

fn step(t: Duration, node: &NodeState, report: &crate::eviction::CycleReport) -> Step {
    let met: BTreeMap<(&str, &str), &crate::eviction::MetThreshold> = report
        .thresholds
        .iter()
        .map(|m| ((m.strategy.as_str(), m.threshold.scope.as_str()), m))
        .collect();
    Step {
        t: t.as_secs_f64(),
        signals: node
            .signals
            .iter()
            .map(|s| (s.name.clone(), s.value))
            .collect(),
        usage: node
            .pods
            .iter()
            .map(|p| {
                let usage = PodUsage {
                    memory_bytes: p.usage.memory_working_set_bytes.unwrap_or(0),
                    ephemeral_storage_bytes: p.usage.ephemeral_storage_bytes.unwrap_or(0),
                    pids: p.usage.pids.unwrap_or(0),
                };
                (format!("{}/{}", p.namespace, p.name), usage)
            })
            .collect(),
        thresholds: report
            .reported
            .iter()
            .map(|(strategy, threshold)| ThresholdRecord {
                strategy: strategy.clone(),
                scope: threshold.scope.clone(),
                met: threshold.met.into(),
                signal: threshold.signal.clone(),
                observed: threshold.observed,
                threshold: threshold.threshold,
                past_grace: (met.get(&(strategy.as_str(), threshold.scope.as_str())))
                    .is_some_and(|m| m.past_grace),
                condition: threshold.condition.as_ref().map(|c| c.name.clone()),
            })
            .collect(),
        conditions: report.conditions.iter().map(|c| c.name.clone()).collect(),
        kubelet: Vec::new(),
        misplaced: report.misplaced.iter().map(ToString::to_string).collect(),
        decisions: report.decisions.iter().map(DecisionRecord::new).collect(),
        started: report
            .started
            .iter()
            .map(|v| format!("{}/{}", v.pod.namespace, v.pod.name))
            .collect(),
        gone: report
            .gone
            .iter()
            .map(|v| format!("{}/{}", v.pod.namespace, v.pod.name))
            .collect(),
        skipped: report.skipped.iter().map(ToString::to_string).collect(),
        unanswered: report
            .skipped
            .iter()
            .filter(|s| s.is_policys())
            .map(ToString::to_string)
            .collect(),
        refusals: report.refusals.clone(),
        config: Vec::new(),
        shadow: Vec::new(),
        snapshot: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_gone_was_withdrawn_and_one_serving_another_version_rolled_back() {
        let versions = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(n, d)| ((*n).to_owned(), (*d).to_owned()))
                .collect()
        };
        let before = versions(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let after = versions(&[("b", "9"), ("c", "3")]);
        assert_eq!(
            rolled_back(&before, &after),
            [
                "policy a faulted in its trial and was withdrawn: nothing of that name serves",
                "policy b faulted in its trial and was rolled back to the version before it"
            ]
        );
        assert!(rolled_back(&after, &after).is_empty());
    }
}
