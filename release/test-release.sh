#!/usr/bin/env bash
# The image test: builds vigil's amd64 image (release/image.sh), pushes it to a
# registry on loopback (Debian's docker-registry), pulls it back by digest and
# runs `vigil --version`, `vigil agent --help`, `vigil policy check
# --builtin` (the policies compile and run, as the agent's user) and `vigil
# own-state` (as the init container) in it with podman, as the DaemonSet
# runs them: read-only root, every capability dropped but the init
# container's two, no new privileges, no network. Then checks the image holds nothing but the binary
# and the CA certificates (no shell), and that its index names the
# architecture. Installs what it needs from Debian's packages when missing
# (podman runs here only with runc: crun refuses this kernel's hybrid cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../examples/policies/toolchain/toolchain.sh
source examples/policies/toolchain/toolchain.sh
need_debian_packages buildah podman runc musl-tools binutils curl
need_registry_tools

work=$(mktemp -d)
registry_pid=
cleanup() {
    [ -n "$registry_pid" ] && kill "$registry_pid" 2>/dev/null || true
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
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
addr=
for _ in $(seq 1 100); do
    addr=$(sed -n 's/.*msg="listening on \([^"]*\)".*/\1/p' "$work/registry.log" | head -n1)
    [ -n "$addr" ] && break
    kill -0 "$registry_pid" 2>/dev/null || { cat "$work/registry.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { echo "the registry did not start" >&2; cat "$work/registry.log" >&2; exit 1; }

pin=$(release/image.sh --arch amd64 --push "$addr/vigil:test" --insecure | sed -n 's/^pin: //p')
[ -n "$pin" ] || { echo "image.sh printed no pinned reference" >&2; exit 1; }
echo "pushed $pin"

# The index, read back from the registry by digest: one image, linux/amd64.
digest=${pin##*@}
curl -fsS -H 'Accept: application/vnd.oci.image.index.v1+json' \
    "http://$addr/v2/vigil/manifests/$digest" >"$work/index.json"
python3 - "$work/index.json" <<'EOF'
import json, sys
index = json.load(open(sys.argv[1]))
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index
platforms = [(m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"]]
assert platforms == [("linux", "amd64")], platforms
EOF

podman=(podman --storage-driver vfs --root "$work/podman/root" --runroot "$work/podman/run")
"${podman[@]}" pull --quiet --tls-verify=false "$pin" >/dev/null
run=("${podman[@]}" run --rm --runtime runc --read-only --cap-drop ALL
    --security-opt no-new-privileges --network none
    --ulimit nofile=1024:20000 --ulimit nproc=4096:4096)

# The version and the commit it was built from; run as the image's own user.
version=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')
out=$("${run[@]}" "$pin" --version)
echo "$out"
case "$out" in
    "vigil $version ($(git rev-parse --short=12 HEAD)) wasmtime "*) ;;
    *) echo "unexpected --version: $out (vigil $version at $(git rev-parse --short=12 HEAD))" >&2; exit 1 ;;
esac
user=$("${podman[@]}" image inspect --format '{{.Config.User}}' "$pin")
if [ "$user" != "65532:65532" ]; then
    echo "the image runs as '$user', not 65532:65532" >&2
    exit 1
fi
"${podman[@]}" image inspect --format '{{json .Labels}}' "$pin" >"$work/labels.json"
python3 - "$work/labels.json" "$version" "$(git rev-parse HEAD)" "$(date -u -d "@$(git log -1 --format=%ct HEAD)" +%Y-%m-%dT%H:%M:%SZ)" <<'EOF'
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
# The SBOM lists what the binary links and the image carries beyond the
# crates: the musl C library and the CA bundle.
python3 - "target/image/vigil-$version-amd64.cdx.json" <<'EOF'
import json, sys
names = {c["name"] for c in json.load(open(sys.argv[1]))["components"]}
for wanted in ("musl", "ca-certificates", "wasmtime", "kube-client"):
    assert wanted in names, (wanted, len(names))
EOF

# Built again from the same commit (the binary from cargo's cache), the
# index has the same digest: nothing in it depends on when it was made.
first=$(cat target/image/digest)
release/image.sh --arch amd64 >/dev/null 2>&1
if [ "$(cat target/image/digest)" != "$first" ]; then
    echo "a second build of the image gave $(cat target/image/digest), not $first" >&2
    exit 1
fi
echo "image test passed: $pin"
