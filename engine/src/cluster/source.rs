//! The node as the eviction loop sees it on a cluster: signals read from the
//! host's `/proc` and cgroups, this node's pods from the API server's cached
//! store (so the loop keeps deciding while a watch reconnects), each pod's
//! usage from its cgroup (and the facts policies declared, its writable
//! layers from the kubelet's statistics among them) and its
//! PodDisruptionBudget from [`Budgets`], and what the host alone uses: each
//! pod's own grace period and the budgets that select it.
//!
//! Budgets only rank candidates and time a PDB override; the Eviction API
//! enforces them whatever the agent knows. So they are watched only while a
//! threshold holds or an eviction is under way, and for [`BUDGETS_IDLE`]
//! after: a node at rest keeps no watch per namespace open, and a fleet at
//! rest costs the API server four watches per node.

use super::budgets::Budgets;
use super::katalyst_cnr::{self, CnrWatch};
use super::kubelet_stats::LayerCache;
use super::pods::{self, PodPhase};
use crate::base::clock::Clock;
use crate::eviction::Wanted;
use crate::eviction::runner::NodeSource;
use crate::eviction::{
    CycleReport, KubeletEviction, NodeState, PodFacts, RankingFacts, Terminating,
};
use crate::model::Pod;
use crate::model::{CpuThrottling, NumaMemory, PodFact, Pressure, Signal};
use crate::signals::{self, Cgroups, CpuRates, Rates, SampledFacts, SignalFiles, catalogue};
use k8s_openapi::api::core::v1::{Node, Pod as KubePod};
use kube::runtime::reflector::Store;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The pod facts read from a file each, for a share of the pods each cycle
/// (see [`SampledFacts`]).
const SAMPLED: [PodFact; 3] = [
    PodFact::NumaMemory,
    PodFact::CpuThrottling,
    PodFact::MemoryPressure,
];

/// A pod's own termination grace period when its spec names none.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// How long the budget watches outlive the pressure that started them, so
/// that pressure that comes and goes does not open and close them each time.
pub(crate) const BUDGETS_IDLE: Duration = Duration::from_secs(5 * 60);

/// Reads the node for each cycle.
pub struct ClusterSource {
    /// Where node and pod signals are read.
    pub signals: SignalFiles,
    /// This node's pods.
    pub pods: Store<KubePod>,
    /// This Node.
    pub node: Store<Node>,
    /// PodDisruptionBudgets of the namespaces with pods here.
    pub budgets: Arc<Budgets>,
    /// Time of each cpu sample.
    pub clock: Arc<dyn Clock>,
    /// Cpu time samples, turned into rates.
    pub cpu: CpuRates,
    /// What the policies read beyond what every cycle reads (node signals,
    /// pod facts): only their files are opened.
    pub wanted: Wanted,
    /// The node's counters (reclaim, CPU time), turned into rates.
    pub rates: Rates,
    /// Until when the budgets are watched (see the module docs); none:
    /// not since the start.
    pub budgets_until: Option<SystemTime>,
    /// The pods' writable layers from the kubelet, fetched while a policy
    /// asks (none: the kubelet's endpoint is not known).
    pub layers: Option<Arc<LayerCache>>,
    /// Each pod's last reading of the facts read for a share of the pods
    /// each cycle.
    pub sampled: SampledFacts,
    /// katalyst's CustomNodeResource of this node, watched while a strategy
    /// asks for `cnr.allocatable.*` (none: never watched).
    pub cnr: Option<CnrWatch>,
}

impl ClusterSource {
    /// Every resource of the Node's `status.allocatable` as a signal
    /// `node.allocatable.<name>` (see [`katalyst_cnr::offered`]).
    fn node_allocatable(&self) -> Vec<Signal> {
        let Some(node) = self.node.state().into_iter().next() else {
            return Vec::new();
        };
        let allocatable = (node.status.as_ref()).and_then(|s| s.allocatable.as_ref());
        let prefix = catalogue::family::NODE_ALLOCATABLE[0];
        allocatable.map_or_else(Vec::new, |a| katalyst_cnr::offered(prefix, a))
    }

    /// Allocatable memory from the Node's status, if known.
    fn allocatable_memory(&self) -> Option<u64> {
        let node = self.node.state().into_iter().next()?;
        let quantity = node.status.as_ref()?.allocatable.as_ref()?.get("memory")?;
        crate::base::quantity::value(quantity).map(|bytes| bytes as u64)
    }

    /// Fills in `pod`'s usage from its cgroup, read just now; a pod whose
    /// cgroup cannot be read (not started yet, or gone) keeps its usage
    /// absent, and its cpu is absent until a second reading gives a rate.
    /// The pod facts wanted every cycle come with it (`facts`): those that
    /// cost a file each read now if the pod is `due`, its last reading if not.
    fn usage(&mut self, cgroups: &Cgroups, facts: &PodFactReader, due: bool, pod: &mut Pod) {
        match signals::pod_usage(cgroups, &pod.uid, pod.qos) {
            Ok(usage) => {
                pod.usage.memory_working_set_bytes = Some(usage.working_set);
                // Read with the working set, at no cost: a policy that did
                // not ask for it never sees it.
                pod.usage.memory_usage_bytes = Some(usage.usage);
                pod.usage.memory_rss_bytes = Some(usage.rss);
                pod.usage.pids = Some(usage.pids);
                let now = self.clock.now();
                pod.usage.cpu_millis = self.cpu.sample(&pod.uid, now, usage.cpu_time);
                pod.usage.age_ms = Some(0);
                facts.read_layers(pod);
                if due {
                    self.throttling(cgroups, pod);
                    facts.read_files(pod);
                    self.sampled.keep(&pod.uid, now, &mut pod.usage);
                } else {
                    self.sampled.fill(&pod.uid, now, &mut pod.usage);
                }
            }
            Err(error) => {
                tracing::debug!(pod = %pod.name, %error, "no usage for pod");
            }
        }
    }
}

impl ClusterSource {
    /// Reads the pod's cpu throttling since its last reading, if wanted (a
    /// rate, so read in its turn whoever asks).
    fn throttling(&mut self, cgroups: &Cgroups, pod: &mut Pod) {
        if self.wanted.facts.contains(&PodFact::CpuThrottling) {
            let relative = cgroups.pod(&pod.uid, pod.qos);
            if let Ok(counters) = cgroups.throttling(&relative)
                && let Some(window) = self.cpu.throttled(&pod.uid, counters)
            {
                pod.usage.cpu_throttling = Some(CpuThrottling {
                    periods: window.periods,
                    throttled_periods: window.throttled_periods,
                    throttled_ms: window.throttled.as_millis() as u64,
                });
            }
        }
    }

    /// The node's signals, read now, in a state without pods yet.
    fn node_signals(&mut self) -> NodeState {
        self.signals.allocatable_memory = self.allocatable_memory();
        let mut reading = self.signals.read_node(&self.wanted.signals);
        for gap in &reading.gaps {
            tracing::debug!(signal = %gap.signal, error = %gap.error, "signal not read");
        }
        let rates = self.rates.signals(self.clock.now(), reading.counters);
        reading.signals.extend(rates);
        if catalogue::asks_for(&self.wanted.signals, &catalogue::family::NODE_ALLOCATABLE) {
            reading.signals.extend(self.node_allocatable());
        }
        if let Some(cnr) = &self.cnr {
            reading.signals.extend(cnr.signals());
        }
        NodeState {
            signals: reading.signals,
            ..NodeState::default()
        }
    }

    /// What the host alone knows of live `pod` (its own grace period, the
    /// budgets that select it), giving the pod its budget's allowance.
    fn pod_facts(&self, object: &KubePod, pod: &mut Pod) -> PodFacts {
        let labels = object.metadata.labels.clone().unwrap_or_default();
        let budgets = self.budgets.of_pod(&pod.namespace, &labels);
        pod.pdb_disruptions_allowed = budgets.allowed;
        let own = (object.spec.as_ref())
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        PodFacts {
            grace_period_seconds: u64::try_from(own).ok(),
            budgets: budgets.names,
        }
    }

    /// The pods whose sampled facts this cycle reads; none when no such
    /// fact is wanted every cycle (nothing to spread).
    fn due<'a>(
        &mut self,
        every_cycle: &PodFactReader,
        live: impl Iterator<Item = &'a str>,
    ) -> Option<HashSet<String>> {
        every_cycle
            .reads_files()
            .then(|| self.sampled.due(live, self.clock.now()))
    }

    /// A reader of `facts` on `cgroups`.
    fn reader(&self, cgroups: &Cgroups, facts: Vec<PodFact>) -> PodFactReader {
        PodFactReader {
            cgroups: cgroups.clone(),
            layers: self.layers.clone(),
            clock: self.clock.clone(),
            facts,
        }
    }
}

/// Reads the pod facts that cost a file each, for the pods whose cgroup
/// was read: memory per NUMA node, memory pressure (cgroup v2), and the
/// writable layers as the kubelet last reported them (a lookup). One that
/// cannot be read stays absent.
#[derive(Debug)]
struct PodFactReader {
    cgroups: Cgroups,
    layers: Option<Arc<LayerCache>>,
    clock: Arc<dyn Clock>,
    facts: Vec<PodFact>,
}

impl PodFactReader {
    /// Whether any fact read from a pod's files is wanted.
    fn reads_files(&self) -> bool {
        (self.facts.iter()).any(|fact| SAMPLED.contains(fact))
    }

    fn read_layers(&self, pod: &mut Pod) {
        if self.facts.contains(&PodFact::WritableLayers)
            && let Some(layers) = &self.layers
        {
            pod.writable_layers = layers.of(&pod.uid, self.clock.now());
        }
    }

    fn read_files(&self, pod: &mut Pod) {
        let wanted = |fact| self.facts.contains(&fact);
        let (numa, psi) = (wanted(PodFact::NumaMemory), wanted(PodFact::MemoryPressure));
        if !(numa || psi) {
            return;
        }
        let relative = self.cgroups.pod(&pod.uid, pod.qos);
        if numa && let Ok(nodes) = self.cgroups.numa(&relative) {
            pod.usage.numa_memory = (nodes.into_iter())
                .map(|(node, bytes)| NumaMemory { node, bytes })
                .collect();
        }
        if psi && let Ok(pressure) = self.cgroups.memory_pressure(&relative) {
            pod.usage.memory_pressure = Some(Pressure {
                some_avg10: pressure.some.avg10,
                full_avg10: pressure.full.map_or(0.0, |full| full.avg10),
            });
        }
    }
}

impl RankingFacts for PodFactReader {
    fn read(&self, pods: &mut [Pod]) {
        // A pod whose cgroup was not read this cycle has none to read.
        for pod in pods.iter_mut().filter(|pod| pod.usage.age_ms.is_some()) {
            self.read_layers(pod);
            self.read_files(pod);
            let usage = &mut pod.usage;
            let read = !usage.numa_memory.is_empty() || usage.memory_pressure.is_some();
            // The oldest of the facts gives their age: one read every cycle
            // in its turn may be older than these, read now.
            if read && usage.facts_age_ms.is_none() {
                usage.facts_age_ms = Some(0);
            }
        }
    }
}

impl NodeSource for ClusterSource {
    fn want(&mut self, wanted: Wanted) {
        if let Some(layers) = &self.layers {
            let layers_wanted = (wanted.facts.iter())
                .chain(&wanted.ranking_facts)
                .any(|fact| *fact == PodFact::WritableLayers);
            layers.want(layers_wanted);
        }
        if let Some(cnr) = &mut self.cnr {
            cnr.want(catalogue::asks_for(
                &wanted.signals,
                &catalogue::family::KATALYST_CNR,
            ));
        }
        self.wanted = wanted;
    }

    fn observe(&mut self) -> NodeState {
        let mut state = self.node_signals();
        let cgroups = self.signals.cgroups();
        let every_cycle = self.reader(&cgroups, self.wanted.facts.clone());
        let objects = self.pods.state();
        let phases: Vec<_> = (objects.iter())
            .map(|object| (object, pods::read(object)))
            .collect();
        let live = phases.iter().filter_map(|(_, phase)| match phase {
            PodPhase::Live(pod) => Some(pod.uid.as_str()),
            _ => None,
        });
        let due = self.due(&every_cycle, live);
        let mut namespaces: BTreeMap<String, usize> = BTreeMap::new();
        for (object, phase) in phases {
            if let Some(namespace) = &object.metadata.namespace {
                *namespaces.entry(namespace.clone()).or_default() += 1;
            }
            match phase {
                PodPhase::Live(mut pod) => {
                    let due = due.as_ref().is_none_or(|due| due.contains(&pod.uid));
                    self.usage(&cgroups, &every_cycle, due, &mut pod);
                    let facts = self.pod_facts(object, &mut pod);
                    state.facts.insert(pod.uid.clone(), facts);
                    state.pods.push(*pod);
                }
                PodPhase::Terminating { uid, name, until } => {
                    state.terminating.push(Terminating { uid, name, until })
                }
                PodPhase::EvictedByKubelet {
                    uid,
                    name,
                    qos,
                    resource,
                } => {
                    // Its cgroup goes once its containers and volumes are cleaned up.
                    let released = signals::pod_usage(&cgroups, &uid, qos).is_err();
                    let eviction = KubeletEviction {
                        uid,
                        name,
                        resource,
                        released,
                    };
                    state.kubelet_evictions.push(eviction);
                }
                PodPhase::Pending | PodPhase::Finished => {}
            }
        }
        let watched = self
            .budgets_until
            .is_some_and(|until| self.clock.now() < until);
        if !watched {
            namespaces.clear();
        }
        self.budgets.follow(&namespaces);
        let live: std::collections::HashSet<&str> =
            state.pods.iter().map(|p| p.uid.as_str()).collect();
        self.cpu.retain(|uid| live.contains(uid));
        // The cgroups of pods that left are closed.
        self.signals.kept.sweep();
        if !self.wanted.ranking_facts.is_empty() {
            let reader = self.reader(&cgroups, self.wanted.ranking_facts.clone());
            state.ranking = Some(Arc::new(reader));
        }
        state
    }

    fn decided(&mut self, report: &CycleReport) {
        if !report.thresholds.is_empty() || report.in_flight > 0 {
            self.budgets_until = Some(self.clock.now() + BUDGETS_IDLE);
        }
    }
}
