#!/usr/bin/env bash
# Checks the deployment offline: every manifest, and kustomize's render of
# them where kubectl is installed, validates strictly (unknown fields are
# errors) against the OpenAPI schemas of Kubernetes 1.37, with the pinned
# kubernetes-validate from PyPI in a venv under target/toolchains/.
# The DaemonSet's flags and variables, the CRDs' drift and the example
# VigilConfig are checked by `cargo test` (cli.rs, config/crd.rs).
set -euo pipefail
cd "$(dirname "$0")"
venv=../target/toolchains/deploy-check
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
fi
validate() { "$venv/bin/kubernetes-validate" --strict --quiet --kubernetes-version 1.37.0 "$@"; }
validate namespace.yaml crds.yaml rbac.yaml policies.yaml daemonset.yaml service.yaml
if command -v kubectl > /dev/null; then
  rendered=$(mktemp)
  trap 'rm -f "$rendered"' EXIT
  kubectl kustomize . > "$rendered"
  validate "$rendered"
fi
echo "deploy/: manifests valid"
