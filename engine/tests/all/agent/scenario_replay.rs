//! Bundled scenarios replayed step by step through the cluster path — pods
//! as Kubernetes objects read by the agent's pod reader, usage from cgroup
//! files, the node's signals from its `/proc` files and its Node object,
//! the Eviction API killer against the test API server — evicts the same
//! pods at the same times as `vigil simulate`. And the same source on a
//! node denser than a cycle's share of the per-pod file facts.

use super::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use vigil::base::clock::ManualClock;
use vigil::cluster::Budgets;
use vigil::cluster::ClusterSource;
use vigil::cluster::EvictionApi;
use vigil::config::VigilConfig;
use vigil::eviction::EvictionManager;
use vigil::eviction::NodeSource;
use vigil::model::{Layer, QosClass};
use vigil::policy::{Host, LimitsTable, Registry};
use vigil::signals::{CpuRates, Driver, SignalFiles};
use vigil::simulate::{PodSpec, RunOptions, Scenario, run};

/// The virtual start of every simulation.
const START: Duration = Duration::from_secs(1_700_000_000);

fn quantity(bytes: f64) -> String {
    format!("{}", bytes as u64)
}

fn resources(memory: f64, cpu: f64) -> Value {
    let mut map = serde_json::Map::new();
    if memory > 0.0 {
        map.insert("memory".into(), json!(quantity(memory)));
    }
    if cpu > 0.0 {
        map.insert("cpu".into(), json!(format!("{}m", cpu as u64)));
    }
    Value::Object(map)
}

fn pod_object(spec: &PodSpec) -> Value {
    let mut requests = resources(spec.requests.memory, spec.requests.cpu);
    for (name, value) in &spec.extended_requests {
        requests[name] = json!(value.to_string());
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": spec.namespace,
                     "uid": format!("uid-{}", spec.name), "labels": spec.labels,
                     "annotations": spec.annotations},
        "spec": {"nodeName": NODE, "priority": spec.priority,
                 "terminationGracePeriodSeconds": spec.grace_period.as_secs(),
                 "containers": [{"name": "main", "image": "example", "resources": {
                     "requests": requests,
                     "limits": resources(spec.limits.memory, spec.limits.cpu)}}]},
        "status": {"phase": "Running", "startTime": "2023-11-14T22:13:20Z"},
    })
}

fn cgroup(spec: &PodSpec, qos: QosClass) -> String {
    let uid = format!("uid-{}", spec.name);
    match qos {
        QosClass::BestEffort => format!("kubepods/besteffort/pod{uid}"),
        QosClass::Burstable => format!("kubepods/burstable/pod{uid}"),
        QosClass::Guaranteed => format!("kubepods/pod{uid}"),
    }
}

/// A pod's `memory.numa_stat` at `t` (cgroup v2's format): its memory
/// per NUMA node as the scenario gives it, else all of it on node 0.
fn numa_stat(spec: &PodSpec, t: Duration) -> String {
    let nodes: Vec<(u32, u64)> = match spec.numa_memory.is_empty() {
        true => vec![(0, spec.memory.at(t) as u64)],
        false => (spec.numa_memory.iter())
            .map(|(node, timeline)| (*node, timeline.at(t) as u64))
            .collect(),
    };
    let anon: Vec<String> = nodes.iter().map(|(n, b)| format!("N{n}={b}")).collect();
    let file: Vec<String> = nodes.iter().map(|(n, _)| format!("N{n}=0")).collect();
    format!("anon {}\nfile {}\n", anon.join(" "), file.join(" "))
}

/// `/proc/zoneinfo` at `t` from the scenario's NUMA signals (each node one
/// Normal zone of the size its `numa.N.memory.free` capacity gives), if it
/// has any.
fn zoneinfo(scenario: &Scenario, t: Duration) -> Option<String> {
    let page = rustix::param::page_size() as f64;
    let mut nodes: Vec<u32> = (scenario.signals.keys())
        .filter_map(|name| name.strip_prefix("numa.")?.split_once('.')?.0.parse().ok())
        .collect();
    nodes.dedup();
    if nodes.is_empty() {
        return None;
    }
    let pages = |name: String| {
        let bytes = scenario.signals.get(&name).map_or(0.0, |s| s.at(t));
        (bytes / page) as u64
    };
    let mut text = String::new();
    for node in nodes {
        let managed = (scenario
            .signal_capacities
            .get(&format!("numa.{node}.memory.free")))
        .map_or(0, |c| (c.0 / page) as u64);
        let zone = |level: &str| pages(format!("numa.{node}.zone.normal.{level}"));
        text.push_str(&format!(
            "Node {node}, zone   Normal\n  pages free     {}\n        min      {}\n        low      {}\n        high     {}\n        managed  {managed}\n      nr_zone_inactive_file {}\n",
            zone("free"),
            zone("min"),
            zone("low"),
            zone("high"),
            zone("inactiveFile"),
        ));
    }
    Some(text)
}

/// The Node at `t`: what it offers as the scenario's `node.allocatable.<name>`
/// signals give it, under the full name a pod requests it by.
fn node_at(scenario: &Scenario, node: &Value, t: Duration) -> Value {
    let mut node = node.clone();
    for (signal, timeline) in &scenario.signals {
        let Some(name) = signal.strip_prefix("node.allocatable.") else {
            continue;
        };
        let full = (scenario.pods.iter())
            .flat_map(|pod| pod.extended_requests.keys())
            .find(|full| full.rsplit('/').next() == Some(name))
            .map_or(name, String::as_str);
        node["status"]["allocatable"][full] = json!(quantity(timeline.at(t)));
    }
    node
}

/// The node's and each pod's CPU time since boot, advanced a step at a
/// time as the scenario's `cpu.usage` and each pod's `cpu` give it: the
/// agent turns them back into rates between cycles.
#[derive(Default)]
struct CpuTime {
    busy: u64,
    idle: u64,
    pods: std::collections::HashMap<String, u64>,
}

impl CpuTime {
    /// `/proc/stat` after the step to `t` (USER_HZ 100), if the scenario
    /// gives `cpu.usage`; its capacity is the online CPUs.
    fn stat(&mut self, scenario: &Scenario, t: Duration, step: Duration) -> Option<String> {
        let usage = scenario.signals.get("cpu.usage")?.at(t);
        let cpus = (scenario.signal_capacities.get("cpu.usage")).map_or(1.0, |c| c.0);
        let ticks = step.as_secs_f64() * 100.0;
        self.busy += (usage * ticks).round() as u64;
        self.idle += ((cpus - usage).max(0.0) * ticks).round() as u64;
        let mut text = format!("cpu  {} 0 0 {} 0 0 0 0\n", self.busy, self.idle);
        for cpu in 0..cpus as usize {
            text.push_str(&format!("cpu{cpu} 0 0 0 0 0 0 0 0\n"));
        }
        Some(text)
    }

    /// The pod cgroup's `cpu.stat` after the step to `t`.
    fn pod(&mut self, spec: &PodSpec, t: Duration, step: Duration) -> String {
        let used = self.pods.entry(spec.name.clone()).or_default();
        *used += (spec.cpu.at(t) * step.as_secs_f64() * 1000.0).round() as u64;
        format!("usage_usec {used}\n")
    }
}

/// The agent's node source over the testbed's node `files` and the stores
/// `pods` and `nodes`, reading time from `clock`.
fn cluster_source(
    files: &NodeFiles,
    pods: Store<Pod>,
    nodes: Store<Node>,
    client: kube::Client,
    clock: Arc<ManualClock>,
) -> ClusterSource {
    ClusterSource {
        signals: SignalFiles {
            proc_root: files.path("proc"),
            cgroup_root: files.path("cgroup"),
            driver: Driver::Cgroupfs,
            nodefs: files.root().to_owned(),
            ..SignalFiles::default()
        },
        pods,
        node: nodes,
        budgets: Arc::new(Budgets::new(client, |_| {})),
        clock,
        cpu: CpuRates::default(),
        budgets_until: None,
        wanted: Default::default(),
        rates: Default::default(),
        sampled: Default::default(),
        layers: None,
        cnr: None,
    }
}

/// Fills `store` with `objects`, as a watcher's initial list would.
fn fill<K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned>(
    writer: &mut reflector::store::Writer<K>,
    objects: Vec<Value>,
) {
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        let object: K = serde_json::from_value(object).expect("a valid object");
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_memory_pressure_evicts_the_same_pods_at_the_same_times_as_simulate() {
    replays_as_simulated("hard-memory-pressure.yaml", 2).await;
}

/// katalyst's RSS overuse on a calm node: the leaking pod, judged by the
/// RSS read from its cgroup's `memory.stat`, at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_overuse_evicts_the_same_pod_at_the_same_time_as_simulate() {
    replays_as_simulated("rss-overuse.yaml", 1).await;
}

/// katalyst's NUMA memory pressure: NUMA node 1 starved while the node
/// is not, read from the node's `/proc/zoneinfo` and each pod's
/// `memory.numa_stat`, one victim for node 1 at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numa_pressure_evicts_the_same_pods_at_the_same_times_as_simulate() {
    replays_as_simulated("numa-pressure.yaml", 2).await;
}

/// katalyst's system CPU pressure: usage read from the node's `/proc/stat`
/// between cycles, the busiest pod by its cgroup's `cpu.stat`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_cpu_pressure_evicts_the_same_pod_at_the_same_time_as_simulate() {
    replays_as_simulated("system-cpu-pressure.yaml", 1).await;
}

/// katalyst's reclaimed resources: the offer from the Node's
/// `status.allocatable`, the requests from the pods' containers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaimed_resources_evict_the_same_pod_at_the_same_time_as_simulate() {
    replays_as_simulated("reclaimed-resources.yaml", 1).await;
}

/// katalyst's system memory pressure: free memory under the scaled
/// watermark while `memory.available` is healthy, read from the node's
/// `/proc/meminfo` and `watermark_scale_factor`, the victim ranked by its
/// memory on the NUMA node with the fewest free pages (the testbed's one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_memory_pressure_evicts_the_same_pod_at_the_same_time_as_simulate() {
    replays_as_simulated("system-memory-pressure.yaml", 1).await;
}

/// Replays the bundled scenario `file`, which evicts at least `at_least`
/// pods in `vigil simulate`, and compares.
async fn replays_as_simulated(file: &str, at_least: usize) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios")
        .join(file);
    let scenario = Scenario::load(&path).expect("a valid scenario");
    let simulated: Vec<(u64, String)> =
        run(&scenario, path.parent().unwrap(), &RunOptions::default())
            .await
            .expect("simulates")
            .evictions
            .iter()
            .map(|e| (e.at as u64, e.pod.clone()))
            .collect();
    assert!(simulated.len() >= at_least, "{simulated:?}");

    let server = ApiServer::start().await;
    server.kubelet(false);
    let files = NodeFiles::default();
    let mut node = objects::node(NODE);
    node["status"]["allocatable"]["memory"] = json!(quantity(scenario.node.memory));
    server.put("nodes", "", node.clone());
    for spec in &scenario.pods {
        server.put("pods", &spec.namespace, pod_object(spec));
    }
    let mut config = kube::Config::new(server.url().parse().expect("a URL"));
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client");

    let host = Arc::new(Host::new(None).expect("host"));
    let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + START));
    let registry = Arc::new(
        Registry::new(host, clock.clone(), LimitsTable::default(), None).expect("registry"),
    );
    let layer = Layer {
        source: "scenario".into(),
        json: scenario.config.clone().unwrap_or(json!({})).to_string(),
    };
    // The replay's disk is the test machine's own, not the scenario's.
    let no_disk = Layer {
        source: "test".into(),
        json: r#"{"policies": {"disk-pressure": {"enabled": false}}}"#.into(),
    };
    let config =
        VigilConfig::merge(&registry, vec![layer, no_disk]).expect("the scenario's config");
    let settings = vigil::eviction::EvictionSettings::from(&config);
    let period = settings.period;
    let mut manager = EvictionManager::new(registry, settings);
    let killer = EvictionApi::new(client.clone());
    let (pods, mut pods_writer) = reflector::store::<Pod>();
    let (nodes, mut nodes_writer): (Store<Node>, _) = reflector::store();
    fill(&mut nodes_writer, vec![node.clone()]);
    let mut source = cluster_source(&files, pods, nodes, client, clock.clone());

    let mut leaves: Vec<(String, Duration)> = Vec::new();
    let mut replayed = Vec::new();
    let mut cpu_time = CpuTime::default();
    let mut t = Duration::ZERO;
    while t <= scenario.duration {
        // The kubelet: pods whose grace period is over are gone.
        for (name, at) in &leaves {
            if *at <= t {
                server.delete("pods", "default", name);
            }
        }
        let present: Vec<&PodSpec> = scenario
            .pods
            .iter()
            .filter(|p| server.get("pods", &p.namespace, &p.name).is_some())
            .collect();
        let mut used = scenario.node.system_memory.at(t);
        for spec in &present {
            let bytes = spec.memory.at(t);
            used += bytes;
            let cgroup = cgroup(spec, spec.qos().into());
            files.cgroup_bytes(&cgroup, bytes as u64);
            let cpu = cpu_time.pod(spec, t, period);
            files.write(&format!("cgroup/{cgroup}/cpu.stat"), &cpu);
        }
        if let Some(stat) = cpu_time.stat(&scenario, t, period) {
            files.write("proc/stat", &stat);
        }
        if let Some(load) = scenario.signals.get("cpu.load1") {
            files.write(
                "proc/loadavg",
                &format!("{0} {0} {0} 1/100 1\n", load.at(t)),
            );
        }
        let total = scenario.node.memory;
        let available = (total - used).max(0.0);
        match scenario.signals.get("memory.free") {
            // Free memory apart from what is available: page cache.
            Some(free) => {
                files.meminfo_with_free(total as u64, available as u64, free.at(t) as u64)
            }
            None => files.meminfo(total as u64, available as u64),
        }
        if let Some(factor) = scenario.signals.get("vm.watermarkScaleFactor") {
            files.write(
                "proc/sys/vm/watermark_scale_factor",
                &format!("{}\n", factor.at(t)),
            );
        }
        if let Some(zoneinfo) = zoneinfo(&scenario, t) {
            files.write("proc/zoneinfo", &zoneinfo);
        }
        for spec in &present {
            files.write(
                &format!(
                    "cgroup/{}/memory.numa_stat",
                    cgroup(spec, spec.qos().into())
                ),
                &numa_stat(spec, t),
            );
        }
        fill(&mut pods_writer, server.list("pods"));
        fill(&mut nodes_writer, vec![node_at(&scenario, &node, t)]);

        let now = SystemTime::UNIX_EPOCH + START + t;
        // What the strategies declare is what the source reads, as the runner tells it.
        source.want(manager.wanted());
        let state = source.observe();
        let report = manager.cycle_through(now, &state, &killer).await;
        source.decided(&report);
        for victim in &report.started {
            let spec = scenario
                .pods
                .iter()
                .find(|p| p.name == victim.pod.name)
                .expect("a scenario pod");
            let grace = victim
                .grace_period_seconds
                .map_or(spec.grace_period, Duration::from_secs);
            leaves.push((spec.name.clone(), t + grace));
            replayed.push((t.as_secs(), format!("{}/{}", spec.namespace, spec.name)));
        }
        t += period;
        clock.advance(period);
    }
    assert_eq!(replayed, simulated);
    // Strategies that observe (rss-overuse, say) send dry runs besides.
    let evictions = server.evictions();
    let real = evictions.iter().filter(|r| !r.uri.ends_with("?dryRun=All"));
    assert_eq!(real.count(), simulated.len(), "one API call per victim");
}

/// Memory per NUMA node costs the kernel a file per pod: on a node denser
/// than a cycle's share, each cycle reads it for that many pods, those read
/// longest ago first, and the others keep their last reading with its age.
#[tokio::test]
async fn a_dense_nodes_numa_memory_is_read_a_share_each_cycle_and_carries_its_age() {
    const PODS: usize = vigil::signals::PER_CYCLE + 8;
    let server = ApiServer::start().await;
    let files = NodeFiles::default();
    files.meminfo(64 << 30, 32 << 30);
    let numa = |mib: u64| format!("anon N0={}\nfile N0=0\n", mib << 20);
    let relative = |i: usize| format!("kubepods/besteffort/poduid-p{i:02}");
    let objects: Vec<Value> = (0..PODS)
        .map(|i| {
            files.cgroup_bytes(&relative(i), 1 << 20);
            files.write(&format!("cgroup/{}/memory.numa_stat", relative(i)), &numa(1));
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i:02}"), "namespace": "default", "uid": format!("uid-p{i:02}")},
                "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "example"}]},
                "status": {"phase": "Running"},
            })
        })
        .collect();
    let (pods, mut pods_writer) = reflector::store::<Pod>();
    fill(&mut pods_writer, objects);
    let (nodes, mut nodes_writer): (Store<Node>, _) = reflector::store();
    fill(&mut nodes_writer, vec![objects::node(NODE)]);
    let clock = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH + START));
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().expect("a URL")))
        .expect("a client");
    let mut source = cluster_source(&files, pods, nodes, client, clock.clone());
    source.want(vigil::eviction::Wanted {
        facts: vec![vigil::model::PodFact::NumaMemory],
        ..Default::default()
    });
    // (MiB on node 0, age in ms) of each pod's reading; none: never read.
    let readings = |state: &vigil::eviction::NodeState| -> Vec<Option<(u64, u64)>> {
        let mut pods: Vec<_> = state.pods.iter().collect();
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        (pods.into_iter())
            .map(|pod| {
                let age = pod.usage.facts_age_ms?;
                Some((pod.usage.numa_memory.first()?.bytes >> 20, age))
            })
            .collect()
    };
    let count = |readings: &[Option<(u64, u64)>], want: Option<(u64, u64)>| {
        readings.iter().filter(|r| **r == want).count()
    };

    let first = readings(&source.observe());
    assert_eq!(first.len(), PODS);
    assert_eq!(
        count(&first, Some((1, 0))),
        vigil::signals::PER_CYCLE,
        "{first:?}"
    );
    assert_eq!(count(&first, None), 8, "not yet read: {first:?}");

    clock.advance(Duration::from_millis(1500));
    for i in 0..PODS {
        files.write(
            &format!("cgroup/{}/memory.numa_stat", relative(i)),
            &numa(2),
        );
    }
    let second = readings(&source.observe());
    // The 8 never read and those read longest ago afresh; 8 kept from before.
    assert_eq!(
        count(&second, Some((2, 0))),
        vigil::signals::PER_CYCLE,
        "{second:?}"
    );
    assert_eq!(count(&second, Some((1, 1500))), 8, "{second:?}");
}
