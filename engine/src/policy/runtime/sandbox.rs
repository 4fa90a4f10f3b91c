//! The per-call sandbox: the state of one short-lived `Store`, and every
//! bound on what a guest can make the host hold.
//!
//! A policy sees WASI with no preopened directories, no network, no
//! environment and no arguments, and the clocks and randomness described in
//! [`crate::policy::runtime::guest_env`]. Its stdout and stderr are captured and forwarded to
//! `tracing` under the policy's name, as are its `log` calls: at most
//! [`LOG_LINES_PER_CALL`] lines and [`LOG_BYTES_PER_CALL`] bytes a call, each
//! line cut to a few KiB with control characters escaped; the rest is
//! dropped and counted. Its linear memories and tables together are capped by
//! [`MemoryCap`], which remembers when it refused to grow so the call can
//! report [`crate::policy::Fault::MemoryLimit`]; WASI resources, component handles
//! and the bytes one import call may carry are capped too.

use crate::base::text;
use crate::model::bindings::Level;
use crate::model::bindings::strategy::vigil::policy::log;
use crate::policy::error::{Cause, GuestSaid};
use crate::policy::runtime::guest_env::{self, GuestClock};
use std::sync::Arc;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Runs `call` where WASI's synchronous bindings can block: they drive their
/// streams with `Handle::block_on`, which panics on a tokio worker thread. On a
/// multi-thread runtime the worker steps aside (`block_in_place`); on a
/// current-thread runtime the call runs on a scoped plain thread; with no
/// runtime it runs right here.
pub(crate) fn off_runtime<R: Send>(call: impl FnOnce() -> R + Send) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Err(_) => call(),
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(call),
        Ok(_) => std::thread::scope(|scope| {
            scope
                .spawn(call)
                .join()
                .expect("policy call thread panicked")
        }),
    }
}

/// How much a guest may print to each of stdout and stderr in one call;
/// writing more fails in the guest.
const STDIO_CAPACITY: usize = 256 << 10;
/// Lines one call may log (`log` calls and printed lines together); more are
/// dropped and counted.
pub(crate) const LOG_LINES_PER_CALL: u32 = 100;
/// Bytes one call may log; more are dropped and counted.
pub(crate) const LOG_BYTES_PER_CALL: usize = 16 << 10;
/// Longest log line kept; longer ones are cut.
const MAX_LOG_LINE: usize = 2 << 10;
/// How many of the last lines a guest wrote to stderr explain its trap.
const STDERR_LINES_EXPLAINED: usize = 16;
/// Most WASI resources (streams, pollables) and component handles one call
/// may hold at once; creating more traps.
const MAX_RESOURCES: usize = 4096;
/// Most bytes one import call may carry from the guest to the host (a log
/// message, a write to stdout); more traps.
pub(crate) const HOSTCALL_BYTES: usize = 1 << 20;
/// Host memory one table element costs (a reference), counted against the cap.
const TABLE_ELEMENT_BYTES: usize = size_of::<usize>();

/// Caps the host memory one store's instances can make the host allocate:
/// linear memories and tables together.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    limit: usize,
    used: usize,
    hit: bool,
}

impl MemoryCap {
    fn new(limit_bytes: u64) -> Self {
        Self {
            limit: usize::try_from(limit_bytes).unwrap_or(usize::MAX),
            used: 0,
            hit: false,
        }
    }

    /// Counts `bytes` more, or refuses (and remembers refusing) past the limit.
    fn charge(&mut self, bytes: usize, what: &str) -> wasmtime::Result<bool> {
        let after = self.used.saturating_add(bytes);
        if after > self.limit {
            self.hit = true;
            wasmtime::bail!("{what} would pass the memory limit of {} bytes", self.limit);
        }
        self.used = after;
        Ok(true)
    }
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.charge(desired.saturating_sub(current), "growing a memory")
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let elements = desired.saturating_sub(current);
        self.charge(
            elements.saturating_mul(TABLE_ELEMENT_BYTES),
            "growing a table",
        )
    }
}

/// What one call may still log, and what it could not.
#[derive(Debug)]
struct LogBudget {
    lines: u32,
    bytes: usize,
    dropped: u64,
}

impl LogBudget {
    fn new() -> Self {
        Self {
            lines: LOG_LINES_PER_CALL,
            bytes: LOG_BYTES_PER_CALL,
            dropped: 0,
        }
    }

    /// Takes one line of `len` bytes from the budget, if it allows.
    fn take(&mut self, len: usize) -> bool {
        if self.lines == 0 || len > self.bytes {
            self.dropped += 1;
            return false;
        }
        self.lines -= 1;
        self.bytes -= len;
        true
    }
}

/// The state of one call's store.
pub(crate) struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    label: Arc<str>,
    clock: GuestClock,
    log: LogBudget,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl Sandbox {
    /// A sandbox for one call to the policy named by `label` (`name@version`),
    /// seeing `clock`.
    pub(crate) fn new(label: Arc<str>, memory_bytes: u64, clock: GuestClock) -> Self {
        let stdout = MemoryOutputPipe::new(STDIO_CAPACITY);
        let stderr = MemoryOutputPipe::new(STDIO_CAPACITY);
        let mut builder = WasiCtxBuilder::new();
        builder
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        guest_env::configure(&mut builder, &clock);
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        Self {
            wasi: builder.build(),
            table,
            memory: MemoryCap::new(memory_bytes),
            label,
            clock,
            log: LogBudget::new(),
            stdout,
            stderr,
        }
    }

    /// Applies the per-store bounds that live on the store itself.
    pub(crate) fn bound(store: &mut Store<Self>) {
        store.limiter(|sandbox| &mut sandbox.memory);
        store.set_hostcall_fuel(HOSTCALL_BYTES);
        store.set_max_component_handles(MAX_RESOURCES);
    }

    pub(in crate::policy) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    pub(in crate::policy) fn clock(&self) -> &GuestClock {
        &self.clock
    }

    /// Whether the memory cap refused a grow during this call.
    pub(crate) fn memory_limit_hit(&self) -> bool {
        self.memory.hit
    }

    /// Log lines this call could not write (over its budget).
    pub(crate) fn log_lines_dropped(&self) -> u64 {
        self.log.dropped
    }

    /// Writes one line the guest logged or printed, within the call's budget,
    /// control characters escaped so a line cannot forge another.
    pub(in crate::policy) fn emit(
        &mut self,
        level: Level,
        stream: Option<&'static str>,
        line: &str,
    ) {
        let line = text::bounded(line, MAX_LOG_LINE);
        if !self.log.take(line.len()) {
            return;
        }
        let policy = &*self.label;
        let stream = stream.unwrap_or("log");
        match level {
            Level::Trace => tracing::trace!(policy, stream, "{line}"),
            Level::Debug => tracing::debug!(policy, stream, "{line}"),
            Level::Info => tracing::info!(policy, stream, "{line}"),
            Level::Warn => tracing::warn!(policy, stream, "{line}"),
            Level::Error => tracing::error!(policy, stream, "{line}"),
        }
    }

    /// `cause` of a trap, with the last lines the guest wrote to stderr in
    /// front if it wrote any: a panic's or an exception's own message.
    pub(crate) fn explain(&self, cause: Cause) -> Cause {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return cause;
        }
        let last = &lines[lines.len().saturating_sub(STDERR_LINES_EXPLAINED)..];
        Box::new(GuestSaid {
            said: text::bounded(&last.join(" | "), MAX_LOG_LINE),
            source: cause,
        })
    }

    /// Forwards what the guest printed to the log, a line at a time, as
    /// info; its stderr as debug if `explained` (the fault carries its last
    /// lines already).
    pub(crate) fn forward_stdio(&mut self, explained: bool) {
        let stderr_level = if explained { Level::Debug } else { Level::Info };
        for (stream, pipe, level) in [
            ("stdout", self.stdout.clone(), Level::Info),
            ("stderr", self.stderr.clone(), stderr_level),
        ] {
            let bytes = pipe.contents();
            for line in String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                self.emit(level, Some(stream), line);
            }
        }
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl log::Host for Sandbox {
    fn log(&mut self, level: Level, message: String) {
        self.emit(level, None, &message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_memories_share_one_cap() {
        use wasmtime::ResourceLimiter;
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 512 << 10, None).unwrap());
        let elements = (512 << 10) / TABLE_ELEMENT_BYTES;
        assert!(cap.table_growing(0, elements, None).unwrap());
        assert!(!cap.hit);
        assert!(cap.table_growing(elements, elements + 1, None).is_err());
        assert!(cap.hit);
    }

    #[test]
    fn a_guest_growing_a_table_hits_the_memory_cap() {
        let grower = wat::parse_str(
            r#"(component
                (core module $m
                  (table $t 1 funcref)
                  (func (export "grow") (result i32)
                    (loop $again
                      (br_if $again
                        (i32.ne (table.grow $t (ref.null func) (i32.const 65536)) (i32.const -1))))
                    (table.size $t)))
                (core instance $i (instantiate $m))
                (func (export "grow") (result u32) (canon lift (core func $i "grow"))))"#,
        )
        .unwrap();
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        let engine = wasmtime::Engine::new(&config).unwrap();
        let component = wasmtime::component::Component::new(&engine, grower).unwrap();
        let clock = GuestClock::new(Arc::new(crate::base::clock::SystemClock));
        let mut store = Store::new(&engine, Sandbox::new("grower".into(), 4 << 20, clock));
        Sandbox::bound(&mut store);
        let linker = wasmtime::component::Linker::<Sandbox>::new(&engine);
        let instance = linker.instantiate(&mut store, &component).unwrap();
        let grow = instance
            .get_typed_func::<(), (u32,)>(&mut store, "grow")
            .unwrap();
        assert!(grow.call(&mut store, ()).is_err());
        assert!(store.data().memory_limit_hit());
        assert!(store.data().memory.used <= 4 << 20);
    }

    #[test]
    fn a_call_logs_within_its_budget_and_counts_the_rest() {
        let mut budget = LogBudget::new();
        let taken = (0..LOG_LINES_PER_CALL + 50)
            .filter(|_| budget.take(10))
            .count();
        assert_eq!(taken, LOG_LINES_PER_CALL as usize);
        assert_eq!(budget.dropped, 50);
        let mut budget = LogBudget::new();
        assert!(budget.take(LOG_BYTES_PER_CALL - 1));
        assert!(!budget.take(2));
        assert!(budget.take(1));
    }
}
