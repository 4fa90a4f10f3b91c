//! Shared fixtures for vigil's end-to-end tests: the test guests (built from
//! `guests/` by `build.rs`), inline WAT components, and helpers that set up a
//! real host and registry in temporary directories.

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use vigil::clock::ManualClock;
use vigil::policy::bindings::{Candidate, Pod, QosClass, Resources, Usage};
use vigil::policy::{Host, Limits, LimitsTable, Registry};

/// An honest sorter that orders candidates in reverse input order.
pub const REVERSE_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_REVERSE_SORTER"));
/// A sorter that never returns.
pub const ENDLESS_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_ENDLESS_SORTER"));
/// A sorter that allocates until stopped.
pub const HUNGRY_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_HUNGRY_SORTER"));
/// A sorter that always panics.
pub const TRAP_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_TRAP_SORTER"));
/// A sorter that answers an index out of range.
pub const BAD_INDEX_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_BAD_INDEX_SORTER"));
/// A reverse sorter that panics when a candidate is named `trigger-fault`.
pub const FLAKY_SORTER: &[u8] = include_bytes!(env!("VIGIL_GUEST_FLAKY_SORTER"));
/// An eviction strategy that answers what its config says (see its crate docs).
pub const SCRIPTED_STRATEGY: &[u8] = include_bytes!(env!("VIGIL_GUEST_SCRIPTED_STRATEGY"));
/// A WASI command component: no policy world at all.
pub const NOT_A_POLICY: &[u8] = include_bytes!(env!("VIGIL_GUEST_NOT_A_POLICY"));

/// The pod name that makes [`FLAKY_SORTER`] trap.
pub const TRIGGER: &str = "trigger-fault";

/// The built-in default sorter's bytes.
pub fn builtin(name: &str) -> &'static [u8] {
    vigil::policy::builtin::BUILTINS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("no such built-in")
        .1
}

/// A component that exports a sorter interface with no functions, importing `import`
/// (a WIT interface name) if given.
pub fn hollow_sorter_wat(import: Option<&str>) -> Vec<u8> {
    let import = import
        .map(|i| format!("(import \"{i}\" (instance (export \"f\" (func))))"))
        .unwrap_or_default();
    let wat = format!(
        "(component {import} (instance $empty) (export \"vigil:policy/sorter@0.1.0\" (instance $empty)))"
    );
    wat::parse_str(wat).expect("test WAT parses")
}

/// Limits for tests: short deadline, small memory, one-minute trial.
pub fn test_limits() -> Limits {
    Limits {
        deadline: Duration::from_millis(50),
        memory_bytes: 16 << 20,
        trial: Duration::from_secs(60),
    }
}

/// A host without cache and a registry on a manual clock, with `state_dir`.
pub fn registry(state_dir: Option<std::path::PathBuf>) -> (Arc<Registry>, Arc<ManualClock>) {
    let host = Arc::new(Host::new(None).expect("host starts"));
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    ));
    let limits = LimitsTable {
        default: test_limits(),
        overrides: Default::default(),
    };
    let registry = Registry::new(host, clock.clone(), limits, state_dir).expect("registry starts");
    (Arc::new(registry), clock)
}

/// A best-effort candidate named `name` using `usage_mib` of memory.
pub fn candidate(name: &str, usage_mib: u64) -> Candidate {
    Candidate {
        pod: policy_kit::pod!(name, QosClass::BestEffort, priority: 0, usage_mib: usage_mib, request_mib: 0),
        strategy: "test".into(),
        reason: "test".into(),
    }
}

/// Candidates `a` (small), `b` (big), `c` (medium), in that input order.
pub fn three_candidates() -> Vec<Candidate> {
    vec![candidate("a", 10), candidate("b", 300), candidate("c", 100)]
}

/// The names of `candidates` in the order a sorter answered.
pub fn order_of(candidates: &[Candidate], order: &[u32]) -> Vec<String> {
    order
        .iter()
        .map(|&i| candidates[i as usize].pod.name.clone())
        .collect()
}
