#!/usr/bin/env bash
# Builds js-sorter.wasm from sorter.js with componentize-js (from npm). WASI
# features the policy does not use are left out, so it imports only `log`.
POLICY=js-sorter
source "$(dirname "$0")/../toolchain/toolchain.sh"
here="$ROOT/examples/policies/$POLICY"
out="$here/$POLICY.wasm"
skip_if_fresh "$out" "$here/sorter.js" "$here/build.sh"
need_js_tools
componentize-js "$here/sorter.js" --wit "$WIT" --world-name candidate-sorter \
  --disable stdio random clocks http fetch-event -o "$out.tmp"
publish "$out.tmp" "$out" "$here/sorter.js" "$here/build.sh"
