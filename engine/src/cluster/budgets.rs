//! PodDisruptionBudgets, watched only where this node needs them.
//!
//! A PDB's status changes whenever its pods do, so an agent on every node
//! watching every PDB would multiply that churn by the fleet. Instead each
//! namespace that has pods on this node gets its own watch, reference-counted
//! by those pods (the kubelet's watch-based manager pattern): started when the
//! first pod of a namespace arrives, stopped when the last one leaves, all
//! stopped when this is dropped. Each watch resumes on its own after a
//! dropped stream or a `410 Gone`, with backoff (`reflect`). Which
//! namespaces are wanted, and when, is the caller's: the agent's
//! [`super::source::ClusterSource`] wants them only under pressure.

use super::watches::{Reflected, reflect};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::{Selector, SelectorExt};
use kube::runtime::watcher;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Per-namespace PDB watches and the budgets they hold.
pub struct Budgets {
    client: Client,
    on_restart: Arc<dyn Fn(&str) + Send + Sync>,
    watches: Mutex<BTreeMap<String, Reflected<PodDisruptionBudget>>>,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let watches = self.watches.lock().expect("budgets lock poisoned");
        f.debug_struct("Budgets")
            .field("namespaces", &watches.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Budgets {
    /// No watches yet; `on_restart` is told the namespace whenever a watch
    /// has to start over (a dropped stream, an error, a `410 Gone`).
    pub fn new(client: Client, on_restart: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self {
            client,
            on_restart: Arc::new(on_restart),
            watches: Mutex::new(BTreeMap::new()),
        }
    }

    /// Watches exactly the namespaces in `pods` (namespace → pods on this
    /// node): starts the missing watches, stops the unreferenced ones.
    pub fn follow(&self, pods: &BTreeMap<String, usize>) {
        let mut watches = self.watches.lock().expect("budgets lock poisoned");
        watches.retain(|namespace, _| {
            let referenced = pods.get(namespace).is_some_and(|n| *n > 0);
            if !referenced {
                tracing::debug!(%namespace, "no pods left: PDB watch stopped");
            }
            referenced
        });
        for namespace in pods.keys() {
            if !watches.contains_key(namespace) {
                tracing::debug!(%namespace, "PDB watch started");
                watches.insert(namespace.clone(), self.start(namespace));
            }
        }
    }

    fn start(&self, namespace: &str) -> Reflected<PodDisruptionBudget> {
        let api = Api::namespaced(self.client.clone(), namespace);
        let name = format!("pdbs/{namespace}");
        reflect(
            api,
            watcher::Config::default(),
            name,
            Arc::clone(&self.on_restart),
        )
    }

    /// The budgets that select a pod of `namespace` with `labels`, as far
    /// as the namespace's watch knows (none while it is not watched).
    pub fn of_pod(&self, namespace: &str, labels: &BTreeMap<String, String>) -> PodBudgets {
        let watches = self.watches.lock().expect("budgets lock poisoned");
        let Some(watch) = watches.get(namespace) else {
            return PodBudgets::default();
        };
        let mut found = PodBudgets::default();
        for pdb in watch
            .store
            .state()
            .iter()
            .filter(|pdb| selects(pdb, labels))
        {
            let allowed = pdb
                .status
                .as_ref()
                .and_then(|s| s.disruptions_allowed)
                .unwrap_or(0);
            let allowed = u32::try_from(allowed).unwrap_or(0);
            found.allowed = Some(found.allowed.map_or(allowed, |a| a.min(allowed)));
            if let Some(name) = &pdb.metadata.name {
                found.names.push(format!("{namespace}/{name}"));
            }
        }
        found
    }
}

/// The budgets that select one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodBudgets {
    /// How many disruptions they allow (the smallest, if several select
    /// it); none if none selects it.
    pub allowed: Option<u32>,
    /// Their names, `namespace/name`.
    pub names: Vec<String>,
}

/// Whether `pdb` selects a pod with `labels`: a missing selector selects
/// nothing, an empty one every pod of the namespace (policy/v1).
fn selects(pdb: &PodDisruptionBudget, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return false;
    };
    Selector::try_from(selector).is_ok_and(|s| s.matches(labels))
}
