//! `vigil policy attach`: a file published as a referrer of an artifact.

use crate::cli::args::RegistryArgs;
use anyhow::Context;
use std::path::PathBuf;

/// The most a file to attach (text: an SBOM, notes) may hold.
const MAX_ATTACHED_BYTES: u64 = 64 << 20;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct AttachArgs {
    /// The artifact it refers to: `registry/repository[:tag]@sha256:…`.
    reference: String,
    /// The file to attach (text, UTF-8).
    file: PathBuf,
    /// Its media type, the artifact's type.
    #[arg(long, default_value = "application/vnd.cyclonedx+json")]
    artifact_type: String,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl AttachArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let access = self.registry.access()?;
        let file = &self.file;
        let text = crate::base::fsutil::read_text(file, MAX_ATTACHED_BYTES)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let title = file.file_name().map_or_else(
            || "attachment".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        let reference = &self.reference;
        let pushed = crate::authoring::attach::attach(
            reference,
            text.into_bytes(),
            &title,
            &self.artifact_type,
            &access,
        )
        .await
        .with_context(|| format!("cannot attach {} to {reference}", file.display()))?;
        println!(
            "attached {} to {reference}: {}",
            file.display(),
            pushed.pinned
        );
        Ok(())
    }
}
