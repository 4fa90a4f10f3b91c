#!/usr/bin/env bash
# The release test: runs release/release.sh, as a maintainer would, on a clean
# clone of this commit against a registry on loopback (Debian's
# docker-registry), then verifies what it published independently of the code
# that published it (release/verify-release.py: the distribution API, Python's
# cryptography for the cosign signatures, the referrers tag schema for the
# SBOMs), the tag and its pinned deploy/ and chart (kustomize and Helm render
# the published digest and nothing else), the krew manifest and its archives;
# runs the arm64 binary under Debian's qemu-user (`--version`, `policy check
# --builtin`); and the amd64 image with podman as the DaemonSet runs it:
# `--version`, `agent --help`, `policy check --builtin` (as the agent's user)
# and `own-state` (as the init container), read-only root, every capability
# dropped but the init container's two, no new privileges, no network; it
# holds nothing but the binary and the CA certificates (no shell). Last, the
# images built again give the same index digest.
# The clone lives in target/release-test/checkout (its builds kept between
# runs).
# `--prepare` only makes the clone and builds its images (no registry): CI
# runs it early in the background, and the test then finds them built.
# Installs what it needs from Debian's packages when missing (podman runs
# here only with runc: crun refuses this kernel's hybrid cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../examples/policies/toolchain/toolchain.sh
source examples/policies/toolchain/toolchain.sh
need_debian_packages buildah podman runc musl-tools binutils curl qemu-user-static python3-cryptography openssl
need_registry_tools

# The release test checks what release.sh does, not how fast the binary runs:
# its builds skip the release profile's whole-program optimisation (fat LTO,
# one codegen unit, opt-level 3: about 29 CPU-minutes per architecture cold,
# 12 of them on one core for the last crate) for opt-level 1 in 16 units
# (13.5 CPU-minutes, measured). Everything else — the targets, static
# linking, the built-in policies (their own profile), reproducibility,
# signatures, pins — is what a release does.
export CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1

main=$PWD
version=$(release/version.sh)
mkdir -p target/release-test
exec 9>target/release-test/lock
flock 9
export GIT_AUTHOR_NAME=release-test GIT_AUTHOR_EMAIL=release-test@localhost
export GIT_COMMITTER_NAME=release-test GIT_COMMITTER_EMAIL=release-test@localhost

# The clone released: this commit (not the working tree's changes), and over
# it the maintainer's last step, the version's section in CHANGELOG.md gets
# its date; a commit made at this commit's time, so the same every run (its
# builds stay fresh: a build embeds the commit).
checkout=target/release-test/checkout
head=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
export GIT_AUTHOR_DATE=@$epoch GIT_COMMITTER_DATE=@$epoch
[ -d "$checkout/.git" ] || git clone -q --no-checkout "$main" "$checkout"
if [ "$(git -C "$checkout" rev-parse -q --verify HEAD^ || true)" != "$head" ]; then
    git -C "$checkout" fetch -q "$main" HEAD
    git -C "$checkout" checkout -q --force --detach FETCH_HEAD
    sed -i "s/^## Unreleased ($version)\$/## [$version] - $(date -u -d "@$epoch" +%F)/" "$checkout/CHANGELOG.md"
    git -C "$checkout" commit -qam "Changelog: $version"
fi
git -C "$checkout" checkout -q -- .
git -C "$checkout" clean -fdq
git -C "$checkout" tag -l | xargs -r git -C "$checkout" tag -d >/dev/null
released=$(git -C "$checkout" rev-parse HEAD)
mkdir -p "$checkout/target"
# The toolchains (deploy/check.sh's venv) are shared; Go's build cache makes
# the clone's own kubectl and Helm a link each.
mkdir -p "$main/target/toolchains"
ln -sfn "$main/target/toolchains" "$checkout/target/toolchains"
if [ "${1:-}" = --prepare ]; then
    (cd "$checkout" && release/image.sh --arch all)
    exit 0
fi
tests/cluster/build.sh >/dev/null
release/tools/build.sh
kubectl() { "$main/target/vigil-cluster/vigil-cluster" kubectl "$@"; }
helm=$main/target/tools/helm

work=$(mktemp -d)
registry_pid=
cleanup() {
    if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# A registry on loopback only (the packaged config listens on every interface).
cat >"$work/registry.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:0
EOF
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 9>&- &
registry_pid=$!
addr=
for _ in $(seq 1 100); do
    addr=$(sed -n 's/.*msg="listening on \([^"]*\)".*/\1/p' "$work/registry.log" | head -n1)
    [ -n "$addr" ] && break
    kill -0 "$registry_pid" 2>/dev/null || { cat "$work/registry.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { echo "the registry did not start" >&2; cat "$work/registry.log" >&2; exit 1; }

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/cosign.key" 2>/dev/null
openssl pkey -in "$work/cosign.key" -pubout -out "$work/cosign.pub"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null | openssl pkey -pubout -out "$work/other.pub"
release() { (cd "$checkout" && release/release.sh "$@" --key "$work/cosign.key" --insecure \
    --download-url "http://downloads.invalid/v$version"); }
refused() { # WHY ARGS...: release.sh refuses, saying WHY, before it builds
    local why=$1 said
    shift
    if said=$(release "$@" 2>&1); then
        echo "release.sh $* did not refuse ($why)" >&2
        exit 1
    fi
    grep -q "$why" <<<"$said" || { echo "release.sh $* refused with: $said (not: $why)" >&2; exit 1; }
}
refused "CHANGELOG.md has no section for 9.9.9" 9.9.9 "$addr/vigil"
echo "## [9.9.9] - 2026-01-01" >>"$checkout/CHANGELOG.md"
refused "the workspace's version is $version, not 9.9.9" 9.9.9 "$addr/vigil"
refused "the tree is not clean" "$version" "$addr/vigil"
git -C "$checkout" checkout -q -- CHANGELOG.md
release "$version" "$addr/vigil"
[ "$(git -C "$checkout" rev-parse HEAD)" = "$released" ] || { echo "release.sh moved HEAD" >&2; exit 1; }
refused "the tag v$version exists" "$version" "$addr/vigil"
out=$checkout/target/dist

# What the registry holds, checked by Python alone.
digest=$(python3 release/verify-release.py "$addr" vigil "$version" "$work/cosign.pub" "$addr/charts" "$out")
pin=$addr/vigil@$digest
echo "published $pin"
vigil=$checkout/target/x86_64-unknown-linux-musl/release/vigil
"$vigil" policy verify "$pin" --key "$work/cosign.pub" --insecure
if "$vigil" policy verify "$pin" --key "$work/other.pub" --insecure 2>/dev/null; then
    echo "vigil policy verify accepted the index under another key" >&2
    exit 1
fi

# The tag: annotated, on a commit over the released one that pins deploy/,
# deploy/cleanup/ and the chart to the published index; kustomize and Helm
# render it and no other image.
[ "$(git -C "$checkout" cat-file -t "v$version")" = tag ] || { echo "v$version is not an annotated tag" >&2; exit 1; }
[ "$(git -C "$checkout" rev-parse "v$version^{commit}^")" = "$released" ] ||
    { echo "v$version is not one commit over $released" >&2; exit 1; }
mkdir -p "$work/tagged"
git -C "$checkout" archive "v$version" deploy | tar -x -C "$work/tagged"
images() { grep -ho 'image: .*' "$@" | sed 's/image: //; s/"//g' | sort -u; }
for render in deploy deploy/cleanup; do
    kubectl kustomize "$work/tagged/$render" >"$work/render.yaml"
    [ "$(images "$work/render.yaml")" = "$pin" ] ||
        { echo "$render at v$version runs $(images "$work/render.yaml" | tr '\n' ' '), not $pin" >&2; exit 1; }
done
"$helm" pull "oci://$addr/charts/vigil" --version "$version" --plain-http --destination "$work" >/dev/null
tar -xzf "$work/vigil-$version.tgz" -C "$work"
"$helm" template vigil "$work/vigil" --kube-version 1.37.0 >"$work/chart.yaml"
[ "$(images "$work/chart.yaml")" = "$pin" ] || { echo "the published chart runs $(images "$work/chart.yaml")" >&2; exit 1; }

# Installed from what was published, on the upstream control plane: the
# tag's deploy/ by kustomize, then (that removed) the published chart by Helm;
# each DaemonSet runs the published index.
# Its input open until the end (then it stops); its line once it is ready.
mkfifo "$work/cluster.in" "$work/cluster.out"
target/vigil-cluster/vigil-cluster up "$work/cluster" <"$work/cluster.in" >"$work/cluster.out" 2>"$work/cluster.err" 9>&- &
exec 8>"$work/cluster.in" 7<"$work/cluster.out"
read -r -t 300 _ <&7 || { echo "the control plane did not start" >&2; cat "$work/cluster.err" >&2; exit 1; }
export KUBECONFIG=$work/cluster/admin.conf
daemonset_image() {
    kubectl -n vigil-system get daemonset vigil -o jsonpath='{.spec.template.spec.containers[0].image}'
}
kubectl apply --server-side -k "$work/tagged/deploy" >/dev/null
[ "$(daemonset_image)" = "$pin" ] || { echo "kustomize installed $(daemonset_image)" >&2; exit 1; }
kubectl delete -k "$work/tagged/deploy" --wait --timeout 300s >/dev/null
"$helm" install vigil "oci://$addr/charts/vigil" --version "$version" --plain-http \
    --namespace default --wait=false >/dev/null
[ "$(daemonset_image)" = "$pin" ] || { echo "Helm installed $(daemonset_image)" >&2; exit 1; }
"$helm" uninstall vigil --namespace default >/dev/null
exec 8>&- 7<&-
echo "installed from the release by kustomize and by Helm"

# The kubectl plugin: the krew manifest's archives, by their sums.
python3 - "$out" "$version" <<'EOF'
import hashlib, pathlib, re, sys, tarfile
out, version = pathlib.Path(sys.argv[1]), sys.argv[2]
manifest = (out / "vigil.krew.yaml").read_text()
assert f"version: v{version}" in manifest, manifest
pairs = re.findall(r"uri: \S+/(vigil-[^/\s]+\.tar\.gz)\n\s+sha256: ([0-9a-f]{64})", manifest)
assert sorted(p[0] for p in pairs) == [f"vigil-{version}-linux-{a}.tar.gz" for a in ("amd64", "arm64")], pairs
for name, sum_ in pairs:
    assert hashlib.sha256((out / name).read_bytes()).hexdigest() == sum_, name
    with tarfile.open(out / name) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-vigil"], tar.getnames()
EOF
tar -xzf "$out/vigil-$version-linux-amd64.tar.gz" -C "$work" kubectl-vigil
"$work/kubectl-vigil" version --client | grep -q "vigil $version" || { echo "kubectl-vigil version --client" >&2; exit 1; }

# The arm64 image's binary runs, under qemu-user: its version and commit,
# and the built-in policies compile (for aarch64) and pass their canary.
arm64=$out/vigil-arm64
chmod +x "$arm64"
short=$(git -C "$checkout" rev-parse --short=12 "$released")
out_arm=$(qemu-aarch64-static "$arm64" --version)
case "$out_arm" in "vigil $version ($short) wasmtime "*) ;; *) echo "arm64 --version: $out_arm" >&2; exit 1 ;; esac
check=$(qemu-aarch64-static "$arm64" policy check --builtin --cache-dir "$work/arm64-cache" 2>&1) ||
    { echo "policy check --builtin under qemu-aarch64: $check" >&2; exit 1; }
[ "$(grep -c ': ok$' <<<"$check")" -ge 3 ] || { echo "arm64 policy check --builtin: $check" >&2; exit 1; }
echo "arm64: $out_arm; policy check --builtin passed"

# The amd64 image, as the DaemonSet runs it.
podman=(podman --storage-driver vfs --root "$work/podman/root" --runroot "$work/podman/run")
"${podman[@]}" pull --quiet --tls-verify=false "$pin" >/dev/null
run=("${podman[@]}" run --rm --runtime runc --read-only --cap-drop ALL
    --security-opt no-new-privileges --network none
    --ulimit nofile=1024:20000 --ulimit nproc=4096:4096)

# The version and the commit it was built from; run as the image's own user.
said=$("${run[@]}" "$pin" --version)
echo "$said"
case "$said" in
    "vigil $version ($short) wasmtime "*) ;;
    *) echo "unexpected --version: $said (vigil $version at $short)" >&2; exit 1 ;;
esac
user=$("${podman[@]}" image inspect --format '{{.Config.User}}' "$pin")
if [ "$user" != "65532:65532" ]; then
    echo "the image runs as '$user', not 65532:65532" >&2
    exit 1
fi
"${podman[@]}" image inspect --format '{{json .Labels}}' "$pin" >"$work/labels.json"
python3 - "$work/labels.json" "$version" "$released" "$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" <<'EOF'
import json, sys
labels, version, revision, created = json.load(open(sys.argv[1])), *sys.argv[2:]
key = "org.opencontainers.image."
wanted = {"version": version, "revision": revision, "created": created, "licenses": "Apache-2.0"}
for name, value in wanted.items():
    assert labels.get(key + name) == value, (name, labels.get(key + name), value)
assert labels.get(key + "source"), labels
EOF
help=$("${run[@]}" "$pin" agent --help)
grep -q -- '--node-name' <<<"$help" || { echo "agent --help does not name --node-name" >&2; exit 1; }
# The policies run in it: the built-ins compile and pass their canary call
# (wasmtime runs only code compiled for the binary's own triple, musl here),
# with nothing writable but a tmpfs for the compile cache.
check=$("${run[@]}" --user 65532:65532 --tmpfs /tmp "$pin" policy check --builtin --cache-dir /tmp/cache 2>&1) || {
    echo "the built-in policies do not load in the image:" >&2
    echo "$check" >&2
    exit 1
}
if [ "$(grep -c ': ok$' <<<"$check")" -lt 3 ]; then
    echo "policy check --builtin in the image: $check" >&2
    exit 1
fi

# The init container's step, as the DaemonSet runs it (root with CHOWN and
# DAC_READ_SEARCH only): a state directory root left gets the agent's user.
mkdir -p "$work/state/config"
echo '{}' >"$work/state/config/checkpoint.json"
chmod 700 "$work/state/config"
"${run[@]}" --user 0 --cap-add CHOWN --cap-add DAC_READ_SEARCH \
    -v "$work/state:/var/lib/vigil" "$pin" own-state >/dev/null
owners=$(find "$work/state" -printf '%U:%G\n' | sort -u)
if [ "$owners" != "65532:65532" ]; then
    echo "own-state in the image left owners $owners" >&2
    exit 1
fi

# Nothing but the binary and the certificates: no shell to run.
if "${run[@]}" --entrypoint /bin/sh "$pin" -c true >/dev/null 2>&1; then
    echo "the image has a shell" >&2
    exit 1
fi
ctr=$("${podman[@]}" create --runtime runc "$pin")
"${podman[@]}" export "$ctr" | tar -t >"$work/files"
"${podman[@]}" rm "$ctr" >/dev/null
expected=$(printf '%s\n' etc/ etc/ssl/ etc/ssl/certs/ etc/ssl/certs/ca-certificates.crt vigil | sort)
actual=$(grep -v '^\(dev\|proc\|sys\|run\)/\?' "$work/files" | grep -v '^etc/\(hosts\|hostname\|resolv.conf\)$' | sort)
if [ "$actual" != "$expected" ]; then
    echo "the image holds more than the binary and the certificates:" >&2
    echo "$actual" >&2
    exit 1
fi
# Built again from the same commit (the binaries from cargo's cache), the
# index has the same digest: nothing in it depends on when it was made.
(cd "$checkout" && release/image.sh --arch all >/dev/null 2>&1)
again=$(cat "$checkout/target/image/digest")
[ "$again" = "$digest" ] || { echo "a second build of the images gave $again, not $digest" >&2; exit 1; }
echo "release test passed: $pin"
