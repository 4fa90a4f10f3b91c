#!/usr/bin/env bash
# Measures, for each language, the author's loop from nothing to a visible
# effect: `vigil policy new` a sorter, `./build.sh`, `vigil simulate
# scenario.yaml` (a cold component cache, so a JS or Python component is
# compiled; a fresh Cargo target, so Rust compiles wit-bindgen too), and
# prints the seconds each took. Uses the toolchains the example policies'
# build installed. Usage: time-to-effect.sh [VIGIL] (default: the release build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
vigil=$(realpath "${1:-$root/target/release/vigil}")
export VIGIL_TOOLCHAINS=$root/target/toolchains
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for lang in rust c js python; do
  start=$(date +%s.%N)
  (cd "$work" && "$vigil" policy new "first-$lang" --world sorter --lang "$lang" >/dev/null)
  (cd "$work/first-$lang" && CARGO_TARGET_DIR=$work/target-$lang ./build.sh >/dev/null 2>&1)
  built=$(date +%s.%N)
  (cd "$work/first-$lang" && "$vigil" simulate scenario.yaml --cache-dir "$work/cache-$lang" 2>/dev/null) |
    grep -q "sorter first-$lang refused kube-system/node-cache"
  done_at=$(date +%s.%N)
  awk -v lang="$lang" -v s="$start" -v b="$built" -v d="$done_at" 'BEGIN {
    printf "%-7s new+build %5.1f s  simulate %5.1f s  total %5.1f s\n", lang, b - s, d - b, d - s }'
done
