#!/usr/bin/env bash
# Builds c-sorter.wasm from sorter.c: bindings from `wit-bindgen c`, Debian's
# clang and wasi-libc for a reactor core module, then `wasm-tools component new`
# with the WASI preview1 reactor adapter (wasi-libc's stdio speaks preview1).
POLICY=c-sorter
source "$(dirname "$0")/../toolchain/toolchain.sh"
here="$ROOT/examples/policies/$POLICY"
out="$here/$POLICY.wasm"
skip_if_fresh "$out" "$here/sorter.c" "$here/build.sh"
need_c_tools
work="$ROOT/target/policies/$POLICY"
rm -rf "$work" && mkdir -p "$work"
wit-bindgen c "$WIT" --world candidate-sorter --out-dir "$work/gen" >/dev/null
clang --target=wasm32-wasi -O2 -Wall -Wextra -Werror -mexec-model=reactor -Wl,--strip-all \
  -I "$work/gen" -o "$work/core.wasm" \
  "$here/sorter.c" "$work/gen/candidate_sorter.c" "$work/gen/candidate_sorter_component_type.o"
wasm-tools component new "$work/core.wasm" --adapt "wasi_snapshot_preview1=$ADAPTER" -o "$work/$POLICY.wasm"
publish "$work/$POLICY.wasm" "$out" "$here/sorter.c" "$here/build.sh"
