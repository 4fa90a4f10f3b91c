#!/usr/bin/env bash
# Builds __NAME__.wasm from policy.py with componentize-py, which bundles
# CPython into the component.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=/dev/null  # written beside this script by `vigil policy new`
source ./toolchain.sh
need_python_tools
mkdir -p build
componentize-py --wit-path wit --world __WORLD__ componentize --python-path . policy -o build/__NAME__.wasm
mv build/__NAME__.wasm __NAME__.wasm
__SERVE__echo "wrote __NAME__.wasm ($(stat -c %s __NAME__.wasm) bytes)"
