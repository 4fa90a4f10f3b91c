#!/usr/bin/env bash
# Builds js-sorter-v2.wasm, the next version of js-sorter, to try in shadow
# before it serves (docs/policies.md): the same refusals, the candidates in
# the reverse of the strategies' order (the least urgent first). Its source
# is js-sorter's sorter.js with that one line changed, made here so the two
# versions never drift apart in anything else.
set -euo pipefail
POLICY=js-sorter-v2
source "$(dirname "$0")/../toolchain/toolchain.sh"
generated="$ROOT/target/js-sorter-v2/sorter.js"
mkdir -p "$(dirname "$generated")"
sed 's|return { order, rejected };|return { order: order.reverse(), rejected };|' \
  "$ROOT/examples/policies/js-sorter/sorter.js" >"$generated.tmp"
grep -q 'order: order.reverse()' "$generated.tmp" || {
  echo "js-sorter-v2: js-sorter's sorter.js no longer ends its sort with 'return { order, rejected };'" >&2
  exit 1
}
mv "$generated.tmp" "$generated"
build_js_policy "$POLICY" "$generated" candidate-sorter
