//! Scenario files for `vigil simulate`: a node, its pods, and timelines of
//! usage and signals, in YAML. Parsing reports the line and field of a
//! malformed value; a validation pass then lists every remaining problem with
//! its path.

use super::timeline::Timeline;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Why a scenario cannot be used.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file cannot be read.
    #[error("cannot read scenario {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid YAML, or a field of the wrong type (the cause has the line and column).
    #[error("invalid scenario {path}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_norway::Error,
    },
    /// Well-formed, but wrong.
    #[error("{path}: {}", .problems.join("; "))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem, with its path.
        problems: Vec<String>,
    },
}

/// A pod's QoS class, as written in scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Qos {
    /// No requests or limits.
    BestEffort,
    /// Some requests, not guaranteed.
    Burstable,
    /// Requests equal limits.
    Guaranteed,
}

impl From<Qos> for crate::model::QosClass {
    fn from(qos: Qos) -> Self {
        match qos {
            Qos::BestEffort => Self::BestEffort,
            Qos::Burstable => Self::Burstable,
            Qos::Guaranteed => Self::Guaranteed,
        }
    }
}

/// Requests or limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceSpec {
    /// Memory, e.g. `512Mi`.
    #[serde(deserialize_with = "super::values::amount")]
    #[schemars(schema_with = "super::values::amount_schema")]
    pub memory: f64,
    /// Cpu in millicores, e.g. `500` or `500m`.
    #[serde(deserialize_with = "super::values::amount")]
    #[schemars(schema_with = "super::values::amount_schema")]
    pub cpu: f64,
}

/// One pod.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSpec {
    /// Name; unique within its namespace.
    pub name: String,
    /// Namespace (`default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// QoS class; derived from requests and limits when absent.
    pub qos: Option<Qos>,
    /// Scheduling priority (0).
    #[serde(default)]
    pub priority: i32,
    /// What its containers request, summed.
    #[serde(default)]
    pub requests: ResourceSpec,
    /// Its containers' limits, summed.
    #[serde(default)]
    pub limits: ResourceSpec,
    /// Its labels, as strategies and sorters may read them.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its annotations, as strategies and sorters may read them.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// A static pod.
    #[serde(default, rename = "static")]
    pub is_static: bool,
    /// A mirror pod.
    #[serde(default)]
    pub mirror: bool,
    /// A system-critical pod.
    #[serde(default)]
    pub critical: bool,
    /// Disruptions its PodDisruptionBudget allows, if one selects it.
    pub pdb_disruptions_allowed: Option<u32>,
    /// How long it takes to terminate once evicted (`30s`).
    #[serde(
        default = "default_grace",
        deserialize_with = "super::values::duration"
    )]
    #[schemars(schema_with = "super::values::duration_schema")]
    pub grace_period: Duration,
    /// How long it has been running when the scenario starts (`0s`; units
    /// up to `d`, at most 365 days): its start time is that much before.
    #[serde(default, deserialize_with = "super::values::age")]
    #[schemars(schema_with = "super::values::age_schema")]
    pub age: Duration,
    /// When it arrives (`0s`: there from the start); it starts then.
    #[serde(default, deserialize_with = "super::values::duration")]
    #[schemars(schema_with = "super::values::duration_schema")]
    pub arrives_at: Duration,
    /// When it leaves by itself (completes or is deleted), if it does.
    #[serde(default, deserialize_with = "super::values::optional_duration")]
    #[schemars(schema_with = "super::values::duration_schema")]
    pub leaves_at: Option<Duration>,
    /// Memory working set over time.
    #[serde(default)]
    pub memory: Timeline,
    /// Bytes written to the node's root filesystem over time.
    #[serde(default)]
    pub disk: Timeline,
    /// Its share of the node's memory stall (`psi.memory.some.avg10`, percent) over time.
    #[serde(default)]
    pub memory_stall: Timeline,
    /// Processes over time (one, if not given).
    #[serde(default)]
    pub pids: Option<Timeline>,
    /// Cpu usage (millicores) over time.
    #[serde(default)]
    pub cpu: Timeline,
    /// Its memory on each NUMA node over time, by node number (the
    /// `numa-memory` pod fact); none given: not measured.
    #[serde(default)]
    pub numa_memory: BTreeMap<u32, Timeline>,
    /// What its containers request of extended resources, summed, by
    /// resource name (e.g. `resource.katalyst.kubewharf.io/reclaimed_millicpu:
    /// 4000`), in the resource's own unit.
    #[serde(default)]
    pub extended_requests: BTreeMap<String, u64>,
}

impl PodSpec {
    /// The QoS class, as given or as the kubelet would derive it.
    pub fn qos(&self) -> Qos {
        self.qos.unwrap_or(
            if self.requests == ResourceSpec::default() && self.limits == ResourceSpec::default() {
                Qos::BestEffort
            } else if self.requests == self.limits
                && self.limits.memory > 0.0
                && self.limits.cpu > 0.0
            {
                Qos::Guaranteed
            } else {
                Qos::Burstable
            },
        )
    }
}

/// The node.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    /// Memory capacity, e.g. `8Gi`.
    #[serde(deserialize_with = "super::values::amount")]
    #[schemars(schema_with = "super::values::amount_schema")]
    pub memory: f64,
    /// Memory used outside pods (system daemons, kernel) over time.
    #[serde(default)]
    pub system_memory: Timeline,
    /// Size of the node's root filesystem (`100Gi`).
    #[serde(default = "default_disk", deserialize_with = "super::values::amount")]
    #[schemars(schema_with = "super::values::amount_schema")]
    pub disk: f64,
    /// Bytes of the root filesystem used outside pods over time.
    #[serde(default)]
    pub system_disk: Timeline,
    /// The kernel's `pid_max` (32768).
    #[serde(default = "default_pid_max")]
    pub pid_max: u64,
    /// Processes outside pods over time.
    #[serde(default)]
    pub system_pids: Timeline,
}

fn default_disk() -> f64 {
    (100u64 << 30) as f64
}

fn default_pid_max() -> u64 {
    32768
}

/// A whole scenario.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// How long to simulate, e.g. `3m`.
    #[serde(deserialize_with = "super::values::duration")]
    #[schemars(schema_with = "super::values::duration_schema")]
    pub duration: Duration,
    /// The node: its capacity and signal timelines.
    pub node: NodeSpec,
    /// A config layer merged over vigil's defaults (same shape as the config CRD).
    #[serde(default)]
    #[schemars(schema_with = "super::values::config_layer_schema")]
    pub config: Option<serde_json::Value>,
    /// Later versions of that layer, in time order: each replaces it from its
    /// time on, as an edit of the config object would on a cluster.
    #[serde(default)]
    pub config_changes: Vec<ConfigChange>,
    /// A policies directory, relative to the scenario file, overriding built-ins.
    pub policies_dir: Option<PathBuf>,
    /// The pods on the node, each with its usage timeline.
    pub pods: Vec<PodSpec>,
    /// Other node signals over time, by name (e.g. `psi.memory.some.avg10`);
    /// one named like a computed signal (`memory.available`,
    /// `nodefs.available`, `pid.available`) replaces it.
    #[serde(default)]
    pub signals: BTreeMap<String, Timeline>,
    /// The capacity of a signal of `signals` that has one, by name (e.g.
    /// `numa.1.memory.free`: that NUMA node's memory, `16Gi`); a signal
    /// given none has none, but for a percentage's 100.
    #[serde(default)]
    pub signal_capacities: BTreeMap<String, super::values::Amount>,
}

/// A new version of the scenario's config layer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigChange {
    /// When it takes effect (after the start, at most the scenario's duration).
    #[serde(deserialize_with = "super::values::duration")]
    #[schemars(schema_with = "super::values::duration_schema")]
    pub at: Duration,
    /// The whole layer from then on (same shape as `config`).
    #[schemars(schema_with = "super::values::config_layer_schema")]
    pub config: serde_json::Value,
}

/// The largest scenario file read.
pub(super) const MAX_SCENARIO_BYTES: u64 = 16 << 20;

fn default_namespace() -> String {
    "default".into()
}

fn default_grace() -> Duration {
    Duration::from_secs(30)
}

impl Scenario {
    /// Reads and validates the scenario at `path`.
    ///
    /// # Errors
    /// The file cannot be read, is malformed (with line and column), or fails validation.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let read_error = |source| ScenarioError::Read {
            path: path.to_owned(),
            source,
        };
        let text = crate::base::fsutil::read_text(path, MAX_SCENARIO_BYTES).map_err(read_error)?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text`; `path` is only used in errors.
    ///
    /// # Errors
    /// As [`Scenario::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, ScenarioError> {
        let scenario: Self =
            serde_norway::from_str(text).map_err(|source| ScenarioError::Syntax {
                path: path.to_owned(),
                source,
            })?;
        let problems = scenario.problems();
        if problems.is_empty() {
            Ok(scenario)
        } else {
            Err(ScenarioError::Invalid {
                path: path.to_owned(),
                problems,
            })
        }
    }

    /// Every problem the parser cannot see.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.duration.is_zero() {
            problems.push("duration: must be more than zero".into());
        }
        if self.node.memory <= 0.0 {
            problems.push("node.memory: must be more than zero".into());
        }
        if self.node.disk <= 0.0 {
            problems.push("node.disk: must be more than zero".into());
        }
        if self.node.pid_max == 0 {
            problems.push("node.pidMax: must be more than zero".into());
        }
        if self.config.as_ref().is_some_and(|c| !c.is_object()) {
            problems.push("config: must be a mapping".into());
        }
        let mut previous = Duration::ZERO;
        for (i, change) in self.config_changes.iter().enumerate() {
            if !change.config.is_object() {
                problems.push(format!("configChanges[{i}].config: must be a mapping"));
            }
            if change.at <= previous {
                problems.push(format!(
                    "configChanges[{i}].at: must be after the start and after the change before it"
                ));
            } else if change.at > self.duration {
                problems.push(format!(
                    "configChanges[{i}].at: after the scenario's end ({:?})",
                    self.duration
                ));
            }
            previous = previous.max(change.at);
        }
        problems.extend(self.node.system_memory.problems("node.systemMemory"));
        problems.extend(self.node.system_disk.problems("node.systemDisk"));
        problems.extend(self.node.system_pids.problems("node.systemPids"));
        let mut names = BTreeSet::new();
        for (i, pod) in self.pods.iter().enumerate() {
            if !names.insert((&pod.namespace, &pod.name)) {
                problems.push(format!(
                    "pods[{i}].name: {}/{} appears twice",
                    pod.namespace, pod.name
                ));
            }
            problems.extend(pod.memory.problems(&format!("pods[{i}].memory")));
            problems.extend(pod.cpu.problems(&format!("pods[{i}].cpu")));
            problems.extend(pod.disk.problems(&format!("pods[{i}].disk")));
            problems.extend(pod.memory_stall.problems(&format!("pods[{i}].memoryStall")));
            for (node, timeline) in &pod.numa_memory {
                problems.extend(timeline.problems(&format!("pods[{i}].numaMemory.{node}")));
            }
            if let Some(pids) = &pod.pids {
                problems.extend(pids.problems(&format!("pods[{i}].pids")));
            }
            if !pod.age.is_zero() && !pod.arrives_at.is_zero() {
                problems.push(format!(
                    "pods[{i}].age: a pod that arrives later starts when it arrives; give age or arrivesAt, not both"
                ));
            }
            if pod.leaves_at.is_some_and(|at| at <= pod.arrives_at) {
                problems.push(format!(
                    "pods[{i}].leavesAt: must be after it arrives ({:?})",
                    pod.arrives_at
                ));
            }
        }
        for (name, timeline) in &self.signals {
            problems.extend(timeline.problems(&format!("signals.{name}")));
        }
        for name in self.signal_capacities.keys() {
            if !self.signals.contains_key(name) {
                problems.push(format!(
                    "signalCapacities.{name}: no signal of that name is given in signals"
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: t\nduration: 1m\nnode: {memory: 8Gi}\npods:\n  - name: a\n    memory: [{at: 0s, value: 1Gi}]\n";

    #[test]
    fn a_minimal_scenario_parses_with_defaults() {
        let scenario = Scenario::parse(MINIMAL, Path::new("t.yaml")).unwrap();
        let pod = &scenario.pods[0];
        assert_eq!(
            (pod.namespace.as_str(), pod.qos(), pod.grace_period),
            ("default", Qos::BestEffort, Duration::from_secs(30))
        );
        assert_eq!(scenario.node.memory, (8u64 << 30) as f64);
        assert_eq!(pod.memory.at(Duration::ZERO), (1u64 << 30) as f64);
    }

    #[test]
    fn qos_is_derived_like_the_kubelet_does() {
        let spec = |requests, limits| PodSpec {
            requests,
            limits,
            ..Scenario::parse(MINIMAL, Path::new("t")).unwrap().pods[0].clone()
        };
        let r = |memory, cpu| ResourceSpec { memory, cpu };
        assert_eq!(spec(r(1.0, 1.0), r(1.0, 1.0)).qos(), Qos::Guaranteed);
        assert_eq!(spec(r(1.0, 0.0), r(0.0, 0.0)).qos(), Qos::Burstable);
        assert_eq!(spec(r(0.0, 0.0), r(0.0, 0.0)).qos(), Qos::BestEffort);
    }

    #[test]
    fn a_malformed_value_is_reported_with_its_line_and_field() {
        let chain = |e: ScenarioError| crate::base::report::Chain(&e).to_string();
        let text = MINIMAL.replace("value: 1Gi", "value: lots");
        let error = chain(Scenario::parse(&text, Path::new("bad.yaml")).unwrap_err());
        let expected = "invalid scenario bad.yaml: pods[0].memory[0].value";
        assert!(error.starts_with(expected), "{error}");
        assert!(error.contains("line 6"), "{error}");
        let unknown = MINIMAL.replace("name: t", "name: t\nduraton: 5s");
        let error = chain(Scenario::parse(&unknown, Path::new("u.yaml")).unwrap_err());
        assert!(
            error.contains("unknown field `duraton`") && error.contains("line 2"),
            "{error}"
        );
    }

    #[test]
    fn every_semantic_problem_is_listed_with_its_path() {
        let text = "name: t\nduration: 0s\nnode: {memory: 8Gi}\npods:\n  - {name: a}\n  - name: a\n    memory: [{at: 5s, value: 1}, {at: 1s, value: 2}]\n    numaMemory: {1: [{at: 5s, value: 1}, {at: 1s, value: 2}]}\nsignalCapacities: {numa.1.memory.free: 16Gi}\n";
        match Scenario::parse(text, Path::new("t")) {
            Err(ScenarioError::Invalid { problems, .. }) => assert_eq!(
                problems,
                [
                    "duration: must be more than zero",
                    "pods[1].name: default/a appears twice",
                    "pods[1].memory[1]: points must be in increasing time order",
                    "pods[1].numaMemory.1[1]: points must be in increasing time order",
                    "signalCapacities.numa.1.memory.free: no signal of that name is given in signals",
                ]
            ),
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn config_changes_must_be_mappings_in_time_order_within_the_scenario() {
        let text = format!(
            "{MINIMAL}configChanges:\n  - {{at: 30s, config: {{}}}}\n  - {{at: 20s, config: {{}}}}\n  - {{at: 2m, config: [1]}}\n"
        );
        match Scenario::parse(&text, Path::new("t")) {
            Err(ScenarioError::Invalid { problems, .. }) => assert_eq!(
                problems,
                [
                    "configChanges[1].at: must be after the start and after the change before it",
                    "configChanges[2].config: must be a mapping",
                    "configChanges[2].at: after the scenario's end (60s)",
                ]
            ),
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn amounts_must_be_finite_and_not_negative() {
        for bad in ["-1", ".nan", ".inf", "-.inf", "-1Gi", "-5.5"] {
            let text = MINIMAL.replace("value: 1Gi", &format!("value: {bad}"));
            assert!(
                Scenario::parse(&text, Path::new("t")).is_err(),
                "{bad} was accepted"
            );
        }
    }

    #[test]
    fn ages_go_up_to_a_year_and_times_up_to_a_day() {
        let with =
            |field: &str| MINIMAL.replace("  - name: a\n", &format!("  - name: a\n    {field}\n"));
        let parse = |field: &str| Scenario::parse(&with(field), Path::new("t"));
        assert_eq!(
            parse("age: 30d").unwrap().pods[0].age,
            Duration::from_secs(30 * 86_400)
        );
        assert!(parse("age: 366d").is_err());
        assert_eq!(
            parse("arrivesAt: 2h").unwrap().pods[0].arrives_at,
            Duration::from_secs(7200)
        );
        assert!(
            parse("arrivesAt: 25h").is_err(),
            "a scenario time is at most a day"
        );
        assert!(parse("leavesAt: 2d").is_err());
        match Scenario::parse(
            &with("age: 1h\n    arrivesAt: 10s\n    leavesAt: 5s"),
            Path::new("t"),
        ) {
            Err(ScenarioError::Invalid { problems, .. }) => {
                assert_eq!(problems.len(), 2, "{problems:?}");
                assert!(problems[0].starts_with("pods[0].age: a pod that arrives later"));
                assert!(problems[1].starts_with("pods[0].leavesAt: must be after it arrives"));
            }
            other => panic!("expected problems, got {other:?}"),
        }
    }
}
