//! Real memory pressure with vigil on the node: a `VigilConfig` puts the
//! memory threshold a few hundred MiB under the node's `memory.available`
//! of the moment, a BestEffort pod allocates past it, and vigil, reading the
//! real `/proc` and cgroup files, evicts it through the Eviction API while a
//! Guaranteed pod and a BestEffort pod behind a PodDisruptionBudget (and
//! holding more memory than the hog when it crosses) stay; the kubelet's own
//! threshold sits below vigil's, and never fires. Each episode is timed from
//! the moment vigil's own reading of the node (the same code, on the same
//! files) crosses the threshold to the moment the hog's process is gone.

use super::{until, until_explained};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use vigil::signals::{Cgroups, Driver, MemInfo};
use vigil_testbed::upstream::Upstream;

const MIB: u64 = 1 << 20;
/// How far under the reading of the moment a threshold is set.
pub const MARGIN_MIB: u64 = 400;
/// What a hog allocates, and how much a second.
pub const HOG_MIB: u64 = 1200;
pub const HOG_STEP_MIB: u64 = 100;
/// What the guarded pod holds: more than the hog when it crosses, so vigil
/// ranks it first and the PodDisruptionBudget has to hold.
const GUARDED_MIB: u64 = 800;
/// How much further under the kubelet's own reading its threshold sits
/// while vigil runs.
const KUBELET_BELOW_MIB: u64 = 1000;
/// A bound for a broken test.
const LIMIT: Duration = Duration::from_secs(120);

/// `memory.available` as vigil reads it (`/proc/meminfo`), in bytes.
pub fn vigil_reading() -> u64 {
    let info = MemInfo::read(Path::new("/proc/meminfo")).expect("/proc/meminfo");
    info.available()
}

/// `memory.available` as the kubelet reads it on this machine's cgroup v1
/// memory controller: capacity less the root cgroup's working set, in bytes.
pub fn kubelet_reading() -> u64 {
    let info = MemInfo::read(Path::new("/proc/meminfo")).expect("/proc/meminfo");
    let root = Cgroups::detect(Path::new("/sys/fs/cgroup"), Driver::Cgroupfs)
        .memory(Path::new(""))
        .expect("the root memory cgroup");
    info.total.saturating_sub(root.working_set)
}

/// The pods that must outlive every episode.
pub struct Workloads {
    registry: String,
    /// Each survivor's name and UID.
    pub(super) survivors: Vec<(String, String)>,
}

impl Workloads {
    /// Starts the Guaranteed pod, the guarded BestEffort pod and its
    /// PodDisruptionBudget, and waits until the budget allows no disruption.
    pub fn start(cluster: &Upstream) -> Self {
        let registry = cluster.registry().to_owned();
        cluster.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: pressure}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: guaranteed, namespace: pressure}}\n\
             spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: sleeper\n    image: {registry}/sleeper:1\n    resources:\n      requests: {{cpu: 10m, memory: 16Mi}}\n      limits: {{cpu: 10m, memory: 16Mi}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: guarded, namespace: pressure, labels: {{app: guarded}}}}\n\
             spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: hog\n    image: {registry}/hog:1\n    args: [\"{GUARDED_MIB}\"]\n---\n\
             apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: guarded, namespace: pressure}}\n\
             spec:\n  minAvailable: 1\n  selector: {{matchLabels: {{app: guarded}}}}\n"
        ));
        cluster.kubectl_ok(&[
            "-n",
            "pressure",
            "wait",
            "--for=condition=Ready",
            "pod/guaranteed",
            "pod/guarded",
            "--timeout=120s",
        ]);
        until(
            "the guarded pod's budget allows no disruption",
            LIMIT,
            || {
                let budget = cluster.get(Some("pressure"), "pdb/guarded")?;
                (budget["status"]["currentHealthy"] == 1
                    && budget["status"]["disruptionsAllowed"] == 0)
                    .then_some(())
            },
        );
        until("the guarded pod holds its memory", LIMIT, || {
            hog_process(&GUARDED_MIB.to_string())
        });
        let survivors = ["guaranteed", "guarded"]
            .into_iter()
            .map(|name| (name.to_owned(), uid(cluster, name)))
            .collect();
        Self {
            registry,
            survivors,
        }
    }

    /// Starts the hog `name` and returns its process once it runs.
    pub fn start_hog(&self, cluster: &Upstream, name: &str) -> u32 {
        let registry = &self.registry;
        cluster.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: pressure}}\n\
             spec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: hog\n    image: {registry}/hog:1\n    args: [\"{HOG_MIB}\", \"{HOG_STEP_MIB}\"]\n"
        ));
        until(&format!("{name}'s process"), LIMIT, || {
            hog_process(&format!("{HOG_MIB}"))
        })
    }

    /// The survivors are the pods they were, running, never restarted.
    pub fn survived(&self, cluster: &Upstream) {
        for (name, before) in &self.survivors {
            let pod = cluster
                .get(Some("pressure"), &format!("pod/{name}"))
                .unwrap_or_else(|| panic!("{name} is gone: {}", who_removed(cluster, name)));
            assert_eq!(
                &pod["metadata"]["uid"],
                before.as_str(),
                "{name} is another pod"
            );
            assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
            assert_eq!(
                pod["status"]["containerStatuses"][0]["restartCount"], 0,
                "{pod:#}"
            );
        }
    }
}

/// What removed the pod `name`, as far as the cluster tells: its Events'
/// reasons, and vigil's own requests on it (the audit log keeps every
/// request of vigil's service accounts).
fn who_removed(cluster: &Upstream, name: &str) -> String {
    let path = format!("/namespaces/pressure/pods/{name}");
    let vigils: Vec<String> = (cluster.audit().iter())
        .filter(|e| e["requestURI"].as_str().is_some_and(|u| u.contains(&path)))
        .filter(|e| e["verb"] != "get")
        .map(|e| {
            format!(
                "{} {} {} by {} as {} at {}",
                e["responseStatus"]["code"],
                e["verb"],
                e["requestURI"],
                e["user"]["username"],
                e["impersonatedUser"]["username"],
                e["requestReceivedTimestamp"]
            )
        })
        .collect();
    format!(
        "its Events: {:?}; vigil's requests on it: {vigils:?}",
        event_reasons(cluster, name)
    )
}

/// The UID of pod `name` in `pressure`.
fn uid(cluster: &Upstream, name: &str) -> String {
    let pod = cluster
        .get(Some("pressure"), &format!("pod/{name}"))
        .expect("the pod");
    pod["metadata"]["uid"].as_str().expect("a UID").to_owned()
}

/// The process of a hog started with `mib` as its first argument.
pub fn hog_process(mib: &str) -> Option<u32> {
    super::install::processes()
        .into_iter()
        .find_map(|(pid, args)| {
            (args.first().is_some_and(|a| a == "/hog") && args.get(1).is_some_and(|a| a == mib))
                .then_some(pid)
        })
}

/// Whether process `pid` has stopped (exited, reaped or not).
fn stopped(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// Samples `reading` every 10 ms until process `pid` stops: the time from
/// the reading first falling under `threshold` to the process gone.
pub fn time_to_stop(pid: u32, threshold: u64, reading: fn() -> u64) -> Duration {
    let start = Instant::now();
    let mut crossed = None;
    loop {
        let now = Instant::now();
        if crossed.is_none() && reading() < threshold {
            crossed = Some(now);
        }
        if stopped(pid) {
            let crossed = crossed.expect("the hog stopped before the node crossed the threshold");
            return now - crossed;
        }
        assert!(
            start.elapsed() < LIMIT,
            "the hog still runs after {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// vigil asked to evict the guarded pod, its first choice, and the
/// PodDisruptionBudget refused.
pub fn budget_held(cluster: &Upstream) {
    let status = cluster
        .get(None, "vigilnodestatus/vigil-node")
        .expect("the node's status");
    let evictions = status["status"]["lastEvictions"]
        .as_array()
        .expect("evictions");
    let guarded = evictions.iter().find(|e| e["pod"] == "pressure/guarded");
    let guarded =
        guarded.unwrap_or_else(|| panic!("vigil never chose the guarded pod: {evictions:#?}"));
    assert_eq!(guarded["result"], "refused", "{guarded:#}");
    let message = guarded["message"].as_str().unwrap_or_default();
    assert!(message.contains("disruption budget"), "{guarded:#}");
}

/// The reasons of the Events about pod `name` in `pressure`.
pub fn event_reasons(cluster: &Upstream, name: &str) -> Vec<String> {
    let selector = format!("--field-selector=involvedObject.name={name}");
    let events = cluster.kubectl_ok(&["-n", "pressure", "get", "events", "-o", "json", &selector]);
    let events: Value = serde_json::from_str(&events).expect("JSON");
    let events = events["items"].as_array().expect("items");
    events
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}

/// The node's condition `kind`'s status, if it has the condition.
pub fn condition(cluster: &Upstream, kind: &str) -> Option<String> {
    let node = cluster.get(None, "node/vigil-node").expect("the node");
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
}

/// Whether the node carries a taint with key `key`.
pub fn tainted(cluster: &Upstream, key: &str) -> bool {
    let node = cluster.get(None, "node/vigil-node").expect("the node");
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|taints| taints.iter().any(|t| t["key"] == key))
}

/// The sorter an episode's config names, with its config (inline YAML).
pub struct Sorter<'a> {
    pub name: &'a str,
    pub config: &'a str,
}

/// Applies the suite's `VigilConfig`, with the memory threshold at
/// `threshold` bytes (else the built-in's) and `sorter` if given, and waits
/// until the agent runs it. `disk-pressure` is off: this machine's disk is
/// shared with the build, and as full as the build leaves it (its soft
/// line, 13% free, would taint the node and keep the workloads off it).
pub fn configure(cluster: &Upstream, threshold: Option<u64>, sorter: Option<&Sorter>) {
    configure_with(cluster, threshold, sorter, "");
}

/// [`configure`], with `policies` (YAML lines under `policies:`) besides.
pub fn configure_with(
    cluster: &Upstream,
    threshold: Option<u64>,
    sorter: Option<&Sorter>,
    policies: &str,
) {
    let generation = |cluster: &Upstream| {
        let config = cluster.get(None, "vigilconfig/node-test")?;
        Some(config["metadata"]["generation"].clone())
    };
    let config = |cluster: &Upstream| {
        let status = cluster.get(None, "vigilnodestatus/vigil-node");
        status.expect("the node's status")["status"]["config"].clone()
    };
    let (before, assigned) = (generation(cluster), config(cluster)["assigned"].clone());
    let (sorter, sorter_config) = sorter.map_or((String::new(), String::new()), |s| {
        (
            format!("    sorter: {}\n", s.name),
            format!("      {}: {{config: {}}}\n", s.name, s.config),
        )
    });
    let memory = threshold.map_or(String::new(), |bytes| {
        format!(
            "      memory-pressure:\n        config: {{hard: {}Mi}}\n",
            bytes / MIB
        )
    });
    cluster.apply(&format!(
        "apiVersion: vigil.dev/v1alpha1\nkind: VigilConfig\nmetadata: {{name: node-test}}\n\
         spec:\n  priority: 10\n  config:\n    conditionTransitionSeconds: 5\n\
         {sorter}    policies:\n{memory}      disk-pressure: {{enabled: false}}\n{sorter_config}{policies}"
    ));
    // The same config as before (an unchanged generation) runs already.
    let changed = generation(cluster) != before;
    until("the agent runs the episode's config", LIMIT, || {
        let config = config(cluster);
        let runs = ["Trial", "Active"].contains(&config["state"].as_str()?)
            && config["active"] == config["assigned"];
        (runs && (!changed || config["assigned"] != assigned)).then_some(())
    });
}

/// Sets the kubelet's own threshold `KUBELET_BELOW_MIB` under its reading,
/// below vigil's: it must never fire while vigil runs.
pub fn kubelet_below(cluster: &mut Upstream) {
    let threshold = kubelet_reading() - KUBELET_BELOW_MIB * MIB;
    super::kubelet::set_threshold(cluster, threshold);
}

/// What the node, the hog's events and the agent's log say, for a failure.
fn explain(cluster: &Upstream, hog: &str) -> String {
    let agent = super::install::agent_pod(cluster);
    let agent = agent["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let log = cluster.kubectl(&["-n", "vigil-system", "logs", &agent, "--tail=150"]);
    let node = cluster.get(None, "node/vigil-node");
    format!(
        "the hog's events: {:?}\nthe node's conditions: {:#}\ntaints: {:#}\nthe agent's log:\n{}",
        event_reasons(cluster, hog),
        node.as_ref()
            .map_or(Value::Null, |n| n["status"]["conditions"].clone()),
        node.as_ref()
            .map_or(Value::Null, |n| n["spec"]["taints"].clone()),
        String::from_utf8_lossy(&log.stdout)
    )
}

/// Waits until the node has neither vigil's memory condition nor its taint.
fn out_of_pressure(cluster: &Upstream) {
    until("vigil's condition and taint go", LIMIT, || {
        (condition(cluster, "VigilMemoryPressure").as_deref() != Some("True")
            && !tainted(cluster, "vigil.dev/MemoryPressure"))
        .then_some(())
    });
}

/// One episode with vigil on the node, the hog called `name` started
/// `start` after vigil runs the episode's config, `sorter` (if given)
/// ranking the candidates: returns the time from crossing to the hog
/// stopped, and vigil's record of its eviction.
pub fn vigil_episode(
    cluster: &Upstream,
    workloads: &Workloads,
    name: &str,
    start: Duration,
    sorter: Option<&Sorter>,
) -> (Duration, Value) {
    out_of_pressure(cluster);
    let threshold = vigil_reading() - MARGIN_MIB * MIB;
    configure(cluster, Some(threshold), sorter);
    std::thread::sleep(start);
    let pid = workloads.start_hog(cluster, name);
    let time = time_to_stop(pid, threshold, vigil_reading);

    // vigil's eviction, its condition and taint; the kubelet's none.
    until_explained(
        "vigil's condition and taint",
        LIMIT,
        || {
            (condition(cluster, "VigilMemoryPressure").as_deref() == Some("True")
                && tainted(cluster, "vigil.dev/MemoryPressure"))
            .then_some(())
        },
        || explain(cluster, name),
    );
    let reasons = event_reasons(cluster, name);
    assert!(
        reasons.iter().any(|r| r == "Evicting"),
        "no eviction by vigil: {reasons:?}"
    );
    assert!(
        !reasons.iter().any(|r| r == "Evicted"),
        "the kubelet evicted: {reasons:?}"
    );
    assert_ne!(
        condition(cluster, "MemoryPressure").as_deref(),
        Some("True"),
        "the kubelet saw pressure"
    );
    let pod = format!("pressure/{name}");
    let eviction = until("vigil's record of the eviction", LIMIT, || {
        let status = cluster.get(None, "vigilnodestatus/vigil-node")?;
        let evictions = status["status"]["lastEvictions"].as_array()?;
        evictions.iter().find(|e| e["pod"] == pod.as_str()).cloned()
    });
    assert_eq!(eviction["result"], "accepted", "{eviction:#}");
    workloads.survived(cluster);
    // The episode's line goes with it: left 400 MiB under a reading taken
    // minutes before, it evicts a survivor once the node's cache grows by
    // that much (the rolling update's image pull did, in CI).
    configure(cluster, None, None);
    out_of_pressure(cluster);
    eprintln!("vigil, {name}: {time:?}");
    (time, eviction)
}
