//! Pulling one policy artifact, pinned by digest, into the node's
//! [`BlobStore`]: what the store already holds is answered without a
//! request (so a node restarted while its registry is down still has its
//! policies); otherwise the manifest is fetched by digest and checked (an
//! image manifest, exactly one component layer of a known media type, a
//! declared size under the cap — before a byte of the layer is read), then
//! the layer streams into the store, counted and digest-checked. With a
//! verification key, an artifact is taken only if a cosign signature under
//! that key covers its manifest's digest: checked before the layer is read,
//! and again (from the signatures kept beside it) when the store answers.
//!
//! The same path pulls a precompiled policy ([`Expect::Precompiled`]): its
//! manifest's claims (see [`Claims`]) must name the component and this
//! node's engine, and a signature under the native-code key must cover it,
//! all before its native code is read.

pub use super::failure::PullError;
use super::layout::{
    Claims, MANIFEST_MEDIA_TYPE, PRECOMPILED_LAYER_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE, oci_digest, parse_oci_digest,
};
use super::registry::{Access, Reader};
use super::signature::{
    self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, Signed, VerificationKey,
};
use super::store::BlobStore;
use crate::base::digest::Digest;
use base64::Engine as _;
use futures::StreamExt;
use oci_client::Reference;
use oci_client::errors::DigestError;
use oci_client::manifest::OciDescriptor;
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

/// The layer media type of the older `wasm-to-oci` layout, still accepted.
pub const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// The most a manifest may hold: a policy's has one config and one layer.
const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// A reference pinned by digest: `registry/repository[:tag]@sha256:…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    reference: Reference,
    manifest: Digest,
}

impl Pinned {
    /// Parses `text`, which must name a sha256 digest.
    ///
    /// # Errors
    /// It does not parse, or names no sha256 digest.
    pub fn parse(text: &str) -> Result<Self, PullError> {
        let reference: Reference = text
            .parse()
            .map_err(|e: oci_client::ParseError| PullError::Reference(format!("{text:?}: {e}")))?;
        let manifest = reference
            .digest()
            .and_then(parse_oci_digest)
            .ok_or_else(|| {
                PullError::Reference(format!("{text:?} is not pinned by a sha256 digest"))
            })?;
        Ok(Self {
            reference,
            manifest,
        })
    }

    /// The manifest's digest.
    pub fn manifest(&self) -> Digest {
        self.manifest
    }

    /// The registry's host (and port).
    pub fn registry(&self) -> &str {
        self.reference.resolve_registry()
    }

    /// `registry/repository`, without tag or digest.
    pub fn repository(&self) -> String {
        format!(
            "{}/{}",
            self.reference.registry(),
            self.reference.repository()
        )
    }
}

/// What a pulled artifact must be.
#[derive(Debug, Clone, Copy)]
pub enum Expect<'a> {
    /// A policy component.
    Component,
    /// A precompiled policy made as these claims say.
    Precompiled(&'a Claims),
}

/// A pulled (or already held) artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The manifest's digest.
    pub manifest: Digest,
    /// The layer's digest: for a component, the policy version it becomes.
    pub layer: Digest,
    /// Where the store keeps it.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it came from the registry now (else the store held it).
    pub fetched: bool,
}

/// The parts of an image manifest a policy's is checked by.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: Option<String>,
    config: Descriptor,
    layers: Vec<Descriptor>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: i64,
}

/// The one layer of `manifest` (its bytes), an artifact as `expect` says:
/// see the module's docs for what is checked.
pub(crate) fn layer(
    manifest: &[u8],
    expect: Expect<'_>,
    cap: u64,
) -> Result<(Digest, u64), PullError> {
    let manifest: Manifest = serde_json::from_slice(manifest)
        .map_err(|e| PullError::Layout(format!("the manifest does not parse: {e}")))?;
    if manifest.schema_version != 2
        || manifest
            .media_type
            .as_deref()
            .is_some_and(|t| t != MANIFEST_MEDIA_TYPE)
    {
        return Err(PullError::Layout(format!(
            "not an OCI image manifest (schemaVersion {}, mediaType {})",
            manifest.schema_version,
            manifest.media_type.as_deref().unwrap_or("absent")
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(PullError::Layout(format!(
            "{} layers, where a policy artifact has exactly one",
            manifest.layers.len()
        )));
    };
    match expect {
        Expect::Component => component_media_types(&manifest, layer)?,
        Expect::Precompiled(node) => precompiled_claims(&manifest, layer, node)?,
    }
    let digest = parse_oci_digest(&layer.digest).ok_or_else(|| {
        PullError::Layout(format!("the layer's digest {} is not sha256", layer.digest))
    })?;
    let size = u64::try_from(layer.size)
        .map_err(|_| PullError::Layout(format!("the layer's size {} is negative", layer.size)))?;
    if size > cap {
        return Err(PullError::Oversized {
            what: format!("the layer declares {size} bytes"),
            cap,
        });
    }
    Ok((digest, size))
}

/// Checks the media types of a component artifact.
fn component_media_types(manifest: &Manifest, layer: &Descriptor) -> Result<(), PullError> {
    let cncf = layer.media_type == WASM_LAYER_MEDIA_TYPE
        && manifest.config.media_type == WASM_CONFIG_MEDIA_TYPE;
    if !cncf && layer.media_type != LEGACY_WASM_LAYER_MEDIA_TYPE {
        return Err(PullError::Layout(format!(
            "a layer of media type {} with a config of {}, where a policy artifact has an \
             {WASM_LAYER_MEDIA_TYPE} layer with an {WASM_CONFIG_MEDIA_TYPE} config (or an \
             {LEGACY_WASM_LAYER_MEDIA_TYPE} layer)",
            layer.media_type, manifest.config.media_type
        )));
    }
    Ok(())
}

/// Checks a precompiled artifact's layer and that its claims are `node`'s.
fn precompiled_claims(
    manifest: &Manifest,
    layer: &Descriptor,
    node: &Claims,
) -> Result<(), PullError> {
    if layer.media_type != PRECOMPILED_LAYER_MEDIA_TYPE {
        return Err(PullError::Layout(format!(
            "a layer of media type {}, where a precompiled policy has one {PRECOMPILED_LAYER_MEDIA_TYPE} layer",
            layer.media_type
        )));
    }
    let claims = Claims::from_annotations(&manifest.annotations)
        .map_err(|e| PullError::Layout(format!("not a precompiled policy: {e}")))?;
    match claims.mismatch(node) {
        None => Ok(()),
        Some(why) if claims.component != node.component => Err(PullError::OtherComponent(why)),
        Some(why) => Err(PullError::Incompatible(why)),
    }
}

/// What the store holds for `pinned`, if it holds both its manifest and
/// its component (and, with `key`, signatures that still verify): no
/// request needed.
fn held(
    store: &BlobStore,
    pinned: &Pinned,
    cap: u64,
    key: Option<&VerificationKey>,
    expect: Expect<'_>,
) -> Option<Pulled> {
    if let Some(key) = key {
        let signed = store.signatures(&pinned.manifest)?;
        signature::verify(key, &pinned.manifest, &signed).ok()?;
    }
    let manifest = store.read(&pinned.manifest, MAX_MANIFEST_BYTES).ok()?;
    let (layer, size) = layer(&manifest, expect, cap).ok()?;
    let path = store.path(&layer);
    (std::fs::metadata(&path).ok()?.len() == size).then_some(Pulled {
        manifest: pinned.manifest,
        layer,
        path,
        size,
        fetched: false,
    })
}

/// The components of the artifacts `store` holds whose kept signatures
/// verify under `key`.
pub fn verified_components(store: &BlobStore, key: &VerificationKey) -> HashSet<Digest> {
    store
        .signed_manifests()
        .into_iter()
        .filter_map(|manifest| {
            signature::verify(key, &manifest, &store.signatures(&manifest)?).ok()?;
            let bytes = store.read(&manifest, MAX_MANIFEST_BYTES).ok()?;
            layer(&bytes, Expect::Component, u64::MAX)
                .ok()
                .map(|(component, _)| component)
        })
        .collect()
}

/// The most a signature payload may hold.
const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

/// The most signatures read beside one artifact: cosign adds a layer to
/// the signature manifest for each signing.
const MAX_SIGNATURES: usize = 32;

/// The signatures stored for `pinned` under cosign's tag in its
/// repository; none if the tag does not exist.
async fn signatures(reader: &Reader, pinned: &Pinned) -> Result<Vec<Signed>, PullError> {
    let reference = Reference::with_tag(
        pinned.reference.registry().to_owned(),
        pinned.reference.repository().to_owned(),
        signature::signature_tag(&pinned.manifest),
    );
    let accepted = [
        MANIFEST_MEDIA_TYPE,
        "application/vnd.docker.distribution.manifest.v2+json",
    ];
    let cap = MAX_MANIFEST_BYTES;
    let Some(manifest) = reader.manifest(&reference, &accepted, cap).await? else {
        return Ok(Vec::new());
    };
    let manifest: oci_client::manifest::OciImageManifest = serde_json::from_slice(&manifest)
        .map_err(|e| PullError::Layout(format!("the signature manifest does not parse: {e}")))?;
    let signed_layers = (manifest.layers.iter())
        .filter_map(|layer| {
            let annotation = layer.annotations.as_ref()?.get(SIGNATURE_ANNOTATION)?;
            (layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE).then_some((layer, annotation))
        })
        .collect::<Vec<_>>();
    if signed_layers.len() > MAX_SIGNATURES {
        return Err(PullError::Layout(format!(
            "{} signatures beside the artifact, over the {MAX_SIGNATURES} the agent reads",
            signed_layers.len()
        )));
    }
    let mut signed = Vec::new();
    for (layer, signature) in signed_layers {
        let payload = match reader.blob(&reference, layer, MAX_PAYLOAD_BYTES).await {
            Ok(payload) => payload,
            // A payload too large to be a cosign claim is no signature.
            Err(PullError::Oversized { .. }) => continue,
            Err(error) => return Err(error),
        };
        signed.push(Signed {
            payload: base64::engine::general_purpose::STANDARD.encode(payload),
            signature: signature.clone(),
        });
    }
    Ok(signed)
}

/// Accepts `pinned`, any artifact (a policy, an image index…), if a
/// cosign signature under `key` stored beside it covers its digest, as
/// `cosign verify --key` does.
///
/// # Errors
/// The registry refused or could not be reached, or no signature under
/// `key` covers `pinned`.
pub(crate) async fn verify_signed(
    pinned: &Pinned,
    access: &Access,
    key: &VerificationKey,
) -> Result<(), PullError> {
    let reader = access.reader(&pinned.reference)?;
    let signed = signatures(&reader, pinned).await?;
    signature::verify(key, &pinned.manifest, &signed)?;
    Ok(())
}

/// Streams the layer `layer` of `size` bytes, an artifact as `expect`
/// says, from `reference`'s repository into `store`, counted and
/// digest-checked; answers where the store keeps it.
async fn store_layer(
    reader: &Reader,
    reference: &Reference,
    expect: Expect<'_>,
    layer: Digest,
    size: u64,
    store: &BlobStore,
) -> Result<PathBuf, PullError> {
    let descriptor = OciDescriptor {
        media_type: match expect {
            Expect::Component => WASM_LAYER_MEDIA_TYPE,
            Expect::Precompiled(_) => PRECOMPILED_LAYER_MEDIA_TYPE,
        }
        .to_owned(),
        digest: oci_digest(&layer),
        size: i64::try_from(size).unwrap_or(i64::MAX),
        ..OciDescriptor::default()
    };
    let mut stream = (reader.oci())
        .pull_blob_stream(reference, &descriptor)
        .await?;
    if stream.content_length.is_some_and(|length| length > size) {
        return Err(PullError::Tampered(format!(
            "the registry sends {} bytes for a layer of {size}",
            stream.content_length.unwrap_or_default()
        )));
    }
    let mut writer = store.writer(layer, size).map_err(PullError::Store)?;
    while let Some(chunk) = stream.next().await {
        // The client checks the digest too, and says so at the stream's end.
        let chunk = chunk.map_err(|e| {
            if e.get_ref().is_some_and(|inner| inner.is::<DigestError>()) {
                PullError::Tampered(e.to_string())
            } else {
                PullError::Unavailable(e.to_string())
            }
        })?;
        writer.write(&chunk)?;
    }
    Ok(writer.finish()?)
}

/// Pulls `pinned`, an artifact as `expect` says, into `store` (see the
/// module's docs), refusing a layer of more than `cap` bytes and, with
/// `key`, one no signature under it covers.
///
/// # Errors
/// Unauthorized, not found, unavailable, tampered, not a policy artifact,
/// oversized, not signed, not made for this node, or the store cannot be
/// written.
pub async fn pull(
    pinned: &Pinned,
    access: &Access,
    store: &BlobStore,
    cap: u64,
    key: Option<&VerificationKey>,
    expect: Expect<'_>,
) -> Result<Pulled, PullError> {
    if let Some(pulled) = held(store, pinned, cap, key, expect) {
        return Ok(pulled);
    }
    let reader = access.reader(&pinned.reference)?;
    let manifest = reader
        .manifest(
            &pinned.reference,
            &[MANIFEST_MEDIA_TYPE],
            MAX_MANIFEST_BYTES,
        )
        .await?
        .ok_or_else(|| {
            PullError::NotFound(format!("no manifest {}", oci_digest(&pinned.manifest)))
        })?;
    if Digest::of(&manifest) != pinned.manifest {
        return Err(PullError::Tampered(format!(
            "the manifest served is not {}",
            oci_digest(&pinned.manifest)
        )));
    }
    let (layer, size) = layer(&manifest, expect, cap)?;
    let signed = match key {
        Some(key) => {
            let signed = signatures(&reader, pinned).await?;
            signature::verify(key, &pinned.manifest, &signed)?;
            Some(signed)
        }
        None => None,
    };
    let path = store_layer(&reader, &pinned.reference, expect, layer, size, store).await?;
    if let Some(signed) = &signed {
        store
            .save_signatures(&pinned.manifest, signed)
            .map_err(PullError::Store)?;
    }
    store.insert(&manifest).map_err(PullError::Store)?;
    Ok(Pulled {
        manifest: pinned.manifest,
        layer,
        path,
        size,
        fetched: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::failure::PullReason;
    use serde_json::json;

    fn manifest(config: &str, layers: &[(&str, u64)]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|(media_type, size)| {
                json!({"mediaType": media_type, "digest": oci_digest(&Digest::of(b"c")), "size": size})
            })
            .collect();
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": config, "digest": oci_digest(&Digest::of(b"{}")), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn only_one_component_layer_of_a_known_layout_under_the_cap_is_taken() {
        let cncf = manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 100)]);
        assert_eq!(
            layer(&cncf, Expect::Component, 100).unwrap(),
            (Digest::of(b"c"), 100)
        );
        let legacy = manifest(
            "application/vnd.wasm.config.v1+json",
            &[(LEGACY_WASM_LAYER_MEDIA_TYPE, 10)],
        );
        assert!(layer(&legacy, Expect::Component, 100).is_ok());

        let cases = [
            (
                manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, 101)]),
                "oversized",
            ),
            (
                manifest(
                    WASM_CONFIG_MEDIA_TYPE,
                    &[(WASM_LAYER_MEDIA_TYPE, 1), (WASM_LAYER_MEDIA_TYPE, 1)],
                ),
                "layout",
            ),
            (manifest(WASM_CONFIG_MEDIA_TYPE, &[]), "layout"),
            (
                manifest(
                    "application/vnd.oci.image.config.v1+json",
                    &[("application/vnd.oci.image.layer.v1.tar+gzip", 1)],
                ),
                "layout",
            ),
            (
                manifest(
                    "application/vnd.oci.image.config.v1+json",
                    &[(WASM_LAYER_MEDIA_TYPE, 1)],
                ),
                "layout",
            ),
            (b"{not json".to_vec(), "layout"),
        ];
        for (bytes, reason) in cases {
            let error = layer(&bytes, Expect::Component, 100).unwrap_err();
            assert_eq!(error.reason().as_str(), reason, "{error}");
        }
    }

    #[test]
    fn a_reference_must_be_pinned_by_a_sha256_digest() {
        let hex = Digest::of(b"m").hex();
        let pinned = Pinned::parse(&format!(
            "registry.example:5000/vigil/sorter:1.0@sha256:{hex}"
        ))
        .unwrap();
        assert_eq!(pinned.manifest(), Digest::of(b"m"));
        assert_eq!(pinned.registry(), "registry.example:5000");
        for text in ["registry.example/vigil/sorter:1.0", "not a reference!"] {
            let error = Pinned::parse(text).unwrap_err();
            assert_eq!(error.reason(), PullReason::Reference, "{error}");
        }
    }
}
