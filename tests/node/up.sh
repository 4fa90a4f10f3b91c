#!/usr/bin/env bash
# A one-node cluster on this machine, for the tests and by hand:
#
#   tests/node/up.sh DIR
#
# Builds what it needs (tests/cluster/build.sh, tests/node/build.sh), starts
# the control plane and the node (`vigil-cluster up --node`), pushes the
# node's images (pause, sleeper, hog) to the node's registry (on the node's address),
# then prints the cluster's JSON line on stdout (as `vigil-cluster up` does,
# with `node` and `registry`) and how to use it on stderr. Lines on its input
# go to vigil-cluster (`restart kubelet`, `restart kube-apiserver`); the end
# of its input, ^C or SIGTERM stops the node and the control plane and leaves
# the machine as it was. Needs root (containers, iptables, mounts).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../../examples/policies/toolchain/toolchain.sh
source "$root/examples/policies/toolchain/toolchain.sh"
# Everything before the cluster's line speaks on stderr, whatever it runs:
# stdout carries that line alone.
{
    need_debian_packages runc containernetworking-plugins docker-registry iptables iproute2 buildah skopeo
    "$root/tests/cluster/build.sh"
    "$here/build.sh"
} >&2
out="$root/target/vigil-node"
cluster="$root/target/vigil-cluster/vigil-cluster"
dir=$(realpath -m "$1")

coproc node { exec "$cluster" up --node "$out/bin" "$dir"; }
# Its pipes, on descriptors that a background job may use too.
exec {from}<&"${node[0]}" {to}>&"${node[1]}"
# shellcheck disable=SC2154  # node_PID is set by coproc
pid=$node_PID
# Closing its input stops it; then wait for it to have cleaned up.
stop() {
    exec {to}>&- 2>/dev/null || true
    # (bash unsets the coproc's descriptors once it has exited)
    # shellcheck disable=SC1083  # {node[1]}>&- closes the descriptor node[1] holds
    if [ -n "${node[1]:-}" ]; then exec {node[1]}>&- 2>/dev/null || true; fi
    wait "$pid" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM
read -r line <&"$from" || { echo "vigil-cluster up --node did not start (its logs: $dir/*.log)" >&2; exit 1; }
registry=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["registry"])' "$line")
storage=(--storage-driver vfs --root "$out/storage/root" --runroot "$out/storage/run")
for image in pause sleeper hog; do
    buildah "${storage[@]}" push -q --tls-verify=false "localhost/$image:1" "docker://$registry/$image:1" >&2
done
echo "$line"
cat >&2 <<EOF
The node vigil-node is Ready; its images are $registry/{pause,sleeper,hog}:1.
  $cluster kubectl --kubeconfig $dir/admin.conf get nodes
  logs: $dir/*.log   kubelet configuration: $dir/kubelet/config.yaml (drop-ins: $dir/kubelet/config.d/*.conf, then 'restart kubelet' on this script's input)
End this script's input (^D) or press ^C to stop the cluster.
EOF
# Further lines of the cluster (answers to commands) on stdout; its input
# from ours, until ours ends.
cat <&"$from" {to}>&- &
cat >&"$to" || true
