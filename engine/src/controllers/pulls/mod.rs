//! The pull controller, the shell around [`crate::distribution::plan`]:
//! follows the `VigilPolicy` objects, asks the plan which pinned reference
//! this node serves and whether a pull is due, pulls it into the store under
//! the state directory and links it, as `NAME.wasm`, into the directory the
//! reloader serves over the policies directory. From there the loader takes
//! over, as for any file: canary, trial, last-known-good, hot swap.
//!
//! A version the rollout has this node run in shadow (`rollout.shadow`)
//! is pulled and checked the same way into a directory of its own, which
//! only the shadow controller (`controllers::shadow`) loads: it never
//! serves.
//!
//! Start-up never waits for a registry: the links of the last run serve at
//! once, and a pull the store can answer makes no request. A failed pull
//! changes nothing that serves; it is counted, logged once per reason, and
//! retried after the plan's backoff. A policy whose object is gone, or whose
//! rollout leaves this node without a version, loses its link (the policies
//! directory's file or the built-in serves again). Blobs no link or wanted
//! reference needs are removed.
//!
//! With a verification key (`--verification-key`), a version is linked only
//! if a cosign signature under that key covers its digest; a refused one
//! leaves the previous version serving, and links an earlier run made
//! without a key are removed before the loader sees them.
//!
//! Before a version is linked, its precompiled artifact for this node's
//! engine (`spec.precompiled`, matched by engine key and by the component
//! its claims name) is pulled, verified under the native-code key
//! (`--native-code-key`) and imported into the host's artifact cache, so
//! the loader maps it and compiles nothing. A refused artifact keeps the
//! version from being linked (the previous one serves; the status and
//! `vigil_policy_precompiled_total` say why). Without one, the version is
//! compiled on the node (`--compile=fallback`), or not linked at all
//! (`--compile=never`).
//!
//! Every decision is the plan's; this shell carries them out: `links`
//! keeps the link directories, `access` reads pull Secrets, `artifacts`
//! imports precompiled artifacts, `views` tells the others.

mod access;
mod artifacts;
mod links;
mod views;

use super::replaced;
use crate::base::clock::Clock;
use crate::base::digest::Digest;
use crate::cluster::watches::Progress;
use crate::distribution::crd::VigilPolicy;
use crate::distribution::layout::oci_digest;
use crate::distribution::plan::{self, Signing, WantedVersion};
use crate::distribution::pull::{Expect, Pinned, PullError, pull, verified_components};
use crate::distribution::rollout::Node;
use crate::distribution::signature::{SignatureError, VerificationKey};
use crate::distribution::store::BlobStore;
use crate::fleet::kinds::PullView;
use crate::metrics::{Metrics, PrecompiledResult, PullResult};
use crate::policy::Host;
use access::Registries;
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use links::{Lane, Links};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
pub(crate) use views::ShadowPull;
use views::report;

/// What the pull controller is told at start-up (the agent's flags).
#[derive(Debug)]
pub(crate) struct PullOptions {
    /// Components of more than this many bytes are refused.
    pub cap: u64,
    /// Where pull Secrets are read (vigil's namespace).
    pub secrets: Option<Api<Secret>>,
    /// Certificates trusted beside the system's roots.
    pub ca: Option<Vec<u8>>,
    /// Only components a cosign signature under this key covers are
    /// linked; links an earlier run made without it are removed at start.
    pub key: Option<VerificationKey>,
    /// The host precompiled artifacts are imported into, and the key their
    /// signatures must verify under (none: no artifact is taken).
    pub native: Option<(Arc<Host>, Option<VerificationKey>)>,
}

/// The pulled policies of one node.
#[derive(Debug)]
pub(crate) struct Pulls {
    node: String,
    store: BlobStore,
    serving: Links,
    shadow: Links,
    options: PullOptions,
    registries: Registries,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    /// How each pull fares, for the fleet view.
    reports: watch::Sender<BTreeMap<String, PullView>>,
    /// The versions in shadow, for the shadow controller.
    shadows: watch::Sender<BTreeMap<String, ShadowPull>>,
    /// A pass was reported.
    reported: bool,
}

impl Pulls {
    /// The pulls of `node`, kept under `state_dir/oci`.
    ///
    /// # Errors
    /// The directories cannot be created, or others could write them.
    pub(crate) fn new(
        state_dir: &Path,
        node: &str,
        options: PullOptions,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Self> {
        let root = state_dir.join("oci");
        let store = BlobStore::open(&root)?;
        let (serving, shadow) = (
            Links::open(root.join("policies"))?,
            Links::open(root.join("shadow"))?,
        );
        if let Some(key) = &options.key {
            let verified = verified_components(&store, key);
            serving.unlink_unverified(&verified);
            shadow.unlink_unverified(&verified);
        }
        Ok(Self {
            node: node.to_owned(),
            store,
            serving,
            shadow,
            options,
            registries: Registries::default(),
            metrics,
            clock,
            reports: watch::Sender::new(BTreeMap::new()),
            shadows: watch::Sender::new(BTreeMap::new()),
            reported: false,
        })
    }

    /// How each pull fares, by policy, after each pass.
    pub(crate) fn reports(&self) -> watch::Receiver<BTreeMap<String, PullView>> {
        self.reports.subscribe()
    }

    /// The directory of links the reloader serves.
    pub(crate) fn links(&self) -> &Path {
        &self.serving.dir
    }

    /// The versions in shadow, by policy, after each pass.
    pub(crate) fn shadows(&self) -> watch::Receiver<BTreeMap<String, ShadowPull>> {
        self.shadows.subscribe()
    }

    fn lane(&mut self, lane: Lane) -> &mut Links {
        match lane {
            Lane::Serving => &mut self.serving,
            Lane::Shadow => &mut self.shadow,
        }
    }

    /// Follows `policies` (and this node's labels, for canaries) until
    /// `stop`: a pass once the objects are listed, then after each change
    /// of them or of the labels, and when a retry is due.
    pub(crate) async fn run(
        mut self,
        policies: Store<VigilPolicy>,
        mut changes: watch::Receiver<Progress>,
        node: Store<KubeNode>,
        mut node_changes: watch::Receiver<Progress>,
        stop: CancellationToken,
    ) {
        tokio::select! {
            () = stop.cancelled() => return,
            ready = policies.wait_until_ready() => if ready.is_err() { return },
        }
        let labels = || {
            node.state()
                .first()
                .map(|n| n.labels().clone())
                .unwrap_or_default()
        };
        let mut seen = labels();
        let mut next = self.pass(&policies.state(), &seen).await;
        loop {
            let retry = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
                changed = node_changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // The kubelet writes its Node often; only labels matter here.
                    if labels() == seen {
                        continue;
                    }
                }
                () = retry => {}
            }
            seen = labels();
            next = self.pass(&policies.state(), &seen).await;
        }
    }

    /// Brings the links in step with `policies` once; answers when the
    /// next retry is due, if any.
    pub(crate) async fn pass(
        &mut self,
        policies: &[Arc<VigilPolicy>],
        labels: &BTreeMap<String, String>,
    ) -> Option<Instant> {
        let node = Node {
            name: &self.node,
            labels,
        };
        let chosen = plan::choose(policies, node);
        let mut changed = false;
        let mut keep = HashSet::new();
        for (lane, chosen) in [
            (Lane::Serving, &chosen.serving),
            (Lane::Shadow, &chosen.shadow),
        ] {
            let (now, wall) = (Instant::now(), self.clock.now());
            self.lane(lane).plan.follow(chosen, now, wall);
            changed |= self.lane(lane).unlink_others(lane, chosen);
            for (name, source) in chosen {
                changed |= self.sync(lane, name, source, &mut keep).await;
            }
        }
        if changed {
            keep.extend(self.serving.blobs().chain(self.shadow.blobs()));
            match self.store.retain(&keep) {
                Ok(removed) if removed.files > 0 => {
                    tracing::info!(
                        files = removed.files,
                        bytes = removed.bytes,
                        "removed pulled blobs no policy needs"
                    );
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "cannot collect the pulled blobs"),
            }
        }
        self.report();
        [&self.serving, &self.shadow]
            .into_iter()
            .filter_map(|lane| lane.plan.next_retry())
            .min()
    }

    /// Tells the fleet view how the pulls fare, and the shadow controller
    /// which versions are in shadow, if that changed.
    fn report(&mut self) {
        let (now, wall) = (Instant::now(), self.clock.now());
        let key = self.options.key.is_some();
        let reports: BTreeMap<String, PullView> = (self.serving.plan.states())
            .filter_map(|(name, state)| Some((name.to_owned(), report(state, key, now, wall)?)))
            .collect();
        let shadows: BTreeMap<String, ShadowPull> = (self.shadow.plan.states())
            .map(|(name, state)| {
                let shadow = ShadowPull {
                    component: state
                        .linked
                        .then(|| self.shadow.dir.join(plan::link_names(name).0)),
                    reference: state.version.reference.clone(),
                    max_divergence: state.version.max_divergence,
                    pull: report(state, key, now, wall),
                };
                (name.to_owned(), shadow)
            })
            .collect();
        // The first pass is told even if it found nothing: the fleet view
        // waits for it before it takes a policy for gone.
        let first = !std::mem::replace(&mut self.reported, true);
        (self.reports).send_if_modified(|shown| replaced(shown, reports) || first);
        (self.shadows).send_if_modified(|shown| replaced(shown, shadows));
    }

    /// Pulls `reference` for `name` and links it, unless it is linked
    /// already or a retry is not due; adds the blobs it needs to `keep`.
    /// Answers whether the links changed.
    async fn sync(
        &mut self,
        lane: Lane,
        name: &str,
        source: &WantedVersion,
        keep: &mut HashSet<Digest>,
    ) -> bool {
        let reference = source.reference.as_str();
        let pinned = match Pinned::parse(reference) {
            Ok(pinned) => pinned,
            Err(error) => {
                self.metrics
                    .policy_pulled(PullResult::Failed(error.reason()), 0);
                self.failed(lane, name, &error, error.to_string());
                return false;
            }
        };
        keep.insert(pinned.manifest());
        if !self.lane(lane).plan.due(name, Instant::now()) {
            return false;
        }
        let key = match Signing::of(source, self.options.key.is_some()) {
            Signing::Verified => self.options.key.as_ref(),
            Signing::Unsigned => None,
            Signing::Refused => return self.refuse_unsigned(lane, name),
        };
        let pulled = match self
            .registries
            .to(&self.options, source, pinned.registry())
            .await
        {
            Ok(access) => {
                let cap = self.options.cap;
                pull(&pinned, &access, &self.store, cap, key, Expect::Component).await
            }
            Err(error) => Err(error),
        };
        let pulled = match pulled {
            Ok(pulled) => pulled,
            Err(error) => {
                self.metrics
                    .policy_pulled(PullResult::Failed(error.reason()), 0);
                self.failed(lane, name, &error, error.to_string());
                return false;
            }
        };
        keep.insert(pulled.layer);
        let (result, bytes) = if pulled.fetched {
            (PullResult::Pulled, pulled.size)
        } else {
            (PullResult::Held, 0)
        };
        self.metrics.policy_pulled(result, bytes);
        if let Err(error) = self.precompiled(source, pulled.layer, keep).await {
            (self.metrics).policy_precompiled(PrecompiledResult::Refused(error.reason()));
            let why = format!("its precompiled artifact: {error}");
            self.failed(lane, name, &error, why);
            return false;
        }
        let links = match lane {
            Lane::Serving => &self.serving,
            Lane::Shadow => &self.shadow,
        };
        if let Err(error) = links.link(name, &pulled, &self.store) {
            tracing::error!(policy = name, %error, "cannot link a pulled policy; keeping what serves");
            return false;
        }
        let stage = source.stage.name();
        tracing::info!(policy = name, reference, stage, component = %oci_digest(&pulled.layer), bytes = pulled.size, fetched = pulled.fetched, "policy linked");
        let (now, wall) = (Instant::now(), self.clock.now());
        self.lane(lane).plan.linked(name, now, wall);
        true
    }

    /// Refuses `name`'s version, unsigned on a node without a key and not
    /// allowed by its policy: one linked before (by an earlier run, or while
    /// its policy allowed it) stops serving too. Answers whether the links
    /// changed.
    fn refuse_unsigned(&mut self, lane: Lane, name: &str) -> bool {
        let unlinked = self.lane(lane).unlink(name);
        let error = PullError::Signature(SignatureError::NoKey);
        self.metrics
            .policy_pulled(PullResult::Failed(error.reason()), 0);
        self.failed(lane, name, &error, error.to_string());
        unlinked
    }

    /// Logs why `name`'s version is not linked (each reason once in a
    /// row) and has the plan set its next retry.
    fn failed(&mut self, lane: Lane, name: &str, error: &PullError, message: String) {
        let (now, wall) = (Instant::now(), self.clock.now());
        let plan = &mut self.lane(lane).plan;
        let Some(retry) = plan.failed(name, error.reason(), message.clone(), now, wall) else {
            return;
        };
        if retry.new_reason {
            let reference = plan.state(name).map(|s| s.version.reference.clone());
            tracing::warn!(policy = name, reference, error = message, retry_in = ?retry.wait, "cannot take a policy version; keeping what serves");
        }
        if let Some(secret) = retry.reread_secret {
            self.registries.forget(&secret);
        }
    }
}
