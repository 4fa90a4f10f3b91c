//! The node as the eviction loop sees it on a cluster: signals read from the
//! host's `/proc` and cgroups, this node's pods from the API server's cached
//! store (so the loop keeps deciding while a watch reconnects), each pod's
//! usage from its cgroup and its PodDisruptionBudget from [`Budgets`], and
//! what the host alone uses: each pod's own grace period and the budgets
//! that select it.

use super::budgets::Budgets;
use super::pods::{self, PodPhase};
use crate::clock::Clock;
use crate::eviction::runner::NodeSource;
use crate::eviction::{NodeState, PodFacts, Terminating};
use crate::model::Pod;
use crate::signals::{self, Cgroups, CpuRates, Sources};
use k8s_openapi::api::core::v1::{Node, Pod as KubePod};
use kube::runtime::reflector::Store;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A pod's own termination grace period when its spec names none.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Reads the node for each cycle.
pub struct ClusterSource {
    /// Where node and pod signals are read.
    pub signals: Sources,
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
}

impl ClusterSource {
    /// Allocatable memory from the Node's status, if known.
    fn allocatable_memory(&self) -> Option<u64> {
        let node = self.node.state().into_iter().next()?;
        let quantity = node.status.as_ref()?.allocatable.as_ref()?.get("memory")?;
        crate::quantity::value(quantity).map(|bytes| bytes as u64)
    }

    /// Fills in `pod`'s usage from its cgroup; a pod whose cgroup cannot be
    /// read (not started yet, or gone) keeps zero usage.
    fn usage(&mut self, cgroups: &Cgroups, pod: &mut Pod) {
        match signals::pod_usage(cgroups, &pod.uid, pod.qos) {
            Ok(usage) => {
                pod.usage.memory_working_set_bytes = usage.working_set;
                pod.usage.memory_rss_bytes = usage.rss;
                pod.usage.pids = usage.pids;
                let now = self.clock.now();
                pod.usage.cpu_millis = self.cpu.sample(&pod.uid, now, usage.cpu_time).unwrap_or(0);
            }
            Err(error) => {
                tracing::debug!(pod = %pod.name, %error, "no usage for pod");
            }
        }
    }
}

impl NodeSource for ClusterSource {
    fn observe(&mut self) -> NodeState {
        self.signals.allocatable_memory = self.allocatable_memory();
        let reading = self.signals.read_node();
        for gap in &reading.gaps {
            tracing::debug!(signal = %gap.signal, error = %gap.error, "signal not read");
        }
        let mut state = NodeState {
            signals: reading.signals,
            ..NodeState::default()
        };
        let cgroups = self.signals.cgroups();
        let mut namespaces: BTreeMap<String, usize> = BTreeMap::new();
        for object in self.pods.state() {
            if let Some(namespace) = &object.metadata.namespace {
                *namespaces.entry(namespace.clone()).or_default() += 1;
            }
            match pods::read(&object) {
                PodPhase::Live(mut pod) => {
                    self.usage(&cgroups, &mut pod);
                    let labels = object.metadata.labels.clone().unwrap_or_default();
                    let budgets = self.budgets.of_pod(&pod.namespace, &labels);
                    pod.pdb_disruptions_allowed = budgets.allowed;
                    let own = object
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                        .unwrap_or(DEFAULT_GRACE_SECONDS);
                    let facts = PodFacts {
                        grace_period_seconds: u64::try_from(own).ok(),
                        budgets: budgets.names,
                    };
                    state.facts.insert(pod.uid.clone(), facts);
                    state.pods.push(pod);
                }
                PodPhase::Terminating { uid, name, until } => {
                    state.terminating.push(Terminating { uid, name, until })
                }
                PodPhase::Pending | PodPhase::Finished => {}
            }
        }
        self.budgets.follow(&namespaces);
        let live: std::collections::HashSet<&str> =
            state.pods.iter().map(|p| p.uid.as_str()).collect();
        self.cpu.retain(|uid| live.contains(uid));
        state
    }
}
