//! The OCI layouts of vigil's artifacts.
//!
//! A policy is published in the CNCF Wasm layout: an image manifest whose
//! config is `application/vnd.wasm.config.v0+json` (`architecture: wasm`,
//! `os: wasip2`, the layer's digest, the component's exports and imports)
//! and whose one layer is the component, `application/wasm`.
//!
//! A precompiled policy (native code made by `vigil policy precompile`) is
//! an image manifest of `artifactType`
//! `application/vnd.vigil.precompiled.v1` with the empty config and one
//! `application/vnd.vigil.cwasm.v1` layer; what it was made for — the
//! component's digest, the engine key, the target, the CPU baseline and
//! the vigil build — are the manifest's annotations ([`Claims`]), so a
//! signature over the manifest covers them, and a node reads them before a
//! byte of native code.

use crate::base::digest::Digest;
use serde_json::json;
use std::collections::BTreeMap;

/// The config of a CNCF Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer of a CNCF Wasm artifact.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// An OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The artifact type of a precompiled policy.
pub(crate) const PRECOMPILED_ARTIFACT_TYPE: &str = "application/vnd.vigil.precompiled.v1";
/// The layer of a precompiled policy: wasmtime's serialised component.
pub(crate) const PRECOMPILED_LAYER_MEDIA_TYPE: &str = "application/vnd.vigil.cwasm.v1";
/// OCI's empty config, for artifacts that need none.
pub(crate) const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The annotation prefix of a precompiled artifact's claims.
const CLAIM_PREFIX: &str = "dev.vigil.";

/// The `sha256:HEX` form of a digest, as OCI writes it.
pub fn oci_digest(digest: &Digest) -> String {
    format!("sha256:{}", digest.hex())
}

/// The digest an OCI `sha256:HEX` names; `None` for another algorithm or a
/// malformed one.
pub(crate) fn parse_oci_digest(text: &str) -> Option<Digest> {
    Digest::from_hex(text.strip_prefix("sha256:")?)
}

/// What describes a component in its artifact.
#[derive(Debug, Clone)]
pub(crate) struct Description<'a> {
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
pub(crate) struct Artifact {
    /// The config blob.
    pub config: Vec<u8>,
    /// The manifest.
    pub manifest: Vec<u8>,
}

impl Artifact {
    /// The artifact of the component `component` describes.
    pub(crate) fn of(component: &Description<'_>) -> Self {
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

/// What a precompiled artifact was made for; each must match the node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The component it was compiled from.
    pub component: Digest,
    /// The key of the engine it loads in.
    pub engine_key: String,
    /// The target triple.
    pub target: String,
    /// The CPU baseline.
    pub cpu_baseline: String,
    /// The vigil build that made it (and alone loads it).
    pub build: String,
}

impl Claims {
    /// The claims as manifest annotations.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        [
            ("component", oci_digest(&self.component)),
            ("engine-key", self.engine_key.clone()),
            ("target", self.target.clone()),
            ("cpu-baseline", self.cpu_baseline.clone()),
            ("build", self.build.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{CLAIM_PREFIX}{k}"), v))
        .collect()
    }

    /// The claims `annotations` make, or which one is missing or malformed.
    ///
    /// # Errors
    /// A claim is absent, or the component is not a sha256 digest.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Result<Self, String> {
        let claim = |key: &str| {
            annotations
                .get(&format!("{CLAIM_PREFIX}{key}"))
                .cloned()
                .ok_or_else(|| format!("no {CLAIM_PREFIX}{key} annotation"))
        };
        let component = claim("component")?;
        Ok(Self {
            component: parse_oci_digest(&component)
                .ok_or_else(|| format!("the component {component:?} is not a sha256 digest"))?,
            engine_key: claim("engine-key")?,
            target: claim("target")?,
            cpu_baseline: claim("cpu-baseline")?,
            build: claim("build")?,
        })
    }

    /// How `self`, an artifact's claims, differs from `node`'s, in words;
    /// `None` if it is made for the node.
    pub fn mismatch(&self, node: &Self) -> Option<String> {
        let pairs = [
            (
                "component",
                oci_digest(&self.component),
                oci_digest(&node.component),
            ),
            ("target", self.target.clone(), node.target.clone()),
            (
                "CPU baseline",
                self.cpu_baseline.clone(),
                node.cpu_baseline.clone(),
            ),
            ("vigil build", self.build.clone(), node.build.clone()),
            (
                "engine key",
                self.engine_key.clone(),
                node.engine_key.clone(),
            ),
        ];
        pairs
            .into_iter()
            .find(|(_, theirs, ours)| theirs != ours)
            .map(|(what, theirs, ours)| {
                format!("made for {what} {theirs}, where this node needs {ours}")
            })
    }
}

/// The empty config's bytes.
pub(crate) const EMPTY_CONFIG: &[u8] = b"{}";

impl Artifact {
    /// The artifact of a precompiled policy of `size` bytes, digest
    /// `layer`, made as `claims` say.
    pub(crate) fn precompiled(layer: &Digest, size: usize, claims: &Claims) -> Self {
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": PRECOMPILED_ARTIFACT_TYPE,
            "config": {
                "mediaType": EMPTY_CONFIG_MEDIA_TYPE,
                "digest": oci_digest(&Digest::of(EMPTY_CONFIG)),
                "size": EMPTY_CONFIG.len(),
            },
            "layers": [{
                "mediaType": PRECOMPILED_LAYER_MEDIA_TYPE,
                "digest": oci_digest(layer),
                "size": size,
            }],
            "annotations": claims.annotations(),
        });
        Self {
            config: EMPTY_CONFIG.to_vec(),
            manifest: serde_json::to_vec(&manifest).expect("JSON serialises"),
        }
    }
}
