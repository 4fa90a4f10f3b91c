#!/usr/bin/env bash
# Builds python-psi-strategy.wasm from strategy.py with componentize-py (from PyPI).
POLICY=python-psi-strategy
source "$(dirname "$0")/../toolchain/toolchain.sh"
build_python_policy "$POLICY" strategy eviction-strategy
