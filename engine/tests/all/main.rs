//! The `vigil` binary's own tests, one module per command, linked into one
//! test binary. Run one suite with `cargo test -p vigil --test all SUITE::`.

mod agent;
mod docs;
mod policy_check;
mod policy_new;
mod policy_push;
mod simulate_cli;

/// The `vigil` binary as these tests run it: compiled components are kept
/// under the build's own temporary directory, never in the user's cache.
fn vigil() -> std::process::Command {
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("vigil-components");
    vigil_testbed::cli::vigil(std::path::Path::new(env!("CARGO_BIN_EXE_vigil")), &cache)
}
