//! Text operators and nodes write: config layers (a `--config` file, a
//! `VigilConfig`'s `config`), scenarios, the kubelet's statistics summary,
//! quantities and policy names.

use crate::base::mutated::mutated_text;
use crate::base::{policy_name::PolicyName, quantity};
use crate::cluster::kubelet_stats::{self, tests::SUMMARY};
use crate::config::schema;
use crate::model::Layer;
use crate::simulate::Scenario;
use proptest::prelude::*;
use std::path::Path;
use std::time::SystemTime;

const CONFIG: &str = include_str!("../../../../deploy/examples/vigilconfig.yaml");
const SCENARIOS: [&str; 3] = [
    include_str!("../../../../examples/scenarios/hard-memory-pressure.yaml"),
    include_str!("../../../../examples/scenarios/numa-pressure.yaml"),
    include_str!("../../../../examples/scenarios/disk-and-pid-pressure.yaml"),
];

fn one_scenario() -> impl Strategy<Value = String> {
    (0..SCENARIOS.len()).prop_flat_map(|i| mutated_text(SCENARIOS[i]))
}

proptest! {
    #![proptest_config(super::budget())]

    #[test]
    fn a_mutated_config_layer_is_checked_or_refused(text in mutated_text(CONFIG)) {
        let Ok(value) = serde_norway::from_str::<serde_json::Value>(&text) else {
            return Ok(());
        };
        // The object's layer, or the text as a `--config` file.
        let config = value.pointer("/spec/config").cloned().unwrap_or(value);
        let layer = Layer { source: "mutated".into(), json: config.to_string() };
        let _ = schema::check_layer(&layer);
    }

    #[test]
    fn a_mutated_scenario_is_loaded_or_refused(text in one_scenario()) {
        let _ = Scenario::parse(&text, Path::new("mutated.yaml"));
    }

    #[test]
    fn a_mutated_kubelet_summary_is_read_or_refused(text in mutated_text(SUMMARY)) {
        if let Ok(pods) = kubelet_stats::parse(&text, SystemTime::now()) {
            prop_assert!(pods.len() <= text.matches("podRef").count());
        }
    }

    #[test]
    fn a_quantity_is_a_finite_amount_or_none(text in mutated_text("1536Mi")) {
        if let Some(value) = quantity::parse(&text) {
            prop_assert!(value.is_finite() && value >= 0.0, "{text:?}: {value}");
        }
    }

    #[test]
    fn a_policy_name_never_holds_a_path(text in mutated_text("my-sorter")) {
        if let Ok(name) = PolicyName::parse(&text) {
            let name = name.to_string();
            prop_assert!(!name.contains(['/', '@', '~']), "{name:?}");
        }
    }
}
