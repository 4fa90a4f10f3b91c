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

mod views;

use super::replaced;
use crate::base::build::BUILD;
use crate::base::clock::Clock;
use crate::base::digest::Digest;
use crate::base::fsutil::private_dir;
use crate::base::policy_name::EXTENSION;
use crate::cluster::watches::Progress;
use crate::distribution::crd::VigilPolicy;
use crate::distribution::credentials::{self, DOCKER_CONFIG_KEY};
use crate::distribution::layout::{Claims, oci_digest};
use crate::distribution::plan::{self, PullPlan, WantedVersion};
use crate::distribution::pull::{Expect, Pinned, PullError, Pulled, pull, verified_components};
use crate::distribution::registry::Access;
use crate::distribution::rollout::Node;
use crate::distribution::signature::VerificationKey;
use crate::distribution::store::BlobStore;
use crate::fleet::kinds::PullView;
use crate::metrics::Metrics;
use crate::policy::artifacts::engine::Baseline;
use crate::policy::{CompileMode, Host};
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
pub(crate) use views::ShadowPull;
use views::report;

/// How long a pull Secret read is used before it is read again.
pub(crate) const SECRET_TTL: Duration = Duration::from_secs(600);
/// How many times larger than a component its precompiled artifact may be
/// (a JavaScript component's is about three times its size).
pub(crate) const ARTIFACT_CAP_FACTOR: u64 = 4;

/// Which versions a set of links holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// The versions that serve, linked for the reloader.
    Serving,
    /// The versions in shadow, linked for the shadow controller.
    Shadow,
}

/// A directory of links and the pulls that keep it.
#[derive(Debug)]
struct Links {
    dir: PathBuf,
    plan: PullPlan,
}

impl Links {
    fn open(dir: PathBuf) -> std::io::Result<Self> {
        private_dir(&dir)?;
        Ok(Self {
            dir,
            plan: PullPlan::default(),
        })
    }
}

/// The pulled policies of one node.
#[derive(Debug)]
pub(crate) struct Pulls {
    node: String,
    store: BlobStore,
    serving: Links,
    shadow: Links,
    cap: u64,
    metrics: Arc<Metrics>,
    /// Where pull Secrets are read (vigil's namespace).
    secrets: Option<Api<Secret>>,
    /// The `.dockerconfigjson` of each pull Secret, and when it was read.
    secret_cache: HashMap<String, (Instant, Vec<u8>)>,
    /// Certificates trusted beside the system's roots.
    ca: Option<Vec<u8>>,
    /// Only components signed under this key are linked.
    key: Option<VerificationKey>,
    /// The host precompiled artifacts are imported into, and the key their
    /// signatures must verify under.
    native: Option<(Arc<Host>, Option<VerificationKey>)>,
    clock: Arc<dyn Clock>,
    /// How each pull fares, for the fleet view.
    reports: watch::Sender<BTreeMap<String, PullView>>,
    /// The versions in shadow, for the shadow controller.
    shadows: watch::Sender<BTreeMap<String, ShadowPull>>,
    /// A pass was reported.
    reported: bool,
}

impl Pulls {
    /// The pulls of `node`, kept under `state_dir/oci`; components of more
    /// than `cap` bytes are refused.
    ///
    /// # Errors
    /// The directories cannot be created, or others could write them.
    pub(crate) fn new(
        state_dir: &Path,
        node: &str,
        cap: u64,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Self> {
        let root = state_dir.join("oci");
        let store = BlobStore::open(&root)?;
        Ok(Self {
            node: node.to_owned(),
            store,
            serving: Links::open(root.join("policies"))?,
            shadow: Links::open(root.join("shadow"))?,
            cap,
            metrics,
            secrets: None,
            secret_cache: HashMap::new(),
            ca: None,
            key: None,
            native: None,
            clock,
            reports: watch::Sender::new(BTreeMap::new()),
            shadows: watch::Sender::new(BTreeMap::new()),
            reported: false,
        })
    }

    /// Links only components a cosign signature under `key` covers, and
    /// unlinks at start what an earlier run linked without one.
    #[must_use]
    pub(crate) fn with_key(mut self, key: VerificationKey) -> Self {
        self.key = Some(key);
        self.unlink_unverified();
        self
    }

    /// With a key, removes the links to components no kept signature under
    /// it covers (linked before the key was configured).
    fn unlink_unverified(&self) {
        let Some(key) = &self.key else { return };
        let verified = verified_components(&self.store, key);
        let entries = [&self.serving.dir, &self.shadow.dir]
            .into_iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flat_map(|entries| entries.flatten());
        for entry in entries {
            if !entry.file_name().to_string_lossy().ends_with(EXTENSION) {
                continue;
            }
            if !blob_of(&entry.path()).is_some_and(|c| verified.contains(&c)) {
                tracing::warn!(link = %entry.path().display(), "unlinking a pulled policy no signature under the verification key covers");
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Takes precompiled artifacts for `host`'s engine when signed under
    /// `native_key` (never without one), as the host's compile mode says.
    #[must_use]
    pub(crate) fn with_host(
        mut self,
        host: Arc<Host>,
        native_key: Option<VerificationKey>,
    ) -> Self {
        self.native = Some((host, native_key));
        self
    }

    /// How each pull fares, by policy, after each pass.
    pub(crate) fn reports(&self) -> watch::Receiver<BTreeMap<String, PullView>> {
        self.reports.subscribe()
    }

    /// Reads the `pullSecretRef` Secrets with `secrets`.
    #[must_use]
    pub(crate) fn with_secrets(mut self, secrets: Api<Secret>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Trusts the certificates `pem` beside the system's roots.
    #[must_use]
    pub(crate) fn with_ca(mut self, pem: Vec<u8>) -> Self {
        self.ca = Some(pem);
        self
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
            changed |= self.unlink_others(lane, chosen);
            for (name, source) in chosen {
                changed |= self.sync(lane, name, source, &mut keep).await;
            }
        }
        if changed {
            keep.extend(self.linked());
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
        let reports: BTreeMap<String, PullView> = (self.serving.plan.states())
            .filter_map(|(name, state)| Some((name.to_owned(), report(state, now, wall)?)))
            .collect();
        let shadows: BTreeMap<String, ShadowPull> = (self.shadow.plan.states())
            .map(|(name, state)| {
                let shadow = ShadowPull {
                    component: state
                        .linked
                        .then(|| self.shadow.dir.join(plan::link_names(name).0)),
                    reference: state.version.reference.clone(),
                    max_divergence: state.version.max_divergence,
                    pull: report(state, now, wall),
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
                self.failed(lane, name, &error);
                return false;
            }
        };
        keep.insert(pinned.manifest());
        if !self.lane(lane).plan.due(name, Instant::now()) {
            return false;
        }
        let access = match self.access(source, pinned.registry()).await {
            Ok(access) => access,
            Err(error) => {
                self.failed(lane, name, &error);
                return false;
            }
        };
        let key = self.key.as_ref();
        match pull(
            &pinned,
            &access,
            &self.store,
            self.cap,
            key,
            Expect::Component,
        )
        .await
        {
            Ok(pulled) => {
                keep.insert(pulled.layer);
                let (result, bytes) = if pulled.fetched {
                    ("pulled", pulled.size)
                } else {
                    ("held", 0)
                };
                self.metrics.policy_pulled(result, bytes);
                if let Err(error) = self.precompiled(source, pulled.layer, keep).await {
                    self.metrics.policy_precompiled(error.reason());
                    self.retry(
                        lane,
                        name,
                        error.reason(),
                        format!("its precompiled artifact: {error}"),
                    );
                    return false;
                }
                if let Err(error) = self.link(lane, name, &pulled) {
                    tracing::error!(policy = name, %error, "cannot link a pulled policy; keeping what serves");
                    return false;
                }
                let stage = source.stage.name();
                tracing::info!(policy = name, reference, stage, component = %oci_digest(&pulled.layer), bytes = pulled.size, fetched = pulled.fetched, "policy linked");
                let (now, wall) = (Instant::now(), self.clock.now());
                self.lane(lane).plan.linked(name, now, wall);
                true
            }
            Err(error) => {
                self.failed(lane, name, &error);
                false
            }
        }
    }

    /// Brings the precompiled artifact of `component` for this node's
    /// engine into the host's cache, if the host takes them and holds none:
    /// the first of `source.precompiled` for the engine's key that is an
    /// artifact of `component`, verified under the native-code key before
    /// its layer is read. Adds the blobs it needs to `keep`.
    ///
    /// # Errors
    /// An artifact for this engine is refused (pull, signature or claims),
    /// cannot be imported, or — when the host compiles nothing — is missing.
    async fn precompiled(
        &mut self,
        source: &WantedVersion,
        component: Digest,
        keep: &mut HashSet<Digest>,
    ) -> Result<(), PullError> {
        let Some((host, native_key)) = self.native.clone() else {
            return Ok(());
        };
        let mode = host.mode();
        if !mode.takes_precompiled() {
            return Ok(());
        }
        if host.holds_artifact(&component) {
            self.metrics.policy_precompiled("held");
            return Ok(());
        }
        let engine_key = host.engine_key().hex();
        let missing = |why: String| match mode {
            CompileMode::Never => Err(PullError::NotPrecompiled(why)),
            _ => Ok(()),
        };
        let Some(native_key) = native_key else {
            self.metrics.policy_precompiled("none");
            return missing("no native-code key is configured (--native-code-key)".into());
        };
        let baseline = Baseline::host();
        let claims = Claims {
            component,
            engine_key: engine_key.clone(),
            target: baseline.triple().to_owned(),
            cpu_baseline: baseline.name().to_owned(),
            build: BUILD.to_owned(),
        };
        let cap = self.cap.saturating_mul(ARTIFACT_CAP_FACTOR);
        let ours = source
            .precompiled
            .iter()
            .filter(|p| p.engine_key == engine_key);
        for entry in ours {
            let pinned = Pinned::parse(&entry.reference)?;
            keep.insert(pinned.manifest());
            let access = self.access(source, pinned.registry()).await?;
            let expect = Expect::Precompiled(&claims);
            let artifact = match pull(
                &pinned,
                &access,
                &self.store,
                cap,
                Some(&native_key),
                expect,
            )
            .await
            {
                Ok(artifact) => artifact,
                Err(PullError::OtherComponent(_)) => continue,
                Err(error) => return Err(error),
            };
            keep.insert(artifact.layer);
            host.import_precompiled(&component, &artifact.path)
                .map_err(PullError::Store)?;
            self.metrics.policy_precompiled("imported");
            tracing::info!(component = %oci_digest(&component), artifact = entry.reference, %engine_key, "precompiled artifact verified and imported");
            return Ok(());
        }
        self.metrics.policy_precompiled("none");
        missing(format!(
            "spec.precompiled has no artifact of component {} for engine key {engine_key}",
            oci_digest(&component)
        ))
    }

    /// How to reach `registry` for `source`, with the credentials of its
    /// pull Secret: read again once [`SECRET_TTL`] old or after a sign-in
    /// failed (a rotated password is picked up), so a fleet retrying an
    /// unreachable registry does not read Secrets at every retry.
    async fn access(
        &mut self,
        source: &WantedVersion,
        registry: &str,
    ) -> Result<Access, PullError> {
        let basic =
            match &source.pull_secret {
                None => None,
                Some(name) => {
                    let config = self.docker_config(name).await?;
                    Some(credentials::basic(&config, registry).map_err(|e| {
                        PullError::Credentials(format!("the pull Secret {name}: {e}"))
                    })?)
                }
            };
        Ok(Access {
            insecure: source.insecure,
            basic,
            ca: self.ca.clone(),
        })
    }

    /// The `.dockerconfigjson` of the Secret `name`, cached.
    async fn docker_config(&mut self, name: &str) -> Result<Vec<u8>, PullError> {
        if let Some((read, config)) = self.secret_cache.get(name)
            && read.elapsed() < SECRET_TTL
        {
            return Ok(config.clone());
        }
        let Some(secrets) = &self.secrets else {
            return Err(PullError::Credentials(format!(
                "the pull Secret {name} cannot be read: no namespace to read it in"
            )));
        };
        let secret = secrets.get(name).await.map_err(|e| {
            PullError::Credentials(format!("cannot read the pull Secret {name}: {e}"))
        })?;
        let config = secret
            .data
            .and_then(|mut data| data.remove(DOCKER_CONFIG_KEY))
            .ok_or_else(|| {
                PullError::Credentials(format!("the pull Secret {name} has no {DOCKER_CONFIG_KEY}"))
            })?
            .0;
        self.secret_cache
            .insert(name.to_owned(), (Instant::now(), config.clone()));
        Ok(config)
    }

    /// Counts a failed pull of `name`'s reference, and retries it later.
    fn failed(&mut self, lane: Lane, name: &str, error: &PullError) {
        self.metrics.policy_pulled(error.reason(), 0);
        self.retry(lane, name, error.reason(), error.to_string());
    }

    /// Logs why `name`'s version is not linked (each reason once in a
    /// row), and sets its next retry.
    fn retry(&mut self, lane: Lane, name: &str, reason: &'static str, message: String) {
        if matches!(reason, "unauthorized" | "credentials") {
            // Read the credentials again at the next try: they may have changed.
            let secret =
                (self.lane(lane).plan.state(name)).and_then(|s| s.version.pull_secret.clone());
            if let Some(secret) = secret {
                self.secret_cache.remove(&secret);
            }
        }
        let (now, wall) = (Instant::now(), self.clock.now());
        let plan = &mut self.lane(lane).plan;
        let Some(retry) = plan.failed(name, reason, message.clone(), now, wall) else {
            return;
        };
        if retry.new_reason {
            let reference = plan.state(name).map(|s| s.version.reference.clone());
            tracing::warn!(policy = name, reference, error = message, retry_in = ?retry.wait, "cannot take a policy version; keeping what serves");
        }
    }

    /// Points `links/NAME.wasm` at the pulled component, and
    /// `links/.NAME.manifest` at its manifest, each in one rename.
    fn link(&mut self, lane: Lane, name: &str, pulled: &Pulled) -> std::io::Result<()> {
        // The manifest's link first (hidden from the loader): while the
        // component's link stands, the manifest it came from is kept too, so
        // its signatures can be checked again after a restart.
        let (component, manifest) = plan::link_names(name);
        let manifest_path = self.store.path(&pulled.manifest);
        let dir = &self.lane(lane).dir;
        replace_link(dir, &manifest, &manifest_path)?;
        replace_link(dir, &component, &pulled.path)
    }

    /// Removes the links of policies not in `chosen`; answers whether it
    /// removed any.
    fn unlink_others<T>(&mut self, lane: Lane, chosen: &BTreeMap<String, T>) -> bool {
        let dir = self.lane(lane).dir.clone();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return false;
        };
        let files: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut removed = false;
        for file in plan::unlinked(files.iter().map(String::as_str), chosen) {
            if file.ends_with(EXTENSION) {
                let policy = plan::link_policy(file);
                match lane {
                    Lane::Serving => tracing::info!(
                        policy,
                        "no VigilPolicy gives this node a version; unlinking"
                    ),
                    Lane::Shadow => tracing::info!(
                        policy,
                        "no version runs in shadow on this node any more; unlinking"
                    ),
                }
            }
            removed |= std::fs::remove_file(dir.join(file)).is_ok();
        }
        removed
    }

    /// The blobs the links point at.
    fn linked(&self) -> Vec<Digest> {
        [&self.serving.dir, &self.shadow.dir]
            .into_iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flat_map(|entries| entries.flatten())
            .filter_map(|e| blob_of(&e.path()))
            .collect()
    }
}

/// The blob a link points at.
fn blob_of(link: &Path) -> Option<Digest> {
    let target = std::fs::read_link(link).ok()?;
    Digest::from_hex(&target.file_name()?.to_string_lossy())
}

/// Points `dir/name` at `target` through a temporary link renamed over it.
fn replace_link(dir: &Path, name: &str, target: &Path) -> std::io::Result<()> {
    let link = dir.join(name);
    if std::fs::read_link(&link).is_ok_and(|current| current == target) {
        return Ok(());
    }
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, &link)
}
