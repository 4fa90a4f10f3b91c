#!/usr/bin/env bash
# Builds __NAME__.wasm from policy.go with the stock Go toolchain (1.24 or
# newer): bindings from `wit-bindgen go` in build/, a module of their own in
# which policy.go is the package their exports call and go-wit/ the WIT
# runtime package they import; a wasip1 reactor core module; then
# `wasm-tools component new` with the WASI preview1 reactor adapter that
# `vigil policy new` wrote here, allocating with memory.grow (the adapter's
# first call comes while the Go runtime is still starting).
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=/dev/null  # written beside this script by `vigil policy new`
source ./toolchain.sh
need_go_tools
rm -rf build && mkdir -p build/__GOPACKAGE__
# (wit-bindgen names each file it writes on stderr: shown only if it fails)
generated=$(wit-bindgen go wit --world __WORLD__ --out-dir build 2>&1) || {
  printf '%s\n' "$generated" >&2
  exit 1
}
cp policy.go build/__GOPACKAGE__/
printf 'replace go.bytecodealliance.org/pkg => %s\n' "$PWD/go-wit" >>build/go.mod
(cd build && GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared \
  -ldflags=-s -o core.wasm .)
wasm-tools component embed wit --world __WORLD__ build/core.wasm -o build/embedded.wasm
wasm-tools component new build/embedded.wasm --realloc-via-memory-grow \
  --adapt wasi_snapshot_preview1=wasi_snapshot_preview1.reactor.wasm -o build/__NAME__.wasm
mv build/__NAME__.wasm __NAME__.wasm
__SERVE__echo "wrote __NAME__.wasm ($(stat -c %s __NAME__.wasm) bytes)"
