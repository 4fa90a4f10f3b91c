//! `vigil policy verify`: is a published artifact signed under a key.

use crate::cli::args::RegistryArgs;
use crate::distribution::pull::{Pinned, verify_signed};
use crate::distribution::signature::VerificationKey;
use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct VerifyArgs {
    /// The artifact: `registry/repository[:tag]@sha256:…`.
    reference: String,
    /// The public key (PEM `PUBLIC KEY`, as `cosign generate-key-pair` writes it).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl VerifyArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let access = self.registry.access()?;
        let key = &self.key;
        let pem = crate::base::fsutil::read_text(key, 64 << 10)
            .with_context(|| format!("cannot read the key {}", key.display()))?;
        let key = VerificationKey::from_pem(&pem)
            .with_context(|| format!("{} is not a public key", key.display()))?;
        let reference = &self.reference;
        let pinned = Pinned::parse(reference)?;
        verify_signed(&pinned, &access, &key)
            .await
            .with_context(|| format!("{reference} is not verified"))?;
        println!("verified {reference}: signed under {}", self.key.display());
        Ok(())
    }
}
