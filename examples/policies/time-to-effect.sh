#!/usr/bin/env bash
# Measures, for each language, the author's loop from nothing to a visible
# effect: `vigil policy new` a sorter and `./build.sh` it (a fresh Cargo
# target, so Rust compiles wit-bindgen too), then `vigil simulate
# scenario.yaml` with an empty component cache (a JS or Python component is
# compiled) and again with nothing changed (it loads from the cache). Prints a
# Markdown table row per language, in seconds. Uses the toolchains the example
# policies' build installed.
# Usage: time-to-effect.sh [VIGIL] (default: the release build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
vigil=$(realpath "${1:-$root/target/release/vigil}")
export VIGIL_TOOLCHAINS=$root/target/toolchains
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
echo "| $(basename "$(dirname "$vigil")") binary | new + build | simulate, cold cache | simulate again, cached | new → effect |"
echo "|---|---|---|---|---|"
for lang in rust c js python go; do
  export VIGIL_CACHE_DIR=$work/cache-$lang
  start=$(now)
  (cd "$work" && "$vigil" policy new "first-$lang" --world sorter --lang "$lang" >/dev/null)
  (cd "$work/first-$lang" && CARGO_TARGET_DIR=$work/target-$lang ./build.sh >/dev/null 2>&1)
  built=$(now)
  (cd "$work/first-$lang" && "$vigil" simulate scenario.yaml) | grep -q -- "-> evict default/warmer"
  cold=$(now)
  (cd "$work/first-$lang" && "$vigil" simulate scenario.yaml) | grep -q -- "-> evict default/warmer"
  cached=$(now)
  awk -v lang="$lang" -v s="$start" -v b="$built" -v c="$cold" -v d="$cached" 'BEGIN {
    printf "| %s | %.1f s | %.1f s | %.2f s | %.1f s |\n", lang, b - s, c - b, d - c, c - s }'
done
