//! The label sets of the agent's metrics, and the outcomes they name as
//! enums (a label value is never a string literal at its call site).

use crate::config::assignment::Update;
use crate::distribution::failure::PullReason;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use std::fmt::Write as _;

/// Labels of an eviction.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// The strategy that chose the victim.
    pub strategy: String,
    /// `hard`, `force` or `soft`.
    pub urgency: String,
    /// `accepted`, `refused`, `not-evictable`, `throttled`, `failed`,
    /// `gone` or `dry-run`.
    pub result: String,
}

/// Labels naming one thing.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The name (a strategy, condition, policy or watch).
    pub name: String,
}

/// Labels of a threshold.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThresholdLabels {
    /// The strategy that reported it (its scopes met at one level add up).
    pub strategy: String,
    /// `soft`, `hard`, or `report` (met, reported, evicting nobody).
    pub level: String,
}

/// Labels of a threshold waiting for reclaim in progress.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WaitingLabels {
    /// The strategy that reported the threshold.
    pub strategy: String,
    /// Whose reclaim it waits for: `own`, `shared`, `terminating` or `kubelet`.
    pub reclaim: String,
}

/// Labels of a threshold out of its place beside the kubelet.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MisplacedLabels {
    /// The strategy that reported it.
    pub strategy: String,
    /// The signal it watches.
    pub signal: String,
    /// `BehindKubelet` or `BeforeImageGC`.
    pub place: String,
}

/// Labels of a victim held back by a cap on volume.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CappedLabels {
    /// The strategy that chose it.
    pub strategy: String,
    /// `node` or `namespace`.
    pub cap: String,
}

/// Labels of what one version of a policy did.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The policy, by name.
    pub name: String,
    /// The version (its component digest's first 12 digits), so a canary
    /// and the version it replaces compare.
    pub version: String,
}

/// Labels of a policy's state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyStateLabels {
    /// The policy, by name.
    pub policy: String,
    /// The version serving (its component digest's first 12 digits).
    pub version: String,
    /// `trial`, `active` or `rolled-back`.
    pub state: String,
}

/// Labels of an API request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// The HTTP method.
    pub verb: String,
    /// The status code, or `error` when no answer came.
    pub code: String,
}

/// Labels of a config update.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigUpdateLabels {
    /// What changed.
    pub result: ConfigChange,
}

/// How the node's config changed.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum ConfigChange {
    /// `applied`: a new config runs.
    Applied,
    /// `rejected`: refused; the previous config keeps running.
    Rejected,
    /// `skipped`: rejected before and unchanged since.
    Skipped,
    /// `deferred`: could not be computed now; tried again.
    Deferred,
    /// `graduated`: its trial ended well; it is the last-known-good.
    Graduated,
    /// `rolled-back`: its trial failed; the last-known-good runs again.
    RolledBack,
    /// `changed`: its status changed otherwise (e.g. a retry's outcome).
    Changed,
}

impl ConfigChange {
    /// What an assignment from the cluster did, if anything.
    pub(crate) fn of(update: Update) -> Option<Self> {
        match update {
            Update::Unchanged => None,
            Update::Applied => Some(Self::Applied),
            Update::Rejected => Some(Self::Rejected),
            Update::Skipped => Some(Self::Skipped),
            Update::Deferred => Some(Self::Deferred),
        }
    }

    /// As the metric's label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Rejected => "rejected",
            Self::Skipped => "skipped",
            Self::Deferred => "deferred",
            Self::Graduated => "graduated",
            Self::RolledBack => "rolled-back",
            Self::Changed => "changed",
        }
    }
}

/// Labels of a policy pull.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PullLabels {
    /// What the pull came to.
    pub result: PullResult,
}

/// What a policy pull came to.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum PullResult {
    /// `pulled`: fetched from the registry.
    Pulled,
    /// `held`: the store had it.
    Held,
    /// Why it failed (`not-found`, `unauthorized`, `signature`, …).
    Failed(PullReason),
}

impl PullResult {
    /// As the metric's label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pulled => "pulled",
            Self::Held => "held",
            Self::Failed(reason) => reason.as_str(),
        }
    }
}

/// Labels of a precompiled artifact sought.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrecompiledLabels {
    /// What the search came to.
    pub result: PrecompiledResult,
}

/// What the search for a version's precompiled artifact came to.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum PrecompiledResult {
    /// `imported`: verified and imported into the artifact cache.
    Imported,
    /// `held`: the cache had it.
    Held,
    /// `none`: no artifact for this node's engine (or no key to verify one).
    None,
    /// Why it was refused (`incompatible`, `signature`, `not-precompiled`, …).
    Refused(PullReason),
}

impl PrecompiledResult {
    /// As the metric's label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Imported => "imported",
            Self::Held => "held",
            Self::None => "none",
            Self::Refused(reason) => reason.as_str(),
        }
    }
}

/// Labels of a scraper's token reviewed.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenReviewLabels {
    /// What the review came to.
    pub result: TokenReviewResult,
}

/// What the API server said of a scraper's token.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum TokenReviewResult {
    /// `allowed`: its user may read `/metrics`.
    Allowed,
    /// `unauthenticated`: not a valid token.
    Unauthenticated,
    /// `forbidden`: its user may not.
    Forbidden,
    /// `unavailable`: the API server did not answer.
    Unavailable,
}

impl TokenReviewResult {
    /// As the metric's label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::Unavailable => "unavailable",
        }
    }
}

/// Encodes an outcome enum by its `as_str`.
macro_rules! label_value_by_name {
    ($($outcome:ty),*) => {$(
        impl EncodeLabelValue for $outcome {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    )*};
}
label_value_by_name!(
    ConfigChange,
    PullResult,
    PrecompiledResult,
    TokenReviewResult
);

/// Labels of a comparison of a version in shadow with the serving one.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabels {
    /// The policy, by name.
    pub policy: String,
    /// The version in shadow (its digest's first 12 digits).
    pub version: String,
    /// `agree`, `differ` or `fault`.
    pub result: String,
}

/// Labels of a checkpoint load.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckpointLabels {
    /// `missing`, `fresh`, `expired` or `corrupt`.
    pub status: String,
}

/// Labels of the config state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigStateLabels {
    /// The `VigilConfigOK` condition's reason.
    pub reason: String,
}

/// Labels of the build.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// vigil's version.
    pub version: String,
    /// The source revision it was built from (`VIGIL_BUILD_ID` at build
    /// time, else the git commit, else `source`).
    pub commit: String,
    /// The policy contract's version.
    pub contract: String,
}
