//! `vigil policy push`: a checked component published to an OCI registry.

use crate::authoring::check::check_bytes;
use crate::base::policy_name::PolicyName;
use crate::cli::args::{CacheArgs, RegistryArgs};
use crate::policy::artifacts::files::{DEFAULT_MAX_POLICY_BYTES, read_policy};
use crate::policy::{Host, Origin};
use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct PushArgs {
    /// The component file (`NAME.wasm`).
    file: PathBuf,
    /// Where to push: `registry/repository[:tag]`.
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

impl PushArgs {
    /// `vigil policy push`: checks the component as `policy check` does (a
    /// component that would not serve is never published), then publishes it.
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let (file, reference) = (self.file.as_path(), self.reference.as_str());
        let access = self.registry.access()?;
        let host = Host::new(self.cache.dir())?;
        let bytes = read_policy(file, DEFAULT_MAX_POLICY_BYTES)?;
        let origin = file.display().to_string();
        let source = Origin::File(file.to_owned());
        let report = check_bytes(
            &host,
            origin,
            PolicyName::of_path(file)?.as_str(),
            bytes.as_slice(),
            source,
            "{}",
        )
        .with_context(|| {
            format!(
                "{} is not a policy vigil would serve; nothing was pushed",
                file.display()
            )
        })?;
        let title = file.file_name().map_or_else(
            || "policy.wasm".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        let pushed = crate::authoring::push::push(bytes, &report, &title, reference, &access)
            .await
            .with_context(|| format!("cannot push {} to {reference}", file.display()))?;
        println!(
            "pushed {} ({}) to {reference}",
            file.display(),
            report.world
        );
        println!("digest: {}", pushed.manifest);
        println!("pin:    {}", pushed.pinned);
        Ok(())
    }
}
