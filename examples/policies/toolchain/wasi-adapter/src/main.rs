//! `wasi-adapter OUT`: writes the WASI preview1 reactor adapter of the
//! wasmtime release vigil links (48.0.8) to `OUT`, for
//! `wasm-tools component new --adapt wasi_snapshot_preview1=OUT`.
//!
//! wasi-libc's stdio calls preview1 functions (`fd_write`, ...); the adapter
//! implements them over WASI preview2, which the host links with nothing granted.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: wasi-adapter OUT");
        return ExitCode::FAILURE;
    };
    let adapter = wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
    match std::fs::write(&out, adapter) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cannot write {}: {error}", out.to_string_lossy());
            ExitCode::FAILURE
        }
    }
}
