//! `vigil enforce --percent N` (also `kubectl vigil enforce`): the one step
//! from the install's observing to acting. The shipped DaemonSet starts
//! every agent with `--observe-first`; this writes the cluster-wide
//! `VigilConfig` [`ENFORCE_LAYER`] (`dryRun: false` on a share of the nodes)
//! by server-side apply, so running it again with another share moves the
//! same object, and `--percent 0` returns every node to observing.

use super::args::one_shot_clients;
use crate::config::{ConfigLayer, ENFORCE_LAYER, ENFORCE_PRIORITY};
use anyhow::Context;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::path::PathBuf;

/// The field manager of the applied layer.
const MANAGER: &str = "vigil-enforce";

/// `vigil enforce`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct EnforceArgs {
    /// The share of nodes that enforce, 0 to 100, chosen by a stable hash of each node's
    /// name: raising it only adds nodes; 0 returns every node to observing.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    percent: u8,
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl EnforceArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let clients = one_shot_clients(self.kubeconfig.as_deref()).await?;
        let layers: Api<ConfigLayer> = Api::all(clients.api);
        let params = PatchParams::apply(MANAGER).force();
        let layer = ConfigLayer::enforcing(self.percent);
        layers
            .patch(ENFORCE_LAYER, &params, &Patch::Apply(&layer))
            .await
            .with_context(|| format!("cannot apply VigilConfig/{ENFORCE_LAYER}"))?;
        println!(
            "VigilConfig/{ENFORCE_LAYER} (priority {ENFORCE_PRIORITY}): dryRun: false on {}% of the nodes",
            self.percent
        );
        println!(
            "each agent applies it within its --config-spread; `vigil status --config` shows every node's mode"
        );
        Ok(())
    }
}
