#!/usr/bin/env bash
# Builds what the node needs beside vigil-cluster, into target/vigil-node/:
# containerd and its runc shim from containerd's Go module at the version
# containerd/go.mod pins (bin/), and the node's images, FROM scratch, from
# static binaries of our own (images/*.c, built with Debian's musl-gcc) in
# buildah's storage under storage/: `pause` and `sleeper` (idle.c) and `hog`
# (hog.c). Installs Debian's packages it needs when missing. A second build
# takes seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../../examples/policies/toolchain/toolchain.sh
source "$root/examples/policies/toolchain/toolchain.sh"
need_debian_packages buildah musl-tools
out="$root/target/vigil-node"
mkdir -p "$out/bin" "$out/programs"
exec 9> "$out/build.lock"
flock 9

(cd "$here/containerd" && go build -mod=readonly -trimpath -tags "no_btrfs no_devmapper no_zfs" -o "$out/bin/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)

for program in idle hog; do
    musl-gcc -static -O2 -s -Wall -Wextra -Werror -o "$out/programs/$program" "$here/images/$program.c"
done

# Each image: one static binary, run as an unprivileged user.
storage=(--storage-driver vfs --root "$out/storage/root" --runroot "$out/storage/run")
image() {
    local name=$1 program=$2 user=$3
    local container
    container=$(buildah "${storage[@]}" from scratch)
    buildah "${storage[@]}" copy "$container" "$out/programs/$program" "/$program" >/dev/null
    buildah "${storage[@]}" config --entrypoint "[\"/$program\"]" --user "$user" "$container"
    buildah "${storage[@]}" commit -q --rm "$container" "localhost/$name:1" >/dev/null
}
image pause idle 65535
image sleeper idle 65534
image hog hog 65534
