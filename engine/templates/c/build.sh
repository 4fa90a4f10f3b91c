#!/usr/bin/env bash
# Builds __NAME__.wasm from policy.c: bindings from `wit-bindgen c`, clang and
# wasi-libc for a reactor core module, then `wasm-tools component new` with the
# WASI preview1 reactor adapter that `vigil policy new` wrote here (wasi-libc's
# stdio speaks preview1).
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=/dev/null  # written beside this script by `vigil policy new`
source ./toolchain.sh
need_c_tools
rm -rf build && mkdir -p build
wit-bindgen c wit --world __WORLD__ --out-dir build/gen >/dev/null
clang --target=wasm32-wasi -O2 -Wall -Wextra -Werror -mexec-model=reactor \
  -I build/gen -o build/core.wasm \
  policy.c build/gen/__CWORLD__.c build/gen/__CWORLD___component_type.o
wasm-tools component new build/core.wasm \
  --adapt wasi_snapshot_preview1=wasi_snapshot_preview1.reactor.wasm -o build/__NAME__.wasm
mv build/__NAME__.wasm __NAME__.wasm
__SERVE__echo "wrote __NAME__.wasm ($(stat -c %s __NAME__.wasm) bytes)"
