#!/usr/bin/env bash
# Builds go-sorter.wasm from sorter.go with the stock Go toolchain: bindings
# from `wit-bindgen go`, a wasip1 reactor core module, then `wasm-tools
# component new` with the WASI preview1 reactor adapter (toolchain.sh's
# build_go_policy says why each step).
POLICY=go-sorter
source "$(dirname "$0")/../toolchain/toolchain.sh"
build_go_policy "$POLICY" sorter.go candidate-sorter export_vigil_policy_sorter
