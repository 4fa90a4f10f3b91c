//! `vigil policy precompile`: compiling a policy once, in CI, instead of on
//! every node. A component is checked as `vigil policy check` checks it,
//! then compiled for an explicit CPU baseline by this very vigil build
//! ([`crate::policy::artifacts::engine`]); the artifact, and the [`Claims`] that say
//! what it was made for, can be published next to the component
//! ([`crate::authoring::push::push_precompiled`]). With `--from-cluster`,
//! every version the cluster's `VigilPolicy` objects name is precompiled
//! and published, and, with `--pin`, added to each object's
//! `spec.precompiled` (entries for other engine keys are kept), so that a
//! release that changes the engine key is prepared before its agents roll.
//!
//! Signing is not done here: the native-code key belongs to whoever signs
//! release builds (`cosign sign --key native.key REF`).

use super::check::check_bytes;
use super::push::{PushError, Pushed, push_precompiled};
use crate::base::build::BUILD;
use crate::base::digest::Digest;
use crate::distribution::crd::{PrecompiledRef, VigilPolicy};
use crate::distribution::layout::Claims;
use crate::distribution::pull::{Expect, Pinned, PullError, pull};
use crate::distribution::registry::Access;
use crate::distribution::store::BlobStore;
use crate::policy::artifacts::engine::{self, Baseline};
use crate::policy::{Host, LoadError, Origin};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use std::collections::BTreeSet;
use thiserror::Error;

/// Why a policy was not precompiled.
#[derive(Debug, Error)]
pub(crate) enum PrecompileError {
    /// The component is not a policy vigil would serve.
    #[error("not a policy vigil would serve")]
    Check(#[from] LoadError),
    /// Compiling for the baseline failed.
    #[error("cannot compile it for {baseline}: {message}")]
    Compile {
        /// The baseline.
        baseline: Baseline,
        /// What wasmtime said.
        message: String,
    },
    /// A component named by the cluster cannot be pulled.
    #[error("cannot pull {reference}")]
    Pull {
        /// The reference.
        reference: String,
        /// Why.
        #[source]
        source: PullError,
    },
    /// The artifact cannot be published.
    #[error("cannot publish the artifact")]
    Push(#[from] PushError),
    /// The cluster cannot be read or written.
    #[error("the cluster: {0}")]
    Cluster(#[from] kube::Error),
    /// A pulled component cannot be read back from the store.
    #[error("cannot read a pulled component")]
    Store(#[source] std::io::Error),
}

/// A component compiled for one engine.
#[derive(Debug)]
pub(crate) struct Made {
    /// The artifact: native code, wasmtime's serialised component.
    pub artifact: Vec<u8>,
    /// What it was made for.
    pub claims: Claims,
}

/// Checks `component` (named `name`) as a policy, then compiles it for
/// `baseline`.
///
/// # Errors
/// It is not a policy, or does not compile for the baseline.
pub(crate) fn precompile(
    host: &Host,
    name: &str,
    component: &[u8],
    baseline: Baseline,
) -> Result<Made, PrecompileError> {
    check_bytes(
        host,
        name.to_owned(),
        name,
        component,
        Origin::File(name.into()),
        "{}",
    )?;
    let made = engine::precompile(baseline, component).map_err(|e| PrecompileError::Compile {
        baseline,
        message: format!("{e:#}"),
    })?;
    Ok(Made {
        artifact: made.artifact,
        claims: Claims {
            component: Digest::of(component),
            engine_key: made.engine_key.hex(),
            target: baseline.triple().to_owned(),
            cpu_baseline: baseline.name().to_owned(),
            build: BUILD.to_owned(),
        },
    })
}

/// The tag a precompiled artifact of `claims` is published under beside
/// its component: the engine key and the component's digest, shortened.
fn tag(claims: &Claims) -> String {
    format!(
        "precompiled-{}-{}",
        &claims.engine_key[..16],
        &claims.component.hex()[..16]
    )
}

/// One version precompiled from the cluster.
#[derive(Debug)]
pub(crate) struct FromCluster {
    /// The `VigilPolicy`.
    pub policy: String,
    /// The component's reference.
    pub component: String,
    /// Where its artifact was published.
    pub pushed: Pushed,
}

/// Precompiles for `baseline` every version (`spec.source` and
/// `spec.rollout.previous`) of every `VigilPolicy` in `policies`, and
/// publishes each artifact in its component's repository (pulling the
/// components into `store`); with `pin`,
/// replaces each object's `spec.precompiled` entries for this engine key
/// with the new ones. `access` reaches the registries (plain HTTP where the
/// object says `insecure`, too).
///
/// # Errors
/// A component cannot be pulled, checked, compiled or published, or an
/// object cannot be read or patched; what was done before stays done.
pub(crate) async fn from_cluster(
    host: &Host,
    policies: &Api<VigilPolicy>,
    store: &BlobStore,
    baseline: Baseline,
    access: &Access,
    pin: bool,
) -> Result<Vec<FromCluster>, PrecompileError> {
    let engine_key = engine::engine_key(baseline)
        .map_err(|e| PrecompileError::Compile {
            baseline,
            message: format!("{e:#}"),
        })?
        .hex();
    let mut done = Vec::new();
    for policy in policies.list(&Default::default()).await? {
        let name = policy.name_any();
        let spec = &policy.spec;
        let access = Access {
            insecure: access.insecure || spec.source.oci.insecure,
            ..access.clone()
        };
        let versions: BTreeSet<&str> = std::iter::once(spec.source.oci.reference.as_str())
            .chain(spec.rollout.as_ref().and_then(|r| r.previous.as_deref()))
            .collect();
        let mut entries = Vec::new();
        for reference in versions {
            let failed = |source| PrecompileError::Pull {
                reference: reference.to_owned(),
                source,
            };
            let pinned = Pinned::parse(reference).map_err(failed)?;
            let pulled = pull(&pinned, &access, store, u64::MAX, None, Expect::Component)
                .await
                .map_err(failed)?;
            let component = std::fs::read(&pulled.path).map_err(PrecompileError::Store)?;
            let made = precompile(host, &name, &component, baseline)?;
            let target = format!("{}:{}", pinned.repository(), tag(&made.claims));
            let pushed = push_precompiled(made.artifact, &made.claims, &target, &access).await?;
            entries.push(PrecompiledRef {
                engine_key: engine_key.clone(),
                reference: pushed.pinned.clone(),
            });
            done.push(FromCluster {
                policy: name.clone(),
                component: reference.to_owned(),
                pushed,
            });
        }
        if pin {
            let kept = spec
                .precompiled
                .iter()
                .filter(|p| p.engine_key != engine_key)
                .cloned();
            let precompiled: Vec<PrecompiledRef> = kept.chain(entries).collect();
            // The resourceVersion makes a concurrent edit fail, not vanish.
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": policy.resource_version()},
                "spec": {"precompiled": precompiled},
            });
            policies
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    Ok(done)
}
