//! The fleet's mode from the command line (also as `kubectl vigil …`), each
//! one cluster-wide `VigilConfig` applied by server-side apply or deleted:
//!
//! - `vigil enforce --percent N`: the one step from the install's observing
//!   to acting. The shipped DaemonSet starts every agent with
//!   `--observe-first`; this applies [`ENFORCE_LAYER`] (`dryRun: false` on a
//!   share of the nodes), so running it again with another share moves the
//!   same object, and `--percent 0` returns every node to observing.
//! - `vigil pause` / `vigil resume`: the fleet's brake. [`PAUSE_LAYER`]
//!   (`pause: true`) stops every agent's evictions and taints the moment
//!   its watch shows it (no spread, no trial); deleting it resumes them.

use super::args::one_shot_clients;
use crate::config::{ConfigLayer, ENFORCE_LAYER, ENFORCE_PRIORITY, PAUSE_LAYER};
use anyhow::Context;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use std::path::{Path, PathBuf};

/// The field manager of the applied layers.
const MANAGER: &str = "vigil-cli";

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
        let layer = ConfigLayer::enforcing(self.percent);
        apply(self.kubeconfig.as_deref(), &layer).await?;
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

/// `vigil pause`'s and `vigil resume`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct BrakeArgs {
    /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl BrakeArgs {
    pub(super) async fn pause(self) -> anyhow::Result<()> {
        apply(self.kubeconfig.as_deref(), &ConfigLayer::pausing()).await?;
        println!(
            "VigilConfig/{PAUSE_LAYER}: every agent stops evicting and tainting as its watch shows it"
        );
        println!("`vigil status --config` shows every node's mode; `vigil resume` lifts it");
        Ok(())
    }

    pub(super) async fn resume(self) -> anyhow::Result<()> {
        let layers = layers(self.kubeconfig.as_deref()).await?;
        match layers.delete(PAUSE_LAYER, &DeleteParams::default()).await {
            Ok(_) => println!(
                "VigilConfig/{PAUSE_LAYER} deleted: the agents resume as their watch shows it"
            ),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                println!("VigilConfig/{PAUSE_LAYER} is not there: nothing to resume");
            }
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("cannot delete VigilConfig/{PAUSE_LAYER}"));
            }
        }
        Ok(())
    }
}

/// The `VigilConfig` objects of the cluster `kubeconfig` names.
async fn layers(kubeconfig: Option<&Path>) -> anyhow::Result<Api<ConfigLayer>> {
    let clients = one_shot_clients(kubeconfig).await?;
    Ok(Api::all(clients.api))
}

/// Applies `layer` (server-side, taking its fields from any other manager).
async fn apply(kubeconfig: Option<&Path>, layer: &ConfigLayer) -> anyhow::Result<()> {
    let name = layer.metadata.name.as_deref().unwrap_or_default();
    let params = PatchParams::apply(MANAGER).force();
    (layers(kubeconfig).await?)
        .patch(name, &params, &Patch::Apply(layer))
        .await
        .with_context(|| format!("cannot apply VigilConfig/{name}"))?;
    Ok(())
}
