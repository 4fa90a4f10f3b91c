//! katalyst's eviction plugins (katalyst-core `pkg/agent/evictionmanager/plugin/`)
//! as vigil strategies, deciding as katalyst does on katalyst's own test
//! cases. Each is a module with its config (katalyst's knobs under vigil's
//! names, katalyst's defaults), its interest and its decision, and the
//! crate builds one component per cargo feature; host builds test them all.
//!
//! | strategy | katalyst plugin | decides |
//! |---|---|---|
//! | `rss-overuse` | `memory/rss_overuse.go` | pods whose RSS exceeds request × ratio: soft candidates, no condition |

/// Bindings generated from the `eviction-strategy` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "eviction-strategy" });
}

pub use bindings::exports::vigil::policy::strategy::{
    Decision, Eviction, Snapshot, StrategyInterest,
};
pub use bindings::vigil::policy::types::{Interest, KeyValue, Pod, QosClass, Resources, Usage};

pub mod rss_overuse;

#[cfg(target_arch = "wasm32")]
mod component {
    use super::{Decision, Eviction, Snapshot, StrategyInterest, rss_overuse};

    struct Katalyst;

    impl crate::bindings::exports::vigil::policy::strategy::Guest for Katalyst {
        fn declare_interest(config: String) -> StrategyInterest {
            rss_overuse::interest(&config)
        }

        fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
            rss_overuse::evaluate(&snapshot.pods, &snapshot.config)
        }

        fn top_victims(_: Snapshot, scope: String, _: u32) -> Result<Vec<Eviction>, String> {
            Err(format!(
                "{} meets no threshold, so has no scope {scope:?}: its pods are soft candidates",
                rss_overuse::NAME
            ))
        }
    }

    crate::bindings::export!(Katalyst with_types_in crate::bindings);
}
