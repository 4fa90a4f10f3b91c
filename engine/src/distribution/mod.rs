//! Policies as OCI artifacts: `layout` says what a policy artifact is (the
//! CNCF Wasm layout: its media types, its config and manifest);
//! `registry` opens a client to a registry (TLS, plain HTTP only when
//! asked, credentials) and reads from it within byte caps; `crd` is the `VigilPolicy` resource that names a
//! policy's artifact and its rollout, and `rollout` decides which version
//! a node takes; [`pull`] brings an artifact pinned by digest into the
//! node's content-addressed `store`, after [`signature`] checked it when a
//! key is configured; `failure` says why a pull failed, as one kind each. The author's `vigil policy push`
//! publishes with the first two; the agent pulls with the rest.

// kube's `KubeSchema` derive adds a copy of each type for its schema, which
// is never reachable: its types are reached through the re-exports below.
#[allow(unreachable_pub)]
pub(crate) mod crd;
pub(crate) mod credentials;
pub(crate) mod failure;
pub(crate) mod layout;
pub(crate) mod plan;
pub(crate) mod pull;
pub(crate) mod registry;
pub(crate) mod rollout;
pub mod signature;
pub(crate) mod store;

pub use crd::{VigilPolicy, VigilPolicySpec};
pub use layout::{
    Claims, MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, oci_digest,
};
pub use pull::{
    Expect, LEGACY_WASM_LAYER_MEDIA_TYPE, Pinned, PullError, Pulled, pull, verified_components,
};
pub use registry::Access;
pub use store::BlobStore;
