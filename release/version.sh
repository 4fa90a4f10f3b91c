#!/usr/bin/env bash
# Prints the workspace's version (Cargo.toml's `workspace.package.version`):
# the one place the scripts read it from.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])'
