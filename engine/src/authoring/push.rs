//! `vigil policy push`: publishes a checked component to an OCI registry in
//! the CNCF Wasm artifact layout ([`crate::distribution::layout`]) and
//! answers the digest to pin it by; `vigil policy precompile --push` does
//! the same for a precompiled artifact, and `vigil policy sign` publishes
//! a cosign signature.

use super::check::CheckReport;
use crate::base::digest::Digest;
use crate::distribution::layout::{
    Artifact, Claims, Description, EMPTY_CONFIG, MANIFEST_MEDIA_TYPE, oci_digest,
};
use crate::distribution::pull::Pinned;
use crate::distribution::registry::Access;
use crate::distribution::signature::{
    SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, SigningKey, signature_tag,
};
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
    /// The artifact to attach a file to is not there, or its referrers
    /// cannot be listed.
    #[error("{0}")]
    Subject(String),
    /// The artifact cannot be signed.
    #[error("cannot sign: {0}")]
    Sign(String),
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

/// Publishes `component` (checked as `report`) as `title` to `reference`
/// in the CNCF Wasm layout.
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
    let created = jiff::Timestamp::now().to_string();
    let artifact = Artifact::of(&Description {
        digest: report.digest,
        size: report.size,
        title,
        exports: &report.exports,
        imports: &report.imports,
        created: &created,
    });
    publish(reference, access, component, &report.digest, artifact).await
}

/// Publishes a precompiled policy (`vigil policy precompile`'s artifact,
/// made as `claims` say) to `reference`.
///
/// # Errors
/// As [`push`].
pub(crate) async fn push_precompiled(
    artifact: Vec<u8>,
    claims: &Claims,
    reference: &str,
    access: &Access,
) -> Result<Pushed, PushError> {
    let layer = Digest::of(&artifact);
    let manifest = Artifact::precompiled(&layer, artifact.len(), claims);
    publish(reference, access, artifact, &layer, manifest).await
}

/// Signs the artifact `pinned` (`registry/repository[:tag]@sha256:…`)
/// with `key` and publishes the signature where cosign would, under
/// `sha256-HEX.sig` in its repository (replacing any there).
///
/// # Errors
/// A reference not pinned by digest, the key cannot sign, or the registry
/// refused or could not be reached.
pub(crate) async fn push_signature(
    pinned: &str,
    key: &SigningKey,
    access: &Access,
) -> Result<Pushed, PushError> {
    let target = Pinned::parse(pinned).map_err(|e| PushError::Sign(e.to_string()))?;
    let repository = target.repository();
    let (payload, signature) = key
        .sign(&repository, &target.manifest())
        .map_err(|e| PushError::Sign(e.to_string()))?;
    let layer = Digest::of(&payload);
    let config = EMPTY_CONFIG.to_vec();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": oci_digest(&Digest::of(&config)),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
            "digest": oci_digest(&layer),
            "size": payload.len(),
            "annotations": {SIGNATURE_ANNOTATION: signature},
        }],
    });
    let artifact = Artifact {
        config,
        manifest: serde_json::to_vec(&manifest).expect("JSON serialises"),
    };
    let reference = format!("{repository}:{}", signature_tag(&target.manifest()));
    publish(&reference, access, payload, &layer, artifact).await
}

/// Publishes `layer` (digest `digest`) with `artifact`'s config and
/// manifest to `reference`: the layer, the config, then the manifest, each
/// only once the one before is stored, so a tag never names an artifact
/// with a missing blob.
async fn publish(
    reference: &str,
    access: &Access,
    layer: Vec<u8>,
    digest: &Digest,
    artifact: Artifact,
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
    client
        .push_blob(&parsed, layer, &oci_digest(digest))
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
