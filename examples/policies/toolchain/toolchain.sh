# shellcheck shell=bash
# Shared by the example policies' build scripts (sourced, not run): where things
# are, installing each toolchain from the package registries once, and skipping a
# build whose inputs have not changed.
#
# Toolchains go under target/toolchains/ (a Python venv, an npm prefix, a cargo
# root), except the C compiler, which comes from Debian's packages, and Go,
# the machine's own.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
WIT="$ROOT/wit"
TOOLCHAIN="$ROOT/examples/policies/toolchain"
TOOLS="$ROOT/target/toolchains"
mkdir -p "$TOOLS/stamps"

say() { printf '%s: %s\n' "${POLICY:-toolchain}" "$*" >&2; }

# The digest of everything a component is built from: the given files, the WIT
# contract and this toolchain's pins.
inputs_digest() {
  cat "$@" "$WIT"/*.wit "$TOOLCHAIN"/toolchain.sh "$TOOLCHAIN"/requirements.txt \
    "$TOOLCHAIN"/package-lock.json | sha256sum | cut -d' ' -f1
}

# Exits the build script when OUT exists and was built from exactly these inputs.
skip_if_fresh() {
  local out=$1
  shift
  local stamp
  stamp="$TOOLS/stamps/$(basename "$out").inputs"
  if [[ -f $out && -f $stamp && $(cat "$stamp") == "$(inputs_digest "$@")" ]]; then
    say "up to date"
    exit 0
  fi
}

# Moves the freshly built TMP over OUT (one rename, so a watching agent never
# sees half a file) and records what it was built from.
publish() {
  local tmp=$1 out=$2
  shift 2
  mv "$tmp" "$out"
  inputs_digest "$@" >"$TOOLS/stamps/$(basename "$out").inputs"
  say "wrote $out ($(stat -c %s "$out") bytes)"
}

# componentize-py and wasm-tools from PyPI, in a venv.
need_python_tools() {
  local venv="$TOOLS/python"
  if ! cmp -s "$TOOLCHAIN/requirements.txt" "$venv/requirements.txt"; then
    say "installing componentize-py and wasm-tools from PyPI"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$TOOLCHAIN/requirements.txt"
    cp "$TOOLCHAIN/requirements.txt" "$venv/requirements.txt"
  fi
  export PATH="$venv/bin:$PATH"
}

# componentize-js from npm, as locked.
need_js_tools() {
  local prefix="$TOOLS/js"
  if ! cmp -s "$TOOLCHAIN/package-lock.json" "$prefix/package-lock.json"; then
    say "installing componentize-js from npm"
    mkdir -p "$prefix"
    cp "$TOOLCHAIN/package.json" "$TOOLCHAIN/package-lock.json" "$prefix/"
    # `npm ci` refuses this lock: the registry mirror lacks some optional
    # platform packages the lock would list. `npm install` follows the lock.
    (cd "$prefix" && npm install --no-audit --no-fund --loglevel=error)
  fi
  export PATH="$prefix/node_modules/.bin:$PATH"
}

# Installs the given Debian packages unless they are all there. apt-get's
# progress goes to stderr: scripts that source this one answer on stdout
# (tests/node/up.sh's JSON line), and an install on a fresh machine must not
# speak there.
need_debian_packages() {
  if ! dpkg -s "$@" >/dev/null 2>&1; then
    say "installing $* from Debian"
    local sudo=()
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    # Waits for another install (CI prepares the release beside the tests).
    local apt=("${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600)
    {
      "${apt[@]}" install -y --no-install-recommends "$@" ||
        { "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends "$@"; }
    } >&2
  fi
}

# The CNCF distribution registry from Debian, which the tests start on
# loopback to publish and pull policies, with openssl for its certificates and
# htpasswd (apache2-utils) for its users. Its packaged service would listen on
# every interface: where systemd runs, it is stopped and disabled.
need_registry_tools() {
  need_debian_packages openssl apache2-utils
  if ! dpkg -s docker-registry >/dev/null 2>&1; then
    need_debian_packages docker-registry
    if [[ -d /run/systemd/system ]]; then
      local sudo=()
      [[ $(id -u) == 0 ]] || sudo=(sudo)
      "${sudo[@]}" systemctl disable --now docker-registry.service || true
    fi
  fi
}

# clang and wasi-libc from Debian; wit-bindgen from crates.io; wasm-tools from
# PyPI; the WASI preview1 reactor adapter from the crate of vigil's wasmtime.
need_c_tools() {
  need_debian_packages clang lld wasi-libc libclang-rt-14-dev-wasm32
  need_bindings_and_adapter
}

# wit-bindgen from crates.io (C and Go bindings), wasm-tools from PyPI and
# the WASI preview1 reactor adapter (in $ADAPTER).
need_bindings_and_adapter() {
  if [[ $("$TOOLS/cargo/bin/wit-bindgen" --version 2>/dev/null) != "wit-bindgen-cli 0.63.0"* ]]; then
    say "installing wit-bindgen-cli from crates.io (a few minutes, once)"
    cargo install --quiet wit-bindgen-cli --version 0.63.0 --locked --root "$TOOLS/cargo"
  fi
  export PATH="$TOOLS/cargo/bin:$PATH"
  need_python_tools
  ADAPTER="$TOOLS/wasi_snapshot_preview1.reactor.wasm"
  cargo run --quiet --manifest-path "$ROOT/Cargo.toml" -p wasi-adapter -- "$ADAPTER"
}

# The machine's own Go, 1.25 or newer (`//go:wasmexport`, and the `go` line of
# the module wit-bindgen writes), with the tools above.
need_go_tools() {
  local version
  version=$(go env GOVERSION 2>/dev/null) || {
    say "Go policies need Go 1.25 or newer on PATH; no go command was found"
    exit 1
  }
  if [[ ! $version =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 25)); then
    say "Go policies need Go 1.25 or newer; this is $version"
    exit 1
  fi
  need_bindings_and_adapter
}

# Builds the Go policy NAME from SOURCE (in its folder) for WORLD: bindings
# from `wit-bindgen go` in a module of their own under target/, SOURCE as
# the package PACKAGE their exports call, the WIT runtime package from
# go-wit/ (see its go.mod), then the stock Go toolchain for a wasip1
# reactor (`-buildmode=c-shared`) and `wasm-tools component new` with the
# reactor adapter, allocating with memory.grow: the adapter's first call
# comes while the Go runtime is still starting, before Go can allocate.
build_go_policy() {
  local name=$1 source=$2 world=$3 package=$4
  local here="$ROOT/examples/policies/$name"
  local out="$here/$name.wasm"
  local runtime="$TOOLCHAIN/go-wit"
  skip_if_fresh "$out" "$here/$source" "$here/build.sh" "$runtime"/go.mod "$runtime"/wit/*/*.go
  need_go_tools
  local work="$ROOT/target/policies/$name"
  rm -rf "$work" && mkdir -p "$work/$package"
  # (wit-bindgen names each file it writes on stderr: shown only if it fails)
  local generated
  generated=$(wit-bindgen go "$WIT" --world "$world" --out-dir "$work" 2>&1) || {
    printf '%s\n' "$generated" >&2
    exit 1
  }
  cp "$here/$source" "$work/$package/"
  printf 'replace go.bytecodealliance.org/pkg => %s\n' "$runtime" >>"$work/go.mod"
  (cd "$work" && GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared \
    -ldflags=-s -o core.wasm .)
  wasm-tools component embed "$WIT" --world "$world" "$work/core.wasm" -o "$work/embedded.wasm"
  wasm-tools component new "$work/embedded.wasm" --realloc-via-memory-grow \
    --adapt "wasi_snapshot_preview1=$ADAPTER" -o "$work/$name.wasm"
  publish "$work/$name.wasm" "$out" "$here/$source" "$here/build.sh" "$runtime"/go.mod "$runtime"/wit/*/*.go
}

# Builds the JavaScript policy NAME from SOURCE (in its folder, or a path) for WORLD with
# componentize-js. WASI features a policy has no use for are left out; stdio
# stays, so an exception's message and stack written to stderr reach vigil's
# fault report.
build_js_policy() {
  local name=$1 source=$2 world=$3
  local here="$ROOT/examples/policies/$name"
  local out="$here/$name.wasm"
  # SOURCE is in the policy's folder, or a path of its own (a generated one).
  [[ $source == /* ]] || source="$here/$source"
  skip_if_fresh "$out" "$source" "$here/build.sh"
  need_js_tools
  componentize-js "$source" --wit "$WIT" --world-name "$world" \
    --disable random clocks http fetch-event -o "$out.tmp"
  publish "$out.tmp" "$out" "$source" "$here/build.sh"
}

# Builds the Python policy NAME from MODULE.py (in its folder) for WORLD with
# componentize-py, which bundles CPython into the component.
build_python_policy() {
  local name=$1 module=$2 world=$3
  local here="$ROOT/examples/policies/$name"
  local out="$here/$name.wasm"
  skip_if_fresh "$out" "$here/$module.py" "$here/build.sh"
  need_python_tools
  (cd "$ROOT/target" && componentize-py --wit-path "$WIT" --world "$world" \
    componentize --python-path "$here" "$module" -o "$out.tmp")
  publish "$out.tmp" "$out" "$here/$module.py" "$here/build.sh"
}
