//! The fleet view from the command line — also as a kubectl plugin, with
//! the binary installed (or linked) as `kubectl-vigil` on the PATH:
//! `vigil status POLICY` (how far a policy has rolled out, [`Summary`]),
//! `vigil status --config` (how far the config has, [`ConfigRollout`]),
//! `vigil explain NAMESPACE/NAME` (why a pod was evicted, [`explain`]),
//! `vigil version` (this binary's build and the agents', [`Builds`]) and
//! `vigil where NODE` (the agent pod of a node). Each is one paged LIST,
//! the first page served from the API server's watch cache.

use super::args::{AGENT_PODS, one_shot_clients};
use crate::base::build::BUILD;
use crate::fleet::explain::explain;
use crate::fleet::kinds::{POLICY_LABEL, VigilNodeStatus, VigilPolicyStatus};
use crate::fleet::rollout::{Builds, ConfigRollout};
use crate::fleet::summary::Summary;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::path::PathBuf;

/// The objects asked for per page.
const PAGE: u32 = 500;

/// `vigil status`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct StatusArgs {
    /// The policy: its `VigilPolicy`'s name (or a built-in's, or a file's).
    #[arg(required_unless_present = "config")]
    policy: Option<String>,
    /// The config's rollout instead: nodes per assigned config, running config and state.
    #[arg(long, conflicts_with = "policy")]
    config: bool,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl StatusArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let Some(policy) = self.policy else {
            let statuses: Vec<VigilNodeStatus> = list(self.kubeconfig, None, None).await?;
            print!("{}", ConfigRollout::of(&statuses));
            return Ok(());
        };
        let selector = format!("{POLICY_LABEL}={policy}");
        let statuses: Vec<VigilPolicyStatus> = list(self.kubeconfig, Some(&selector), None).await?;
        print!("{}", Summary::of(&policy, &statuses));
        Ok(())
    }
}

/// `vigil version`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct VersionArgs {
    /// This binary's build only; ask the cluster nothing.
    #[arg(long)]
    client: bool,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl VersionArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        println!("client: {BUILD}");
        if !self.client {
            let statuses: Vec<VigilNodeStatus> = list(self.kubeconfig, None, None).await?;
            print!("{}", Builds::of(&statuses));
        }
        Ok(())
    }
}

/// `vigil where`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct WhereArgs {
    /// The node.
    node: String,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl WhereArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let on_node = format!("spec.nodeName={}", self.node);
        let pods: Vec<Pod> = list(self.kubeconfig, Some(AGENT_PODS), Some(&on_node)).await?;
        if pods.is_empty() {
            bail!(
                "no vigil pod on node {} (label {AGENT_PODS}, any namespace)",
                self.node
            );
        }
        for pod in &pods {
            println!("{}", agent_pod(pod));
        }
        Ok(())
    }
}

/// One agent pod, in a line: where it is, its phase, readiness, restarts and image.
fn agent_pod(pod: &Pod) -> String {
    let meta = &pod.metadata;
    let status = pod.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let ready = containers.iter().filter(|c| c.ready).count();
    let restarts: i32 = containers.iter().map(|c| c.restart_count).sum();
    let image = (pod.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .unwrap_or("-");
    format!(
        "{}/{} on {}: {}, ready {ready}/{}, {restarts} restart(s), image {image}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        (pod.spec.as_ref())
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("-"),
        status.and_then(|s| s.phase.as_deref()).unwrap_or("Unknown"),
        pod.spec.as_ref().map_or(0, |s| s.containers.len()),
    )
}

/// `vigil explain`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct ExplainArgs {
    /// The pod, as `NAMESPACE/NAME`.
    #[arg(value_parser = pod_name)]
    pod: String,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl ExplainArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let statuses: Vec<VigilNodeStatus> = list(self.kubeconfig, None, None).await?;
        print!("{}", explain(&self.pod, &statuses));
        Ok(())
    }
}

fn pod_name(text: &str) -> Result<String, String> {
    match text.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => Ok(text.to_owned()),
        _ => Err(format!("{text:?} is not NAMESPACE/NAME")),
    }
}

/// Every object of kind `K` in every namespace (matching the label
/// selector `labels` and the field selector `fields`), in pages of [`PAGE`].
async fn list<K>(
    kubeconfig: Option<PathBuf>,
    labels: Option<&str>,
    fields: Option<&str>,
) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let clients = one_shot_clients(kubeconfig.as_deref()).await?;
    let objects: Api<K> = Api::all(clients.api);
    let kind = K::kind(&());
    let params = || {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(labels) = labels {
            params = params.labels(labels);
        }
        if let Some(fields) = fields {
            params = params.fields(fields);
        }
        params
    };
    let mut page = (objects.list(&params().match_any()).await)
        .with_context(|| format!("cannot list the {kind} objects"))?;
    let mut all = std::mem::take(&mut page.items);
    while let Some(token) = page.metadata.continue_.filter(|t| !t.is_empty()) {
        page = (objects.list(&params().continue_token(&token)).await)
            .with_context(|| format!("cannot list the next page of {kind} objects"))?;
        all.append(&mut page.items);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_agent_pod_is_told_by_where_it_runs_its_readiness_restarts_and_image() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "vigil-system", "name": "vigil-x7k2p"},
            "spec": {"nodeName": "node-7",
                     "containers": [{"name": "agent", "image": "registry.example/vigil@sha256:ab"}]},
            "status": {"phase": "Running",
                       "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 2,
                                              "image": "x", "imageID": "y"}]}
        }))
        .unwrap();
        assert_eq!(
            agent_pod(&pod),
            "vigil-system/vigil-x7k2p on node-7: Running, ready 1/1, 2 restart(s), image registry.example/vigil@sha256:ab"
        );
        let pending: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "ops", "name": "team-vigil-abc"},
            "spec": {"containers": [{"name": "agent"}]}
        }))
        .unwrap();
        assert_eq!(
            agent_pod(&pending),
            "ops/team-vigil-abc on -: Unknown, ready 0/1, 0 restart(s), image -"
        );
    }
}
