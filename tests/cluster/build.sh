#!/usr/bin/env bash
# Builds vigil-cluster (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, the kubelet, kube-proxy and kubectl at the versions go.mod
# pins, in one binary) to $1, default
# target/vigil-cluster/vigil-cluster at the workspace root. Go's build cache
# makes a second build take seconds; the first takes a while (see README.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../target/vigil-cluster/vigil-cluster}"
version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")"
minor="$(echo "$version" | cut -d. -f2)"
stamp=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
  stamp+=" -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
done
mkdir -p "$(dirname "$out")"
cd "$here"
# One build at a time: CI starts one early in the background, and the tests'
# own call then waits for it and finds everything built.
exec 9> "$out.lock"
flock 9
go build -mod=readonly -ldflags "$stamp" -o "$out" .
