//! The CNCF Wasm OCI artifact layout a policy is published in: an image
//! manifest whose config is `application/vnd.wasm.config.v0+json`
//! (`architecture: wasm`, `os: wasip2`, the layer's digest, the component's
//! exports and imports) and whose one layer is the component,
//! `application/wasm`.

use crate::policy::Digest;
use serde_json::json;

/// The config of a CNCF Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer of a CNCF Wasm artifact.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// An OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// The `sha256:HEX` form of a digest, as OCI writes it.
pub fn oci_digest(digest: &Digest) -> String {
    format!("sha256:{}", digest.hex())
}

/// The digest an OCI `sha256:HEX` names; `None` for another algorithm or a
/// malformed one.
pub fn parse_oci_digest(text: &str) -> Option<Digest> {
    Digest::from_hex(text.strip_prefix("sha256:")?)
}

/// What describes a component in its artifact.
#[derive(Debug, Clone)]
pub struct Description<'a> {
    /// The component's digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: usize,
    /// The file name it is published under.
    pub title: &'a str,
    /// Its exports (WIT names).
    pub exports: &'a [String],
    /// Its imports (WIT names).
    pub imports: &'a [String],
    /// When it was published (RFC 3339).
    pub created: &'a str,
}

/// An artifact's config and manifest, serialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The config blob.
    pub config: Vec<u8>,
    /// The manifest.
    pub manifest: Vec<u8>,
}

impl Artifact {
    /// The artifact of the component `component` describes.
    pub fn of(component: &Description<'_>) -> Self {
        let layer = oci_digest(&component.digest);
        let config = json!({
            "created": component.created,
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer],
            "component": {"exports": component.exports, "imports": component.imports},
        });
        let config = serde_json::to_vec(&config).expect("JSON serialises");
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": WASM_CONFIG_MEDIA_TYPE,
            "config": {
                "mediaType": WASM_CONFIG_MEDIA_TYPE,
                "digest": oci_digest(&Digest::of(&config)),
                "size": config.len(),
            },
            "layers": [{
                "mediaType": WASM_LAYER_MEDIA_TYPE,
                "digest": layer,
                "size": component.size,
                "annotations": {"org.opencontainers.image.title": component.title},
            }],
        });
        let manifest = serde_json::to_vec(&manifest).expect("JSON serialises");
        Self { config, manifest }
    }
}
