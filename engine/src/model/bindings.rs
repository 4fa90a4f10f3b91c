//! Host bindings for the three worlds of `vigil:policy@0.3.0` (see `wit/`).
//!
//! The shared `types` and `log` interfaces are generated once, with the
//! strategy world, and reused by the other two so a `Pod` is one Rust type.
#![allow(missing_docs)]

/// The `eviction-strategy` world.
pub mod strategy {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "eviction-strategy",
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

/// The `candidate-sorter` world.
pub mod sorter {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "candidate-sorter",
        additional_derives: [serde::Serialize, serde::Deserialize],
        with: {
            "vigil:policy/types": super::strategy::vigil::policy::types,
            "vigil:policy/log": super::strategy::vigil::policy::log,
        },
    });
}

/// The `config-merger` world.
pub mod merger {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "config-merger",
        additional_derives: [serde::Serialize, serde::Deserialize],
        with: {
            "vigil:policy/log": super::strategy::vigil::policy::log,
        },
    });
}

pub use merger::exports::vigil::policy::merger::{Layer, Rejection as MergeRejection};
pub use sorter::exports::vigil::policy::sorter::{
    Candidate, Rejection as SortRejection, Sorted, Urgency,
};
pub use strategy::exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, MetLevel, ScopeMet, Signal, Snapshot, StrategyInterest,
    Threshold,
};
pub use strategy::vigil::policy::log::Level;
pub use strategy::vigil::policy::types::{
    Amount, CpuThrottling, Interest, KeyValue, NumaMemory, OwnerKind, Pod, PodFact, Pressure,
    QosClass, Resources, Usage, WritableLayers,
};
