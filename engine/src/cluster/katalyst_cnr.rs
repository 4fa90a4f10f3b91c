//! katalyst's CustomNodeResource of this node (`node.katalyst.kubewharf.io`,
//! named after the node), where katalyst's reporter says what the node
//! offers its `reclaimed_cores` pods: watched only while a strategy asks
//! for the signals `cnr.allocatable.<name>`, each resource of its
//! `status.resources.allocatable` by its name without its domain. A cluster
//! without katalyst never pays for it; one with katalyst pays one watch per
//! node while the strategy runs.

use super::watches::{Reflected, reflect};
use crate::model::Signal;
use crate::signals::catalogue::family::KATALYST_CNR;
use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client, Resource};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The part of katalyst's CustomNodeResource vigil reads: its name and
/// status (the rest of the object, its spec among it, is ignored).
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct CustomNodeResource {
    /// The object's metadata: named after its node.
    pub metadata: ObjectMeta,
    /// What katalyst reports of the node.
    #[serde(default)]
    pub status: Option<CnrStatus>,
}

impl Resource for CustomNodeResource {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "CustomNodeResource".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "node.katalyst.kubewharf.io".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "customnoderesources".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A CustomNodeResource's status: what the node offers.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct CnrStatus {
    /// The node's resources as katalyst reports them.
    #[serde(default)]
    pub resources: CnrResources,
}

/// katalyst's resources of a node.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct CnrResources {
    /// What the node offers, by resource name.
    #[serde(default)]
    pub allocatable: Option<BTreeMap<String, Quantity>>,
}

/// The node's CustomNodeResource, watched while wanted.
pub struct CnrWatch {
    client: Client,
    node: String,
    watch: Option<Reflected<CustomNodeResource>>,
}

impl CnrWatch {
    /// A watch of node `node`'s object, not started.
    pub fn new(client: Client, node: &str) -> Self {
        Self {
            client,
            node: node.to_owned(),
            watch: None,
        }
    }

    /// Starts the watch when `wanted` and stops it when not.
    pub(crate) fn want(&mut self, wanted: bool) {
        match (wanted, self.watch.is_some()) {
            (true, false) => {
                let config = kube::runtime::watcher::Config::default()
                    .fields(&format!("metadata.name={}", self.node));
                let api: Api<CustomNodeResource> = Api::all(self.client.clone());
                let watch = reflect(api, config, "katalyst-cnr".into(), Arc::new(|_| {}));
                self.watch = Some(watch);
            }
            (false, true) => self.watch = None,
            _ => {}
        }
    }

    /// The signals of the object as last seen; none before it is seen.
    pub(crate) fn signals(&self) -> Vec<Signal> {
        let Some(watch) = &self.watch else {
            return Vec::new();
        };
        let objects = watch.store.state();
        let allocatable = (objects.iter())
            .find(|cnr| cnr.metadata.name.as_deref() == Some(self.node.as_str()))
            .and_then(|cnr| cnr.status.as_ref())
            .and_then(|status| status.resources.allocatable.as_ref());
        allocatable.map_or_else(Vec::new, |a| offered(KATALYST_CNR[0], a))
    }
}

/// `resources` (name → quantity) as the signals `<prefix><name>`, each name
/// without its domain (a signal's name has no `/`); one that is not a
/// quantity is left out, and of two resources of one name in two domains,
/// the first in name order.
pub(crate) fn offered(prefix: &str, resources: &BTreeMap<String, Quantity>) -> Vec<Signal> {
    let mut signals: BTreeMap<String, Signal> = BTreeMap::new();
    for (resource, quantity) in resources {
        let name = resource.rsplit('/').next().unwrap_or(resource);
        let name = format!("{prefix}{name}");
        if let Some(value) = crate::base::quantity::value(quantity) {
            let signal = Signal {
                name: name.clone(),
                value,
                capacity: None,
            };
            signals.entry(name).or_insert(signal);
        }
    }
    signals.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_become_signals_by_name_without_domain() {
        let resources: BTreeMap<String, Quantity> = [
            ("resource.katalyst.kubewharf.io/reclaimed_millicpu", "52k"),
            ("resource.katalyst.kubewharf.io/reclaimed_memory", "100Gi"),
            ("other.example.com/reclaimed_memory", "1"),
            ("cpu", "not a quantity"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
        .collect();
        let signals: Vec<(String, f64)> = (offered(KATALYST_CNR[0], &resources).into_iter())
            .map(|s| (s.name, s.value))
            .collect();
        assert_eq!(
            signals,
            [
                ("cnr.allocatable.reclaimed_memory".to_owned(), 1.0),
                ("cnr.allocatable.reclaimed_millicpu".to_owned(), 52000.0),
            ],
            "the first of two names in name order (other.example.com sorts first)"
        );
    }
}
