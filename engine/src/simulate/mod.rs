//! `vigil simulate`: the real eviction manager and the real policies against a
//! scenario file, on a virtual clock — what a newcomer runs first and what a
//! policy author tests with.
//!
//! [`Scenario`] parses and validates the file; [`run`] simulates it into a
//! [`Simulation`], which [`output::render`] prints, serde writes as JSON, and
//! `plot::draw` turns into an SVG chart.

mod api;
pub(crate) mod output;
pub(crate) mod plot;
mod record;
mod run;
mod scenario;
pub mod schema;
pub mod shadow;
mod timeline;
mod values;

pub use api::EvictionModel;
pub use output::render;
pub use record::{
    DecisionRecord, EvictionRecord, Met, PodUsage, PolicyRecord, ShadowRecord, Simulation, Step,
    ThresholdRecord,
};
pub use run::{RunOptions, SimulateError, run};
pub use scenario::{ConfigChange, NodeSpec, PodSpec, Qos, ResourceSpec, Scenario, ScenarioError};
pub use timeline::{Point, Timeline};
pub use values::MAX_DURATION;
