//! `vigil cleanup`: what an uninstall must remove besides the manifests —
//! on every Node, vigil's taints (`vigil.dev/…`) and conditions (`Vigil…`);
//! the fleet's status objects; and on each node, the state directory's
//! contents (checkpoint, last-known-good policies, compile cache, pulled
//! policies). `deploy/cleanup/` runs the first two as a Job and the last as a
//! DaemonSet.
//!
//! Both refuse to race a running agent: the cluster cleanup stops while an
//! agent pod still runs (it would write everything back), and the state
//! cleanup removes only the entries the agent makes, so a mistyped
//! directory loses nothing of anyone else's.

use crate::cluster::node_status::{
    CONFIG_FIELD_MANAGER, NodeConditions, NodeStatus, TAINT_PREFIX, apply_conditions,
};
use crate::fleet::kinds::{VigilNodeStatus, VigilPolicyStatus};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, Resource};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The prefix of every node condition type vigil writes.
const CONDITION_PREFIX: &str = "Vigil";
/// The entries the agent makes in its state directory: the config
/// checkpoint, the compile cache, last-known-good policies, refused
/// versions, pulled policies.
const STATE_ENTRIES: [&str; 5] = ["config", "cache", "lkg", "rejected.json", "oci"];
/// Nodes cleaned at once.
const NODES_AT_ONCE: usize = 8;
/// Nodes read per page.
const NODES_PER_PAGE: u32 = 500;

/// Why a cleanup stopped.
#[derive(Debug, Error)]
pub enum CleanupError {
    /// Agents still run: they would write back what is removed.
    #[error(
        "{} agent pod(s) still run in namespace {namespace} ({}); delete the vigil DaemonSet \
         and wait for its pods to go first, or they write everything back",
        pods.len(),
        pods.join(", ")
    )]
    AgentsRunning {
        /// The namespace looked in.
        namespace: String,
        /// The agent pods found.
        pods: Vec<String>,
    },
    /// The API server refused or could not be reached.
    #[error("cannot {what}")]
    Api {
        /// What was being done.
        what: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// A node still shows vigil's marks after its cleanup.
    #[error(
        "node {node} still shows {} after the cleanup (written by another field manager?); \
         remove them by hand",
        left.join(", ")
    )]
    Left {
        /// The node.
        node: String,
        /// Its taint keys and condition types left.
        left: Vec<String>,
    },
    /// A state directory entry could not be removed.
    #[error("cannot remove {}", path.display())]
    State {
        /// The entry.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> CleanupError {
    let what = what.into();
    move |source| CleanupError::Api { what, source }
}

/// What the cluster cleanup removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ClusterCleaned {
    /// The nodes that showed vigil's taints or conditions, now without them.
    pub nodes: Vec<String>,
    /// Nodes looked at.
    pub nodes_seen: usize,
    /// `VigilNodeStatus` objects deleted.
    pub node_statuses: usize,
    /// `VigilPolicyStatus` objects deleted.
    pub policy_statuses: usize,
}

/// Removes vigil's taints and conditions from every node that shows any,
/// then every fleet status object, unless a pod matching `agents` (a label
/// selector) still runs in `namespace`. Nodes without any mark are not
/// written to.
///
/// # Errors
/// Agents still run, the API server refused, or a node kept a mark.
pub async fn cluster(
    client: Client,
    namespace: &str,
    agents: &str,
) -> Result<ClusterCleaned, CleanupError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let running = pods
        .list(&ListParams::default().labels(agents))
        .await
        .map_err(api(format!("list the agent pods in {namespace}")))?;
    if !running.items.is_empty() {
        return Err(CleanupError::AgentsRunning {
            namespace: namespace.to_owned(),
            pods: running
                .items
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect(),
        });
    }
    let (marked, nodes_seen) = marked_nodes(&client).await?;
    let mut cleaned: Vec<String> = futures::stream::iter(marked)
        .map(|node| clean_node(client.clone(), node))
        .buffer_unordered(NODES_AT_ONCE)
        .try_collect()
        .await?;
    cleaned.sort();
    Ok(ClusterCleaned {
        nodes: cleaned,
        nodes_seen,
        node_statuses: delete_all::<VigilNodeStatus>(&client).await?,
        policy_statuses: delete_all::<VigilPolicyStatus>(&client).await?,
    })
}

/// The nodes that show any of vigil's marks, and how many nodes there are,
/// read a page at a time (a fleet's nodes are too many to hold at once).
async fn marked_nodes(client: &Client) -> Result<(Vec<String>, usize), CleanupError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let (mut marked, mut seen) = (Vec::new(), 0);
    let mut params = ListParams::default().limit(NODES_PER_PAGE);
    loop {
        let page = nodes.list(&params).await.map_err(api("list the nodes"))?;
        seen += page.items.len();
        marked.extend(
            page.items
                .iter()
                .filter(|n| !marks(n).is_empty())
                .filter_map(|n| n.metadata.name.clone()),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((marked, seen)),
        }
    }
}

/// vigil's taint keys and condition types on `node`.
fn marks(node: &Node) -> Vec<String> {
    let taints = node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| &t.key)
        .filter(|k| k.starts_with(TAINT_PREFIX));
    let conditions = node
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .map(|c| &c.type_)
        .filter(|t| t.starts_with(CONDITION_PREFIX));
    taints.chain(conditions).cloned().collect()
}

/// Removes vigil's marks from `node` as the agent would when nothing holds
/// (its field managers apply no condition; its taints are taken off with a
/// resourceVersion precondition), then checks none is left.
async fn clean_node(client: Client, node: String) -> Result<String, CleanupError> {
    let nodes: Api<Node> = Api::all(client.clone());
    NodeStatus::new(client, &node)
        .publish(&NodeConditions::default())
        .await
        .map_err(api(format!("clear node {node}")))?;
    apply_conditions(&nodes, &node, CONFIG_FIELD_MANAGER, Vec::new())
        .await
        .map_err(api(format!("clear node {node}'s config condition")))?;
    let after = nodes
        .get(&node)
        .await
        .map_err(api(format!("read node {node} back")))?;
    match marks(&after) {
        left if left.is_empty() => Ok(node),
        left => Err(CleanupError::Left { node, left }),
    }
}

/// Deletes every object of the cluster-scoped kind `K`; how many.
async fn delete_all<K>(client: &Client) -> Result<usize, CleanupError>
where
    K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let kind = K::kind(&());
    let objects: Api<K> = Api::all(client.clone());
    let names: Vec<String> = objects
        .list_metadata(&ListParams::default())
        .await
        .map_err(api(format!("list the {kind} objects")))?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    for name in &names {
        match objects.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            // Gone meanwhile: what was wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(api(format!("delete {kind} {name}"))(error)),
        }
    }
    Ok(names.len())
}

/// What the state cleanup removed, and what it left.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StateCleaned {
    /// The agent's entries removed.
    pub removed: Vec<String>,
    /// Entries the agent does not make, left in place.
    pub left: Vec<String>,
}

/// Removes the entries the agent makes in its state directory `dir` (and
/// the temporaries of its atomic writes); the directory itself stays, as
/// does anything else in it. A missing directory has nothing to remove.
///
/// # Errors
/// An entry could not be read or removed.
pub fn state_dir(dir: &Path) -> Result<StateCleaned, CleanupError> {
    let mut cleaned = StateCleaned::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(cleaned),
        Err(source) => {
            return Err(CleanupError::State {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        if !is_agent_entry(&name) {
            cleaned.left.push(name);
            continue;
        }
        let path = dir.join(&name);
        let removed = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => cleaned.removed.push(name),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(CleanupError::State { path, source }),
        }
    }
    Ok(cleaned)
}

/// Whether the agent makes the state directory entry `name`: one of
/// [`STATE_ENTRIES`], or the temporary of an atomic write of one
/// (`.NAME.tmp-…`, see [`crate::base::fsutil::write_atomic`]).
fn is_agent_entry(name: &str) -> bool {
    let entry = name
        .strip_prefix('.')
        .and_then(|rest| rest.split_once(".tmp-"))
        .map_or(name, |(entry, _)| entry);
    STATE_ENTRIES.contains(&entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_cleanup_removes_the_agents_entries_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("cache/v1")).unwrap();
        std::fs::write(root.join("cache/v1/artifact"), b"code").unwrap();
        std::fs::create_dir_all(root.join("config")).unwrap();
        std::fs::write(root.join("config/checkpoint.json"), b"{}").unwrap();
        std::fs::create_dir(root.join("lkg")).unwrap();
        std::fs::write(root.join("rejected.json"), b"{}").unwrap();
        std::fs::write(root.join(".rejected.json.tmp-42"), b"{").unwrap();
        std::fs::create_dir_all(root.join("oci/blobs")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"someone else's").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("lkg/escape")).unwrap();
        std::fs::write(root.join("notes.txt"), b"an operator's").unwrap();
        std::fs::create_dir(root.join(".hidden")).unwrap();

        let cleaned = state_dir(root).unwrap();
        assert_eq!(
            cleaned.removed,
            [
                ".rejected.json.tmp-42",
                "cache",
                "config",
                "lkg",
                "oci",
                "rejected.json"
            ]
        );
        assert_eq!(cleaned.left, [".hidden", "notes.txt"]);
        let mut left: Vec<String> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".hidden", "notes.txt"]);
        assert!(
            outside.path().join("keep").exists(),
            "a link is removed, never followed"
        );
        // Again: nothing more to remove.
        assert_eq!(state_dir(root).unwrap().removed, Vec::<String>::new());
        assert_eq!(
            state_dir(&root.join("absent")).unwrap(),
            StateCleaned::default()
        );
    }

    #[test]
    fn atomic_write_temporaries_count_as_their_entry() {
        assert!(is_agent_entry(".rejected.json.tmp-7"));
        assert!(is_agent_entry("oci"));
        assert!(!is_agent_entry(".notes.tmp-7"));
        assert!(!is_agent_entry("ocio"));
        assert!(!is_agent_entry(".oci"));
    }
}
