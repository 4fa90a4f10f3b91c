//! What the tests and benchmarks need that no user of the library does: one
//! surface, so that they name no room's inner files and the rooms can move
//! their files freely. In the crate's own tests, `untrusted`: property
//! tests of every parser of outside input.

pub use crate::controllers::config::turn;
pub use crate::eviction::runner::RECYCLE_BURST;

#[cfg(test)]
mod untrusted;
