//! `deploy/admission.yaml`, evaluated as the API server evaluates a
//! ValidatingAdmissionPolicy — resource rules, match conditions, variables,
//! validations, each a CEL expression — on the requests the agent really
//! made (every one admitted) and on forged ones (denied): another node's
//! token, a token without a node, another node's pod or status object.

use super::*;
use cel::{Context, Env};
use serde::Deserialize;
use std::sync::Arc;

/// Another node of the cluster.
const OTHER: &str = "node-2";

/// The agent's user: `deploy/`'s ServiceAccount in vigil's namespace ([`VIGIL_NS`]).
const AGENT: &str = "system:serviceaccount:vigil-system:vigil";

/// The policy's answer.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Not for this policy: no rule or match condition matched.
    Skipped,
    /// Every validation held.
    Admitted,
    /// A validation failed (or an expression errored: the policy fails closed).
    Denied(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    match_constraints: Constraints,
    match_conditions: Vec<Named>,
    variables: Vec<Named>,
    validations: Vec<Validation>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Constraints {
    resource_rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    api_groups: Vec<String>,
    operations: Vec<String>,
    resources: Vec<String>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
    expression: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Validation {
    expression: String,
    message: Option<String>,
    message_expression: Option<String>,
}

/// The policy, and its parameter: the agent's ServiceAccount.
struct Policy {
    spec: Spec,
    params: Value,
}

impl Policy {
    fn load() -> Self {
        let path = format!("{}/../deploy/admission.yaml", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).unwrap())
            .collect();
        let policy = docs
            .iter()
            .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .expect("a ValidatingAdmissionPolicy");
        let binding = docs
            .iter()
            .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
            .expect("its binding");
        assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        assert_eq!(policy["spec"]["paramKind"]["kind"], "ServiceAccount");
        let param = &binding["spec"]["paramRef"];
        assert_eq!(param["name"], "vigil", "the ServiceAccount of rbac.yaml");
        let params = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": param["name"], "namespace": param["namespace"]}});
        Self {
            spec: serde_json::from_value(policy["spec"].clone()).unwrap(),
            params,
        }
    }

    /// What the API server would answer `review` (`request`, `object`, `oldObject`).
    fn admit(&self, review: &Value) -> Verdict {
        let request = &review["request"];
        let resource = match request["subResource"].as_str() {
            Some(sub) if !sub.is_empty() => {
                format!(
                    "{}/{sub}",
                    request["resource"]["resource"].as_str().unwrap()
                )
            }
            _ => request["resource"]["resource"].as_str().unwrap().to_owned(),
        };
        let listed = |list: &[String], item: &str| list.iter().any(|i| i == item || i == "*");
        let matched = self
            .spec
            .match_constraints
            .resource_rules
            .iter()
            .any(|rule| {
                listed(
                    &rule.api_groups,
                    request["resource"]["group"].as_str().unwrap(),
                ) && listed(&rule.operations, request["operation"].as_str().unwrap())
                    && listed(&rule.resources, &resource)
            });
        if !matched {
            return Verdict::Skipped;
        }
        // Kubernetes' CEL has the strings extension (`substring`…) too.
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings).unwrap();
        let env = Arc::new(env);
        let mut context = Context::with_env(Arc::clone(&env));
        for (name, value) in [
            ("request", request),
            ("object", &review["object"]),
            ("oldObject", &review["oldObject"]),
            ("params", &self.params),
        ] {
            context.add_variable(name, value.clone()).unwrap();
        }
        for condition in &self.spec.match_conditions {
            match evaluate(&env, &context, &condition.expression) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => return Verdict::Skipped,
                other => return Verdict::Denied(format!("{}: {other:?}", condition.name)),
            }
        }
        // The server evaluates a variable when a validation first reads it,
        // and its error fails only such a validation: one that errors here
        // is left out, so reading it errors as the server's would.
        let mut variables = serde_json::Map::new();
        for variable in &self.spec.variables {
            context.add_variable("variables", &variables).unwrap();
            if let Ok(value) = evaluate(&env, &context, &variable.expression) {
                variables.insert(variable.name.clone(), value);
            }
        }
        context.add_variable("variables", &variables).unwrap();
        for validation in &self.spec.validations {
            match evaluate(&env, &context, &validation.expression) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let message = match &validation.message_expression {
                        Some(expression) => match evaluate(&env, &context, expression) {
                            Ok(Value::String(message)) => message,
                            other => panic!("{expression}: {other:?}"),
                        },
                        None => validation.message.clone().expect("a message"),
                    };
                    return Verdict::Denied(message);
                }
                other => return Verdict::Denied(format!("{}: {other:?}", validation.expression)),
            }
        }
        Verdict::Admitted
    }
}

/// One CEL expression's value, as JSON.
fn evaluate(env: &Env, context: &Context, expression: &str) -> Result<Value, String> {
    let program = env
        .compile(expression)
        .map_err(|e| format!("{expression}: {e}"))?;
    let value = program
        .execute(context)
        .map_err(|e| format!("{expression}: {e}"))?;
    value.json().map_err(|e| format!("{expression}: {e:?}"))
}

/// Who sends a request: a username and the node its token was bound to.
#[derive(Clone, Copy)]
struct Caller<'a> {
    username: &'a str,
    node: Option<&'a str>,
}

impl Caller<'static> {
    fn agent_on(node: &'static str) -> Self {
        Caller {
            username: AGENT,
            node: Some(node),
        }
    }
}

/// What a request acts on, as the API server's admission attributes say it.
struct Target {
    operation: &'static str,
    group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    /// Made as the node (constrained impersonation): admission sees the
    /// node's user, not the agent's.
    as_node: bool,
}

impl Target {
    /// The target of a recorded write; `None` for a read.
    fn of(recorded: &Request) -> Option<Self> {
        let access = recorded
            .access()
            .unwrap_or_else(|| panic!("{}", recorded.uri));
        let verb = access.verb.as_str();
        let operation = match verb
            .strip_prefix("impersonate-on:associated-node:")
            .unwrap_or(verb)
        {
            "create" => "CREATE",
            "update" | "patch" => "UPDATE",
            "delete" => "DELETE",
            _ => return None,
        };
        // A create names its object in the body, not the path.
        let name = access.name.unwrap_or_else(|| {
            let body = recorded.body.as_ref().expect("a create's body");
            body["metadata"]["name"].as_str().unwrap().to_owned()
        });
        let (resource, subresource) = match access.resource.split_once('/') {
            Some((resource, sub)) => (resource.to_owned(), sub.to_owned()),
            None => (access.resource, String::new()),
        };
        Some(Self {
            operation,
            group: access.group,
            resource,
            subresource,
            namespace: access.namespace,
            name,
            as_node: recorded.impersonated.is_some(),
        })
    }

    /// The object it names (a subresource names its object): resource,
    /// namespace, name.
    fn key(&self) -> (String, String, String) {
        (
            self.resource.clone(),
            self.namespace.clone(),
            self.name.clone(),
        )
    }

    /// The review the API server hands the policy.
    fn review(&self, caller: Caller, object: Value, old_object: Value) -> Value {
        let mut extra = serde_json::Map::new();
        if let Some(node) = caller.node {
            extra.insert(
                "authentication.kubernetes.io/node-name".into(),
                json!([node]),
            );
        }
        json!({
            "request": {
                "operation": self.operation,
                "resource": {"group": self.group, "version": "v1", "resource": self.resource},
                "subResource": self.subresource,
                "namespace": self.namespace,
                "name": self.name,
                "userInfo": {"username": caller.username, "extra": extra},
            },
            "object": object,
            "oldObject": old_object,
        })
    }
}

/// The agent's recorded writes as the policy sees them, each with the
/// object after it and, as `oldObject`, the object the store held just
/// before it.
fn recorded_writes(server: &ApiServer) -> Vec<(Target, Value, Value)> {
    let mut writes = Vec::new();
    for recorded in server.requests() {
        let Some(target) = Target::of(&recorded) else {
            continue;
        };
        let old = match target.operation {
            "CREATE" => Value::Null,
            _ => recorded.before.clone().unwrap_or(Value::Null),
        };
        // What the store held after it, as admission sees it; a refused
        // create or update as it was sent.
        let object = match (recorded.method.as_str(), &recorded.answer) {
            ("DELETE", _) => Value::Null,
            (_, Some(answer)) if recorded.status < 300 => answer.clone(),
            ("POST" | "PUT", _) => recorded.body.clone().expect("a write's body"),
            _ => panic!("a refused patch: {recorded:?}"),
        };
        writes.push((target, object, old));
    }
    writes
}

/// Asserts that the policy admits every write the agent made on this test's
/// node, that each of them it checks is denied when forged, and that it
/// checked writes of every kind it guards.
pub(super) fn assert_it_admits_the_agent_and_denies_forgeries(server: &ApiServer) {
    let policy = Policy::load();
    assert_eq!(policy.params["metadata"]["namespace"], VIGIL_NS);
    let mut checked = BTreeSet::new();
    for (target, object, old) in recorded_writes(server) {
        let review = |caller| target.review(caller, object.clone(), old.clone());
        let what = format!("{} {:?}", target.operation, target.key());
        let kubelet = Caller {
            username: "system:node:node-1",
            node: None,
        };
        if target.as_node {
            // The node's own requests are NodeRestriction's, never the policy's.
            assert_eq!(policy.admit(&review(kubelet)), Verdict::Skipped, "{what}");
            let sub = &target.subresource;
            let resource =
                [target.resource.as_str(), sub].join(if sub.is_empty() { "" } else { "/" });
            checked.insert(format!("{} {resource} as the node", target.operation));
            continue;
        }
        match policy.admit(&review(Caller::agent_on(NODE))) {
            Verdict::Skipped => continue,
            Verdict::Admitted => {}
            Verdict::Denied(why) => panic!("{what} of the agent denied: {why}"),
        }
        checked.insert(format!("{} {}", target.operation, target.resource));
        let Verdict::Denied(why) = policy.admit(&review(Caller::agent_on(OTHER))) else {
            panic!("{what} admitted from the agent on {OTHER}");
        };
        assert!(why.contains(OTHER), "{what}: {why}");
        let nameless = Caller {
            node: None,
            ..Caller::agent_on(NODE)
        };
        let Verdict::Denied(why) = policy.admit(&review(nameless)) else {
            panic!("{what} admitted from a token without a node");
        };
        assert!(why.contains("names no node"), "{what}: {why}");
        assert_eq!(policy.admit(&review(kubelet)), Verdict::Skipped, "{what}");
    }
    let expected = [
        "CREATE pods/eviction as the node",
        "CREATE vigilnodestatuses",
        "CREATE vigilpolicystatuses",
        "DELETE pods as the node",
        "DELETE vigilpolicystatuses",
        "UPDATE nodes",
        "UPDATE vigilnodestatuses",
        "UPDATE vigilpolicystatuses",
    ];
    assert_eq!(checked.iter().collect::<Vec<_>>(), expected);
}

/// A pod of `node`, as the API server holds it.
fn bound_pod(node: &str, name: &str) -> Value {
    objects::best_effort_pod(node, NS, name, 1)
}

fn delete_pod(name: &str) -> Target {
    Target {
        operation: "DELETE",
        group: String::new(),
        resource: "pods".into(),
        subresource: String::new(),
        namespace: NS.into(),
        name: name.into(),
        as_node: false,
    }
}

fn policy_status(operation: &'static str, name: &str) -> Target {
    Target {
        operation,
        group: "vigil.dev".into(),
        resource: "vigilpolicystatuses".into(),
        subresource: String::new(),
        namespace: String::new(),
        name: name.into(),
        as_node: false,
    }
}

/// A `VigilPolicyStatus` of `node`'s `policy`, by its label and spec.
fn status_of(node: &str, name: &str) -> Value {
    json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicyStatus",
           "metadata": {"name": name, "labels": {"vigil.dev/node": node}},
           "spec": {"node": node, "policy": "memory-pressure"}})
}

fn node_write(subresource: &str) -> Target {
    Target {
        operation: "UPDATE",
        group: String::new(),
        resource: "nodes".into(),
        subresource: subresource.into(),
        namespace: String::new(),
        name: NODE.into(),
        as_node: false,
    }
}

/// This test's Node as its kubelet and others keep it: a label, a taint
/// of another owner, addresses, capacity, the kubelet's condition.
fn kept_node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": "10.0.1.0/24",
                 "taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
        "status": {"capacity": {"memory": "8Gi"}, "allocatable": {"memory": "7Gi"},
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
}

#[test]
fn an_agent_deletes_only_pods_bound_to_its_node() {
    let policy = Policy::load();
    let agent = Caller::agent_on(NODE);
    let own = delete_pod("here").review(agent, Value::Null, bound_pod(NODE, "here"));
    assert_eq!(policy.admit(&own), Verdict::Admitted);
    let elsewhere = delete_pod("there").review(agent, Value::Null, bound_pod(OTHER, "there"));
    let Verdict::Denied(why) = policy.admit(&elsewhere) else {
        panic!("another node's pod deleted");
    };
    assert!(
        why.contains("may delete only pods bound to it, not there"),
        "{why}"
    );
    let mut pending = bound_pod(NODE, "pending");
    pending["spec"].as_object_mut().unwrap().remove("nodeName");
    let unbound = delete_pod("pending").review(agent, Value::Null, pending);
    assert!(matches!(policy.admit(&unbound), Verdict::Denied(_)));
    // Anyone else, e.g. a controller, is not this policy's business.
    let controller = Caller {
        username: "system:serviceaccount:kube-system:replicaset-controller",
        node: None,
    };
    let theirs = delete_pod("there").review(controller, Value::Null, bound_pod(OTHER, "there"));
    assert_eq!(policy.admit(&theirs), Verdict::Skipped);
}

#[test]
fn an_agent_cannot_take_over_another_nodes_status_object() {
    let policy = Policy::load();
    let agent = Caller::agent_on(NODE);
    let name = "node-2.memory-pressure";
    // Relabelled as its own, another node's object is still not its own.
    let relabelled =
        policy_status("UPDATE", name).review(agent, status_of(NODE, name), status_of(OTHER, name));
    assert!(matches!(policy.admit(&relabelled), Verdict::Denied(_)));
    let created = policy_status("CREATE", name).review(agent, status_of(OTHER, name), Value::Null);
    assert!(matches!(policy.admit(&created), Verdict::Denied(_)));
    let deleted = policy_status("DELETE", name).review(agent, Value::Null, status_of(OTHER, name));
    assert!(matches!(policy.admit(&deleted), Verdict::Denied(_)));
    let own = "node-1.memory-pressure";
    let updated =
        policy_status("UPDATE", own).review(agent, status_of(NODE, own), status_of(NODE, own));
    assert_eq!(policy.admit(&updated), Verdict::Admitted);
}

#[test]
fn an_agent_changes_only_its_own_taints_and_conditions_on_its_node() {
    let mut policy = Policy::load();
    let agent = Caller::agent_on(NODE);
    let before = kept_node();
    let changed = |subresource: &str, change: &dyn Fn(&mut Value)| {
        let mut after = before.clone();
        change(&mut after);
        node_write(subresource).review(agent, after, before.clone())
    };
    let taint = |effect: &str| json!({"key": "vigil.dev/MemoryPressure", "effect": effect});
    let admitted = [
        changed("", &|n| {
            n["spec"]["taints"]
                .as_array_mut()
                .unwrap()
                .push(taint("NoSchedule"));
        }),
        changed("status", &|n| {
            let condition = json!({"type": "VigilMemoryPressure", "status": "True"});
            n["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(condition);
        }),
    ];
    for review in &admitted {
        assert_eq!(policy.admit(review), Verdict::Admitted, "{review:#}");
    }
    let no_execute = changed("", &|n| {
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(taint("NoExecute"));
    });
    let denied: [(&str, Value); 9] = [
        ("may not add a NoExecute taint", no_execute.clone()),
        (
            "may change only vigil.dev/ taints",
            changed("", &|n| n["spec"]["taints"] = json!([])),
        ),
        (
            "may change only its taints and conditions",
            changed("", &|n| n["spec"]["unschedulable"] = json!(true)),
        ),
        (
            "may change only its taints and conditions",
            changed("", &|n| n["spec"]["podCIDR"] = json!("10.0.9.0/24")),
        ),
        (
            "may change only its taints and conditions",
            changed("", &|n| {
                n["metadata"]["labels"]["node-restriction.kubernetes.io/pci"] = json!("true");
            }),
        ),
        (
            "may change only its taints and conditions",
            changed("status", &|n| {
                n["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .clear();
            }),
        ),
        (
            "may change only its taints and conditions",
            changed("status", &|n| {
                n["status"]["addresses"][0]["address"] = json!("10.6.6.6")
            }),
        ),
        (
            "may change only its taints and conditions",
            changed("status", &|n| {
                n["status"]["capacity"]["memory"] = json!("64Gi")
            }),
        ),
        (
            "may change only Vigil conditions",
            changed("status", &|n| {
                n["status"]["conditions"][0]["status"] = json!("False")
            }),
        ),
    ];
    for (says, review) in &denied {
        let Verdict::Denied(why) = policy.admit(review) else {
            panic!("admitted: {review:#}");
        };
        assert!(why.contains(says), "{why}");
    }
    // NoExecute once the cluster's admin has allowed it on the
    // ServiceAccount.
    policy.params["metadata"]["annotations"] = json!({"vigil.dev/allow-no-execute": "true"});
    assert_eq!(policy.admit(&no_execute), Verdict::Admitted);
}

#[test]
fn an_agent_writes_status_objects_of_its_node_only() {
    let policy = Policy::load();
    let agent = Caller::agent_on(NODE);
    // Another node's name taken first, under the agent's own label.
    let name = "node-2.memory-pressure";
    let created = policy_status("CREATE", name).review(agent, status_of(NODE, name), Value::Null);
    let Verdict::Denied(why) = policy.admit(&created) else {
        panic!("another node's name taken");
    };
    assert!(
        why.contains("may create only VigilPolicyStatuses named node-1.*"),
        "{why}"
    );
    // Its own name, naming another node.
    let own = "node-1.memory-pressure";
    let mut elsewhere = status_of(NODE, own);
    elsewhere["spec"]["node"] = json!(OTHER);
    let created = policy_status("CREATE", own).review(agent, elsewhere, Value::Null);
    let Verdict::Denied(why) = policy.admit(&created) else {
        panic!("a status object of another node");
    };
    assert!(why.contains("whose spec.node is node-1"), "{why}");
    let created = policy_status("CREATE", own).review(agent, status_of(NODE, own), Value::Null);
    assert_eq!(policy.admit(&created), Verdict::Admitted);
    // A node named past 236 characters: its names are its name's first
    // 236 and a hash (fleet::reconcile), and only those are its own.
    let long: &'static str = "n".repeat(240).leak();
    let hashed = format!("{}.{}", &long[..236], "0123456789abcdef");
    let agent = Caller::agent_on(long);
    let created =
        policy_status("CREATE", &hashed).review(agent, status_of(long, &hashed), Value::Null);
    assert_eq!(policy.admit(&created), Verdict::Admitted);
    let short = "n.0123456789abcdef";
    let created = policy_status("CREATE", short).review(agent, status_of(long, short), Value::Null);
    assert!(matches!(policy.admit(&created), Verdict::Denied(_)));
}
