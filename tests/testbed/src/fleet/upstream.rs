//! The upstream control plane under a simulated fleet: `deploy/` installed,
//! its RBAC, FlowSchemas and admission policy in force (its DaemonSet
//! removed: no kubelet runs its pods, the fleet starts the agents itself);
//! each agent under a token the API server issues for the DaemonSet's
//! ServiceAccount, bound to a pod on the agent's node as the kubelet's would
//! be. The agents' requests come from the API server's audit log (every
//! request of a `vigil-system` service account), the server's own account
//! from its `/metrics`.

use super::plane::ControlPlane;
use super::server_use::Sample;
use crate::Request;
use crate::upstream::Upstream;
use crate::wait::Polling;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a wait looks again: each look is a few kubectl LISTs.
const LOOK: Duration = Duration::from_secs(1);

/// The upstream control plane, as a fleet's API server.
#[derive(Debug)]
pub struct UpstreamPlane {
    cluster: Upstream,
    audit: Mutex<Audit>,
    /// Each resource's objects as one look listed them, for [`ControlPlane::get`].
    looked: Mutex<BTreeMap<String, Vec<Value>>>,
}

/// The agents' requests read so far from the audit log.
#[derive(Debug, Default)]
struct Audit {
    /// Bytes of the log read.
    read: u64,
    requests: Vec<Request>,
    /// Watches started and not yet ended: audit ID → index in `requests`.
    open: BTreeMap<String, usize>,
}

impl UpstreamPlane {
    /// Installs `deploy` on `cluster`, removes its DaemonSet and makes the
    /// namespaces the fleet's pods live in.
    ///
    /// # Panics
    /// If a step is refused.
    pub fn install(cluster: Upstream, deploy: &Path) -> Self {
        for (step, output) in cluster.install_steps(deploy) {
            assert!(
                output.status.success(),
                "{step}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        cluster.kubectl_ok(&["delete", "daemonset", "vigil", "-n", "vigil-system"]);
        cluster.kubectl_ok(&["create", "namespace", "shop"]);
        cluster.kubectl_ok(&["create", "namespace", "batch"]);
        Self {
            cluster,
            audit: Mutex::default(),
            looked: Mutex::default(),
        }
    }

    /// The cluster.
    pub fn cluster(&self) -> &Upstream {
        &self.cluster
    }

    /// Applies `items` as one List, server-side, as the admin.
    fn apply(&self, items: Vec<Value>, subresource: Option<&str>) {
        if items.is_empty() {
            return;
        }
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
        let mut args = vec!["apply", "--server-side", "--force-conflicts", "-f", "-"];
        let flag = subresource.map(|s| format!("--subresource={s}"));
        args.extend(flag.as_deref());
        let output = self
            .cluster
            .kubectl_as(&self.cluster.admin_kubeconfig(), &args, Some(&list));
        assert!(
            output.status.success(),
            "apply refused: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Reads the audit log's new complete lines.
    fn read_audit(&self) {
        let mut audit = self.audit.lock().unwrap();
        let Ok(mut file) = std::fs::File::open(self.cluster.audit_log()) else {
            return;
        };
        file.seek(SeekFrom::Start(audit.read)).expect("seek");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("the audit log reads");
        let Some(end) = text.rfind('\n') else {
            return;
        };
        audit.read += end as u64 + 1;
        for line in text[..end].lines() {
            let event: Value = serde_json::from_str(line).expect("an audit event");
            audit.add(&event);
        }
    }
}

impl Audit {
    /// Takes in one event: a request's end (`ResponseComplete`), or a
    /// watch's start (`ResponseStarted`) and later its end.
    fn add(&mut self, event: &Value) {
        let id = event["auditID"].as_str().unwrap_or_default().to_owned();
        match event["stage"].as_str() {
            Some("ResponseComplete") if self.open.remove(&id).is_some() => return,
            Some("ResponseStarted") => {
                self.open.insert(id, self.requests.len());
            }
            _ => {}
        }
        self.requests.push(request(event));
    }
}

/// An audit event as the request it records.
fn request(event: &Value) -> Request {
    let method = match event["verb"].as_str().unwrap_or_default() {
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "GET",
    };
    let received: jiff::Timestamp = event["requestReceivedTimestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("a request time");
    let ago = jiff::Timestamp::now().duration_since(received);
    let now = Instant::now();
    Request {
        method: method.to_owned(),
        uri: event["requestURI"].as_str().unwrap_or_default().to_owned(),
        status: event["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or_default(),
        // Present for what the audit policy logs whole (Events).
        body: event.get("requestObject").cloned(),
        answer: event.get("responseObject").cloned(),
        impersonated: event["impersonatedUser"]["username"]
            .as_str()
            .map(str::to_owned),
        at: Duration::try_from(ago)
            .ok()
            .and_then(|ago| now.checked_sub(ago))
            .unwrap_or(now),
        before: None,
    }
}

/// `object` without what a client does not set on create: its UID and status.
fn spec_only(object: &Value) -> Value {
    let mut object = object.clone();
    object["metadata"].as_object_mut().map(|m| m.remove("uid"));
    object.as_object_mut().map(|o| o.remove("status"));
    object
}

/// `object`'s status, as an apply to its `status` subresource.
fn status_only(object: &Value) -> Option<Value> {
    let status = object.get("status")?;
    let mut metadata = json!({"name": object["metadata"]["name"]});
    if let Some(namespace) = object["metadata"].get("namespace") {
        metadata["namespace"] = namespace.clone();
    }
    Some(json!({
        "apiVersion": object["apiVersion"], "kind": object["kind"],
        "metadata": metadata, "status": status,
    }))
}

impl ControlPlane for UpstreamPlane {
    fn put(&self, _resource: &str, objects: Vec<Value>) {
        self.apply(objects.iter().map(spec_only).collect(), None);
        self.apply(
            objects.iter().filter_map(status_only).collect(),
            Some("status"),
        );
    }

    fn delete(&self, resource: &str, name: &str) {
        self.cluster.kubectl_ok(&["delete", resource, name]);
    }

    fn get(&self, resource: &str, name: &str) -> Option<Value> {
        let mut looked = self.looked.lock().unwrap();
        let items = looked.entry(resource.to_owned()).or_insert_with(|| {
            let list: Value =
                serde_json::from_str(&self.cluster.kubectl_ok(&["get", resource, "-o", "json"]))
                    .expect("JSON");
            list["items"].as_array().cloned().unwrap_or_default()
        });
        items
            .iter()
            .find(|o| o["metadata"]["name"] == name)
            .cloned()
    }

    /// A pod on each node in `vigil-system` under the DaemonSet's
    /// ServiceAccount (labelled as its pods are), and a token bound to it.
    fn agent_kubeconfigs(&self, nodes: &[String]) -> Vec<String> {
        let pod = |node: &String| format!("vigil-agent-{node}");
        let pods = nodes
            .iter()
            .map(|node| {
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod(node), "namespace": "vigil-system",
                                 "labels": {"app.kubernetes.io/name": "vigil"}},
                    "spec": {"nodeName": node, "serviceAccountName": "vigil",
                             "containers": [{"name": "agent", "image": "example.invalid/vigil:1"}]},
                })
            })
            .collect();
        self.apply(pods, None);
        nodes
            .iter()
            .map(|node| {
                let token = self.cluster.pod_token("vigil-system", "vigil", &pod(node));
                self.cluster.kubeconfig_for(&token)
            })
            .collect()
    }

    fn request_count(&self) -> usize {
        self.read_audit();
        self.audit.lock().unwrap().requests.len()
    }

    fn requests_since(&self, mark: usize) -> Vec<Request> {
        self.read_audit();
        let audit = self.audit.lock().unwrap();
        audit.requests.iter().skip(mark).cloned().collect()
    }

    fn open_watches(&self) -> usize {
        self.read_audit();
        self.audit.lock().unwrap().open.len()
    }

    fn usage(&self) -> Option<Sample> {
        Some(Sample::parse(&self.cluster.metrics()))
    }

    /// Looks every second: reads the audit log anew and lists each resource
    /// the condition asks about once per look.
    async fn until(&self, limit: Duration, what: &str, condition: impl Fn(&Self) -> bool) {
        // The real server has no change feed here: look again every LOOK.
        let look = || {
            self.looked.lock().unwrap().clear();
            self.read_audit();
            condition(self).then_some(())
        };
        let polling = Polling::new(LOOK, limit);
        polling.until_async(what, look, String::new).await;
    }

    /// Restarts kube-apiserver; done when every agent has a pod watch and a
    /// Node watch open that it started after the restart.
    async fn restart(&mut self, nodes: &[String], limit: Duration) {
        let mark = ControlPlane::request_count(self);
        self.cluster.restart_apiserver();
        self.until(limit, "every agent watching again", |s| {
            let audit = s.audit.lock().unwrap();
            let open: Vec<&str> = (audit.open.values())
                .filter(|&&at| at >= mark)
                .map(|&at| audit.requests[at].uri.as_str())
                .collect();
            nodes.iter().all(|node| {
                let watching = |path: &str| {
                    open.iter()
                        .any(|uri| uri.starts_with(path) && uri.contains(node.as_str()))
                };
                watching("/api/v1/pods?") && watching("/api/v1/nodes?")
            })
        })
        .await;
    }
}
