//! Test guest: a candidate sorter that misbehaves on purpose, one way per
//! cargo feature, so the host's limits and checks can be proven.
//!
//! - no feature: an honest sorter that orders candidates in reverse;
//! - `endless`: never returns (the epoch deadline must stop it);
//! - `hungry`: allocates until it is stopped (the memory cap must stop it);
//! - `trap`: panics, which traps;
//! - `bad-index`: answers an index that does not exist;
//! - `flaky`: honest, until a candidate is named `trigger-fault` — it passes
//!   the canary and fails later, during its trial;
//! - `sleepy`: honest, but when a candidate is named `trigger-fault` it first
//!   sleeps (through WASI's clock and poll) for longer than anyone waits;
//! - `chatty`: honest, after logging and printing 1 000 lines each, one of them
//!   with a newline that tries to forge a log line of its own;
//! - `verbose`: declines every call with a 50 MiB message;
//! - `remembering`: grows its memory by 4 MiB and counts its calls in a
//!   static, then declines with the count and its memory size — a fresh
//!   instance per call must say `call 1` and the same size every time.

/// Bindings generated from the `candidate-sorter` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "candidate-sorter" });
}

use bindings::exports::vigil::policy::sorter::{Candidate, Guest, Sorted};
use bindings::vigil::policy::log::{Level, log};
use bindings::vigil::policy::types::Interest;

/// The sorter; exported only when built as a component.
pub struct FaultSorter;

impl Guest for FaultSorter {
    fn declare_interest(_config: String) -> Interest {
        Interest {
            labels: vec![],
            annotations: vec![],
            facts: Vec::new(),
        }
    }

    fn sort(
        _strategies: Vec<String>,
        candidates: Vec<Candidate>,
        _config: String,
    ) -> Result<Sorted, String> {
        let count = u32::try_from(candidates.len()).map_err(|_| "too many candidates")?;
        if cfg!(feature = "endless") {
            let mut spins = 0u64;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        if cfg!(feature = "hungry") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        if cfg!(feature = "trap") {
            panic!("fault-sorter (trap) always panics");
        }
        if cfg!(feature = "bad-index") {
            return Ok(Sorted {
                order: vec![count + 7],
                rejected: vec![],
            });
        }
        let triggered = candidates.iter().any(|c| c.pod.name == "trigger-fault");
        if cfg!(feature = "flaky") && triggered {
            panic!("fault-sorter (flaky) met its trigger");
        }
        if cfg!(feature = "sleepy") && triggered {
            std::thread::sleep(std::time::Duration::from_secs(u64::MAX >> 2));
        }
        if cfg!(feature = "chatty") {
            log(Level::Info, "first\nINFO vigil: forged line");
            for i in 0..1_000 {
                log(Level::Info, &format!("chatter {i}"));
                println!("printed {i}");
            }
        }
        if cfg!(feature = "remembering") {
            static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let calls = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            std::hint::black_box(vec![1u8; 4 << 20]).leak();
            return Err(format!("call {calls}, {} pages", memory_pages()));
        }
        if cfg!(feature = "verbose") {
            return Err("x".repeat(50 << 20));
        }
        Ok(Sorted {
            order: (0..count).rev().collect(),
            rejected: vec![],
        })
    }
}

/// The size of the guest's linear memory, in 64 KiB pages.
fn memory_pages() -> usize {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size(0);
    #[cfg(not(target_arch = "wasm32"))]
    0
}

#[cfg(target_arch = "wasm32")]
bindings::export!(FaultSorter with_types_in bindings);
