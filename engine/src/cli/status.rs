//! `vigil status POLICY` — also `kubectl vigil status POLICY`, with the
//! binary installed (or linked) as `kubectl-vigil` on the PATH: how far a
//! policy has rolled out across the fleet ([`Summary`]), from one paged
//! LIST of its `VigilPolicyStatus` objects (by their `vigil.dev/policy`
//! label), the first page served from the API server's watch cache.

use super::args::one_shot_clients;
use crate::fleet::kinds::{POLICY_LABEL, VigilPolicyStatus};
use crate::fleet::summary::Summary;
use anyhow::Context;
use kube::Api;
use kube::api::ListParams;
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
        let clients = one_shot_clients(self.kubeconfig.as_deref()).await?;
        let objects: Api<VigilPolicyStatus> = Api::all(clients.api);
        let selector = format!("{POLICY_LABEL}={}", self.policy);
        let first = ListParams::default()
            .labels(&selector)
            .limit(PAGE)
            .match_any();
        let mut page = objects
            .list(&first)
            .await
            .context("cannot list the VigilPolicyStatus objects")?;
        let mut statuses = std::mem::take(&mut page.items);
        while let Some(token) = page.metadata.continue_.filter(|t| !t.is_empty()) {
            let next = ListParams::default()
                .labels(&selector)
                .limit(PAGE)
                .continue_token(&token);
            page = objects
                .list(&next)
                .await
                .context("cannot list the next page of VigilPolicyStatus objects")?;
            statuses.append(&mut page.items);
        }
        print!("{}", Summary::of(&self.policy, &statuses));
        Ok(())
    }
}
