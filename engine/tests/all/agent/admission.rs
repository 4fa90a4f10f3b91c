//! `deploy/admission.yaml`, evaluated as the API server evaluates a
//! ValidatingAdmissionPolicy — resource rules, match conditions, variables,
//! validations, each a CEL expression — on the requests the agent really
//! made (every one admitted) and on forged ones (denied): another node's
//! token, a token without a node, another node's pod or status object.

use super::*;
use cel::{Context, Program};
use serde::Deserialize;
use std::collections::BTreeMap;

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
            Some(sub) if !sub.is_empty() => format!("{}/{sub}", request["resource"]["resource"]),
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
        let mut context = Context::default();
        for (name, value) in [
            ("request", request),
            ("object", &review["object"]),
            ("oldObject", &review["oldObject"]),
            ("params", &self.params),
        ] {
            context.add_variable(name, value.clone()).unwrap();
        }
        for condition in &self.spec.match_conditions {
            match evaluate(&context, &condition.expression) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => return Verdict::Skipped,
                other => return Verdict::Denied(format!("{}: {other:?}", condition.name)),
            }
        }
        let mut variables = serde_json::Map::new();
        for variable in &self.spec.variables {
            context.add_variable("variables", &variables).unwrap();
            match evaluate(&context, &variable.expression) {
                Ok(value) => variables.insert(variable.name.clone(), value),
                Err(error) => return Verdict::Denied(format!("{}: {error}", variable.name)),
            };
        }
        context.add_variable("variables", &variables).unwrap();
        for validation in &self.spec.validations {
            match evaluate(&context, &validation.expression) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let message = match &validation.message_expression {
                        Some(expression) => match evaluate(&context, expression) {
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
fn evaluate(context: &Context, expression: &str) -> Result<Value, String> {
    let program = Program::compile(expression).map_err(|e| format!("{expression}: {e}"))?;
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

    /// What it names: resource (with its subresource), namespace, name.
    fn key(&self) -> (String, String, String) {
        let resource = match self.subresource.as_str() {
            "" => self.resource.clone(),
            sub => format!("{}/{sub}", self.resource),
        };
        (resource, self.namespace.clone(), self.name.clone())
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
/// object as it was before (one of the test's `pods`, or the agent's last
/// write of it) and after.
fn recorded_writes(server: &ApiServer, pods: &[Value]) -> Vec<(Target, Value, Value)> {
    let mut known: BTreeMap<(String, String, String), Value> = pods
        .iter()
        .map(|object| {
            let text = |key: &str| object["metadata"][key].as_str().unwrap().to_owned();
            (
                ("pods".into(), text("namespace"), text("name")),
                object.clone(),
            )
        })
        .collect();
    let mut writes = Vec::new();
    for recorded in server.requests() {
        let Some(target) = Target::of(&recorded) else {
            continue;
        };
        let key = target.key();
        let old = match target.operation {
            "CREATE" => Value::Null,
            _ => known.get(&key).cloned().unwrap_or(Value::Null),
        };
        let object = match (recorded.method.as_str(), &recorded.body) {
            ("DELETE", _) => Value::Null,
            ("PATCH", _) => server
                .get(&target.resource, &target.namespace, &target.name)
                .unwrap_or_else(|| json!({"metadata": {"name": target.name}})),
            (_, Some(body)) => body.clone(),
            (_, None) => panic!("a write without a body: {}", recorded.uri),
        };
        match target.operation {
            "DELETE" => known.remove(&key),
            _ => known.insert(key, object.clone()),
        };
        writes.push((target, object, old));
    }
    writes
}

/// Asserts that the policy admits every write the agent made on this test's
/// node, that each of them it checks is denied when forged, and that it
/// checked writes of every kind it guards.
pub(super) fn assert_it_admits_the_agent_and_denies_forgeries(server: &ApiServer, pods: &[Value]) {
    let policy = Policy::load();
    assert_eq!(policy.params["metadata"]["namespace"], VIGIL_NS);
    let mut checked = BTreeSet::new();
    for (target, object, old) in recorded_writes(server, pods) {
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

/// A `VigilPolicyStatus` of `node`'s `policy`, by its label.
fn status_of(node: &str, name: &str) -> Value {
    json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicyStatus",
           "metadata": {"name": name, "labels": {"vigil.dev/node": node}}})
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
