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

# The Helm chart (deploy/chart/) is written from kustomize's renders of
# deploy/ by chart.py: `deploy/check.sh --write-chart` writes it.
version=$(../release/version.sh)
renders=../target/deploy-check/chart-renders
write_chart() {
  mkdir -p "$renders/compile-on-node" "$renders/prometheus"
  kubectl kustomize . > "$renders/base.yaml"
  for component in compile-on-node prometheus; do
    printf 'resources: [../../../../deploy]\ncomponents: [../../../../deploy/components/%s]\n' \
      "$component" > "$renders/$component/kustomization.yaml"
    kubectl kustomize "$renders/$component" > "$renders/$component.yaml"
  done
  "$venv/bin/python" chart.py "$1" "$version" \
    "$renders/base.yaml" "$renders/compile-on-node.yaml" "$renders/prometheus.yaml"
}
if [ "${1:-}" = --write-chart ]; then
  write_chart chart
  echo "deploy/chart/ written"
  exit 0
fi

rendered=$(mktemp)
scratch=$(mktemp -d)
trap 'rm -rf "$rendered" "$scratch"' EXIT
kubectl kustomize . > "$rendered"
validate "$rendered"
# No render names an image of another release: deploy/ runs the tag of the
# workspace's version (what that version's release publishes, until then no
# image: the pods do not start) or, at a release's tag, its digest.
kubectl kustomize cleanup > "$scratch/cleanup.yaml"
for render in "$rendered" "$scratch/cleanup.yaml"; do
  images=$(grep -ho 'image: .*' "$render" | sed 's/image: //; s/"//g')
  [ -n "$images" ] || { echo "no image in $render" >&2; exit 1; }
  other=$(grep -v -e ":$version\$" -e '@sha256:[0-9a-f]\{64\}$' <<<"$images" || true)
  [ -z "$other" ] || { echo "deploy/ runs $other, not version $version's image" >&2; exit 1; }
done
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
# The PDB override: the only delete of a pod, as the node; and for clusters
# before 1.36, pods as the service account, the DaemonSet saying so.
for component in pdb-override pods-cluster-wide; do
  overlay=../target/deploy-check/$component
  mkdir -p "$overlay"
  printf 'resources: [../../../deploy]\ncomponents: [../../../deploy/components/%s]\n' \
    "$component" > "$overlay/kustomization.yaml"
  kubectl kustomize "$overlay" > "$rendered"
  validate "$rendered"
  check privilege "$rendered"
done
grep -q -- '- --pod-access=service-account$' "$rendered" || {
  echo "deploy/: components/pods-cluster-wide does not run the agent as its service account" >&2
  exit 1
}
# On CRI-O, the image filesystem from CRI-O's store.
overlay=../target/deploy-check/cri-o
mkdir -p "$overlay"
printf 'resources: [../../../deploy]\ncomponents: [../../../deploy/components/cri-o]\n' \
  > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$rendered"
validate "$rendered"
check privilege "$rendered"
grep -q 'path: /var/lib/containers/storage/vigil-statfs$' "$rendered"
cp "$rendered" "$scratch/cri-o.yaml"
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
# Authenticated metrics, beside the PodMonitor and renamed and moved as
# above: the agent reviews tokens (and only then may), its probes speak
# HTTPS, and the PodMonitor scrapes over HTTPS with the token of a
# ServiceAccount the render holds; alone, the component renders too.
overlay=../target/deploy-check/metrics-auth
mkdir -p "$overlay"
printf 'namespace: ops-vigil\nnamePrefix: team-\nresources: [../../../deploy]\ncomponents: [../../../deploy/components/prometheus, ../../../deploy/components/metrics-auth]\n' \
  > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$rendered"
check privilege "$rendered"
check prometheus "$rendered"
grep -q -- '- --metrics-auth=kubernetes$' "$rendered"
printf 'resources: [../../../deploy]\ncomponents: [../../../deploy/components/metrics-auth]\n' \
  > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$rendered"
validate "$rendered"
check privilege "$rendered"
# The cleanup (docs/operating.md, "Uninstalling") renders and runs the
# release's image (its RBAC is checked against its requests by cargo test).
kubectl kustomize cleanup > "$rendered"
validate "$rendered"
image() { sed -n '/^images:/,$p' "$1"; }
if [ "$(image kustomization.yaml)" != "$(image cleanup/kustomization.yaml)" ]; then
  echo "deploy/cleanup/: its images entry differs from deploy/'s (release/pin.sh pins both)" >&2
  exit 1
fi

# The chart: current, lint-clean, refusing values its schema does not
# allow, and rendering what kustomize renders, object for object — by
# default and with each value a component or an overlay sets — with Helm
# built from its Go module at the version release/tools/go.mod pins.
write_chart "$scratch/chart"
if ! diff -r chart "$scratch/chart" > "$scratch/chart.diff"; then
  echo "deploy/chart/ is not what deploy/ makes: run deploy/check.sh --write-chart" >&2
  head -40 "$scratch/chart.diff" >&2
  exit 1
fi
../release/tools/build.sh
helm=../target/tools/helm
# The Kubernetes version the tests run (Helm's own default is far older).
template() { "$helm" template vigil chart --namespace default --kube-version 1.37.0 "$@"; }
"$helm" lint --strict --kube-version 1.37.0 chart > /dev/null
template > /dev/null
same() { # HELM-ARGS... -- KUSTOMIZE-RENDER
  local args=() render
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  render=$2
  template "${args[@]}" > "$scratch/helm.yaml"
  check same "$scratch/helm.yaml" "$render"
}
same -- "$renders/base.yaml"
same --set components.compileOnNode.enabled=true -- "$renders/compile-on-node.yaml"
same --set components.prometheus.enabled=true -- "$renders/prometheus.yaml"
# Installed as the docs say (Helm into `default`, or the component beside
# deploy/ with no namespace of the overlay's): the monitors live with the
# agents, where the PodMonitor finds them.
check prometheus "$renders/prometheus.yaml"
template --set components.prometheus.enabled=true > "$scratch/helm.yaml"
check prometheus "$scratch/helm.yaml"
# The values kustomize has none of: the monitors' labels for the Prometheus
# that selects them, a pull Secret, a verification key the chart stores.
# (Any PEM text: the chart stores it, the agent is not asked to read it.)
printf -- '-----BEGIN PUBLIC KEY-----\n%s\n-----END PUBLIC KEY-----\n' \
  "$(head -c 64 /dev/urandom | base64 -w 0)" > "$scratch/cosign.pub"
template --set components.prometheus.enabled=true \
  --set-string components.prometheus.labels.release=kube-prometheus-stack \
  --set 'imagePullSecrets[0].name=regcred' \
  --set-file keys.verificationKey="$scratch/cosign.pub" > "$scratch/helm.yaml"
check chart-values "$scratch/helm.yaml" release=kube-prometheus-stack regcred "$scratch/cosign.pub"
same --set runtime.imagefs=/var/lib/containers/storage/vigil-statfs -- "$scratch/cri-o.yaml"
overlay=../target/deploy-check/namespace-only
mkdir -p "$overlay"
printf 'namespace: ops-vigil\nresources: [../../../deploy]\n' > "$overlay/kustomization.yaml"
kubectl kustomize "$overlay" > "$scratch/namespace.yaml"
same --set namespace.name=ops-vigil -- "$scratch/namespace.yaml"
for bad in cgroupDriver=cgroupsv2 image.digest=latest runtime.nodefs=relative extraArgs[0]=dry-run \
  keys.verificationKey=not-a-key 'imagePullSecrets[0]=regcred'; do
  if template --set "$bad" > /dev/null 2> "$scratch/refused"; then
    echo "deploy/chart/: values.schema.json lets --set $bad through" >&2
    exit 1
  fi
  grep -q 'values don.t meet the specifications of the schema' "$scratch/refused" || {
    echo "deploy/chart/: --set $bad refused, but not by the schema:" >&2
    cat "$scratch/refused" >&2
    exit 1
  }
done
echo "deploy/: manifests valid"
