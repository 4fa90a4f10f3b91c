//! The `vigil` binary: parses the command line and hands it to [`vigil::cli::run`].

use clap::Parser;
use std::io::IsTerminal;
use std::time::Duration;
use tracing_subscriber::EnvFilter;
use vigil::cli::{Cli, LogFormat};

/// How long the exit waits for work left on blocking threads (a policy
/// compile abandoned at shutdown) before the process ends anyway.
const EXIT_GRACE: Duration = Duration::from_secs(1);

fn main() -> std::process::ExitCode {
    return_large_frees();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot start the async runtime");
    let code = runtime.block_on(run());
    runtime.shutdown_timeout(EXIT_GRACE);
    code
}

/// Makes glibc map every allocation over 128 KiB on its own and unmap it on
/// free. By default glibc raises that threshold after the first such free,
/// so the 12-18 MB buffers a policy version passes through (read, digested,
/// pulled) land in the heap and stay the process's after they are freed:
/// ~30 MiB of anonymous memory with a JS and a Python policy, measured by
/// `benches/precompiled_memory.rs`, in an agent limited to 128 MiB.
fn return_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator; called first
    // thing in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Lets a closed stdout end the process as it ends `cat` or `grep`
/// (`vigil simulate … | head`), instead of a panic in `println!`. Rust
/// ignores SIGPIPE so that a write to a closed socket is an error; only
/// commands that print and end take the default back, never the agent.
fn end_quietly_when_the_reader_goes() {
    // SAFETY: restores the default disposition of one signal; no handler
    // runs, and nothing in this process relies on SIGPIPE being ignored
    // outside the agent (sockets are written with MSG_NOSIGNAL anyway).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

async fn run() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !cli.is_daemon() {
        end_quietly_when_the_reader_goes();
    }
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(cli.default_log_level()));
    // Colour only for a person at a terminal, not in a container's log.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    match vigil::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
