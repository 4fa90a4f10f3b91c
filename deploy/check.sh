#!/usr/bin/env bash
# Checks the deployment offline: every manifest, and kustomize's render of
# them (with the pinned kubectl: see below; never skipped), validates strictly (unknown fields are
# errors) against the OpenAPI schemas of Kubernetes 1.37, with the pinned
# kubernetes-validate from PyPI in a venv under target/toolchains/.
# The render holds no policies ConfigMap (an upgrade must not wipe policies).
# check.py checks least privilege in the render (what the DaemonSet mounts,
# runs as and listens on, RBAC, the admission policy) and the Prometheus
# component against the operator's CRD schemas (deploy/schemas/).
# The DaemonSet's flags and variables, the CRDs' drift, the example
# VigilConfig and the admission policy's CEL are checked by `cargo test`
# (cli.rs, config/crd.rs, agent::admission).
set -euo pipefail
cd "$(dirname "$0")"
venv=../target/toolchains/deploy-check
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
fi
validate() { "$venv/bin/kubernetes-validate" --strict --quiet --kubernetes-version 1.37.0 "$@"; }
validate namespace.yaml crds.yaml rbac.yaml admission.yaml flowcontrol.yaml quota.yaml daemonset.yaml
check() { "$venv/bin/python" check.py "$@"; }
# kubectl: the one of the pinned Kubernetes version, from the tests' build of
# the upstream components (tests/cluster/build.sh: seconds once built, as CI
# has by now; else a Go build). Never skipped: without it nothing below is
# checked, so its build failing fails the check.
cluster=../target/vigil-cluster/vigil-cluster
../tests/cluster/build.sh > /dev/null
kubectl() { "$cluster" kubectl "$@"; }
rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
kubectl kustomize . > "$rendered"
validate "$rendered"
# An upgrade (apply -k again) must never replace the operator's policies.
if grep -q '^  name: vigil-policies$' "$rendered"; then
  echo "deploy/: kustomize renders the vigil-policies ConfigMap; an upgrade would wipe policies" >&2
  exit 1
fi
check privilege "$rendered"
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
# Moved into another namespace and renamed by an overlay, nothing still
# names the default namespace (RBAC subjects, FlowSchema subjects, the
# admission binding's parameter, the Namespace itself), and check.py finds
# the binding's parameter is the renamed ServiceAccount.
overlay=../target/deploy-check/other-namespace
mkdir -p "$overlay"
printf 'namespace: ops-vigil\nnamePrefix: team-\nresources: [../../../deploy]\n' \
  > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$rendered"
validate "$rendered"
check privilege "$rendered"
if grep -q 'vigil-system' "$rendered"; then
  echo "deploy/: rendered into namespace ops-vigil, it still names vigil-system:" >&2
  grep -n 'vigil-system' "$rendered" >&2
  exit 1
fi
# On CRI-O, the image filesystem from CRI-O's store.
overlay=../target/deploy-check/cri-o
mkdir -p "$overlay"
printf 'resources: [../../../deploy]\ncomponents: [../../../deploy/components/cri-o]\n' \
  > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$rendered"
validate "$rendered"
check privilege "$rendered"
grep -q 'path: /var/lib/containers/storage/vigil-statfs$' "$rendered"
# The Prometheus Operator's PodMonitor and PrometheusRule, in an overlay
# that renames and moves everything: the PodMonitor still selects the
# agents, and no alert matches an object's name or namespace.
overlay=../target/deploy-check/prometheus
mkdir -p "$overlay"
printf 'namespace: ops-vigil\nnamePrefix: team-\nresources: [../../../deploy]\ncomponents: [../../../deploy/components/prometheus]\n' \
  > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$rendered"
check prometheus "$rendered"
if grep -q 'vigil-system' "$rendered"; then
  echo "deploy/: with the prometheus component in namespace ops-vigil, it still names vigil-system:" >&2
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
echo "deploy/: manifests valid"
