//! The precompiled artifact of a version being linked: sought as the
//! plan's [`precompiled::search`] says, pulled and verified under the
//! native-code key, and imported into the host's artifact cache.

use super::Pulls;
use crate::base::build::BUILD;
use crate::base::digest::Digest;
use crate::distribution::layout::{Claims, oci_digest};
use crate::distribution::plan::WantedVersion;
use crate::distribution::plan::precompiled::{self, Search};
use crate::distribution::pull::{Expect, Pinned, PullError, pull};
use crate::metrics::PrecompiledResult;
use crate::policy::artifacts::engine::Baseline;
use std::collections::HashSet;

impl Pulls {
    /// Brings the precompiled artifact of `component` for this node's
    /// engine into the host's cache, as [`precompiled::search`] says: the
    /// first of `source.precompiled` for the engine's key that is an
    /// artifact of `component`, verified under the native-code key before
    /// its layer is read. Adds the blobs it needs to `keep`.
    ///
    /// # Errors
    /// An artifact for this engine is refused (pull, signature or claims),
    /// cannot be imported, or — when the host compiles nothing — is missing.
    pub(super) async fn precompiled(
        &mut self,
        source: &WantedVersion,
        component: Digest,
        keep: &mut HashSet<Digest>,
    ) -> Result<(), PullError> {
        let Some((host, native_key)) = self.options.native.clone() else {
            return Ok(());
        };
        let (mode, engine_key) = (host.mode(), host.engine_key().hex());
        let held = host.holds_artifact(&component);
        let search = precompiled::search(
            mode,
            held,
            native_key.is_some(),
            &source.precompiled,
            &engine_key,
        );
        let (tried, native_key) = match (search, native_key) {
            (Search::NotTaken, _) => return Ok(()),
            (Search::Held, _) => {
                self.metrics.policy_precompiled(PrecompiledResult::Held);
                return Ok(());
            }
            (Search::Try(tried), Some(native_key)) => (tried, native_key),
            (Search::NoKey | Search::Try(_), _) => {
                self.metrics.policy_precompiled(PrecompiledResult::None);
                let why = "no native-code key is configured (--native-code-key)";
                return precompiled::without_artifact(mode, why.into());
            }
        };
        let baseline = Baseline::host();
        let claims = Claims {
            component,
            engine_key: engine_key.clone(),
            target: baseline.triple().to_owned(),
            cpu_baseline: baseline.name().to_owned(),
            build: BUILD.to_owned(),
        };
        let cap = precompiled::artifact_cap(self.options.cap);
        for entry in tried {
            let pinned = Pinned::parse(&entry.reference)?;
            keep.insert(pinned.manifest());
            let access = self
                .registries
                .to(&self.options, source, pinned.registry())
                .await?;
            let expect = Expect::Precompiled(&claims);
            let key = Some(&native_key);
            let artifact = match pull(&pinned, &access, &self.store, cap, key, expect).await {
                Ok(artifact) => artifact,
                Err(PullError::OtherComponent(_)) => continue,
                Err(error) => return Err(error),
            };
            keep.insert(artifact.layer);
            host.import_precompiled(&component, &artifact.path)
                .map_err(PullError::Store)?;
            self.metrics.policy_precompiled(PrecompiledResult::Imported);
            tracing::info!(component = %oci_digest(&component), artifact = entry.reference, %engine_key, "precompiled artifact verified and imported");
            return Ok(());
        }
        self.metrics.policy_precompiled(PrecompiledResult::None);
        precompiled::without_artifact(
            mode,
            format!(
                "spec.precompiled has no artifact of component {} for engine key {engine_key}",
                oci_digest(&component)
            ),
        )
    }
}
