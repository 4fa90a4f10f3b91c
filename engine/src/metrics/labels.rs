//! The label sets of the agent's metrics.

use prometheus_client::encoding::EncodeLabelSet;

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
    /// `applied`, `rejected`, `skipped`, `deferred`, `graduated` or `rolled-back`.
    pub result: String,
}

/// Labels of a policy pull.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PullLabels {
    /// `pulled`, `held` (the store had it), or why it failed
    /// ([`crate::distribution::pull::PullError::reason`]).
    pub result: String,
}

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
