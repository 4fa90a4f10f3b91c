//! Validation by the real server: for every CEL rule and schema bound of the
//! CRDs under `spec`, an object that breaks it is refused with the message
//! the CRD states, and its valid neighbour is accepted. A bound the table
//! misses fails the census: a new bound needs its case here.

use super::{installed, root};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// One bound: where (`resource`, the schema path with `{}` for a map's
/// values and `[]` for a list's items, and which bound), the JSON pointer
/// that reaches it in [`base`]'s object, the value that breaks it, its valid
/// neighbour, and what the refusal says.
struct Case {
    resource: &'static str,
    path: &'static str,
    bound: &'static str,
    pointer: &'static str,
    bad: Value,
    good: Value,
    says: &'static str,
}

const DIGEST: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

fn pinned(repository: &str) -> String {
    format!("registry.example/{repository}@sha256:{DIGEST}")
}

/// A valid object of `resource` that reaches every bound in the table.
fn base(resource: &str) -> Value {
    match resource {
        "vigilconfigs" => json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilConfig",
            "spec": {
                "priority": 1,
                "target": {"nodeNames": ["n1"], "expiresAfter": "2030-01-01T00:00:00Z"},
                "rollout": {"percent": 50},
                "config": {
                    "sorter": "default-sorter",
                    "kubelet": {"evictionHard": {}, "evictionSoft": {}},
                    "evictionLimits": {},
                    "policies": {"memory-pressure": {"configFrom": [
                        {"namespace": "vigil-system", "name": "limits", "key": "memory"}
                    ]}}
                }
            }
        }),
        "vigilpolicies" => json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
            "spec": {
                "source": {"oci": {"ref": pinned("policies/sorter:1.1.0"), "pullSecretRef": {"name": "pull"}}},
                "precompiled": [{"engineKey": "0123456789abcdef0123456789abcdef", "ref": pinned("policies/sorter:1.1.0-x86_64")}],
                "rollout": {
                    "percent": 10,
                    "previous": pinned("policies/sorter:1.0.0"),
                    "canary": {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}},
                    "shadow": {"percent": 20, "maxDivergencePercent": 10}
                },
                "trial": {"maxEvictions": 3}
            }
        }),
        "vigilnodestatuses" => json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilNodeStatus",
            "spec": {"node": "n1"}
        }),
        "vigilpolicystatuses" => json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicyStatus",
            "spec": {"node": "n1", "policy": "default-sorter"}
        }),
        other => panic!("no base for {other}"),
    }
}

/// The bounds on whole numbers under `spec`: each refuses one past its end
/// and accepts the end itself.
fn numeric_cases(census: &[(String, String, Value)]) -> Vec<Case> {
    let mut cases = Vec::new();
    for (resource, path, bound) in census {
        let (which, limit) = match bound {
            Value::Object(b) if b.contains_key("minimum") => ("minimum", &b["minimum"]),
            Value::Object(b) if b.contains_key("maximum") => ("maximum", &b["maximum"]),
            _ => continue,
        };
        let limit = limit.as_f64().expect("a number") as i64;
        let (bad, says) = if which == "minimum" {
            (limit - 1, "greater than or equal to")
        } else {
            (limit + 1, "less than or equal to")
        };
        let pointer = pointer_of(path);
        cases.push(Case {
            resource: leak(resource),
            path: leak(path),
            bound: which,
            pointer: leak(&pointer),
            bad: json!(bad),
            good: json!(limit),
            says,
        });
    }
    cases
}

/// The JSON pointer in [`base`]'s objects of a schema path.
fn pointer_of(path: &str) -> String {
    path.replace("{}", "/memory-pressure")
        .replace("[]", "/0")
        .replace('.', "/")
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

/// The bounds the numeric rule does not cover, one by one.
fn other_cases() -> Vec<Case> {
    let quantity = "should match";
    let mut cases = vec![
        Case {
            resource: "vigilconfigs",
            path: ".spec.target",
            bound: "set nodeSelector or nodeNames, not both",
            pointer: "/spec/target",
            bad: json!({"nodeNames": ["n1"], "nodeSelector": {"matchLabels": {"pool": "a"}}}),
            good: json!({"nodeSelector": {"matchLabels": {"pool": "a"}}}),
            says: "set nodeSelector or nodeNames, not both",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.target",
            bound: "expiresAfter applies to nodeNames only",
            pointer: "/spec/target",
            bad: json!({"nodeSelector": {"matchLabels": {"pool": "a"}}, "expiresAfter": "2030-01-01T00:00:00Z"}),
            good: json!({"nodeNames": ["n1"], "expiresAfter": "2030-01-01T00:00:00Z"}),
            says: "expiresAfter applies to nodeNames only",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.target.nodeNames",
            bound: "minItems",
            pointer: "/spec/target/nodeNames",
            bad: json!([]),
            good: json!(["n1"]),
            says: "should have at least 1 items",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.target.nodeSelector.matchExpressions[]",
            bound: "required",
            pointer: "/spec/target",
            bad: json!({"nodeSelector": {"matchExpressions": [{"key": "pool"}]}}),
            good: json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}}),
            says: "spec.target.nodeSelector.matchExpressions[0].operator: Required value",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.rollout",
            bound: "required",
            pointer: "/spec/rollout",
            bad: json!({}),
            good: json!({"percent": 0}),
            says: "spec.rollout.percent: Required value",
        },
        Case {
            resource: "vigilconfigs",
            path: "",
            bound: "required",
            pointer: "/spec",
            bad: Value::Null,
            good: json!({}),
            says: "spec: Required value",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.config.sorter",
            bound: "minLength",
            pointer: "/spec/config/sorter",
            bad: json!(""),
            good: json!("s"),
            says: "should be at least 1 chars long",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.config.sorter",
            bound: "maxLength",
            pointer: "/spec/config/sorter",
            bad: json!("s".repeat(64)),
            good: json!("s".repeat(63)),
            says: "may not be more than 63 bytes",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.config.policies{}.configFrom",
            bound: "maxItems",
            pointer: "/spec/config/policies/memory-pressure/configFrom",
            bad: json!(vec![json!({"namespace": "a", "name": "b", "key": "c"}); 17]),
            good: json!(vec![json!({"namespace": "a", "name": "b", "key": "c"}); 16]),
            says: "must have at most 16 items",
        },
        Case {
            resource: "vigilconfigs",
            path: ".spec.config.policies{}.configFrom[]",
            bound: "required",
            pointer: "/spec/config/policies/memory-pressure/configFrom/0",
            bad: json!({"namespace": "a", "name": "b"}),
            good: json!({"namespace": "a", "name": "b", "key": "c"}),
            says: "configFrom[0].key: Required value",
        },
    ];
    for (field, longest) in [("key", 253), ("name", 253), ("namespace", 63)] {
        let pointer = format!("/spec/config/policies/memory-pressure/configFrom/0/{field}");
        let path = format!(".spec.config.policies{{}}.configFrom[].{field}");
        cases.push(Case {
            resource: "vigilconfigs",
            path: leak(&path),
            bound: "minLength",
            pointer: leak(&pointer),
            bad: json!(""),
            good: json!("a"),
            says: "should be at least 1 chars long",
        });
        cases.push(Case {
            resource: "vigilconfigs",
            path: leak(&path),
            bound: "maxLength",
            pointer: leak(&pointer),
            bad: json!("a".repeat(longest + 1)),
            good: json!("a".repeat(longest)),
            says: leak(&format!("may not be more than {longest} bytes")),
        });
    }
    for table in ["evictionHard", "evictionSoft"] {
        for signal in [
            "memory.available",
            "allocatableMemory.available",
            "nodefs.available",
            "nodefs.inodesFree",
            "imagefs.available",
            "imagefs.inodesFree",
            "pid.available",
        ] {
            let path = format!(".spec.config.kubelet.{table}.{signal}");
            let pointer = format!("/spec/config/kubelet/{table}/{signal}");
            cases.push(Case {
                resource: "vigilconfigs",
                path: leak(&path),
                bound: "pattern",
                pointer: leak(&pointer),
                bad: json!("lots"),
                good: json!("10%"),
                says: quantity,
            });
        }
    }
    let digest_message =
        "must be pinned by digest: registry/repository[:tag]@sha256:<64 hex digits>";
    for (path, pointer) in [
        (".spec.source.oci.ref", "/spec/source/oci/ref"),
        (".spec.precompiled[].ref", "/spec/precompiled/0/ref"),
        (".spec.rollout.previous", "/spec/rollout/previous"),
    ] {
        cases.push(Case {
            resource: "vigilpolicies",
            path,
            bound: digest_message,
            pointer,
            bad: json!("registry.example/policies/sorter:1.1.0"),
            good: json!(pinned("policies/sorter")),
            says: digest_message,
        });
    }
    for (path, pointer, longest) in [
        (".spec.source.oci.ref", "/spec/source/oci/ref", 1024),
        (".spec.precompiled[].ref", "/spec/precompiled/0/ref", 1024),
        (".spec.rollout.previous", "/spec/rollout/previous", 1024),
        (
            ".spec.precompiled[].engineKey",
            "/spec/precompiled/0/engineKey",
            32,
        ),
    ] {
        let fill = |length: usize| {
            if longest == 32 {
                "a".repeat(length)
            } else {
                let prefix = "registry.example/";
                let suffix = format!("@sha256:{DIGEST}");
                format!(
                    "{prefix}{}{suffix}",
                    "a".repeat(length - prefix.len() - suffix.len())
                )
            }
        };
        cases.push(Case {
            resource: "vigilpolicies",
            path,
            bound: "maxLength",
            pointer,
            bad: json!(fill(longest + 1)),
            good: json!(fill(longest)),
            says: leak(&format!("may not be more than {longest} bytes")),
        });
    }
    let precompiled =
        json!({"engineKey": "0123456789abcdef0123456789abcdef", "ref": pinned("policies/sorter")});
    cases.push(Case {
        resource: "vigilpolicies",
        path: ".spec.precompiled",
        bound: "maxItems",
        pointer: "/spec/precompiled",
        bad: json!(vec![precompiled.clone(); 33]),
        good: json!(vec![precompiled; 32]),
        says: "must have at most 32 items",
    });
    cases.extend([
        Case {
            resource: "vigilpolicies",
            path: ".spec.precompiled[].engineKey",
            bound: "engineKey is 32 lowercase hex digits",
            pointer: "/spec/precompiled/0/engineKey",
            bad: json!("0123456789ABCDEF0123456789ABCDEF"),
            good: json!("fedcba9876543210fedcba9876543210"),
            says: "engineKey is 32 lowercase hex digits",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.precompiled[]",
            bound: "required",
            pointer: "/spec/precompiled/0",
            bad: json!({"ref": pinned("policies/sorter")}),
            good: json!({"ref": pinned("policies/sorter"), "engineKey": "0123456789abcdef0123456789abcdef"}),
            says: "spec.precompiled[0].engineKey: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.rollout",
            bound: "required",
            pointer: "/spec/rollout",
            bad: json!({"previous": pinned("policies/sorter")}),
            good: json!({"percent": 100}),
            says: "spec.rollout.percent: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.rollout.shadow",
            bound: "required",
            pointer: "/spec/rollout/shadow",
            bad: json!({"maxDivergencePercent": 5}),
            good: json!({"percent": 0}),
            says: "spec.rollout.shadow.percent: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.rollout.canary.nodeSelector.matchExpressions[]",
            bound: "required",
            pointer: "/spec/rollout/canary/nodeSelector/matchExpressions/0",
            bad: json!({"operator": "Exists"}),
            good: json!({"key": "pool", "operator": "Exists"}),
            says: "matchExpressions[0].key: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec",
            bound: "required",
            pointer: "/spec",
            bad: json!({"rollout": {"percent": 1}}),
            good: json!({"source": {"oci": {"ref": pinned("policies/sorter")}}}),
            says: "spec.source: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.source",
            bound: "required",
            pointer: "/spec/source",
            bad: json!({}),
            good: json!({"oci": {"ref": pinned("policies/sorter")}}),
            says: "spec.source.oci: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.source.oci",
            bound: "required",
            pointer: "/spec/source/oci",
            bad: json!({"pullSecretRef": {"name": "pull"}}),
            good: json!({"ref": pinned("policies/sorter")}),
            says: "spec.source.oci.ref: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: ".spec.source.oci.pullSecretRef",
            bound: "required",
            pointer: "/spec/source/oci/pullSecretRef",
            bad: json!({}),
            good: json!({"name": "pull"}),
            says: "spec.source.oci.pullSecretRef.name: Required value",
        },
        Case {
            resource: "vigilpolicies",
            path: "",
            bound: "required",
            pointer: "/spec",
            bad: Value::Null,
            good: json!({"source": {"oci": {"ref": pinned("policies/sorter")}}}),
            says: "spec: Required value",
        },
    ]);
    for (resource, field) in [
        ("vigilnodestatuses", "node"),
        ("vigilpolicystatuses", "node"),
        ("vigilpolicystatuses", "policy"),
    ] {
        cases.push(Case {
            resource,
            path: ".spec",
            bound: "required",
            pointer: leak(&format!("/spec/{field}")),
            bad: Value::Null,
            good: json!("n2"),
            says: leak(&format!("spec.{field}: Required value")),
        });
        cases.push(Case {
            resource,
            path: "",
            bound: "required",
            pointer: "/spec",
            bad: Value::Null,
            good: base(resource)["spec"].clone(),
            says: "spec: Required value",
        });
    }
    cases
}

/// Every bound of the CRDs' schemas outside `status` (which only the agent
/// writes, through the status subresource): (resource, path, the bound as
/// JSON: `{"minimum": 1}`, `{"required": [...]}`, `{"rule": ...}`).
fn census() -> Vec<(String, String, Value)> {
    let text = std::fs::read_to_string(root().join("deploy/crds.yaml")).unwrap();
    let mut bounds = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let crd = Value::deserialize(document).unwrap();
        let resource = crd["spec"]["names"]["plural"].as_str().unwrap().to_owned();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            walk(
                &version["schema"]["openAPIV3Schema"],
                "",
                &resource,
                &mut bounds,
            );
        }
    }
    bounds
}

fn walk(schema: &Value, path: &str, resource: &str, bounds: &mut Vec<(String, String, Value)>) {
    if path.starts_with(".status") {
        return;
    }
    for key in [
        "minimum",
        "maximum",
        "pattern",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "required",
        "enum",
    ] {
        if let Some(value) = schema.get(key) {
            bounds.push((resource.to_owned(), path.to_owned(), json!({key: value})));
        }
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        bounds.push((resource.to_owned(), path.to_owned(), rule.clone()));
    }
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        walk(property, &format!("{path}.{name}"), resource, bounds);
    }
    if schema["items"].is_object() {
        walk(&schema["items"], &format!("{path}[]"), resource, bounds);
    }
    if schema["additionalProperties"].is_object() {
        walk(
            &schema["additionalProperties"],
            &format!("{path}{{}}"),
            resource,
            bounds,
        );
    }
}

/// The name a census bound has in the table: its kind, or a rule's message.
fn bound_name(bound: &Value) -> String {
    match bound.get("message") {
        Some(message) => message.as_str().unwrap().to_owned(),
        None => bound.as_object().unwrap().keys().next().unwrap().clone(),
    }
}

#[test]
fn every_bound_of_the_crds_has_a_case() {
    let census = census();
    let mut cases: Vec<Case> = numeric_cases(&census);
    cases.extend(other_cases());
    let covered: BTreeSet<(String, String, String)> = cases
        .iter()
        .map(|c| (c.resource.to_owned(), c.path.to_owned(), c.bound.to_owned()))
        .collect();
    let mut missing = Vec::new();
    for (resource, path, bound) in &census {
        let mut name = bound_name(bound);
        if bound
            .get("message")
            .is_some_and(|m| m.as_str().unwrap().contains("pinned by digest"))
        {
            name =
                "must be pinned by digest: registry/repository[:tag]@sha256:<64 hex digits>".into();
        }
        if !covered.contains(&(resource.clone(), path.clone(), name.clone())) {
            missing.push(format!("{resource} {path} {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "bounds without a case:\n{}",
        missing.join("\n")
    );
    assert!(
        census.len() > 40,
        "the census found the bounds: {}",
        census.len()
    );
}

#[test]
fn the_real_server_refuses_each_broken_bound_and_accepts_its_neighbour() {
    let cluster = installed();
    let census = census();
    let mut cases = numeric_cases(&census);
    cases.extend(other_cases());
    let mut wrong = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        for (value, valid) in [(&case.bad, false), (&case.good, true)] {
            let mut object = base(case.resource);
            object["metadata"] = json!({"name": format!("bound-{index}-{valid}")});
            set(&mut object, case.pointer, value.clone());
            let output = cluster.kubectl_as(
                &cluster.admin_kubeconfig(),
                &["create", "--dry-run=server", "-f", "-"],
                Some(&object.to_string()),
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            let verdict = if valid {
                output.status.success()
            } else {
                !output.status.success() && stderr.contains(case.says)
            };
            if !verdict {
                wrong.push(format!(
                    "{} {} {} = {value}: expected {}, got: {stderr}",
                    case.resource,
                    case.path,
                    case.bound,
                    if valid { "accepted" } else { case.says }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Sets `pointer` in `object` to `value` (null removes it), making the
/// objects on the way.
fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    let mut at = object;
    for part in parent.split('/').skip(1) {
        at = match at {
            Value::Array(items) => &mut items[part.parse::<usize>().unwrap()],
            _ => at.as_object_mut().unwrap().entry(part).or_insert(json!({})),
        };
    }
    match (at, value) {
        (Value::Object(map), Value::Null) => {
            map.remove(last);
        }
        (Value::Object(map), value) => {
            map.insert(last.to_owned(), value);
        }
        (Value::Array(items), value) => items[last.parse::<usize>().unwrap()] = value,
        (other, _) => panic!("{pointer} reaches {other}"),
    }
}
