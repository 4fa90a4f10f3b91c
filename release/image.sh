#!/usr/bin/env bash
# vigil's image, built with no internet access: a static (musl) release binary
# and the CA certificates in an image FROM scratch (no shell, no package
# manager), one per architecture, gathered in one OCI index, with a CycloneDX
# SBOM of each binary beside it.
#
#   release/image.sh [--arch amd64|arm64|all] [--push REGISTRY/REPOSITORY[:TAG]] [--insecure]
#
# Writes target/image/: vigil-VERSION.oci/ (an OCI image layout holding the
# index), vigil-VERSION-ARCH.cdx.json (the SBOMs) and digest (the index's
# digest). With --push, also pushes the index (every architecture) and prints
# the reference pinned by digest. Installs what it needs: buildah and
# musl-tools (and gcc-aarch64-linux-gnu with libc6-dev-arm64-cross, whose C
# headers ring compiles against, for arm64) from Debian's packages, the
# Rust targets with rustup.
# Images are kept in buildah's vfs storage under target/image/storage, not
# in the machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../examples/policies/toolchain/toolchain.sh
source examples/policies/toolchain/toolchain.sh

arch=amd64
push=
tls=true
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch=$2; shift 2 ;;
        --push) push=$2; shift 2 ;;
        --insecure) tls=false; shift ;;
        *) echo "usage: $0 [--arch amd64|arm64|all] [--push REF] [--insecure]" >&2; exit 2 ;;
    esac
done
case "$arch" in
    all) arches="amd64 arm64" ;;
    amd64|arm64) arches=$arch ;;
    *) echo "unknown architecture $arch (amd64, arm64 or all)" >&2; exit 2 ;;
esac

# What cargo sets for a process it runs (a test, a build script): run from
# one (the node suite prepares the image from its test), these would reach
# the nested build, and build scripts that watch them (ring watches
# CARGO_PKG_NAME, CARGO_MANIFEST_DIR…) would run again, rebuilding ring and
# everything over it for both targets on each change of caller.
for variable in $(compgen -e); do
    case "$variable" in
        CARGO_PKG_* | CARGO_MANIFEST_* | CARGO_BIN_EXE_* | CARGO_CRATE_NAME | CARGO_BIN_NAME | \
            CARGO_PRIMARY_PACKAGE | CARGO_TARGET_TMPDIR | OUT_DIR) unset "$variable" ;;
    esac
done

need_debian_packages buildah musl-tools binutils
case " $arches " in *" arm64 "*) need_debian_packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross ;; esac

version=$(release/version.sh)
# Reproducible: every time in the image and its SBOMs is SOURCE_DATE_EPOCH,
# by default the commit's time, so two builds of one commit give one digest.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# Nor on where it is built: no absolute path of this checkout (generated
# sources under target/ name themselves in panic locations) or of cargo's
# home in the binary (for the target only: RUSTFLAGS skips build scripts
# when --target is given, and the built-in policies' nested build drops it).
export RUSTFLAGS="--remap-path-prefix=$PWD=/vigil --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
# The source the labels name: the origin this checkout came from, if any.
source=$(git remote get-url origin 2>/dev/null || echo unknown)
out=target/image
storage=(--storage-driver vfs --root "$PWD/$out/storage/root" --runroot "$PWD/$out/storage/run")
mkdir -p "$out"
index="localhost/vigil:$version"
buildah "${storage[@]}" manifest rm "$index" >/dev/null 2>&1 || true
buildah "${storage[@]}" manifest create "$index" >/dev/null

for a in $arches; do
    case "$a" in
        amd64) triple=x86_64-unknown-linux-musl ;;
        arm64)
            triple=aarch64-unknown-linux-musl
            export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
            export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
            ;;
    esac
    rustup target add "$triple" wasm32-wasip2 >/dev/null
    echo "== vigil $version for $a ($triple)" >&2
    cargo build --release --locked -p vigil --target "$triple"
    binary=target/$triple/release/vigil
    if readelf --program-headers "$binary" | grep -q INTERP; then
        echo "$binary asks for a dynamic loader: it would not run FROM scratch" >&2
        exit 1
    fi
    release/sbom.py "$triple" "$version" >"$out/vigil-$version-$a.cdx.json"

    ctr=$(buildah "${storage[@]}" from --arch "$a" --os linux scratch)
    buildah "${storage[@]}" copy --chmod 0555 "$ctr" "$binary" /vigil >/dev/null
    buildah "${storage[@]}" copy --chmod 0444 "$ctr" /etc/ssl/certs/ca-certificates.crt \
        /etc/ssl/certs/ca-certificates.crt >/dev/null
    buildah "${storage[@]}" config --arch "$a" --os linux \
        --entrypoint '["/vigil"]' --cmd agent --user 65532:65532 \
        --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        --label org.opencontainers.image.title=vigil \
        --label org.opencontainers.image.version="$version" \
        --label org.opencontainers.image.licenses=Apache-2.0 \
        --label org.opencontainers.image.revision="$(git rev-parse HEAD)" \
        --label org.opencontainers.image.created="$created" \
        --label org.opencontainers.image.source="$source" \
        "$ctr"
    buildah "${storage[@]}" commit --quiet --format oci --rm --timestamp "$SOURCE_DATE_EPOCH" \
        --identity-label=false "$ctr" "$index-$a" >/dev/null
    buildah "${storage[@]}" manifest add "$index" "containers-storage:$index-$a" >/dev/null
done

rm -rf "$out/vigil-$version.oci"
buildah "${storage[@]}" manifest push --quiet --all --format oci \
    --digestfile "$out/digest" "$index" "oci:$out/vigil-$version.oci:$version"
echo "== $out/vigil-$version.oci ($(cat "$out/digest")), SBOMs in $out" >&2
if [ -n "$push" ]; then
    buildah "${storage[@]}" manifest push --quiet --all --format oci --tls-verify="$tls" \
        --digestfile "$out/pushed" "$index" "docker://$push"
    repository=$push
    case "${push##*/}" in *:*) repository=${push%:*} ;; esac
    echo "pin: $repository@$(cat "$out/pushed")"
fi
