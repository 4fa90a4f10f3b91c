//! The `VigilPolicy` custom resource (`vigil.dev/v1alpha1`,
//! cluster-scoped), one per policy name: where the policy's component is
//! published (an OCI reference pinned by digest), how to reach it, how far
//! its newest version has rolled out, and where its precompiled artifacts
//! are (one per engine key). Which policies run, and with what settings,
//! stays `VigilConfig`'s to say; which native code a node may run stays the
//! native-code key's, configured on the DaemonSet, never here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The CEL rule of a pinned reference: a `sha256` digest, a tag before it
/// allowed. The API server prices a rule by the longest string it may see:
/// every string a rule reads has a `maxLength`, and every list of them a
/// `maxItems`, or the CRD is refused for its cost.
const PINNED_RULE: &str = "self.matches('^[^@ ]+@sha256:[0-9a-f]{64}$')";
/// The CEL rule of an engine key.
const ENGINE_KEY_RULE: &str = "self.matches('^[0-9a-f]{32}$')";

/// Where one policy's component comes from, and how far its newest
/// version has rolled out.
// Each printer column repeats `type_`, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "vigil.dev",
    version = "v1alpha1",
    kind = "VigilPolicy",
    plural = "vigilpolicies",
    shortname = "vp",
    category = "vigil",
    doc = "Where the component of the policy named like this object is published, pinned by digest, and how far its newest version has rolled out across the fleet",
    printcolumn(name = "Ref", type_ = "string", json_path = ".spec.source.oci.ref"),
    printcolumn(
        name = "Percent",
        type_ = "integer",
        json_path = ".spec.rollout.percent"
    ),
    printcolumn(
        name = "Previous",
        type_ = "string",
        json_path = ".spec.rollout.previous",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct VigilPolicySpec {
    /// Where the newest version is published.
    pub source: PolicySource,
    /// How far the newest version has rolled out; absent: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// Precompiled artifacts of these versions (`vigil policy precompile`),
    /// each for one engine key; a node takes the one for its own key whose
    /// component is the version it serves, if signed by the native-code key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub precompiled: Vec<PrecompiledRef>,
    /// Bounds on what a version of this policy may do on trial, beside
    /// faulting: one that breaks a bound rolls back as a faulting one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<TrialBounds>,
}

/// What a version on trial may do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TrialBounds {
    /// At most this many evictions on one node while on trial, counting
    /// each eviction the version took part in (as the strategy that chose
    /// the pod or the sorter that ordered it); the one past it rolls the
    /// version back on that node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evictions: Option<u32>,
}

/// A precompiled artifact of one version, for one engine.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PrecompiledRef {
    /// The engine key it was made for (`vigil policy precompile` prints it).
    #[x_kube(validation = Rule::new(ENGINE_KEY_RULE).message("engineKey is 32 lowercase hex digits"))]
    #[schemars(length(max = 32))]
    pub engine_key: String,
    /// `registry/repository[:tag]@sha256:…`: the digest pins the bytes.
    #[serde(rename = "ref")]
    #[x_kube(validation = Rule::new(PINNED_RULE).message("ref must be pinned by digest: registry/repository[:tag]@sha256:<64 hex digits>"))]
    #[schemars(length(max = 1024))]
    pub reference: String,
}

/// A component's source.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicySource {
    /// An OCI registry.
    pub oci: OciSource,
}

/// A component in an OCI registry.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// `registry/repository[:tag]@sha256:…`: the digest pins the bytes.
    #[serde(rename = "ref")]
    #[x_kube(validation = Rule::new(PINNED_RULE).message("ref must be pinned by digest: registry/repository[:tag]@sha256:<64 hex digits>"))]
    #[schemars(length(max = 1024))]
    pub reference: String,
    /// A `kubernetes.io/dockerconfigjson` Secret in vigil's namespace with
    /// the registry's credentials; absent: anonymous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret_ref: Option<SecretRef>,
    /// Plain HTTP to this registry (never a silent downgrade from TLS).
    #[serde(default)]
    pub insecure: bool,
    /// Take its versions unsigned on nodes without a verification key
    /// (`--verification-key`); without it, such a node refuses them. A
    /// node with a key takes only versions signed under it, whatever this
    /// says: the key is the DaemonSet's, not the policy's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unsigned: bool,
}

/// A Secret by name, in vigil's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
}

/// A staged rollout of `source`: the canary nodes first, then the share of
/// the fleet `percent` says; every other node keeps `previous`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// The share of nodes (by a stable hash of policy and node name) that
    /// take `source`; raising it only adds nodes.
    #[schemars(range(min = 0, max = 100))]
    pub percent: u8,
    /// What the other nodes keep (`registry/repository[:tag]@sha256:…`);
    /// absent: they serve the policy from the ConfigMap or the built-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PINNED_RULE).message("previous must be pinned by digest: registry/repository[:tag]@sha256:<64 hex digits>"))]
    #[schemars(length(max = 1024))]
    pub previous: Option<String>,
    /// Nodes that take `source` whatever `percent` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// Nodes that run `source` in shadow beside what they serve: it is
    /// asked what the serving version is asked and never acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
}

/// A rollout's shadow stage: where `source` decides beside the serving
/// version, compared and never acted on.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Shadow {
    /// The share of nodes, by the same stable hash as `percent`, that run
    /// `source` in shadow; the nodes that serve it (under `percent`, or
    /// canaries) do not, so `shadow.percent` above `percent` is the share
    /// that judges it before it serves.
    #[schemars(range(min = 0, max = 100))]
    pub percent: u8,
    /// At most this share (in percent) of a node's comparisons may differ
    /// once it has made 20 of them: above it the node stops
    /// running the version in shadow and its status says why. Absent: no
    /// bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub max_divergence_percent: Option<u8>,
}

/// The comparisons a shadow makes on a node before its divergence is held
/// to `maxDivergencePercent`: a few cycles say nothing of a share.
pub const MIN_JUDGED: u64 = 20;

/// A rollout's canary stage: nodes by labels or by name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// Nodes whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Nodes by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_references_carry_the_digest_rule_and_the_percentage_its_range() {
        let crd = serde_json::to_value(VigilPolicy::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let reference = &spec["properties"]["source"]["properties"]["oci"]["properties"]["ref"];
        let previous = &spec["properties"]["rollout"]["properties"]["previous"];
        let precompiled = &spec["properties"]["precompiled"]["items"]["properties"];
        assert_eq!(
            precompiled["engineKey"]["x-kubernetes-validations"][0]["rule"],
            ENGINE_KEY_RULE
        );
        for field in [reference, previous, &precompiled["ref"]] {
            assert_eq!(
                field["x-kubernetes-validations"][0]["rule"], PINNED_RULE,
                "{field}"
            );
        }
        let rollout = &spec["properties"]["rollout"]["properties"];
        let shadow = &rollout["shadow"]["properties"];
        for percent in [
            &rollout["percent"],
            &shadow["percent"],
            &shadow["maxDivergencePercent"],
        ] {
            assert_eq!(
                (percent["minimum"].as_f64(), percent["maximum"].as_f64()),
                (Some(0.0), Some(100.0))
            );
        }
    }
}
