//! The `vigil` binary's own tests, one module per command, linked into one
//! test binary. Run one suite with `cargo test -p vigil --test all SUITE::`.

mod agent;
mod policy_check;
mod policy_new;
mod policy_push;
mod simulate_cli;
