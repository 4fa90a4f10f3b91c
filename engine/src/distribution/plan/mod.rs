//! What the pull controller decides, as data on explicit time: which
//! version of each `VigilPolicy` this node wants and how to pull it
//! ([`choose`]), when a version is due for a pull and when again after a
//! failure, and whose credentials are read again then ([`PullPlan`]), how
//! long a pull Secret read is used ([`secrets`]), which precompiled
//! artifact is sought and what its absence means ([`precompiled`]), and
//! which links of the links directory belong to no wanted policy
//! ([`unlinked`]). No I/O and no clock here: the shell
//! (`controllers::pulls`) pulls, links and reports what this says.

pub(crate) mod precompiled;
pub(crate) mod secrets;

use super::crd::{PrecompiledRef, VigilPolicy};
use super::failure::PullReason;
use super::rollout::{self, Node};
use crate::base::policy_name::EXTENSION;
use crate::base::rate::Backoff;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The first retry of a failed pull waits this long, doubling after each
/// further failure up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest wait between two pulls of one failing reference.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The waits between pulls of a failing reference, each up to a fifth
/// longer at random (a registry that comes back is not met by the whole
/// fleet at once).
const BACKOFF: Backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF).jittered(1.0, 1.2);

/// Where a node stands in a policy's rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// It serves `spec.source`.
    Newest,
    /// It serves `spec.rollout.previous`.
    Previous,
    /// It runs `spec.source` in shadow beside what it serves.
    Shadow,
}

impl Stage {
    /// As the fleet view shows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Newest => "newest",
            Self::Previous => "previous",
            Self::Shadow => "shadow",
        }
    }
}

/// A version of a policy this node serves or runs in shadow, and how to
/// pull it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WantedVersion {
    /// The pinned reference.
    pub reference: String,
    /// Where the node stands in the rollout.
    pub stage: Stage,
    /// Plain HTTP to its registry.
    pub insecure: bool,
    /// The Secret holding its registry's credentials.
    pub pull_secret: Option<String>,
    /// The policy's precompiled artifacts, for any engine.
    pub precompiled: Vec<PrecompiledRef>,
    /// In shadow: the most divergence allowed, in percent of comparisons.
    pub max_divergence: Option<u8>,
    /// Its `VigilPolicy` takes it unsigned where no key is configured.
    pub allow_unsigned: bool,
}

/// How a version's signature is held, decided before any request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signing {
    /// A signature under the node's verification key must cover it.
    Verified,
    /// Taken unsigned: the node has no key, and its policy allows it.
    Unsigned,
    /// Refused: the node has no key, and its policy does not allow it.
    Refused,
}

impl Signing {
    /// How `version` is held on a node with (`key`) or without a
    /// verification key: with one, every version must be signed under it
    /// (a `VigilPolicy` cannot waive the DaemonSet's key); without one, only
    /// a policy that says `allowUnsigned` is taken.
    pub(crate) fn of(version: &WantedVersion, key: bool) -> Self {
        match (key, version.allow_unsigned) {
            (true, _) => Self::Verified,
            (false, true) => Self::Unsigned,
            (false, false) => Self::Refused,
        }
    }

    /// As the fleet view shows a linked version: `verified` or `unsigned`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Unsigned => "unsigned",
            Self::Refused => "refused",
        }
    }
}

/// The versions a node wants, by policy name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Chosen {
    /// The version it serves; a policy whose rollout leaves the node
    /// without one is absent.
    pub serving: BTreeMap<String, WantedVersion>,
    /// The version it runs in shadow, where it runs one.
    pub shadow: BTreeMap<String, WantedVersion>,
}

/// The versions each of `policies` has this `node` serve and run in shadow.
pub(crate) fn choose(policies: &[Arc<VigilPolicy>], node: Node<'_>) -> Chosen {
    let mut chosen = Chosen::default();
    for policy in policies {
        let name = policy.name_any();
        let choice = rollout::choose(&name, &policy.spec, node);
        let oci = &policy.spec.source.oci;
        let version = |reference: &str, stage| WantedVersion {
            reference: reference.to_owned(),
            stage,
            insecure: oci.insecure,
            pull_secret: oci.pull_secret_ref.as_ref().map(|r| r.name.clone()),
            precompiled: policy.spec.precompiled.clone(),
            max_divergence: None,
            allow_unsigned: oci.allow_unsigned,
        };
        if let Some(reference) = rollout::shadow(&name, &policy.spec, node, choice) {
            let mut shadow = version(reference, Stage::Shadow);
            shadow.max_divergence = (policy.spec.rollout.as_ref())
                .and_then(|r| r.shadow.as_ref())
                .and_then(|s| s.max_divergence_percent);
            chosen.shadow.insert(name.clone(), shadow);
        }
        if let Some(choice) = choice {
            let stage = if choice.newest {
                Stage::Newest
            } else {
                Stage::Previous
            };
            chosen
                .serving
                .insert(name, version(choice.reference, stage));
        }
    }
    chosen
}

/// How the pulls of one policy's wanted version fare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PullState {
    /// The version.
    pub version: WantedVersion,
    /// Whether it is pulled and linked.
    pub linked: bool,
    /// Consecutive failures of its pulls.
    pub failures: u32,
    /// Why the last pull failed (its reason and the message).
    pub last_error: Option<(PullReason, String)>,
    /// No pull before this.
    pub next: Instant,
    /// Since when it is linked, or failing for the same reason.
    pub since: SystemTime,
}

impl PullState {
    fn new(version: &WantedVersion, now: Instant, wall: SystemTime) -> Self {
        Self {
            version: version.clone(),
            linked: false,
            failures: 0,
            last_error: None,
            next: now,
            since: wall,
        }
    }
}

/// A failure recorded by [`PullPlan::failed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Retry {
    /// How long until the next pull.
    pub wait: Duration,
    /// Whether the reason differs from the last failure's (worth a log line).
    pub new_reason: bool,
    /// The pull Secret to read again before the next pull: the failure
    /// is one a changed password explains.
    pub reread_secret: Option<String>,
}

/// The pulls of one node: a [`PullState`] per wanted policy.
#[derive(Debug, Default)]
pub(crate) struct PullPlan {
    wanted: BTreeMap<String, PullState>,
}

impl PullPlan {
    /// Follows `chosen`: forgets the policies it no longer has, and starts
    /// afresh where the wanted version changed.
    pub(crate) fn follow(
        &mut self,
        chosen: &BTreeMap<String, WantedVersion>,
        now: Instant,
        wall: SystemTime,
    ) {
        self.wanted.retain(|name, _| chosen.contains_key(name));
        for (name, version) in chosen {
            let state = self
                .wanted
                .entry(name.clone())
                .or_insert_with(|| PullState::new(version, now, wall));
            if state.version != *version {
                *state = PullState::new(version, now, wall);
            }
        }
    }

    /// Whether `name`'s version should be pulled at `now`: wanted, not
    /// linked, and no retry pending.
    pub(crate) fn due(&self, name: &str, now: Instant) -> bool {
        self.wanted
            .get(name)
            .is_some_and(|s| !s.linked && s.next <= now)
    }

    /// `name`'s version is pulled and linked.
    pub(crate) fn linked(&mut self, name: &str, now: Instant, wall: SystemTime) {
        if let Some(state) = self.wanted.get_mut(name) {
            *state = PullState::new(&state.version, now, wall);
            state.linked = true;
        }
    }

    /// A pull of `name`'s version failed for `reason`: its next pull waits
    /// the backoff. `None` if `name` is not wanted.
    pub(crate) fn failed(
        &mut self,
        name: &str,
        reason: PullReason,
        message: String,
        now: Instant,
        wall: SystemTime,
    ) -> Option<Retry> {
        let state = self.wanted.get_mut(name)?;
        state.failures += 1;
        let wait = BACKOFF.wait(state.failures);
        state.next = now + wait;
        let new_reason = state.last_error.as_ref().map(|(r, _)| *r) != Some(reason);
        if new_reason {
            state.since = wall;
        }
        state.last_error = Some((reason, message));
        let reread_secret =
            (state.version.pull_secret.clone()).filter(|_| reason.refreshes_credentials());
        Some(Retry {
            wait,
            new_reason,
            reread_secret,
        })
    }

    /// When the next retry is due, if any pull is failing.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.wanted
            .values()
            .filter(|s| !s.linked && s.failures > 0)
            .map(|s| s.next)
            .min()
    }

    /// Each wanted policy's state, by name.
    pub(crate) fn states(&self) -> impl Iterator<Item = (&str, &PullState)> {
        self.wanted.iter().map(|(name, s)| (name.as_str(), s))
    }

    /// The state of `name`'s pulls, if it is wanted.
    pub(crate) fn state(&self, name: &str) -> Option<&PullState> {
        self.wanted.get(name)
    }
}

/// The suffix of the hidden link to a linked component's manifest.
pub(crate) const MANIFEST_SUFFIX: &str = ".manifest";

/// The links of `name` in the links directory: its component, as the
/// loader sees it, and its manifest, hidden from the loader.
pub(crate) fn link_names(name: &str) -> (String, String) {
    (
        format!("{name}{EXTENSION}"),
        format!(".{name}{MANIFEST_SUFFIX}"),
    )
}

/// The policy a link in the links directory belongs to: `NAME.wasm`, or
/// `.NAME.manifest` (its manifest); anything else is its own.
pub(crate) fn link_policy(file: &str) -> &str {
    file.strip_suffix(EXTENSION)
        .or_else(|| file.strip_prefix('.')?.strip_suffix(MANIFEST_SUFFIX))
        .unwrap_or(file)
}

/// Which of `files` (the links directory's entries) belong to no policy in
/// `chosen`, and must go.
pub(crate) fn unlinked<'a, T>(
    files: impl IntoIterator<Item = &'a str>,
    chosen: &BTreeMap<String, T>,
) -> Vec<&'a str> {
    files
        .into_iter()
        .filter(|file| !chosen.contains_key(link_policy(file)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(reference: &str) -> WantedVersion {
        WantedVersion {
            reference: reference.to_owned(),
            stage: Stage::Newest,
            insecure: false,
            pull_secret: None,
            precompiled: Vec::new(),
            max_divergence: None,
            allow_unsigned: false,
        }
    }

    #[test]
    fn a_key_holds_every_version_to_it_and_without_one_only_an_allowed_version_is_unsigned() {
        let signed = version("r@sha256:a");
        let allowed = WantedVersion {
            allow_unsigned: true,
            ..signed.clone()
        };
        assert_eq!(Signing::of(&signed, true), Signing::Verified);
        // The policy cannot waive the DaemonSet's key.
        assert_eq!(Signing::of(&allowed, true), Signing::Verified);
        assert_eq!(Signing::of(&allowed, false), Signing::Unsigned);
        assert_eq!(Signing::of(&signed, false), Signing::Refused);
    }

    #[test]
    fn links_belong_to_their_policy() {
        assert_eq!(link_policy("my-sorter.wasm"), "my-sorter");
        assert_eq!(link_policy(".my-sorter.manifest"), "my-sorter");
        assert_eq!(
            link_policy(".my-sorter.wasm.tmp-7"),
            ".my-sorter.wasm.tmp-7"
        );
        let (component, manifest) = link_names("my-sorter");
        assert_eq!(link_policy(&component), "my-sorter");
        assert_eq!(link_policy(&manifest), "my-sorter");
        let chosen = BTreeMap::from([("a".to_owned(), ())]);
        let files = ["a.wasm", ".a.manifest", "b.wasm", ".b.manifest", "x"];
        assert_eq!(unlinked(files, &chosen), ["b.wasm", ".b.manifest", "x"]);
    }

    #[test]
    fn a_failing_pull_waits_a_growing_backoff_and_a_new_version_starts_afresh() {
        let (t0, wall) = (Instant::now(), SystemTime::UNIX_EPOCH);
        let mut plan = PullPlan::default();
        let mut chosen = BTreeMap::from([("sorter".to_owned(), version("r@sha256:1"))]);
        plan.follow(&chosen, t0, wall);
        assert!(plan.due("sorter", t0));
        assert!(!plan.due("other", t0));
        let first = plan.failed("sorter", PullReason::Unavailable, "down".into(), t0, wall);
        let first = first.unwrap();
        assert!(first.new_reason);
        assert_eq!(first.reread_secret, None, "no pull Secret");
        assert!(first.wait >= FIRST_BACKOFF && first.wait <= FIRST_BACKOFF * 6 / 5);
        assert!(!plan.due("sorter", t0));
        assert_eq!(plan.next_retry(), Some(t0 + first.wait));
        let t1 = t0 + first.wait;
        assert!(plan.due("sorter", t1));
        let later = wall + Duration::from_secs(9);
        let second = plan.failed("sorter", PullReason::Unavailable, "down".into(), t1, later);
        let second = second.unwrap();
        assert!(!second.new_reason);
        assert!(second.wait >= FIRST_BACKOFF * 2);
        assert_eq!(plan.state("sorter").unwrap().since, wall, "same reason");
        // Following the same choice keeps the backoff; a new version resets it.
        plan.follow(&chosen, t1, later);
        assert_eq!(plan.state("sorter").unwrap().failures, 2);
        chosen.insert("sorter".to_owned(), version("r@sha256:2"));
        plan.follow(&chosen, t1, later);
        assert!(plan.due("sorter", t1));
        assert_eq!(plan.next_retry(), None);
        plan.linked("sorter", t1, later);
        assert!(!plan.due("sorter", t1));
        assert!(plan.state("sorter").unwrap().linked);
        plan.follow(&BTreeMap::new(), t1, later);
        assert_eq!(plan.states().count(), 0);
        assert!(
            plan.failed("sorter", PullReason::Store, String::new(), t1, later)
                .is_none()
        );
    }

    #[test]
    fn only_a_refused_sign_in_has_the_pull_secret_read_again() {
        let (t0, wall) = (Instant::now(), SystemTime::UNIX_EPOCH);
        let mut plan = PullPlan::default();
        let mut wanted = version("r@sha256:1");
        wanted.pull_secret = Some("pull".to_owned());
        plan.follow(&BTreeMap::from([("sorter".to_owned(), wanted)]), t0, wall);
        for (reason, reread) in [
            (PullReason::Unavailable, None),
            (PullReason::Unauthorized, Some("pull")),
            (PullReason::NotFound, None),
            (PullReason::Credentials, Some("pull")),
            (PullReason::Signature, None),
        ] {
            let retry = plan.failed("sorter", reason, String::new(), t0, wall);
            let retry = retry.unwrap();
            assert_eq!(retry.reread_secret.as_deref(), reread, "{reason:?}");
        }
    }
}
