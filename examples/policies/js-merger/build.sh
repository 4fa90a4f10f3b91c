#!/usr/bin/env bash
# Builds js-merger.wasm from merger.js with componentize-js (from npm).
POLICY=js-merger
source "$(dirname "$0")/../toolchain/toolchain.sh"
build_js_policy "$POLICY" merger.js config-merger
