//! What a policy sees of time and randomness.
//!
//! - **Clocks read the host's [`Clock`]**: the system clock in the agent, the
//!   simulation's virtual clock in `vigil simulate`, so a simulation is
//!   reproducible. Within one call the monotonic clock never goes backwards;
//!   in `simulate` neither clock moves during a call.
//! - **Nothing can wait.** Every `wasi:clocks/monotonic-clock` subscription is
//!   ready at once, so `wasi:io/poll` (and so `sleep`, `setTimeout` or
//!   `time.sleep` in a guest) returns immediately. A guest that spins until
//!   its clock moves runs into its epoch deadline like any other loop: no host
//!   call can hold a policy past its deadline.
//! - **Randomness is a fixed sequence**, the same at every call, in the agent
//!   and in `simulate`: a policy's answer depends on its input alone. Language
//!   runtimes that seed hash tables from it work; a policy must not use it to
//!   decide anything. At most [`MAX_RANDOM_BYTES`] can be asked for at once.

// A deliberate cycle with `sandbox`: this file adds the clock and random
// host functions to the sandbox's store data, and the sandbox holds this
// file's clock. Both are the one guest environment, split by topic.
use crate::base::clock::Clock;
use crate::policy::runtime::sandbox::Sandbox;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, UNIX_EPOCH};
use wasmtime::component::{HasSelf, Linker, Resource};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};
use wasmtime_wasi::{Deterministic, HostWallClock, WasiCtxBuilder};

/// The most random bytes one request may ask for; more traps.
pub(crate) const MAX_RANDOM_BYTES: u64 = 64 << 10;

/// The bytes every call's random generators cycle through.
static RANDOM_CYCLE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    // splitmix64 from a fixed seed: well spread, and the same in every process.
    let mut state = 0x5eed_u64;
    (0..128)
        .flat_map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .collect()
});

/// One call's view of the host clock.
#[derive(Debug, Clone)]
pub(crate) struct GuestClock {
    clock: Arc<dyn Clock>,
    /// The latest monotonic reading handed out, in nanoseconds.
    last: Arc<AtomicU64>,
}

impl GuestClock {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    fn since_epoch(&self) -> Duration {
        self.clock
            .now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }

    /// Nanoseconds since the Unix epoch, never less than an earlier reading.
    fn monotonic(&self) -> u64 {
        let now = u64::try_from(self.since_epoch().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(now, Ordering::Relaxed).max(now)
    }
}

impl HostWallClock for GuestClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn now(&self) -> Duration {
        self.since_epoch()
    }
}

/// Gives a WASI context the host's clock and the fixed random sequence.
pub(crate) fn configure(builder: &mut WasiCtxBuilder, clock: &GuestClock) {
    builder
        .wall_clock(clock.clone())
        .secure_random(Deterministic::new(RANDOM_CYCLE.clone()))
        .insecure_random(Deterministic::new(RANDOM_CYCLE.clone()))
        .insecure_random_seed(0x5eed)
        .max_random_size(MAX_RANDOM_BYTES);
}

/// Replaces WASI's monotonic clock in `linker` (which already holds the rest
/// of WASI) with one whose subscriptions never wait.
pub(crate) fn link(linker: &mut Linker<Sandbox>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    monotonic_clock::add_to_linker::<_, HasSelf<Sandbox>>(linker, |s| s)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// A pollable that is always ready.
struct Ready;

#[wasmtime_wasi::async_trait]
impl Pollable for Ready {
    async fn ready(&mut self) {}
}

impl Sandbox {
    fn ready_now(&mut self) -> wasmtime::Result<Resource<DynPollable>> {
        let table = self.table();
        let ready = table.push(Ready)?;
        subscribe(table, ready)
    }
}

impl monotonic_clock::Host for Sandbox {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(self.clock().monotonic())
    }
    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(1_000_000)
    }
    fn subscribe_instant(
        &mut self,
        _when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.ready_now()
    }
    fn subscribe_duration(
        &mut self,
        _duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.ready_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::ManualClock;

    fn unix_nanos(clock: &dyn Clock) -> u64 {
        let since = clock.now().duration_since(UNIX_EPOCH).unwrap();
        u64::try_from(since.as_nanos()).unwrap()
    }

    #[test]
    fn the_monotonic_clock_follows_the_host_clock_and_never_goes_back() {
        let manual = Arc::new(ManualClock::new(UNIX_EPOCH + Duration::from_secs(100)));
        let clock = GuestClock::new(manual.clone());
        assert_eq!(clock.monotonic(), unix_nanos(&*manual));
        manual.advance(Duration::from_secs(1));
        let later = clock.monotonic();
        assert_eq!(later, unix_nanos(&*manual));
        let stepped_back = GuestClock {
            clock: Arc::new(ManualClock::new(UNIX_EPOCH)),
            last: Arc::clone(&clock.last),
        };
        assert_eq!(stepped_back.monotonic(), later);
        assert_eq!(HostWallClock::now(&clock), Duration::from_secs(101));
    }

    #[test]
    fn the_random_sequence_is_fixed_and_spread() {
        let distinct: std::collections::HashSet<u8> = RANDOM_CYCLE.iter().copied().collect();
        assert_eq!(RANDOM_CYCLE.len(), 1024);
        assert!(distinct.len() > 200, "{} distinct bytes", distinct.len());
    }
}
