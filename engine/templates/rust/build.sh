#!/usr/bin/env bash
# Builds __NAME__.wasm from src/lib.rs: Rust's wasm32-wasip2 target makes a
# component directly.
set -euo pipefail
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --quiet --release --target wasm32-wasip2
target=${CARGO_TARGET_DIR:-target}
cp "$target/wasm32-wasip2/release/__CRATE__.wasm" __NAME__.wasm.tmp
mv __NAME__.wasm.tmp __NAME__.wasm
__SERVE__echo "wrote __NAME__.wasm ($(stat -c %s __NAME__.wasm) bytes)"
