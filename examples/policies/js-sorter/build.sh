#!/usr/bin/env bash
# Builds js-sorter.wasm from sorter.js with componentize-js (from npm).
POLICY=js-sorter
source "$(dirname "$0")/../toolchain/toolchain.sh"
build_js_policy "$POLICY" sorter.js candidate-sorter
