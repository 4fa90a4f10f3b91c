#!/usr/bin/env bash
# Builds python-psi-strategy.wasm from strategy.py with componentize-py (from
# PyPI), which bundles CPython into the component.
POLICY=python-psi-strategy
source "$(dirname "$0")/../toolchain/toolchain.sh"
here="$ROOT/examples/policies/$POLICY"
out="$here/$POLICY.wasm"
skip_if_fresh "$out" "$here/strategy.py" "$here/build.sh"
need_python_tools
(cd "$ROOT/target" && PYTHONDONTWRITEBYTECODE=1 componentize-py --wit-path "$WIT" --world eviction-strategy \
  componentize --python-path "$here" strategy -o "$out.tmp")
publish "$out.tmp" "$out" "$here/strategy.py" "$here/build.sh"
