//! katalyst's eviction plugins (katalyst-core `pkg/agent/evictionmanager/plugin/`)
//! as vigil strategies, deciding as katalyst does on katalyst's own test
//! cases. Each is a module with its config (katalyst's knobs under vigil's
//! names, katalyst's defaults), its interest and its decision, and the
//! crate builds one component per cargo feature; host builds test them all.
//!
//! | strategy | katalyst plugin | decides |
//! |---|---|---|
//! | `rss-overuse` | `memory/rss_overuse.go` | pods whose RSS exceeds request × ratio: soft candidates, no condition |
//! | `numa-pressure` | `memory/numa_pressure.go` | each NUMA node's free memory against its Normal zone's watermarks, counted over cycles: a hard threshold and a victim per pressed node |
//! | `reclaimed-resources` | `resource/reclaimed_resources.go` | the `reclaimed_cores` pods' extended requests against a rate × what the node offers: a hard threshold per resource, victims by their request |
//! | `rootfs-pressure` | `rootfs/rootfs_pressure.go` | the image filesystem's free bytes and inodes: `SystemRootfs`, victims by their writable layers |
//! | `system-cpu-pressure` | `cpu/system_pressure.go` (PR #1141) | load and CPU usage against bounds over a ring of samples: `SystemCPU` reported at the soft bound, the busiest pod evicted at the hard one, a cool-down |
//! | `system-memory-pressure` | `memory/system_pressure.go` | `MemFree` against the scaled watermark, and the workload cgroup's memory PSI: `MemoryPressure`, a victim from the most pressed NUMA node, a cool-down |
//!
//! `ranking` orders candidates as katalyst's memory plugins do.

/// Bindings generated from the `eviction-strategy` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "eviction-strategy" });
}

pub use bindings::exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, MetLevel, ScopeMet, Signal, Snapshot, StrategyInterest,
    Threshold,
};
pub use bindings::vigil::policy::types::{
    Amount, Interest, KeyValue, NumaMemory, Pod, PodFact, Pressure, QosClass, Resources, Usage,
    WritableLayers,
};

pub mod cpu_pressure;
pub mod knobs;
pub mod numa_pressure;
pub mod ranking;
pub mod reclaimed_resources;
pub mod rootfs_pressure;
pub mod rss_overuse;
pub mod system_memory;

/// The strategy this component exports, chosen by its cargo feature: each
/// `chosen` says how its module answers the three calls.
#[cfg(target_arch = "wasm32")]
mod component {
    use super::{Decision, Eviction, Snapshot, StrategyInterest};

    #[cfg(feature = "rss-overuse")]
    mod chosen {
        use super::*;
        pub use crate::rss_overuse::interest;
        pub fn evaluate(s: &Snapshot) -> Result<Decision, String> {
            crate::rss_overuse::evaluate(&s.pods, &s.config)
        }
        pub fn top_victims(_: &Snapshot, scope: &str) -> Result<Vec<Eviction>, String> {
            Err(format!(
                "{} meets no threshold, so has no scope {scope:?}: its pods are soft candidates",
                crate::rss_overuse::NAME
            ))
        }
    }

    #[cfg(feature = "numa-pressure")]
    mod chosen {
        use super::*;
        pub use crate::numa_pressure::interest;
        pub fn evaluate(s: &Snapshot) -> Result<Decision, String> {
            crate::numa_pressure::evaluate(&s.signals, &s.config, &s.state)
        }
        pub fn top_victims(s: &Snapshot, scope: &str) -> Result<Vec<Eviction>, String> {
            crate::numa_pressure::top_victims(&s.signals, &s.pods, &s.config, &s.state, scope)
        }
    }

    #[cfg(feature = "system-memory-pressure")]
    mod chosen {
        use super::*;
        use crate::knobs::Seen;
        use crate::system_memory as strategy;
        pub use strategy::interest;
        pub fn evaluate(s: &Snapshot) -> Result<Decision, String> {
            strategy::evaluate(&Seen::of(s), &s.config, &s.state)
        }
        pub fn top_victims(s: &Snapshot, scope: &str) -> Result<Vec<Eviction>, String> {
            strategy::top_victims(&s.signals, &s.pods, &s.config, &s.state, scope)
        }
    }

    #[cfg(feature = "system-cpu-pressure")]
    mod chosen {
        use super::*;
        use crate::cpu_pressure as strategy;
        use crate::knobs::Seen;
        pub use strategy::interest;
        pub fn evaluate(s: &Snapshot) -> Result<Decision, String> {
            strategy::evaluate(&Seen::of(s), &s.config, &s.state)
        }
        pub fn top_victims(s: &Snapshot, scope: &str) -> Result<Vec<Eviction>, String> {
            strategy::top_victims(&s.pods, &s.config, scope)
        }
    }

    #[cfg(feature = "reclaimed-resources")]
    mod chosen {
        use super::*;
        use crate::reclaimed_resources as strategy;
        pub use strategy::interest;
        pub fn evaluate(s: &Snapshot) -> Result<Decision, String> {
            strategy::evaluate(&s.signals, &s.pods, &s.config)
        }
        pub fn top_victims(s: &Snapshot, scope: &str) -> Result<Vec<Eviction>, String> {
            strategy::top_victims(&s.pods, &s.config, scope)
        }
    }

    #[cfg(feature = "rootfs-pressure")]
    mod chosen {
        use super::*;
        pub use crate::rootfs_pressure::interest;
        pub fn evaluate(s: &Snapshot) -> Result<Decision, String> {
            crate::rootfs_pressure::evaluate(&s.signals, &s.pods, &s.config)
        }
        pub fn top_victims(s: &Snapshot, scope: &str) -> Result<Vec<Eviction>, String> {
            crate::rootfs_pressure::top_victims(&s.signals, &s.pods, &s.config, &s.state, scope)
        }
    }

    struct Katalyst;

    impl crate::bindings::exports::vigil::policy::strategy::Guest for Katalyst {
        fn declare_interest(config: String) -> StrategyInterest {
            chosen::interest(&config)
        }

        fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
            chosen::evaluate(&snapshot)
        }

        fn top_victims(snapshot: Snapshot, scope: String, n: u32) -> Result<Vec<Eviction>, String> {
            let mut victims = chosen::top_victims(&snapshot, &scope)?;
            victims.truncate(n as usize);
            Ok(victims)
        }
    }

    crate::bindings::export!(Katalyst with_types_in crate::bindings);
}
