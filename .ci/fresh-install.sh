#!/usr/bin/env bash
# The fresh-machine path of every install step: scripts that source
# examples/policies/toolchain/toolchain.sh answer on stdout (tests/node/up.sh
# prints the cluster's JSON line there), so installing a Debian package that
# is missing must write nothing to stdout. A machine where an earlier run
# installed the suites' packages never takes that path; this check takes it
# with a package no step of the project needs (Debian's `hello`, ~50 KB),
# installs it with the project's own function, and removes it again.
set -euo pipefail
cd "$(dirname "$0")/.."
package=hello
if dpkg -s "$package" >/dev/null 2>&1; then
    echo "fresh-install: $package is installed already; this check needs it absent" >&2
    exit 1
fi
trap 'apt-get -o DPkg::Lock::Timeout=600 purge -y -q "$package" >/dev/null 2>&1 || true' EXIT
out=$(bash -c 'source examples/policies/toolchain/toolchain.sh && need_debian_packages "$1"' _ "$package" 2>/dev/null)
dpkg -s "$package" >/dev/null 2>&1 || { echo "fresh-install: $package was not installed" >&2; exit 1; }
if [[ -n $out ]]; then
    printf 'fresh-install: installing a missing package wrote to stdout:\n%s\n' "$out" >&2
    exit 1
fi
echo "fresh-install: a missing package installs with stdout silent"
