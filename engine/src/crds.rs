//! Every custom resource definition vigil serves, as `vigil crd` prints them
//! and `deploy/crds.yaml` installs them: `VigilConfig` (the config layers),
//! `VigilPolicy` (where a policy's component is published) and the status
//! kinds of the fleet view.
//!
//! Each kind is a list of API versions merged into one definition, served
//! all, stored in [`STORAGE_VERSION`]. Today the list is `v1alpha1` alone; a
//! later `v1beta1` is a second Rust type (its own `#[kube(version)]`) added
//! to its kind's list, and the storage version moves only once every agent
//! reads it. The versions convert with `strategy: None` (the API server
//! rewrites `apiVersion` only), so a new version may add optional fields but
//! never rename or retype one (docs/operating.md, "CRD versions").

use crate::config::crd::ConfigLayer;
use crate::distribution::crd::VigilPolicy;
use crate::fleet::kinds::{VigilNodeStatus, VigilPolicyStatus};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;
use serde_json::Value;

/// The API version every kind is stored in.
pub const STORAGE_VERSION: &str = "v1alpha1";

/// Each kind's definition: its versions, merged.
fn kinds() -> Vec<CustomResourceDefinition> {
    [
        vec![ConfigLayer::crd()],
        vec![VigilPolicy::crd()],
        vec![VigilNodeStatus::crd()],
        vec![VigilPolicyStatus::crd()],
    ]
    .into_iter()
    .map(|versions| {
        let mut crd = merge_crds(versions, STORAGE_VERSION)
            .expect("every kind has one definition per version, the storage version among them");
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "None".into(),
            webhook: None,
        });
        crd
    })
    .collect()
}

/// The definitions, as a YAML stream.
pub fn definitions() -> String {
    let mut yaml = String::new();
    for crd in kinds() {
        let mut crd = serde_json::to_value(crd).expect("a CRD serialises");
        plain_status(&mut crd);
        known_formats(&mut crd["spec"]["versions"]);
        yaml.push_str("---\n");
        yaml.push_str(&serde_norway::to_string(&crd).expect("a CRD serialises to YAML"));
    }
    yaml
}

/// Drops the status subresource: the agent alone writes its status objects,
/// and one write of the whole object carries a whole change.
fn plain_status(crd: &mut Value) {
    for version in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
        if let Some(version) = version.as_object_mut() {
            version.remove("subresources");
        }
    }
}

/// The `format`s the API server knows (k8s.io/kube-openapi's strfmt
/// registry and the integer and number formats of OpenAPI itself).
const KNOWN_FORMATS: [&str; 9] = [
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "date",
    "date-time",
    "duration",
    "uuid",
];

/// Drops every `format` the API server does not know (schemars writes
/// `uint64`, `uint8`, … for Rust's unsigned integers): the server ignores
/// them but warns at each apply. The bounds stay in `minimum`/`maximum`.
fn known_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !KNOWN_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            map.values_mut().for_each(known_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(known_formats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_definitions_are_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crds.yaml");
        let checked_in = std::fs::read_to_string(path).unwrap();
        assert!(
            checked_in == definitions(),
            "deploy/crds.yaml is not what `vigil crd` prints; regenerate it with \
             `cargo run -p vigil -- crd > deploy/crds.yaml`"
        );
    }

    #[test]
    fn each_kind_stores_one_version_and_serves_the_one_the_agent_reads() {
        use kube::Resource;
        let read = [
            ConfigLayer::version(&()),
            VigilPolicy::version(&()),
            VigilNodeStatus::version(&()),
            VigilPolicyStatus::version(&()),
        ];
        for (crd, read) in kinds().iter().zip(read) {
            let kind = &crd.spec.names.kind;
            let stored: Vec<&str> = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.storage)
                .map(|v| v.name.as_str())
                .collect();
            assert_eq!(
                stored,
                [STORAGE_VERSION],
                "{kind}: exactly one storage version"
            );
            assert!(
                crd.spec.versions.iter().all(|v| v.served),
                "{kind}: every version is served"
            );
            assert!(
                crd.spec.versions.iter().any(|v| v.name == read),
                "{kind}: the agent reads {read}, which is not served"
            );
            let conversion = crd.spec.conversion.as_ref().expect("a conversion");
            assert_eq!(conversion.strategy, "None", "{kind}");
        }
    }

    #[test]
    fn the_status_kinds_are_cluster_scoped_with_a_plain_status_and_fleet_columns() {
        let kinds: Vec<Value> = [VigilNodeStatus::crd(), VigilPolicyStatus::crd()]
            .into_iter()
            .map(|crd| {
                let mut crd = serde_json::to_value(crd).unwrap();
                plain_status(&mut crd);
                crd
            })
            .collect();
        for crd in &kinds {
            assert_eq!(crd["spec"]["scope"], "Cluster");
            let version = &crd["spec"]["versions"][0];
            assert!(version.get("subresources").is_none(), "{version}");
            let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"];
            assert_eq!(status["type"], "object", "{status}");
        }
        let columns: Vec<&str> = kinds[1]["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        for column in ["Node", "Policy", "Version", "State", "Faults"] {
            assert!(columns.contains(&column), "{columns:?}");
        }
    }
}
