"""What deploy/check.sh checks in kustomize's renders beyond schema validity:
each item of least privilege and monitoring a manifest can show.

    check.py privilege RENDER       the default render of deploy/
    check.py prometheus RENDER      a render with components/prometheus
    check.py same HELM KUSTOMIZE    the chart's render against kustomize's
    check.py chart-values RENDER LABELS PULL-SECRET KEY
                                    the chart's render with its own values

Every failure names the object and what is wrong; the exit code is 1 then.
"""

import pathlib
import re
import sys

import jsonschema
import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent
failures = []


def fail(what, why):
    failures.append(f"{what}: {why}")


def load(path):
    with open(path) as file:
        return [doc for doc in yaml.safe_load_all(file) if doc]


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        fail(kind, f"expected one, found {len(found)}")
        return {}
    return found[0]


def agent_args(docs):
    """The arguments of the agent's container."""
    daemonset = one(docs, "DaemonSet")
    return daemonset["spec"]["template"]["spec"]["containers"][0].get("args", []) if daemonset else []


def agent_account(docs):
    """The ServiceAccount the agent's DaemonSet runs as."""
    daemonset = one(docs, "DaemonSet")
    name = daemonset["spec"]["template"]["spec"].get("serviceAccountName") if daemonset else None
    found = [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == name]
    if len(found) != 1:
        fail("ServiceAccount", f"the DaemonSet's ({name}) is not in the render")
        return {}
    return found[0]


def check_privilege(docs):
    check_pod(docs)
    check_roles(docs)
    check_admission(docs)
    check_metrics_auth(docs)
    check_signed(docs)


def check_signed(docs):
    """Registry versions must be signed: the agent is given a verification
    key, read from a Secret it mounts."""
    daemonset = one(docs, "DaemonSet")
    if not daemonset:
        return
    spec = daemonset["spec"]["template"]["spec"]
    container = spec["containers"][0]
    keys = [a.split("=", 1)[1] for a in agent_args(docs) if a.startswith("--verification-key=")]
    if len(keys) != 1:
        fail("DaemonSet", "no --verification-key: registry versions would run unsigned on every node")
        return
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = [m for m in container.get("volumeMounts", []) if keys[0].startswith(m["mountPath"].rstrip("/") + "/")]
    if not mounts or "secret" not in volumes.get(mounts[0]["name"], {}):
        fail("DaemonSet", f"--verification-key={keys[0]} is not read from a mounted Secret")


def metrics_reviewed(docs):
    """Whether the agent reviews scrapers' tokens (--metrics-auth=kubernetes)."""
    return "--metrics-auth=kubernetes" in agent_args(docs)


def check_metrics_auth(docs):
    """The agent may review tokens (create tokenreviews and
    subjectaccessreviews) only when it does, and then its probes speak
    HTTPS."""
    reviews = {"tokenreviews", "subjectaccessreviews"}
    granted = {
        resource
        for role in docs
        if role["kind"] in ("ClusterRole", "Role")
        for rule in role.get("rules", [])
        if "create" in rule.get("verbs", [])
        for resource in set(rule.get("resources", [])) & reviews
    }
    reviewed = metrics_reviewed(docs)
    if granted and not reviewed:
        fail("ClusterRole", f"grants create on {sorted(granted)}, which only --metrics-auth=kubernetes needs")
    if reviewed and granted != reviews:
        fail("DaemonSet", "--metrics-auth=kubernetes without create on tokenreviews and subjectaccessreviews: every scrape would be refused")
    if reviewed:
        container = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if container.get(probe, {}).get("httpGet", {}).get("scheme") != "HTTPS":
                fail("DaemonSet", f"its {probe} speaks HTTP to a port that speaks TLS")


def check_pod(docs):
    """The DaemonSet's pod: confined, its mounts and flags as shipped."""
    daemonset = one(docs, "DaemonSet")
    pod = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    if pod.get("nodeSelector", {}).get("kubernetes.io/os") != "linux":
        fail("DaemonSet", "no kubernetes.io/os: linux node selector")
    if pod.get("securityContext", {}).get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail("DaemonSet", "the pod's seccompProfile is not RuntimeDefault")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        fail("DaemonSet", "shares a host namespace")
    if pod.get("priorityClassName") == "system-node-critical":
        quota = one(docs, "ResourceQuota")
        scopes = quota.get("spec", {}).get("scopeSelector", {}).get("matchExpressions", [])
        if not any("system-node-critical" in e.get("values", []) for e in scopes):
            fail("ResourceQuota", "does not name the system-node-critical priority class")
    # Root only to give the state directory to the agent's user, with two
    # capabilities; every container confined.
    for container in pod.get("initContainers", []) + pod.get("containers", []):
        where = f"DaemonSet container {container['name']}"
        context = container.get("securityContext", {})
        if context.get("privileged"):
            fail(where, "privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            fail(where, "allowPrivilegeEscalation is not false")
        if context.get("readOnlyRootFilesystem") is not True:
            fail(where, "the root filesystem is writable")
        capabilities = context.get("capabilities", {})
        if capabilities.get("drop") != ["ALL"]:
            fail(where, "capabilities are not all dropped")
        root = context.get("runAsUser") == 0 or not context.get("runAsNonRoot")
        if root and container.get("args", [None])[0] != "own-state":
            fail(where, "runs as root")
        if set(capabilities.get("add", [])) - ({"CHOWN", "DAC_READ_SEARCH"} if root else set()):
            fail(where, f"adds capabilities {capabilities.get('add')}")
    for container in pod.get("containers", []):
        where = f"DaemonSet container {container['name']}"
        args = container.get("args", [])
        if "--metrics-addr=[::]:9464" not in args:
            fail(where, "does not listen dual-stack (--metrics-addr=[::]:9464)")
        for flag in ("--nodefs=/host/nodefs", "--imagefs=/host/imagefs"):
            if flag not in args:
                fail(where, f"no {flag}")
        if not any(a.startswith("--cgroup-driver=") for a in args):
            fail(where, "the cgroup driver is not set (--cgroup-driver)")
        writable = [m["name"] for m in container.get("volumeMounts", []) if not m.get("readOnly")]
        if writable != ["state"]:
            fail(where, f"writable mounts {writable}, only the state directory may be")
    for volume in pod.get("volumes", []):
        path = volume.get("hostPath", {}).get("path")
        if path is None:
            continue
        where = f"DaemonSet volume {volume['name']} ({path})"
        kubelet = path.rstrip("/") == "/var/lib/kubelet"
        if kubelet or (path.startswith("/var/lib/kubelet/") and not path.endswith("/vigil-statfs")):
            fail(where, "mounts the kubelet's directory (its keys, the pods' Secrets)")
        statfs = path.endswith("/vigil-statfs") and volume["hostPath"].get("type") == "DirectoryOrCreate"
        if volume["name"] in ("nodefs", "imagefs") and not statfs:
            fail(where, "not an empty vigil-statfs directory made by the kubelet (DirectoryOrCreate)")


def pods_as_itself(docs):
    """Whether the agent reads and evicts pods as its service account
    (--pod-access=service-account), not as its node."""
    return "--pod-access=service-account" in agent_args(docs)


AS_NODE = "impersonate-on:associated-node:"


def check_impersonation(where, rule, as_itself):
    """Pods only as the agent's own node, unless it runs as itself; no
    other impersonation at all."""
    resources, verbs = set(rule.get("resources", [])), rule.get("verbs", [])
    for verb in (v for v in verbs if v.startswith("impersonate")):
        if verb != "impersonate:associated-node" and not verb.startswith(AS_NODE):
            fail(where, f"grants {verb}: the agent may impersonate only the node its token names")
    if "impersonate:associated-node" in verbs and resources != {"nodes"}:
        fail(where, f"grants impersonate:associated-node on {sorted(resources)}, not nodes")
    plain = [v for v in verbs if not v.startswith("impersonate")]
    if resources & {"pods", "pods/eviction"} and plain and not as_itself:
        fail(where, f"lets the agent {plain} pods as itself: only as its node (--pod-access=node)")


def check_roles(docs):
    """ConfigMaps only in vigil's namespace; no Secret but by name; no
    wildcard; pods only as the agent's node."""
    as_itself = pods_as_itself(docs)
    for role in (d for d in docs if d["kind"] in ("ClusterRole", "Role")):
        where = f"{role['kind']} {role['metadata']['name']}"
        for rule in role.get("rules", []):
            check_impersonation(where, rule, as_itself)
            resources = set(rule.get("resources", []))
            if role["kind"] == "ClusterRole" and resources & {"configmaps", "secrets"}:
                fail(where, f"grants {sorted(resources & {'configmaps', 'secrets'})} cluster-wide")
            if "secrets" in resources and not rule.get("resourceNames"):
                fail(where, "reads Secrets other than by name")
            if "*" in resources or "*" in rule.get("verbs", []):
                fail(where, "grants a wildcard")


def check_admission(docs):
    """One node's agent acts on its own node only."""
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    account = agent_account(docs)
    if policy and binding and account:
        spec = policy["spec"]
        if spec.get("failurePolicy") != "Fail":
            fail("ValidatingAdmissionPolicy", "does not fail closed")
        rules = {
            (op, res)
            for rule in spec["matchConstraints"]["resourceRules"]
            for op in rule["operations"]
            for res in rule["resources"]
        }
        for needed in [("UPDATE", "nodes"), ("UPDATE", "nodes/status"), ("DELETE", "pods")]:
            if needed not in rules:
                fail("ValidatingAdmissionPolicy", f"does not check {needed[0]} {needed[1]}")
        if binding["spec"].get("policyName") != policy["metadata"]["name"]:
            fail("ValidatingAdmissionPolicyBinding", "binds another policy")
        if binding["spec"].get("validationActions") != ["Deny"]:
            fail("ValidatingAdmissionPolicyBinding", "does not deny")
        ref = binding["spec"].get("paramRef", {})
        meta = account["metadata"]
        if (ref.get("name"), ref.get("namespace")) != (meta["name"], meta.get("namespace")):
            fail("ValidatingAdmissionPolicyBinding", f"its parameter {ref} is not the agent's ServiceAccount")
        if "authentication.kubernetes.io/node-name" not in yaml.safe_dump(spec):
            fail("ValidatingAdmissionPolicy", "does not read the token's node name")


def schema_of(kind):
    for path in (DEPLOY / "schemas").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            version = next(v for v in crd["spec"]["versions"] if v["storage"])
            return version["schema"]["openAPIV3Schema"]
    raise SystemExit(f"deploy/schemas has no CRD for {kind}")


def unknown_fields(value, schema, path):
    """Fields the structural schema does not know (the API server would prune or refuse them)."""
    if isinstance(value, dict) and "properties" in schema:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        for key, item in value.items():
            if key not in schema["properties"]:
                yield f"{path}.{key}"
            else:
                yield from unknown_fields(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from unknown_fields(item, schema["items"], f"{path}[{index}]")


def check_prometheus(docs):
    for kind in ("PodMonitor", "PrometheusRule"):
        resource = one(docs, kind)
        if not resource:
            continue
        schema = schema_of(kind)
        body = {k: v for k, v in resource.items() if k not in ("apiVersion", "kind", "metadata")}
        for error in jsonschema.Draft7Validator(schema).iter_errors(body):
            fail(kind, f"{'.'.join(map(str, error.absolute_path))}: {error.message}")
        for field in unknown_fields(body, schema, ""):
            fail(kind, f"unknown field {field.lstrip('.')}")

    monitor = one(docs, "PodMonitor")
    daemonset = one(docs, "DaemonSet")
    # A PodMonitor selects pods in its own namespace unless told otherwise,
    # and a rule elsewhere is a rule nobody looks for beside the agents.
    for kind in ("PodMonitor", "PrometheusRule"):
        resource = one(docs, kind)
        if resource and daemonset:
            where = resource["metadata"].get("namespace")
            agents = daemonset["metadata"].get("namespace")
            if where != agents:
                fail(kind, f"in namespace {where!r}, the agents in {agents!r}")
    if monitor and "namespaceSelector" in monitor["spec"]:
        fail("PodMonitor", "a namespaceSelector: the PodMonitor lives with the agents, and an overlay moves both")
    if monitor and daemonset:
        labels = daemonset["spec"]["template"]["metadata"]["labels"]
        wanted = monitor["spec"]["selector"]["matchLabels"]
        if any(labels.get(k) != v for k, v in wanted.items()):
            fail("PodMonitor", f"its selector {wanted} does not select the agent's pods")
        ports = {p["name"] for c in daemonset["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            if endpoint.get("port") not in ports:
                fail("PodMonitor", f"scrapes port {endpoint.get('port')}, the agent has {sorted(ports)}")
            relabelled = {
                r["targetLabel"]
                for r in endpoint.get("relabelings", [])
                if r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]
            }
            if relabelled != {"node", "instance"}:
                fail("PodMonitor", "series are not labelled with the node (node and instance)")
            if metrics_reviewed(docs):
                check_authenticated_scrape(docs, endpoint)

    rule = one(docs, "PrometheusRule")
    alerts = yaml.safe_load((DEPLOY / "observability" / "alerts.yaml").read_text())
    if rule and rule["spec"]["groups"] != alerts["groups"]:
        fail("PrometheusRule", "its groups differ from deploy/observability/alerts.yaml")
    names = {r.get("alert") for g in alerts["groups"] for r in g["rules"]}
    if "VigilAgentMissing" not in names:
        fail("alerts.yaml", "no alert for a node without a ready agent")
    # An overlay renames and moves every object (namePrefix, namespace): an
    # alert that matches series by an object's name stops finding them.
    by_name = re.compile(r'\b(created_by_name|daemonset|job|namespace|pod|service)\s*(=~|!~|!=|=)\s*"')
    for group in alerts["groups"]:
        for r in group["rules"]:
            if "instance" in r["expr"]:
                fail("alerts.yaml", f"{r['alert']} groups by instance, not node")
            for found in by_name.finditer(r["expr"]):
                fail("alerts.yaml", f"{r['alert']} matches {found.group(1)} by name, which an overlay renames")
            if not r.get("annotations", {}).get("runbook_url"):
                fail("alerts.yaml", f"{r['alert']} has no runbook_url")


def check_chart_values(docs, labels, pull_secret, key):
    """A Helm render with the values kustomize has no counterpart of: the
    monitors carry `labels` beside their own, the agents' pods pull with
    `pull_secret`, and the verification key's Secret holds the PEM file
    `key` (and no native-code Secret is made, that value being unset)."""
    wanted = dict(item.split("=", 1) for item in labels.split(","))
    for kind in ("PodMonitor", "PrometheusRule"):
        have = one(docs, kind)["metadata"]["labels"]
        if any(have.get(k) != v for k, v in wanted.items()) or have.get("app.kubernetes.io/name") != "vigil":
            fail(kind, f"labels {have}, not {wanted} beside its own")
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    if pod.get("imagePullSecrets") != [{"name": pull_secret}]:
        fail("DaemonSet", f"imagePullSecrets {pod.get('imagePullSecrets')}, not {pull_secret}")
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    volume = {v["name"]: v for v in pod["volumes"]}["verification-key"]["secret"]["secretName"]
    pem = pathlib.Path(key).read_text()
    secret = secrets.get(volume)
    if not secret or secret.get("stringData", {}).get("cosign.pub") != pem:
        fail("Secret", f"{volume} does not hold the verification key given")
    elif secret["metadata"].get("namespace") != one(docs, "DaemonSet")["metadata"]["namespace"]:
        fail("Secret", f"{volume} is not in the agents' namespace")
    native = {v["name"]: v for v in pod["volumes"]}["native-code-key"]["secret"]["secretName"]
    if native in secrets:
        fail("Secret", f"{native} made without a native-code key given")


def check_authenticated_scrape(docs, endpoint):
    """A scrape of agents that review tokens: over HTTPS, with the token of a
    ServiceAccount the render holds."""
    if endpoint.get("scheme") != "https":
        fail("PodMonitor", "scrapes over HTTP an agent that speaks TLS (--metrics-auth=kubernetes)")
    secret_name = endpoint.get("authorization", {}).get("credentials", {}).get("name")
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    secret = secrets.get(secret_name)
    if not secret or secret.get("type") != "kubernetes.io/service-account-token":
        fail("PodMonitor", f"presents the Secret {secret_name!r}, not a ServiceAccount token the render holds")
    elif secret["metadata"].get("annotations", {}).get("kubernetes.io/service-account.name") not in accounts:
        fail("Secret", f"{secret_name} is the token of a ServiceAccount the render does not hold")


def check_same(helm, kustomize):
    """Helm's render and kustomize's hold the same objects, field for field
    (the CRDs' `helm.sh/resource-policy: keep` aside: Helm's alone)."""

    def key(doc):
        meta = doc["metadata"]
        return (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])

    def unkept(doc):
        annotations = doc["metadata"].get("annotations", {})
        annotations.pop("helm.sh/resource-policy", None)
        if not annotations:
            doc["metadata"].pop("annotations", None)
        return doc

    def by_name(value):
        # A list of named items (volumes, containers, ports) is a map: a
        # strategic-merge patch moves the item it patches.
        if isinstance(value, dict):
            return {k: by_name(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [by_name(v) for v in value]
            if items and all(isinstance(v, dict) and "name" in v for v in items):
                items.sort(key=lambda v: str(v["name"]))
            return items
        return value

    ours = {key(d): by_name(unkept(d)) for d in helm}
    theirs = {key(d): by_name(d) for d in kustomize}
    for missing in sorted(set(theirs) - set(ours)):
        fail("chart", f"renders no {missing}")
    for extra in sorted(set(ours) - set(theirs)):
        fail("chart", f"renders {extra}, which kustomize does not")
    for both in sorted(set(ours) & set(theirs)):
        if ours[both] != theirs[both]:
            path, mine, kustomized = first_difference(ours[both], theirs[both])
            fail("chart", f"renders {both} otherwise than kustomize at {path}: {mine!r}, not {kustomized!r}")


def first_difference(a, b, path=""):
    """The first path at which two values differ, and both values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return path, a, b


def main():
    mode, render = sys.argv[1:3]
    docs = load(render)
    if mode == "same":
        check_same(docs, load(sys.argv[3]))
    elif mode == "chart-values":
        check_chart_values(docs, *sys.argv[3:6])
    else:
        {"privilege": check_privilege, "prometheus": check_prometheus}[mode](docs)
    for failure in failures:
        print(f"deploy/ ({mode}): {failure}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
