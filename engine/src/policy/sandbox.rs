//! The per-call sandbox: the state of one short-lived `Store`.
//!
//! A policy sees WASI with no preopened directories, no network, no
//! environment and no arguments; its stdout and stderr are captured and
//! forwarded to `tracing` under the policy's name, as are its `log` calls. Its
//! linear memory is capped by [`MemoryCap`], which remembers when it refused
//! to grow so the call can report [`super::Fault::MemoryLimit`].

use super::bindings::Level;
use super::bindings::strategy::vigil::policy::log;
use std::sync::Arc;
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

/// How much a guest may print in one call; more is a fault.
const STDIO_CAPACITY: usize = 256 << 10;
/// Longest log message kept; longer ones are cut.
const MAX_LOG_MESSAGE: usize = 4 << 10;

/// Caps the total linear memory of one store.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    limit: usize,
    used: usize,
    hit: bool,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.used + desired.saturating_sub(current);
        if after > self.limit {
            self.hit = true;
            wasmtime::bail!("memory limit of {} bytes reached", self.limit);
        }
        self.used = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far beyond any honest policy.
        Ok(desired <= 1_000_000)
    }
}

/// The state of one call's store.
pub(crate) struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    label: Arc<str>,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl Sandbox {
    /// A sandbox for one call to the policy named by `label` (`name@version`).
    pub(crate) fn new(label: Arc<str>, memory_bytes: u64) -> Self {
        let stdout = MemoryOutputPipe::new(STDIO_CAPACITY);
        let stderr = MemoryOutputPipe::new(STDIO_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap {
                limit: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
                used: 0,
                hit: false,
            },
            label,
            stdout,
            stderr,
        }
    }

    /// Whether the memory cap refused a grow during this call.
    pub(crate) fn memory_limit_hit(&self) -> bool {
        self.memory.hit
    }

    /// Forwards what the guest printed to the log, a line at a time.
    pub(crate) fn forward_stdio(&self) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            for line in String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                tracing::info!(policy = %self.label, stream, "{line}");
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
    fn log(&mut self, level: Level, mut message: String) {
        if message.len() > MAX_LOG_MESSAGE {
            let cut = (0..=MAX_LOG_MESSAGE)
                .rev()
                .find(|&i| message.is_char_boundary(i))
                .unwrap_or(0);
            message.truncate(cut);
            message.push_str(" [cut]");
        }
        let policy = &*self.label;
        match level {
            Level::Trace => tracing::trace!(policy, "{message}"),
            Level::Debug => tracing::debug!(policy, "{message}"),
            Level::Info => tracing::info!(policy, "{message}"),
            Level::Warn => tracing::warn!(policy, "{message}"),
            Level::Error => tracing::error!(policy, "{message}"),
        }
    }
}
