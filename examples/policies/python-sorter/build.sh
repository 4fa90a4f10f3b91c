#!/usr/bin/env bash
# Builds python-sorter.wasm from sorter.py with componentize-py (from PyPI),
# which bundles CPython into the component.
POLICY=python-sorter
source "$(dirname "$0")/../toolchain/toolchain.sh"
here="$ROOT/examples/policies/$POLICY"
out="$here/$POLICY.wasm"
skip_if_fresh "$out" "$here/sorter.py" "$here/build.sh"
need_python_tools
(cd "$ROOT/target" && PYTHONDONTWRITEBYTECODE=1 componentize-py --wit-path "$WIT" --world candidate-sorter \
  componentize --python-path "$here" sorter -o "$out.tmp")
publish "$out.tmp" "$out" "$here/sorter.py" "$here/build.sh"
