//! Publishes the node's status objects the way the kubelet publishes
//! ResourceSlices: changes put keys on a `WorkQueue` (the node, or one
//! policy), and a single worker syncs each key by comparing what should
//! exist (`desired`) with what does — creating what is missing, updating
//! what differs (reusing an obsolete object before creating one), deleting
//! what is no longer wanted. A failed sync, or a panic in one, is retried
//! with jittered backoff; each object is written at most once per spacing.
//!
//! Every object has a name the agent can compute ([`policy_object_name`]:
//! node and policy), so it reads them by name — never a LIST, which at
//! fleet scale filters every node's objects for each caller. The
//! `VigilNodeStatus` records which policies have objects, so an object whose
//! policy went away while the agent was down is found and deleted too.
//!
//! The agent is the only writer of its objects, so it reads them (from the
//! watch cache) at start, about every [`RESYNC`] (jittered) and after a
//! failed write, and otherwise trusts the answers to its own writes: no
//! watch is kept open for them. The next read repairs anything changed
//! behind its back (a deleted object, a Node recreated with a new UID whose
//! old objects were garbage-collected). Objects named by an earlier release
//! (`generateName`) are found by one label LIST, once, when the node's
//! object does not record its policies yet.

use super::activity::Activity;
use super::desired;
use super::kinds::{
    NODE_LABEL, POLICY_LABEL, PolicyView, PullView, ShadowView, VigilNodeStatus,
    VigilNodeStatusSpec, VigilPolicyStatus, VigilPolicyStatusSpec,
};
use super::queue::{Done, WorkQueue};
use crate::base::report::Chain;
use crate::config::assignment::ConfigView;
use crate::policy::Registry;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, GetParams, ListParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often, on average, the objects are read again to repair what
/// changed behind the agent's back: one GET per object, from the watch
/// cache. Each wait is jittered (half to one and a half times this), so a
/// fleet that started together does not read together: at 5000 nodes with
/// three policies each, some 6 GETs a second.
pub(crate) const RESYNC: Duration = Duration::from_secs(60 * 60);

/// The wait before the next resync: [`RESYNC`] times a random factor in [0.5, 1.5).
fn next_resync() -> Duration {
    RESYNC.mul_f64(0.5 + fastrand::f64())
}

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    /// Read the objects that exist, then sync every key.
    Read,
    /// The node's `VigilNodeStatus`.
    Node,
    /// The `VigilPolicyStatus` of one policy.
    Policy(String),
}

/// Why a sync failed.
#[derive(Debug, Error)]
pub(crate) enum SyncError {
    /// The objects are not read yet (or a write failed since).
    #[error("the status objects are not read yet")]
    NotRead,
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
    pub config: watch::Receiver<ConfigView>,
    /// The loop's activity.
    pub activity: watch::Receiver<Activity>,
    /// This Node (for the owner reference).
    pub node: Store<Node>,
    /// Changes when the Node's watch delivers something.
    pub node_changes: watch::Receiver<crate::cluster::watches::Progress>,
    /// How the pulls of registry versions fare, by policy; changed once
    /// the pull controller has made its first pass.
    pub pulls: watch::Receiver<BTreeMap<String, PullView>>,
    /// The versions in shadow, by policy.
    pub shadows: watch::Receiver<BTreeMap<String, ShadowView>>,
}

/// The objects that exist, as last read or written.
#[derive(Debug, Default)]
struct Actual {
    read: bool,
    node: Option<VigilNodeStatus>,
    /// By policy name.
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
    /// The pull controller made its first pass (or there is none): until
    /// then a pulled policy the registry does not serve yet is not known
    /// to be gone, and its object is kept.
    pulls_known: bool,
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
            pulls_known: false,
        }
    }

    /// Publishes until `stop`: waits for the Node (its objects need its
    /// UID), reads, then syncs every key whose input changed.
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
        let (mut pulls, mut shadows) = (self.inputs.pulls.clone(), self.inputs.shadows.clone());
        self.queue.add(Key::Read);
        let resync = tokio::time::sleep(next_resync());
        tokio::pin!(resync);
        let mut open = [true; 5];
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
                changed = pulls.changed(), if open[3] => {
                    if changed.is_err() {
                        open[3] = false;
                    }
                    self.pulls_known = true;
                    self.policies_changed();
                }
                changed = shadows.changed(), if open[4] => match changed {
                    Ok(()) => self.policies_changed(),
                    Err(_) => open[4] = false,
                },
                changed = node.changed() => match changed {
                    Ok(()) => self.node_changed(),
                    Err(_) => return,
                },
                () = &mut resync => {
                    resync.as_mut().reset(tokio::time::Instant::now() + next_resync());
                    self.queue.add(Key::Read);
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
            Err(SyncError::NotRead) => Done::Failed,
            Err(error) => {
                if matches!(error, SyncError::Panic(_)) {
                    self.reread();
                }
                let failures = self.queue.failures(key) + 1;
                tracing::warn!(?key, failures, error = %Chain(&error), "status object not synced; retrying with backoff");
                Done::Failed
            }
        }
    }

    async fn sync(&mut self, key: &Key) -> Result<Done, SyncError> {
        match key {
            Key::Read => self.read().await,
            Key::Node => self.sync_node().await,
            Key::Policy(name) => self.sync_policy(name).await,
        }
    }

    /// What every policy's status object should say.
    fn wanted_policies(&self) -> BTreeMap<String, PolicyView> {
        let (pulls, shadows) = (self.inputs.pulls.borrow(), self.inputs.shadows.borrow());
        desired::policies(&self.inputs.registry, &pulls, &shadows)
    }

    /// Queues every policy known to the registry or to the API server.
    fn policies_changed(&self) {
        let wanted = self.wanted_policies();
        let names: BTreeSet<&String> = wanted.keys().chain(self.actual.policies.keys()).collect();
        for name in names {
            self.queue.add(Key::Policy(name.clone()));
        }
    }

    /// A Node with another UID (deleted and recreated) owns none of the
    /// objects (the garbage collector deletes them): read again.
    fn node_changed(&mut self) {
        let uid = self.owner().ok().map(|o| o.uid);
        if uid.is_some() && uid != self.owner_uid {
            self.owner_uid = uid;
            self.queue.add(Key::Read);
        }
    }

    /// Forgets what exists; the next sync reads first.
    fn reread(&mut self) {
        self.actual.read = false;
        self.queue.add(Key::Read);
    }

    /// Reads this node's objects by name: the node's, then one per policy
    /// it records or the registry has.
    async fn read(&mut self) -> Result<Done, SyncError> {
        let node = cached(&self.nodes, &self.node_name)
            .await
            .map_err(|source| api("get", "VigilNodeStatus", source))?;
        let recorded = node
            .as_ref()
            .and_then(|n| n.status.as_ref())
            .map(|s| s.policies.clone());
        if let (Some(_), None | Some(None)) = (&node, &recorded) {
            self.delete_unnamed().await?;
        }
        let wanted = self.wanted_policies();
        let known: BTreeSet<String> = wanted
            .into_keys()
            .chain(recorded.flatten().unwrap_or_default())
            .chain(self.actual.policies.keys().cloned())
            .collect();
        let mut policies = BTreeMap::new();
        for policy in known {
            let name = policy_object_name(&self.node_name, &policy);
            let object = cached(&self.policies, &name)
                .await
                .map_err(|source| api("get", &format!("VigilPolicyStatus {name}"), source))?;
            policies.extend(object.map(|o| (policy, o)));
        }
        self.actual = Actual {
            read: true,
            node,
            policies,
        };
        self.queue.add(Key::Node);
        self.policies_changed();
        Ok(Done::Unchanged)
    }

    /// Deletes the objects an earlier release named by `generateName`,
    /// found by their node label (once: the node's object then records its
    /// policies).
    async fn delete_unnamed(&mut self) -> Result<(), SyncError> {
        let selector = format!("{NODE_LABEL}={}", self.node_name);
        let listed = self
            .policies
            .list(&ListParams::default().labels(&selector).match_any())
            .await
            .map_err(|source| api("list", "VigilPolicyStatuses", source))?;
        for object in listed.items {
            let name = object.name_any();
            if name != policy_object_name(&self.node_name, &object.spec.policy) {
                tracing::info!(%name, "deleting a status object named by an earlier release");
                self.delete(&name).await?;
            }
        }
        Ok(())
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
        if !self.actual.read {
            return Err(SyncError::NotRead);
        }
        let owner = self.owner()?;
        let mut report =
            desired::node(&self.inputs.config.borrow(), &self.inputs.activity.borrow());
        // Every policy with an object, or about to have one.
        let wanted = self.wanted_policies();
        let policies: BTreeSet<String> = wanted
            .into_keys()
            .chain(self.actual.policies.keys().cloned())
            .collect();
        report.policies = Some(policies.into_iter().collect());
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

    async fn sync_policy(&mut self, policy: &str) -> Result<Done, SyncError> {
        if !self.actual.read {
            return Err(SyncError::NotRead);
        }
        let wanted = self.wanted_policies();
        let name = policy_object_name(&self.node_name, policy);
        let Some(report) = wanted.get(policy) else {
            if !self.actual.policies.contains_key(policy) || !self.pulls_known {
                return Ok(Done::Unchanged);
            }
            self.delete(&name).await?;
            self.actual.policies.remove(policy);
            // The node's object no longer records it.
            self.queue.add(Key::Node);
            return Ok(Done::Wrote);
        };
        let owner = self.owner()?;
        let existing = self.actual.policies.get(policy);
        let mut report = report.clone();
        keep_since(&mut report, existing.and_then(|e| e.status.as_ref()));
        let mut object = self.policy_object(policy, report, owner);
        let written = match existing {
            Some(existing)
                if existing.metadata.owner_references == object.metadata.owner_references
                    && existing.status == object.status =>
            {
                return Ok(Done::Unchanged);
            }
            Some(existing) => {
                object.metadata.resource_version = existing.metadata.resource_version.clone();
                let written = self
                    .policies
                    .replace(&name, &PostParams::default(), &object)
                    .await;
                self.written(written, "update", &format!("VigilPolicyStatus {name}"))?
            }
            None => {
                // Recorded on the node's object first, so that a restart
                // finds the object should its policy go meanwhile.
                if !self.recorded(policy) {
                    self.sync_node().await?;
                }
                let written = self.policies.create(&PostParams::default(), &object).await;
                self.written(written, "create", &format!("VigilPolicyStatus {name}"))?
            }
        };
        self.actual.policies.insert(policy.to_owned(), written);
        Ok(Done::Wrote)
    }

    /// Whether the node's object records `policy` as having an object.
    fn recorded(&self, policy: &str) -> bool {
        let recorded = self.actual.node.as_ref().and_then(|n| n.status.as_ref());
        recorded
            .and_then(|s| s.policies.as_ref())
            .is_some_and(|p| p.iter().any(|p| p == policy))
    }

    fn policy_object(
        &self,
        policy: &str,
        report: PolicyView,
        owner: OwnerReference,
    ) -> VigilPolicyStatus {
        let mut labels = BTreeMap::from([(NODE_LABEL.to_owned(), self.node_name.clone())]);
        if is_label_value(policy) {
            labels.insert(POLICY_LABEL.to_owned(), policy.to_owned());
        }
        VigilPolicyStatus {
            metadata: ObjectMeta {
                name: Some(policy_object_name(&self.node_name, policy)),
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

    /// Deletes the policy object `name`; one already gone is fine.
    async fn delete(&mut self, name: &str) -> Result<(), SyncError> {
        match self.policies.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => {
                self.reread();
                Err(api("delete", &format!("VigilPolicyStatus {name}"), source))
            }
        }
    }

    /// The object a write answered, or the error (after which the objects
    /// are read again: the write may have found them changed).
    fn written<K>(
        &mut self,
        written: Result<K, kube::Error>,
        action: &'static str,
        what: &str,
    ) -> Result<K, SyncError> {
        written.map_err(|source| {
            self.reread();
            api(action, what, source)
        })
    }
}

/// The object `name`, from the API server's watch cache (`resourceVersion=0`).
async fn cached<K>(objects: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match objects.get_with(name, &GetParams::any()).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(error),
    }
}

/// The name of the `VigilPolicyStatus` of `policy` on `node`:
/// `NODE.POLICY` when that is a valid object name, else the node's name
/// (shortened if need be) and a hash of both.
pub(crate) fn policy_object_name(node: &str, policy: &str) -> String {
    let plain = format!("{node}.{policy}");
    if is_subdomain(&plain) {
        return plain;
    }
    let hash = crate::base::digest::Digest::of(format!("{node}/{policy}").as_bytes()).hex();
    let prefix = node[..node.len().min(MAX_NAME - 17)]
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{prefix}.{}", &hash[..16])
}

/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// Whether `name` is a DNS subdomain, as object names must be: at most 253
/// characters, dot-separated labels of lower-case alphanumerics and `-`,
/// alphanumeric at both ends.
fn is_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        let ends =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        ends(l.chars().next())
            && ends(l.chars().last())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    name.len() <= MAX_NAME && name.split('.').all(label)
}

fn api(action: &'static str, what: &str, source: kube::Error) -> SyncError {
    SyncError::Api {
        action,
        what: what.to_owned(),
        source,
    }
}

/// Whether `existing` already says what `wanted` says.
/// Keeps the object's `since` when the policy is in the same state with
/// the same version (and the same trial end), and its pull's when that is
/// in the same state for the same reference: only the agent restarted (a
/// built-in is `Active`, a pulled version `Pulled`, since its process
/// started), and a rollout of the agent must not rewrite every policy
/// object of the fleet.
fn keep_since(report: &mut PolicyView, existing: Option<&PolicyView>) {
    let Some(existing) = existing else {
        return;
    };
    if existing.state == report.state
        && existing.digest == report.digest
        && existing.trial_end == report.trial_end
    {
        report.since = existing.since.clone();
    }
    if let (Some(pull), Some(before)) = (&mut report.pull, &existing.pull)
        && (&pull.state, &pull.reference) == (&before.state, &before.reference)
    {
        pull.since = before.since.clone();
    }
}

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

    fn report(state: &str, since: &str, pulled_since: &str) -> PolicyView {
        serde_json::from_value(serde_json::json!({
            "state": state, "since": since, "digest": "d1", "faults": 0,
            "pull": {"reference": "r@sha256:1", "stage": "newest", "state": "Pulled", "since": pulled_since},
        }))
        .expect("a report")
    }

    #[test]
    fn a_restart_keeps_the_times_of_states_that_did_not_change() {
        let before = report("Active", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z");
        let mut after = report("Active", "2026-11-25T10:00:00Z", "2026-11-25T10:00:01Z");
        keep_since(&mut after, Some(&before));
        assert_eq!(after, before, "the same state and pull: nothing to write");
        let mut rolled_back = report("RolledBack", "2026-11-25T10:00:00Z", "2026-11-25T10:00:01Z");
        keep_since(&mut rolled_back, Some(&before));
        assert_eq!(rolled_back.since.0.to_string(), "2026-11-25T10:00:00Z");
        assert_eq!(
            rolled_back.pull.as_ref().unwrap().since,
            before.pull.as_ref().unwrap().since,
            "the pull is as it was"
        );
        let mut repulled = report("Active", "2026-11-25T10:00:00Z", "2026-11-25T10:00:01Z");
        repulled.pull.as_mut().unwrap().reference = "r@sha256:2".into();
        keep_since(&mut repulled, Some(&before));
        assert_eq!(repulled.since, before.since);
        assert_ne!(
            repulled.pull.unwrap().since,
            before.pull.unwrap().since,
            "another version pulled"
        );
    }

    #[test]
    fn label_values_are_checked_as_the_api_server_does() {
        assert!(is_label_value("default-sorter"));
        assert!(is_label_value("a.b_c"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value(""));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn policy_object_names_are_valid_and_distinct() {
        assert_eq!(
            policy_object_name("pool-a-1", "my-sorter"),
            "pool-a-1.my-sorter"
        );
        let long_node = format!("n{}", "-x".repeat(125));
        let hashed = [
            policy_object_name("pool-a-1", "My_Sorter"),
            policy_object_name("pool-a-1", "My_Sorter2"),
            policy_object_name(&long_node, "my-sorter"),
            policy_object_name(&long_node, "my-sorter2"),
        ];
        for name in &hashed {
            assert!(is_subdomain(name), "{name}");
        }
        assert!(hashed[0].starts_with("pool-a-1."), "{}", hashed[0]);
        let distinct: BTreeSet<&String> = hashed.iter().collect();
        assert_eq!(distinct.len(), hashed.len(), "{hashed:?}");
        assert!(!is_subdomain("a..b"));
        assert!(!is_subdomain("-a"));
        assert!(!is_subdomain(&"a".repeat(254)));
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
