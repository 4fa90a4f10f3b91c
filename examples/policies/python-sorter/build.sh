#!/usr/bin/env bash
# Builds python-sorter.wasm from sorter.py with componentize-py (from PyPI).
POLICY=python-sorter
source "$(dirname "$0")/../toolchain/toolchain.sh"
build_python_policy "$POLICY" sorter candidate-sorter
