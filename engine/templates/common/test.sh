#!/usr/bin/env bash
# Tests __NAME__.wasm (run ./build.sh first): `vigil policy check` loads it as
# the agent would and makes the canary call; then each test/NAME.input.json
# goes through `vigil policy test`, whose answer must equal
# test/NAME.expected.json. Add cases by adding pairs of files; cut inputs from
# `vigil simulate SCENARIO --output json --snapshots`.
set -euo pipefail
cd "$(dirname "$0")"
vigil=${VIGIL:-vigil}
cache=(--cache-dir "${VIGIL_CACHE_DIR:-$HOME/.cache/vigil/components}")
"$vigil" policy check __NAME__.wasm "${cache[@]}"
answer=$(mktemp)
trap 'rm -f "$answer"' EXIT
for input in test/*.input.json; do
  expected=${input%.input.json}.expected.json
  "$vigil" policy test __NAME__.wasm --input "$input" "${cache[@]}" >"$answer" || true
  python3 - "$expected" "$answer" <<'PY'
import json, sys
expected, answer = (json.load(open(path)) for path in sys.argv[1:])
if expected != answer:
    sys.exit(f"FAILED {sys.argv[1]}:\n  expected {json.dumps(expected)}\n  got      {json.dumps(answer)}")
PY
  echo "ok: $input"
done
