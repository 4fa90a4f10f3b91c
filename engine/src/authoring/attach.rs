//! `vigil policy attach`: a file (an image's SBOM, a policy's notes…)
//! published as an OCI artifact whose `subject` is another, and listed
//! where clients look for that artifact's referrers. A registry with the
//! OCI referrers API lists it from its `subject`; for every other registry
//! (Docker's registry 2.8, Debian's, has none) the referrers tag schema's
//! index under `sha256-HEX` is kept too — always, as `oras attach` does on
//! such registries, so a client that reads either finds it.

use super::push::{PushError, Pushed};
use crate::base::digest::Digest;
use crate::distribution::layout::{
    EMPTY_CONFIG, EMPTY_CONFIG_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, oci_digest,
};
use crate::distribution::pull::{Pinned, PullError};
use crate::distribution::registry::Access;
use oci_client::{Client, Reference, RegistryOperation};
use serde_json::{Value, json};

/// An OCI image index's media type (a multi-architecture image, the
/// referrers tag schema's list).
const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// What a subject may be: an OCI or Docker manifest or index.
const SUBJECT_MEDIA_TYPES: [&str; 4] = [
    MANIFEST_MEDIA_TYPE,
    INDEX_MEDIA_TYPE,
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Publishes `file` (named `title`, of `artifact_type`) as an artifact
/// referring to `subject` (`registry/repository[:tag]@sha256:…`), in the
/// subject's repository, and lists it under the referrers tag schema.
/// The same file attached again is the same artifact, listed once.
///
/// # Errors
/// A reference not pinned by digest, a subject the registry does not hold
/// (or serves with another digest), or the registry refused or could not
/// be reached.
pub(crate) async fn attach(
    subject: &str,
    file: Vec<u8>,
    title: &str,
    artifact_type: &str,
    access: &Access,
) -> Result<Pushed, PushError> {
    let pinned = Pinned::parse(subject).map_err(|e| PushError::Subject(e.to_string()))?;
    let reference: Reference = subject.parse().map_err(|source| PushError::Reference {
        reference: subject.to_owned(),
        source,
    })?;
    let (client, auth) = access.client(&reference);
    client
        .auth(&reference, &auth, RegistryOperation::Push)
        .await?;
    let subject = descriptor(&client, &auth, &reference, &pinned).await?;
    let layer = Digest::of(&file);
    let artifact = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": artifact_type,
        "config": {
            "mediaType": EMPTY_CONFIG_MEDIA_TYPE,
            "digest": oci_digest(&Digest::of(EMPTY_CONFIG)),
            "size": EMPTY_CONFIG.len(),
        },
        "layers": [{
            "mediaType": artifact_type,
            "digest": oci_digest(&layer),
            "size": file.len(),
            "annotations": {"org.opencontainers.image.title": title},
        }],
        "subject": subject,
    });
    let artifact = serde_json::to_vec(&artifact).expect("JSON serialises");
    let digest = oci_digest(&Digest::of(&artifact));
    let (registry, repository) = (reference.registry(), reference.repository());
    let here = Reference::with_digest(registry.to_owned(), repository.to_owned(), digest.clone());
    client.push_blob(&here, file, &oci_digest(&layer)).await?;
    let config = oci_digest(&Digest::of(EMPTY_CONFIG));
    (client.push_blob(&here, EMPTY_CONFIG.to_vec(), &config)).await?;
    let descriptor = json!({
        "mediaType": MANIFEST_MEDIA_TYPE,
        "digest": digest,
        "size": artifact.len(),
        "artifactType": artifact_type,
    });
    let header = http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE);
    client.push_manifest_raw(&here, artifact, header).await?;
    let tag = format!("sha256-{}", pinned.manifest().hex());
    let tag = Reference::with_tag(registry.to_owned(), repository.to_owned(), tag);
    list_referrer(&client, &auth, &tag, descriptor).await?;
    Ok(Pushed {
        pinned: format!(
            "{}/{}@{digest}",
            reference.registry(),
            reference.repository()
        ),
        manifest: digest,
    })
}

/// The descriptor of `reference` (pinned as `pinned`), as the registry
/// serves it.
async fn descriptor(
    client: &Client,
    auth: &oci_client::secrets::RegistryAuth,
    reference: &Reference,
    pinned: &Pinned,
) -> Result<Value, PushError> {
    let (manifest, _) = client
        .pull_manifest_raw(reference, auth, &SUBJECT_MEDIA_TYPES)
        .await?;
    let media_type = (serde_json::from_slice::<Value>(&manifest).ok())
        .and_then(|m| m["mediaType"].as_str().map(str::to_owned));
    match media_type.filter(|_| Digest::of(&manifest) == pinned.manifest()) {
        Some(media_type) => Ok(json!({
            "mediaType": media_type,
            "digest": oci_digest(&pinned.manifest()),
            "size": manifest.len(),
        })),
        None => Err(PushError::Subject(format!(
            "the registry serves {reference} with another digest or no media type"
        ))),
    }
}

/// Adds `descriptor` to the referrers index under `tag` (made if there is
/// none), unless it lists it already.
async fn list_referrer(
    client: &Client,
    auth: &oci_client::secrets::RegistryAuth,
    tag: &Reference,
    descriptor: Value,
) -> Result<(), PushError> {
    let mut index = match client
        .pull_manifest_raw(tag, auth, &[INDEX_MEDIA_TYPE])
        .await
    {
        Ok((bytes, _)) => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(|i| i["manifests"].is_array())
            .ok_or_else(|| PushError::Subject(format!("{tag} is not a referrers index")))?,
        Err(error) => match PullError::from(error) {
            PullError::NotFound(_) => json!({
                "schemaVersion": 2,
                "mediaType": INDEX_MEDIA_TYPE,
                "manifests": [],
            }),
            other => return Err(PushError::Subject(format!("cannot read {tag}: {other}"))),
        },
    };
    let listed = index["manifests"].as_array_mut().expect("checked an array");
    if listed.iter().any(|d| d["digest"] == descriptor["digest"]) {
        return Ok(());
    }
    listed.push(descriptor);
    let index = serde_json::to_vec(&index).expect("JSON serialises");
    let header = http::HeaderValue::from_static(INDEX_MEDIA_TYPE);
    client.push_manifest_raw(tag, index, header).await?;
    Ok(())
}
