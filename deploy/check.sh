#!/usr/bin/env bash
# Checks the deployment offline: every manifest, and kustomize's render of
# them where kubectl is installed, validates strictly (unknown fields are
# errors) against the OpenAPI schemas of Kubernetes 1.37, with the pinned
# kubernetes-validate from PyPI in a venv under target/toolchains/.
# The render holds no policies ConfigMap (an upgrade must not wipe policies).
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
validate namespace.yaml crds.yaml rbac.yaml flowcontrol.yaml quota.yaml daemonset.yaml service.yaml
if command -v kubectl > /dev/null; then
  rendered=$(mktemp)
  trap 'rm -f "$rendered"' EXIT
  kubectl kustomize . > "$rendered"
  validate "$rendered"
  # An upgrade (apply -k again) must never replace the operator's policies.
  if grep -q '^  name: vigil-policies$' "$rendered"; then
    echo "deploy/: kustomize renders the vigil-policies ConfigMap; an upgrade would wipe policies" >&2
    exit 1
  fi
  # Linux nodes only, at a priority some providers admit only under a quota
  # naming it, listening dual-stack.
  grep -q 'kubernetes.io/os: linux$' "$rendered"
  grep -q -- '- --metrics-addr=\[::\]:9464$' "$rendered"
  grep -A14 '^kind: ResourceQuota$' "$rendered" | grep -q -- '- system-node-critical$'
  # The default agent compiles nothing and is Guaranteed at 128Mi; the
  # compile-on-node component makes it compile, with room for it.
  grep -q -- '- --compile=never$' "$rendered"
  overlay=../target/deploy-check/compile-on-node
  mkdir -p "$overlay"
  printf 'resources: [../../../deploy]\ncomponents: [../../../deploy/components/compile-on-node]\n' \
    > "$overlay/kustomization.yaml"
  kubectl kustomize "$overlay" > "$rendered"
  validate "$rendered"
  if ! grep -q -- '- --compile=fallback$' "$rendered" || grep -q -- '--compile=never' "$rendered" \
    || [ "$(grep -c 'memory: 640Mi$' "$rendered")" != 2 ]; then
    echo "deploy/: components/compile-on-node does not make the agent compile with 640Mi" >&2
    exit 1
  fi
  # Moved into another namespace by an overlay, nothing still names the
  # default one (RBAC subjects, FlowSchema subjects, the Namespace itself).
  overlay=../target/deploy-check/other-namespace
  mkdir -p "$overlay"
  printf 'namespace: ops-vigil\nresources: [../../../deploy]\n' > "$overlay/kustomization.yaml"
  kubectl kustomize "$overlay" > "$rendered"
  validate "$rendered"
  if grep -q 'vigil-system' "$rendered"; then
    echo "deploy/: rendered into namespace ops-vigil, it still names vigil-system:" >&2
    grep -n 'vigil-system' "$rendered" >&2
    exit 1
  fi
  # The cleanup (docs/operating.md, "Uninstalling") renders and runs the
  # release's image (its RBAC is checked against its requests by cargo test).
  kubectl kustomize cleanup > "$rendered"
  validate "$rendered"
  image() { sed -n '/^images:/,$p' "$1"; }
  if [ "$(image kustomization.yaml)" != "$(image cleanup/kustomization.yaml)" ]; then
    echo "deploy/cleanup/: its images entry differs from deploy/'s (release/pin.sh pins both)" >&2
    exit 1
  fi
fi
echo "deploy/: manifests valid"
