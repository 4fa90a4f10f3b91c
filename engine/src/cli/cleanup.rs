//! `vigil cleanup cluster|node`: what an uninstall removes besides the
//! manifests (the work is [`crate::cleanup`]'s), reported.

use super::args::{one_shot_clients, shutdown_signal};
use std::path::PathBuf;

/// `vigil cleanup`'s two halves: the cluster's, run once, and each node's.
#[derive(Debug, clap::Subcommand)]
pub(super) enum CleanupCommand {
    /// Remove vigil's taints (`vigil.dev/…`) and conditions (`Vigil…`) from every node and
    /// delete the fleet status objects; refused while an agent pod still runs.
    Cluster {
        /// The namespace the agents run in.
        #[arg(long, env = "POD_NAMESPACE", default_value = "vigil-system")]
        namespace: String,
        /// The label selector of the agent pods.
        #[arg(
            long,
            value_name = "SELECTOR",
            default_value = super::args::AGENT_PODS
        )]
        agent_selector: String,
        /// A kubeconfig file; without it the in-cluster service account, else `$KUBECONFIG`.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// Remove the agent's entries (checkpoint, last-known-good and pulled policies, compile
    /// cache) from this node's state directory, leaving anything else.
    Node {
        /// The agent's state directory.
        #[arg(long, value_name = "DIR", default_value = "/var/lib/vigil")]
        state_dir: PathBuf,
        /// Then wait for SIGTERM (as a DaemonSet's container, which must not exit).
        #[arg(long)]
        wait: bool,
    },
}

impl CleanupCommand {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        match self {
            Self::Cluster {
                namespace,
                agent_selector,
                kubeconfig,
            } => cluster(kubeconfig, &namespace, &agent_selector).await,
            Self::Node { state_dir, wait } => node(state_dir, wait).await,
        }
    }
}

async fn cluster(
    kubeconfig: Option<PathBuf>,
    namespace: &str,
    agent_selector: &str,
) -> anyhow::Result<()> {
    let clients = one_shot_clients(kubeconfig.as_deref()).await?;
    let done = crate::cleanup::cluster(clients.api, namespace, agent_selector).await?;
    for node in &done.nodes {
        println!("{node}: vigil's taints and conditions removed");
    }
    println!(
        "{} of {} node(s) cleaned; {} VigilNodeStatus and {} VigilPolicyStatus object(s) deleted",
        done.nodes.len(),
        done.nodes_seen,
        done.node_statuses,
        done.policy_statuses
    );
    Ok(())
}

async fn node(state_dir: PathBuf, wait: bool) -> anyhow::Result<()> {
    let terminated = shutdown_signal()?;
    let done = crate::cleanup::state_dir(&state_dir)?;
    let removed = if done.removed.is_empty() {
        "nothing".to_owned()
    } else {
        done.removed.join(", ")
    };
    println!("{}: removed {removed}", state_dir.display());
    if !done.left.is_empty() {
        println!(
            "{}: left {} (not the agent's)",
            state_dir.display(),
            done.left.join(", ")
        );
    }
    if wait {
        terminated.await;
    }
    Ok(())
}
