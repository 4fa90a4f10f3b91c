//! `vigil policy push`: publishes a checked component to an OCI registry in
//! the CNCF Wasm artifact layout ([`crate::distribution::layout`]) and
//! answers the digest to pin it by.

use super::check::CheckReport;
use crate::distribution::layout::{Artifact, Description, MANIFEST_MEDIA_TYPE, oci_digest};
use crate::distribution::registry::Access;
use crate::policy::Digest;
use oci_client::{Reference, RegistryOperation};
use thiserror::Error;

/// Why a component was not published.
#[derive(Debug, Error)]
pub enum PushError {
    /// The reference does not parse.
    #[error("{reference:?} is not an OCI reference (registry/repository[:tag])")]
    Reference {
        /// The reference given.
        reference: String,
        /// Why.
        #[source]
        source: oci_client::ParseError,
    },
    /// A reference pinned by digest cannot be pushed to.
    #[error("{0} names a digest: push to a tag or a repository, the digest is the answer")]
    Pinned(String),
    /// The registry refused or could not be reached.
    #[error("the registry refused or could not be reached: {0}")]
    Registry(#[from] oci_client::errors::OciDistributionError),
}

/// What was published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest's digest (`sha256:…`).
    pub manifest: String,
    /// `registry/repository@sha256:…`: the reference that pins it.
    pub pinned: String,
}

/// Publishes `component` (checked as `report`) as `title` to `reference`:
/// the layer, the config, then the manifest, each only once the one before
/// is stored, so a tag never names an artifact with a missing blob.
///
/// # Errors
/// A bad or pinned reference, or the registry refused or could not be
/// reached.
pub async fn push(
    component: Vec<u8>,
    report: &CheckReport,
    title: &str,
    reference: &str,
    access: &Access,
) -> Result<Pushed, PushError> {
    let parsed: Reference = reference.parse().map_err(|source| PushError::Reference {
        reference: reference.to_owned(),
        source,
    })?;
    if parsed.digest().is_some() {
        return Err(PushError::Pinned(reference.to_owned()));
    }
    let (client, auth) = access.client(&parsed);
    client.auth(&parsed, &auth, RegistryOperation::Push).await?;
    let created = jiff::Timestamp::now().to_string();
    let artifact = Artifact::of(&Description {
        digest: report.digest,
        size: report.size,
        title,
        exports: &report.exports,
        imports: &report.imports,
        created: &created,
    });
    client
        .push_blob(&parsed, component, &oci_digest(&report.digest))
        .await?;
    let config_digest = oci_digest(&Digest::of(&artifact.config));
    client
        .push_blob(&parsed, artifact.config, &config_digest)
        .await?;
    let manifest = oci_digest(&Digest::of(&artifact.manifest));
    client
        .push_manifest_raw(
            &parsed,
            artifact.manifest,
            http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
        )
        .await?;
    Ok(Pushed {
        pinned: format!("{}/{}@{manifest}", parsed.registry(), parsed.repository()),
        manifest,
    })
}
