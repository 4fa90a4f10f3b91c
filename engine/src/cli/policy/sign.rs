//! `vigil policy sign`: a cosign signature pushed beside an artifact.

use crate::cli::args::RegistryArgs;
use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct SignArgs {
    /// The artifact: `registry/repository[:tag]@sha256:…`.
    reference: String,
    /// The private key (PEM `PRIVATE KEY`).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl SignArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let access = self.registry.access()?;
        let key = &self.key;
        let pem = crate::base::fsutil::read_text(key, 64 << 10)
            .with_context(|| format!("cannot read the key {}", key.display()))?;
        let key = crate::distribution::signature::SigningKey::from_pem(&pem)
            .with_context(|| format!("{} is not a signing key", key.display()))?;
        let reference = &self.reference;
        let pushed = crate::authoring::push::push_signature(reference, &key, &access)
            .await
            .with_context(|| format!("cannot sign {reference}"))?;
        println!("signed {reference}: {}", pushed.pinned);
        Ok(())
    }
}
