//! The status custom resources (`vigil.dev/v1alpha1`, cluster-scoped),
//! written by each agent about its own node and owned by that Node, so they
//! are garbage-collected with it:
//!
//! - [`VigilNodeStatus`], named after the node: the config state, the
//!   pressure conditions that hold, the last evictions and their counts;
//! - [`VigilPolicyStatus`], one per node and policy, named `NODE.POLICY`
//!   (labels [`NODE_LABEL`], [`POLICY_LABEL`]): the version serving, its
//!   state, its faults.
//!
//! Their `status` is an ordinary field (no status subresource): the agent is
//! the only writer, and one write carries a whole change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The label naming the node a policy status describes.
pub(crate) const NODE_LABEL: &str = "vigil.dev/node";
/// The label naming the policy a policy status describes.
pub(crate) const POLICY_LABEL: &str = "vigil.dev/policy";

/// Which node a `VigilNodeStatus` describes (the object's status says
/// what its agent runs and did lately).
// Each printer column repeats `type_`, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "vigil.dev",
    version = "v1alpha1",
    kind = "VigilNodeStatus",
    plural = "vigilnodestatuses",
    shortname = "vns",
    category = "vigil",
    status = "NodeView",
    doc = "What the vigil agent of one node runs and did lately; written by that agent, owned by its Node",
    printcolumn(name = "Mode", type_ = "string", json_path = ".status.mode"),
    printcolumn(name = "Config", type_ = "string", json_path = ".status.config.state"),
    printcolumn(
        name = "Pressure",
        type_ = "string",
        json_path = ".status.conditions[*].type"
    ),
    printcolumn(
        name = "Evicted",
        type_ = "integer",
        json_path = ".status.evictions.accepted"
    ),
    printcolumn(
        name = "Last-Eviction",
        type_ = "date",
        json_path = ".status.lastEvictionTime"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.config.message",
        priority = "1"
    ),
    printcolumn(
        name = "Agent",
        type_ = "string",
        json_path = ".status.agent",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VigilNodeStatusSpec {
    /// The node described.
    pub node: String,
}

/// The node's state as its agent sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeView {
    /// The agent's build, as `vigil --version` names it. Absent when
    /// written by an agent before 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Whether the agent evicts and taints (`enforce`), only decides and
    /// reports (`observe`), or is stopped by a pausing layer (`paused`).
    /// Absent when written by an agent before 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Which config runs, and why.
    pub config: ConfigState,
    /// The pressure conditions that hold now.
    #[serde(default)]
    pub conditions: Vec<PressureCondition>,
    /// Thresholds out of their place beside the kubelet (not ahead of its
    /// eviction, or before its image garbage collection), in words; empty
    /// when every one is in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beside_kubelet: Vec<String>,
    /// The last evictions this agent asked for, oldest first.
    #[serde(default)]
    pub last_evictions: Vec<Eviction>,
    /// When the newest of them ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_eviction_time: Option<Time>,
    /// Eviction calls ended since the agent started, by result
    /// (`accepted`, `dry-run`, `refused`, `failed`, `gone`).
    #[serde(default)]
    pub evictions: BTreeMap<String, u64>,
    /// The policies that have a `VigilPolicyStatus` of this node (named
    /// `NODE.POLICY`, or hashed when that is no valid name). Absent when
    /// written by an agent before 0.2, which named them `NODE-xxxxx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<String>>,
}

/// Whether a node's agent acts on its decisions.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Mode {
    /// Every decision is a dry run: nothing is evicted or tainted.
    Observe,
    /// Strategies not in dry run of their own evict and taint.
    Enforce,
    /// A `VigilConfig` layer pauses the node: nothing is evicted or tainted.
    Paused,
}

impl Mode {
    /// The mode of an agent that is (or is not) paused, and observing.
    pub(crate) fn of(paused: bool, observing: bool) -> Self {
        match (paused, observing) {
            (true, _) => Self::Paused,
            (false, true) => Self::Observe,
            (false, false) => Self::Enforce,
        }
    }

    /// The mode as the status object spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Observe => "observe",
            Self::Enforce => "enforce",
            Self::Paused => "paused",
        }
    }
}

/// The config state of a node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigState {
    /// The reason of the node's `VigilConfigOK` condition (`Active`,
    /// `Trial`, `RolledBack`, `Rejected`, `CheckpointInUse`, `Defaults`).
    pub state: String,
    /// Which config, and why, for people.
    pub message: String,
    /// The hash of the layers the cluster assigned last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned: Option<String>,
    /// The hash of the layers that run (absent: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// The hash of the last config that passed its trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good: Option<String>,
    /// When the trial under way ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial_end: Option<Time>,
    /// Why a config was last refused or rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A pressure condition that holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PressureCondition {
    /// The condition, e.g. `MemoryPressure`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Since when it holds.
    pub since: Time,
}

/// One eviction call, as it ended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Eviction {
    /// `NAMESPACE/NAME`.
    pub pod: String,
    /// The strategy that chose it.
    pub strategy: String,
    /// `hard`, `force` or `soft`.
    pub urgency: String,
    /// The strategy's reason.
    pub reason: String,
    /// `accepted`, `dry-run`, `refused`, `failed` or `gone`.
    pub result: String,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the call ended.
    pub time: Time,
    /// Why this pod, in words: the strategy and its version, the signal
    /// and threshold that held, the sorter, its version and the pod's rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Which node and policy a `VigilPolicyStatus` describes (the object's
/// status says which version serves and how it fares).
// Each printer column repeats `type_`, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "vigil.dev",
    version = "v1alpha1",
    kind = "VigilPolicyStatus",
    plural = "vigilpolicystatuses",
    shortname = "vps",
    category = "vigil",
    status = "PolicyView",
    doc = "Which version of one policy serves on one node and how it fares; written by that node's vigil agent, owned by its Node",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.policy"),
    printcolumn(name = "World", type_ = "string", json_path = ".status.world"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Since", type_ = "date", json_path = ".status.since"),
    printcolumn(name = "Faults", type_ = "integer", json_path = ".status.faults"),
    printcolumn(name = "Pull", type_ = "string", json_path = ".status.pull.state"),
    printcolumn(
        name = "Last-Fault",
        type_ = "string",
        json_path = ".status.lastFault.message",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VigilPolicyStatusSpec {
    /// The node the status is about.
    pub node: String,
    /// The policy's name.
    pub policy: String,
}

/// One policy on one node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicyView {
    /// `Trial`, `Active`, `RolledBack`, or `Failed` (the newest file was
    /// refused at load; what served before, if anything, still serves);
    /// while no version serves, its pull's state (`PullFailed`) or
    /// `Unserved` (only a version in shadow runs).
    pub state: String,
    /// Since when it is in this state.
    pub since: Time,
    /// The world it implements (absent if nothing of it serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<String>,
    /// The serving version: the sha256 of its component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The digest's first 12 digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `builtin`, `file` or `last-known-good` (the saved copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When the trial under way ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial_end: Option<Time>,
    /// The version a rollback would return to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_good: Option<String>,
    /// The newest fault or refusal of this policy on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fault: Option<Fault>,
    /// Faults of the serving version on this node (each comes with its
    /// `lastFault`). How often a policy is called is a metric
    /// (`vigil_policy_calls_total`), never written here: a busy policy costs the
    /// API server nothing.
    pub faults: u64,
    /// The registry version its `VigilPolicy` gives this node, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullView>,
    /// The version its `VigilPolicy` has this node run in shadow, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowView>,
}

/// A version running in shadow on one node: compared with the serving
/// version on the same inputs, never acted on. The counts are those of
/// the last write: it is written when its state changes, at the first
/// divergence of a pressure episode, and otherwise at most every ten
/// minutes (`vigil_policy_shadow_total` counts as it goes).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowView {
    /// The pinned reference (`spec.source`).
    pub reference: String,
    /// Its component's digest, first 12 digits, once loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `Pulling`, `PullFailed`, `Comparing`, `Refused` (it does not load,
    /// or is of another world than what serves) or `Rejected` (it diverged
    /// more than `maxDivergencePercent` allows).
    pub state: String,
    /// Since when it is in this state.
    pub since: Time,
    /// Why it is not comparing, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Calls compared.
    pub comparisons: u64,
    /// Of those, the same decision.
    pub agreements: u64,
    /// Of those, the shadow faulted (trap, deadline, memory, contract).
    pub faults: u64,
    /// The latest call on which the shadow decided otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_divergence: Option<Divergence>,
}

/// One call on which a version in shadow decided otherwise.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// When.
    pub time: Time,
    /// `evaluate`, `top-victims` or `sort`.
    pub call: String,
    /// Where the decisions part, e.g. "serving evicts default/a (rank 1),
    /// shadow evicts default/b".
    pub message: String,
}

/// The registry version a `VigilPolicy` gives one node, and how pulling it
/// fares.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullView {
    /// The pinned reference this node takes.
    pub reference: String,
    /// `newest` (`spec.source`) or `previous` (`spec.rollout.previous`):
    /// where the node stands in the rollout.
    pub stage: String,
    /// `Pulled` (it is linked for the loader) or `PullFailed` (what served
    /// before still serves).
    pub state: String,
    /// Since when it is in this state.
    pub since: Time,
    /// Once pulled: `verified` (a signature under the node's verification
    /// key covers it) or `unsigned` (the node has no key, and the policy
    /// says `allowUnsigned: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Why the last pull failed: `unauthorized`, `credentials`,
    /// `not-found`, `unavailable`, `tampered`, `layout`, `oversized`,
    /// `signature`, `reference` or `store`; for the version's precompiled
    /// artifact also `incompatible` or `not-precompiled` (the message says
    /// which artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The failure, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it is tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry: Option<Time>,
}

/// Something that went wrong with a policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Fault {
    /// When.
    pub time: Time,
    /// What.
    pub message: String,
}
