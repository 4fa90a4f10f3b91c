//! Every custom resource definition vigil serves, as `vigil crd` prints them
//! and `deploy/crds.yaml` installs them: `VigilConfig` (the config layers),
//! `VigilPolicy` (where a policy's component is published) and the status
//! kinds of the fleet view.

use crate::config::crd::ConfigLayer;
use crate::distribution::crd::VigilPolicy;
use crate::fleet::kinds::{VigilNodeStatus, VigilPolicyStatus};
use kube::CustomResourceExt;
use serde_json::Value;

/// The definitions, as a YAML stream.
pub fn definitions() -> String {
    let mut yaml = String::new();
    for crd in [
        ConfigLayer::crd(),
        VigilPolicy::crd(),
        VigilNodeStatus::crd(),
        VigilPolicyStatus::crd(),
    ] {
        let mut crd = serde_json::to_value(crd).expect("a CRD serialises");
        plain_status(&mut crd);
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
