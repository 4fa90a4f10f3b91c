//! `vigil policy precompile`: native code for the nodes, written beside each
//! component or published, from files or from what the cluster's VigilPolicy
//! objects name.

use crate::base::policy_name::PolicyName;
use crate::cli::args::{CacheArgs, RegistryArgs, one_shot_clients};
use crate::distribution::registry::Access;
use crate::policy::artifacts::files::{DEFAULT_MAX_POLICY_BYTES, read_policy};
use crate::policy::{Baseline, Host};
use anyhow::Context;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct PrecompileArgs {
    /// Component files; the artifact of `NAME.wasm` is written to `NAME.<baseline>.cwasm`
    /// (or published with --push).
    #[arg(
        required_unless_present = "from_cluster",
        conflicts_with = "from_cluster"
    )]
    files: Vec<PathBuf>,
    /// The CPU baseline the nodes have at least: x86-64, x86-64-v2, x86-64-v3, armv8-a or
    /// armv8.1-a. It must be the agents' (x86-64-v2 on x86-64, armv8-a on aarch64).
    #[arg(long, value_name = "BASELINE", default_value_t = Baseline::host())]
    cpu_baseline: Baseline,
    /// Publish each artifact to this `registry/repository[:tag]` instead of writing a file.
    #[arg(long, value_name = "REF", conflicts_with = "from_cluster")]
    push: Option<String>,
    /// Precompile every version the cluster's VigilPolicy objects name (`ref` and
    /// `rollout.previous`), publishing each beside its component.
    #[arg(long)]
    from_cluster: bool,
    /// With --from-cluster: write the artifacts into each object's `spec.precompiled`
    /// (replacing the entries for this engine key, keeping the others).
    #[arg(long, requires = "from_cluster")]
    pin: bool,
    /// A kubeconfig file, for --from-cluster; without it the in-cluster service account,
    /// else `$KUBECONFIG`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

impl PrecompileArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let access = self.registry.access()?;
        let host = Host::new(self.cache.dir())?;
        let baseline = self.cpu_baseline;
        if self.from_cluster {
            let kubeconfig = self.kubeconfig.as_deref();
            precompile_cluster(&host, kubeconfig, baseline, &access, self.pin).await
        } else {
            let push = self.push.as_deref();
            precompile_files(&host, &self.files, baseline, push, &access).await
        }
    }
}

/// `vigil policy precompile FILE…`: each artifact to a file beside its
/// component, or published to `push`.
async fn precompile_files(
    host: &Host,
    files: &[PathBuf],
    baseline: Baseline,
    push: Option<&str>,
    access: &Access,
) -> anyhow::Result<()> {
    use crate::authoring::precompile::precompile;
    for file in files {
        let bytes = read_policy(file, DEFAULT_MAX_POLICY_BYTES)?;
        let made = precompile(
            host,
            PolicyName::of_path(file)?.as_str(),
            bytes.as_slice(),
            baseline,
        )
        .with_context(|| format!("cannot precompile {}", file.display()))?;
        let engine_key = made.claims.engine_key.clone();
        let size = made.artifact.len();
        let reference = match push {
            Some(reference) => {
                crate::authoring::push::push_precompiled(
                    made.artifact,
                    &made.claims,
                    reference,
                    access,
                )
                .await
                .with_context(|| {
                    format!(
                        "cannot push the artifact of {} to {reference}",
                        file.display()
                    )
                })?
                .pinned
            }
            None => {
                let out = file.with_extension(format!("{baseline}.cwasm"));
                crate::base::fsutil::write_atomic(&out, &made.artifact)
                    .with_context(|| format!("cannot write {}", out.display()))?;
                out.display().to_string()
            }
        };
        println!(
            "precompiled {} for {baseline} ({size} bytes): {reference}",
            file.display()
        );
        println!("  engineKey: {engine_key}");
        println!("  build:     {}", made.claims.build);
    }
    Ok(())
}

/// `vigil policy precompile --from-cluster`.
async fn precompile_cluster(
    host: &Host,
    kubeconfig: Option<&Path>,
    baseline: Baseline,
    access: &Access,
    pin: bool,
) -> anyhow::Result<()> {
    use crate::distribution::store::BlobStore;
    let clients = one_shot_clients(kubeconfig).await?;
    let dir = std::env::temp_dir().join(format!("vigil-precompile-{}", std::process::id()));
    let store = BlobStore::open(&dir).context("cannot make a temporary store")?;
    let done = crate::authoring::precompile::from_cluster(
        host,
        &kube::Api::all(clients.api),
        &store,
        baseline,
        access,
        pin,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let done = done.context("cannot precompile the cluster's policies")?;
    for made in &done {
        println!(
            "{}: {} -> {}",
            made.policy, made.component, made.pushed.pinned
        );
    }
    println!(
        "{} version(s) precompiled for {baseline}{}; sign each with the native-code key:",
        done.len(),
        if pin { " and pinned" } else { "" }
    );
    for made in &done {
        println!(
            "  cosign sign --key native.key --tlog-upload=false {}",
            made.pushed.pinned
        );
    }
    Ok(())
}
