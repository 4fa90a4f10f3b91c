//! Every parser of input from outside the agent, under property tests:
//! registry manifests, references, signatures and public keys; `/proc` and
//! cgroup files; config layers; scenarios; the kubelet's statistics; HTTP
//! requests to the agent's port. Each is fed its kept corpus — real samples
//! of its format (`signals/fixtures/`, the examples) — mutated, and
//! arbitrary bytes: it must answer a value or an error, never panic, hang
//! or claim memory without bound. The number of cases is the budget (CI
//! runs the defaults below); proptest keeps each failing input it finds in
//! `proptest-regressions/`, replayed first on every run: a crash found
//! becomes a regression case. HTTP requests to the agent's port are
//! `agent::http::connections`' own (its tests).

mod registry;
mod signals;
mod text;

use proptest::test_runner::Config;

/// Cases per property: 256 (each runs in milliseconds), or
/// `PROPTEST_CASES` for a longer search.
fn budget() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok());
    Config {
        cases: cases.unwrap_or(256),
        ..Config::default()
    }
}
