#!/usr/bin/env bash
# Builds __NAME__.wasm from policy.js with componentize-js. stdio stays
# enabled, so an uncaught exception's message reaches vigil's fault report.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=/dev/null  # written beside this script by `vigil policy new`
source ./toolchain.sh
need_js_tools
componentize-js policy.js --wit wit --world-name __WORLD__ \
  --disable random clocks http fetch-event -o __NAME__.wasm.tmp
mv __NAME__.wasm.tmp __NAME__.wasm
__SERVE__echo "wrote __NAME__.wasm ($(stat -c %s __NAME__.wasm) bytes)"
