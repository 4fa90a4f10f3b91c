#!/usr/bin/env bash
# Tests __NAME__.wasm (run ./build.sh first): `vigil policy check` loads it as
# the agent would and makes the canary call; then each test/NAME.input.json
# goes through `vigil policy test`, whose answer must equal
# test/NAME.expected.json. Add cases by adding input files (a pod needs only
# the fields your case is about: see "Testing a policy alone" in the guide),
# then `./test.sh --record` writes each input's current answer as its expected
# file, for you to review. Compiled components are kept in vigil's cache
# ($VIGIL_CACHE_DIR, else $XDG_CACHE_HOME/vigil/components, else
# ~/.cache/vigil/components), so a second run of an unchanged policy takes a
# fraction of a second.
set -euo pipefail
cd "$(dirname "$0")"
vigil=${VIGIL:-vigil}
if ! command -v "$vigil" >/dev/null; then
  echo "test.sh: no $vigil command. Put vigil on PATH (from vigil's repository:" >&2
  echo "  cargo install --path engine), or name the binary: VIGIL=/path/to/vigil ./test.sh" >&2
  exit 127
fi
record=()
case "${1:-}" in
  --record) record=(--record) ;;
  "") ;;
  *) echo "usage: ./test.sh [--record]" >&2; exit 2 ;;
esac
"$vigil" policy check __NAME__.wasm
answer=$(mktemp)
trap 'rm -f "$answer"' EXIT
for input in test/*.input.json; do
  if [ ${#record[@]} -gt 0 ]; then
    "$vigil" policy test __NAME__.wasm --input "$input" --record || true
    continue
  fi
  expected=${input%.input.json}.expected.json
  if [ ! -f "$expected" ]; then
    echo "FAILED $input: no $expected yet (./test.sh --record writes it, for review)" >&2
    exit 1
  fi
  "$vigil" policy test __NAME__.wasm --input "$input" >"$answer" || true
  python3 - "$expected" "$answer" <<'PY'
import json, sys
expected, answer = (json.load(open(path)) for path in sys.argv[1:])
if expected != answer:
    sys.exit(f"FAILED {sys.argv[1]}:\n  expected {json.dumps(expected)}\n  got      {json.dumps(answer)}")
PY
  echo "ok: $input"
done
