//! vigil's end-to-end tests, one module per suite, linked into one test
//! binary (each suite would otherwise link wasmtime and cranelift again).
//! Run one suite with `cargo test -p vigil-tests --test all SUITE::`.

mod cache;
mod contracts;
mod distribution;
mod eviction;
mod faults;
mod fleet;
mod languages;
mod lifecycle;
mod parsers;
mod registry_limits;
mod reload;
mod runner;
mod scopes;
mod shadow;
mod simulate;
