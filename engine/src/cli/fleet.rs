//! The fleet view from the command line — also as a kubectl plugin, with
//! the binary installed (or linked) as `kubectl-vigil` on the PATH:
//! `vigil status POLICY` (how far a policy has rolled out, [`Summary`])
//! and `vigil explain NAMESPACE/NAME` (why a pod was evicted,
//! [`explain`]). Each is one paged LIST of the status objects, the first
//! page served from the API server's watch cache.

use super::args::one_shot_clients;
use crate::fleet::explain::explain;
use crate::fleet::kinds::{POLICY_LABEL, VigilNodeStatus, VigilPolicyStatus};
use crate::fleet::summary::Summary;
use anyhow::Context;
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
    policy: String,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl StatusArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let selector = format!("{POLICY_LABEL}={}", self.policy);
        let statuses: Vec<VigilPolicyStatus> = list(self.kubeconfig, Some(&selector)).await?;
        print!("{}", Summary::of(&self.policy, &statuses));
        Ok(())
    }
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
        let statuses: Vec<VigilNodeStatus> = list(self.kubeconfig, None).await?;
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

/// Every object of kind `K` (matching `selector`), in pages of [`PAGE`].
async fn list<K>(kubeconfig: Option<PathBuf>, selector: Option<&str>) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let clients = one_shot_clients(kubeconfig.as_deref()).await?;
    let objects: Api<K> = Api::all(clients.api);
    let kind = K::kind(&());
    let params = || {
        let params = ListParams::default().limit(PAGE);
        match selector {
            Some(selector) => params.labels(selector),
            None => params,
        }
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
