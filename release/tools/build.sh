#!/usr/bin/env bash
# Builds the release's Go tools at the versions go.mod pins, from the Go
# module proxy (checked against go.sum): Helm (helm.sh/helm/v3) to
# target/tools/helm at the workspace root. Go's build cache makes a second
# build take seconds; a cold one about 3 CPU-minutes. One build at a time:
# CI starts one early in the background, and later calls wait for it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../target/tools"
mkdir -p "$out"
cd "$here"
exec 9> "$out/build.lock"
flock 9
version="$(awk '$1 == "helm.sh/helm/v3" { print $2; exit }' go.mod)"
go build -mod=readonly -trimpath \
  -ldflags "-X helm.sh/helm/v3/internal/version.version=$version" \
  -o "$out/helm" helm.sh/helm/v3/cmd/helm
