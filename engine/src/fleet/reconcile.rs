//! Publishes the node's status objects the way the kubelet publishes
//! ResourceSlices: changes put keys on a [`WorkQueue`] (the node, or one
//! policy), and a single worker syncs each key by comparing what should
//! exist ([`desired`]) with what does — creating what is missing, updating
//! what differs (reusing an obsolete object before creating one), deleting
//! what is no longer wanted. A failed sync, or a panic in one, is retried
//! with jittered backoff; each object is written at most once per spacing.
//!
//! The agent is the only writer of its objects, so it lists them (from the
//! watch cache) at start, about every [`RESYNC`] (jittered) and after a
//! failed write, and otherwise trusts the answers to its own writes: no
//! watch is kept open for them. The next list repairs anything changed behind its back (a deleted object, a Node
//! recreated with a new UID whose old objects were garbage-collected).

use super::activity::Activity;
use super::desired;
use super::kinds::{
    NODE_LABEL, POLICY_LABEL, PolicyReport, PullReport, VigilNodeStatus, VigilNodeStatusSpec,
    VigilPolicyStatus, VigilPolicyStatusSpec,
};
use super::queue::{Done, WorkQueue};
use crate::config::assignment::ConfigReport;
use crate::policy::Registry;
use crate::report::Chain;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often, on average, the objects are listed again to repair what
/// changed behind the agent's back. Each wait is jittered (half to one and
/// a half times this), so a fleet that started together does not list
/// together: at 5000 nodes, some 3 lists a second, from the watch cache.
pub const RESYNC: Duration = Duration::from_secs(30 * 60);

/// The wait before the next resync: [`RESYNC`] times a random factor in [0.5, 1.5).
fn next_resync() -> Duration {
    RESYNC.mul_f64(0.5 + fastrand::f64())
}

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// List the objects that exist, then sync every key.
    List,
    /// The node's `VigilNodeStatus`.
    Node,
    /// The `VigilPolicyStatus` of one policy.
    Policy(String),
}

/// Why a sync failed.
#[derive(Debug, Error)]
pub enum SyncError {
    /// The objects are not listed yet (or a write failed since).
    #[error("the status objects are not listed yet")]
    NotListed,
    /// The Node is not known yet: its objects need its UID.
    #[error("the Node {0} is not known yet")]
    NoNode(String),
    /// The API server refused or failed a request.
    #[error("cannot {action} {what}")]
    Api {
        /// `list`, `get`, `create`, `update` or `delete`.
        action: &'static str,
        /// The object or collection.
        what: String,
        /// The answer.
        #[source]
        source: kube::Error,
    },
    /// The sync panicked.
    #[error("internal error: the sync panicked: {0}")]
    Panic(String),
}

/// What the status objects are made from.
pub struct Inputs {
    /// The policies.
    pub registry: Arc<Registry>,
    /// The config controller's account.
    pub config: watch::Receiver<ConfigReport>,
    /// The loop's activity.
    pub activity: watch::Receiver<Activity>,
    /// This Node (for the owner reference).
    pub node: Store<Node>,
    /// Changes when the Node's watch delivers something.
    pub node_changes: watch::Receiver<crate::cluster::watches::Progress>,
    /// How the pulls of registry versions fare, by policy.
    pub pulls: watch::Receiver<BTreeMap<String, PullReport>>,
}

/// The objects that exist, as last listed or written.
#[derive(Debug, Default)]
struct Actual {
    listed: bool,
    node: Option<VigilNodeStatus>,
    /// By object name.
    policies: BTreeMap<String, VigilPolicyStatus>,
}

/// The status publisher of one node.
pub struct Reconciler {
    node_name: String,
    nodes: Api<VigilNodeStatus>,
    policies: Api<VigilPolicyStatus>,
    inputs: Inputs,
    queue: WorkQueue<Key>,
    actual: Actual,
    /// The Node's UID the objects were last synced with.
    owner_uid: Option<String>,
}

impl Reconciler {
    /// A publisher for node `node_name` writing each object at most once per `spacing`.
    pub fn new(client: Client, node_name: &str, inputs: Inputs, spacing: Duration) -> Self {
        Self {
            node_name: node_name.to_owned(),
            nodes: Api::all(client.clone()),
            policies: Api::all(client),
            inputs,
            queue: WorkQueue::new(spacing),
            actual: Actual::default(),
            owner_uid: None,
        }
    }

    /// Publishes until `stop`: waits for the Node (its objects need its
    /// UID), lists, then syncs every key whose input changed.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut node = self.inputs.node_changes.clone();
        while self.owner().is_err() {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = node.changed() => if changed.is_err() { return },
            }
        }
        self.owner_uid = self.owner().ok().map(|o| o.uid);
        let mut registry = self.inputs.registry.subscribe();
        let (mut config, mut activity) = (self.inputs.config.clone(), self.inputs.activity.clone());
        let mut pulls = self.inputs.pulls.clone();
        self.queue.add(Key::List);
        let resync = tokio::time::sleep(next_resync());
        tokio::pin!(resync);
        let mut open = [true; 4];
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = registry.changed(), if open[0] => match changed {
                    Ok(()) => self.policies_changed(),
                    Err(_) => open[0] = false,
                },
                changed = config.changed(), if open[1] => match changed {
                    Ok(()) => self.queue.add(Key::Node),
                    Err(_) => open[1] = false,
                },
                changed = activity.changed(), if open[2] => match changed {
                    Ok(()) => self.queue.add(Key::Node),
                    Err(_) => open[2] = false,
                },
                changed = pulls.changed(), if open[3] => match changed {
                    Ok(()) => self.policies_changed(),
                    Err(_) => open[3] = false,
                },
                changed = node.changed() => match changed {
                    Ok(()) => self.node_changed(),
                    Err(_) => return,
                },
                () = &mut resync => {
                    resync.as_mut().reset(tokio::time::Instant::now() + next_resync());
                    self.queue.add(Key::List);
                }
                key = self.queue.next() => {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        done = self.sync_caught(&key) => self.queue.done(&key, done),
                    }
                }
            }
        }
    }

    /// Syncs `key`, a panic counting as a failure.
    async fn sync_caught(&mut self, key: &Key) -> Done {
        match caught(self.sync(key)).await {
            Ok(done) => done,
            Err(SyncError::NotListed) => Done::Failed,
            Err(error) => {
                if matches!(error, SyncError::Panic(_)) {
                    self.relist();
                }
                let failures = self.queue.failures(key) + 1;
                tracing::warn!(?key, failures, error = %Chain(&error), "status object not synced; retrying with backoff");
                Done::Failed
            }
        }
    }

    async fn sync(&mut self, key: &Key) -> Result<Done, SyncError> {
        match key {
            Key::List => self.list().await,
            Key::Node => self.sync_node().await,
            Key::Policy(name) => self.sync_policy(name).await,
        }
    }

    /// Queues every policy known to the registry or to the API server.
    fn policies_changed(&self) {
        let wanted = desired::policies(&self.inputs.registry, &self.inputs.pulls.borrow());
        let existing = self.actual.policies.values().map(|o| &o.spec.policy);
        let names: BTreeSet<&String> = wanted.keys().chain(existing).collect();
        for name in names {
            self.queue.add(Key::Policy(name.clone()));
        }
    }

    /// A Node with another UID (deleted and recreated) owns none of the
    /// objects (the garbage collector deletes them): list again.
    fn node_changed(&mut self) {
        let uid = self.owner().ok().map(|o| o.uid);
        if uid.is_some() && uid != self.owner_uid {
            self.owner_uid = uid;
            self.queue.add(Key::List);
        }
    }

    /// Forgets what exists; the next sync lists first.
    fn relist(&mut self) {
        self.actual.listed = false;
        self.queue.add(Key::List);
    }

    async fn list(&mut self) -> Result<Done, SyncError> {
        let selector = format!("{NODE_LABEL}={}", self.node_name);
        let listed = self
            .policies
            // From the watch cache: a write that finds it stale fails
            // (conflict, already exists) and lists again.
            .list(&ListParams::default().labels(&selector).match_any())
            .await
            .map_err(|source| api("list", "VigilPolicyStatuses", source))?;
        let node = self
            .nodes
            .get_opt(&self.node_name)
            .await
            .map_err(|source| api("get", "VigilNodeStatus", source))?;
        self.actual = Actual {
            listed: true,
            node,
            policies: listed
                .items
                .into_iter()
                .map(|o| (o.name_any(), o))
                .collect(),
        };
        self.queue.add(Key::Node);
        self.policies_changed();
        Ok(Done::Unchanged)
    }

    /// The owner reference to this Node.
    fn owner(&self) -> Result<OwnerReference, SyncError> {
        let node = self
            .inputs
            .node
            .get(&ObjectRef::new(&self.node_name))
            .ok_or_else(|| SyncError::NoNode(self.node_name.clone()))?;
        node.controller_owner_ref(&())
            .ok_or_else(|| SyncError::NoNode(self.node_name.clone()))
    }

    async fn sync_node(&mut self) -> Result<Done, SyncError> {
        if !self.actual.listed {
            return Err(SyncError::NotListed);
        }
        let owner = self.owner()?;
        let report = desired::node(&self.inputs.config.borrow(), &self.inputs.activity.borrow());
        let wanted = VigilNodeStatus {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: VigilNodeStatusSpec {
                node: self.node_name.clone(),
            },
            status: Some(report),
        };
        let written = match self.actual.node.clone() {
            Some(existing) if same_node(&existing, &wanted) => return Ok(Done::Unchanged),
            Some(mut existing) => {
                existing.metadata.owner_references = wanted.metadata.owner_references;
                existing.spec = wanted.spec;
                existing.status = wanted.status;
                let written = self
                    .nodes
                    .replace(&self.node_name, &PostParams::default(), &existing)
                    .await;
                self.written(written, "update", "VigilNodeStatus")?
            }
            None => {
                let written = self.nodes.create(&PostParams::default(), &wanted).await;
                self.written(written, "create", "VigilNodeStatus")?
            }
        };
        self.actual.node = Some(written);
        Ok(Done::Wrote)
    }

    async fn sync_policy(&mut self, name: &str) -> Result<Done, SyncError> {
        if !self.actual.listed {
            return Err(SyncError::NotListed);
        }
        let wanted = desired::policies(&self.inputs.registry, &self.inputs.pulls.borrow());
        let objects_of = |actual: &Actual, policy: &str| -> Vec<String> {
            actual
                .policies
                .iter()
                .filter(|(_, o)| o.spec.policy == policy)
                .map(|(n, _)| n.clone())
                .collect()
        };
        let mut mine = objects_of(&self.actual, name);
        // The objects of a policy no longer wanted go first to a wanted
        // policy that has none (whichever key syncs first), else away.
        let name = match wanted.get(name) {
            Some(_) => name.to_owned(),
            None => {
                let homeless = wanted
                    .keys()
                    .find(|p| objects_of(&self.actual, p).is_empty());
                match homeless {
                    Some(homeless) if !mine.is_empty() => {
                        mine = Vec::new();
                        homeless.clone()
                    }
                    _ => return self.delete_all(&mine).await,
                }
            }
        };
        let report = &wanted[&name];
        let owner = self.owner()?;
        let current = mine.iter().position(|n| {
            let object = &self.actual.policies[n];
            object.metadata.owner_references.as_deref() == Some(std::slice::from_ref(&owner))
                && object.status.as_ref().is_some_and(|s| s == report)
        });
        if let Some(index) = current {
            mine.remove(index);
            return self.delete_all(&mine).await;
        }
        // Update this policy's object, else reuse one no policy wants any
        // more, before creating one.
        let reused = if mine.is_empty() {
            self.actual
                .policies
                .iter()
                .find(|(_, o)| !wanted.contains_key(&o.spec.policy))
                .map(|(n, _)| n.clone())
        } else {
            Some(mine.remove(0))
        };
        let object = self.policy_object(&name, report.clone(), owner);
        let written = match reused {
            Some(existing) => {
                let mut object = object;
                object.metadata.name = Some(existing.clone());
                object.metadata.resource_version = self.actual.policies[&existing]
                    .metadata
                    .resource_version
                    .clone();
                self.actual.policies.remove(&existing);
                let written = self
                    .policies
                    .replace(&existing, &PostParams::default(), &object)
                    .await;
                self.written(written, "update", &format!("VigilPolicyStatus {existing}"))?
            }
            None => {
                let written = self.policies.create(&PostParams::default(), &object).await;
                self.written(written, "create", &format!("VigilPolicyStatus for {name}"))?
            }
        };
        self.actual.policies.insert(written.name_any(), written);
        self.delete_all(&mine).await?;
        Ok(Done::Wrote)
    }

    fn policy_object(
        &self,
        policy: &str,
        report: PolicyReport,
        owner: OwnerReference,
    ) -> VigilPolicyStatus {
        let mut labels = BTreeMap::from([(NODE_LABEL.to_owned(), self.node_name.clone())]);
        if is_label_value(policy) {
            labels.insert(POLICY_LABEL.to_owned(), policy.to_owned());
        }
        VigilPolicyStatus {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", self.node_name)),
                labels: Some(labels),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: VigilPolicyStatusSpec {
                node: self.node_name.clone(),
                policy: policy.to_owned(),
            },
            status: Some(report),
        }
    }

    async fn delete_all(&mut self, names: &[String]) -> Result<Done, SyncError> {
        for name in names {
            match self.policies.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    self.relist();
                    return Err(api("delete", &format!("VigilPolicyStatus {name}"), source));
                }
            }
            self.actual.policies.remove(name);
        }
        Ok(if names.is_empty() {
            Done::Unchanged
        } else {
            Done::Wrote
        })
    }

    /// The object a write answered, or the error (after which the objects
    /// are listed again: the write may have found them changed).
    fn written<K>(
        &mut self,
        written: Result<K, kube::Error>,
        action: &'static str,
        what: &str,
    ) -> Result<K, SyncError> {
        written.map_err(|source| {
            self.relist();
            api(action, what, source)
        })
    }
}

fn api(action: &'static str, what: &str, source: kube::Error) -> SyncError {
    SyncError::Api {
        action,
        what: what.to_owned(),
        source,
    }
}

/// Whether `existing` already says what `wanted` says.
fn same_node(existing: &VigilNodeStatus, wanted: &VigilNodeStatus) -> bool {
    existing.metadata.owner_references == wanted.metadata.owner_references
        && existing.spec == wanted.spec
        && existing.status == wanted.status
}

/// Whether `value` may be a label value (63 characters at most, alphanumeric
/// at both ends, `-`, `_` and `.` between).
fn is_label_value(value: &str) -> bool {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && ends(value.chars().next())
        && ends(value.chars().last())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// What `sync` returns, a panic in it becoming [`SyncError::Panic`].
async fn caught<T>(sync: impl Future<Output = Result<T, SyncError>>) -> Result<T, SyncError> {
    match std::panic::AssertUnwindSafe(sync).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(SyncError::Panic(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_checked_as_the_api_server_does() {
        assert!(is_label_value("default-sorter"));
        assert!(is_label_value("a.b_c"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value(""));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[tokio::test]
    async fn a_panicking_sync_is_an_error_with_its_message() {
        let panicking = async {
            if is_label_value("") {
                return Ok(Done::Unchanged);
            }
            panic!("the registry is inconsistent")
        };
        let error = caught(panicking).await.unwrap_err();
        assert!(
            matches!(&error, SyncError::Panic(m) if m == "the registry is inconsistent"),
            "{error:?}"
        );
        assert_eq!(
            caught(async { Ok(Done::Wrote) }).await.unwrap(),
            Done::Wrote
        );
    }
}
