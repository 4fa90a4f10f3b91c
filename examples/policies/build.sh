#!/usr/bin/env bash
# Builds every example policy (each with its own build.sh, which installs its
# toolchain from the package registries the first time and skips an unchanged
# policy). The components land next to their sources, e.g. c-sorter/c-sorter.wasm.
# It also installs the OCI registry the tests publish policies to.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=toolchain/toolchain.sh
source "$here/toolchain/toolchain.sh"
need_registry_tools
for script in "$here"/*/build.sh; do
  bash "$script"
done
