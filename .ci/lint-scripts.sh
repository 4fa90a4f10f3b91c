#!/usr/bin/env bash
# Scripts are code: every tracked shell script (and .ci/run) through
# Debian's shellcheck, following what each sources, and every tracked Python
# file through ruff (PyPI, pinned, in a venv under target/toolchains/), both
# clean. Installs what it lacks with the project's own function (its
# progress on stderr); ~2 s once installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../examples/policies/toolchain/toolchain.sh
source examples/policies/toolchain/toolchain.sh
need_debian_packages shellcheck
venv=target/toolchains/lint
if [ ! -x "$venv/bin/ruff" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check ruff==0.17.5 >&2
fi
mapfile -t shell < <(git ls-files '*.sh' .ci/run)
mapfile -t python < <(git ls-files '*.py')
shellcheck -x --source-path=SCRIPTDIR "${shell[@]}"
"$venv/bin/ruff" check --quiet --output-format concise "${python[@]}"
echo "lint: ${#shell[@]} shell scripts and ${#python[@]} Python files clean"
