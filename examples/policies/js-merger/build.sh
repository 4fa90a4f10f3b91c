#!/usr/bin/env bash
# Builds js-merger.wasm from merger.js with componentize-js (from npm). WASI
# features the policy does not use are left out, so it imports only `log`.
POLICY=js-merger
source "$(dirname "$0")/../toolchain/toolchain.sh"
here="$ROOT/examples/policies/$POLICY"
out="$here/$POLICY.wasm"
skip_if_fresh "$out" "$here/merger.js" "$here/build.sh"
need_js_tools
componentize-js "$here/merger.js" --wit "$WIT" --world-name config-merger \
  --disable stdio random clocks http fetch-event -o "$out.tmp"
publish "$out.tmp" "$out" "$here/merger.js" "$here/build.sh"
