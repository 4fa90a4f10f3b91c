//! A Kubernetes API server subset, served over real HTTP on
//! `127.0.0.1:0` so a real `kube::Client` (its retry, watch and backoff
//! machinery included) talks to it.
//!
//! What it serves:
//! - list and watch of pods (field selector `spec.nodeName`), nodes
//!   (`metadata.name`), PodDisruptionBudgets (per namespace) and any other
//!   collection such as `vigilconfigs` (a `metadata.generation` that
//!   counts changes of `spec`) or one ConfigMap (field selector
//!   `metadata.name` in a namespace), with label selectors, resourceVersions, bookmarks, `410 Gone` for a watch resuming
//!   from before a [`ApiServer::compact`], and streams closed at
//!   `timeoutSeconds`;
//! - `GET` of a namespaced core object (a pod, a Secret);
//! - `GET` and merge `PATCH` of a node (a `metadata.resourceVersion` in the
//!   patch is a precondition: 409 when stale), server-side apply of
//!   `nodes/status` conditions (merged by type, owned per field manager);
//! - the eviction subresource with the API server's rules (see
//!   [`eviction`]), pod deletion with preconditions, and a kubelet that sets
//!   `deletionTimestamp` and removes the pod after its grace period;
//! - events.k8s.io/v1 Events (create and patch);
//! - create (with `generateName`), get, replace (a stale
//!   `metadata.resourceVersion` is a 409) and delete of any cluster-scoped
//!   custom resource, such as the status objects;
//! - in the kubelet's place, its statistics summary (`GET /stats/summary`)
//!   as the test sets it ([`ApiServer::kubelet_summary`]; 404 until then),
//!   for the pods' writable layers, which only a container runtime measures.
//!
//! Faults on demand: an outage (every request 503), the next requests
//! failing with a status, throttling (429 with `Retry-After` and no
//! `DisruptionBudget` cause, as API Priority and Fairness answers), requests
//! that hang without an answer, latency, dropping every open watch. Every request
//! is recorded, and the watch streams open are counted. Tests wait for what they expect with [`ApiServer::until`],
//! which wakes on every change instead of sleeping.

mod eviction;
mod routes;
mod store;

pub use store::{Key, Selector};

use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::Store;
use tokio::sync::watch;

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The status answered (for a watch, the status it opened with).
    pub status: u16,
    /// The body, if it was JSON.
    pub body: Option<Value>,
    /// When it arrived.
    pub at: std::time::Instant,
    /// The user it acted as (`Impersonate-User`), if not its sender.
    pub impersonated: Option<String>,
    /// What it was answered (an object, a list or a status), but for a
    /// watch's events: what the store held then.
    pub answer: Option<Value>,
    /// For a write to one object: what the store held there just before
    /// it (admission's `oldObject`); none for a read, a watch, or an object
    /// that did not exist.
    pub before: Option<Value>,
}

impl Request {
    /// Its query parameter `name`, if present.
    pub fn param(&self, name: &str) -> Option<&str> {
        let query = self.uri.split_once('?')?.1;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    }

    /// A watch (`watch=true`).
    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch"), Some("true" | "1"))
    }

    /// A LIST: a GET of a collection that is not a watch.
    pub fn is_list(&self) -> bool {
        let path = self.uri.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let collection = matches!(
            segments.as_slice(),
            ["api", "v1", _]
                | ["apis", _, _, _]
                | ["api", "v1", "namespaces", _, _]
                | ["apis", _, _, "namespaces", _, _]
        );
        self.method == "GET" && collection && !self.is_watch()
    }

    /// A LIST the API server may answer from its watch cache
    /// (`resourceVersion=0`) rather than by a consistent read of etcd.
    pub fn from_cache(&self) -> bool {
        self.param("resourceVersion") == Some("0")
    }
}

/// What RBAC must allow for a request: verb, API group (`""` for core),
/// resource (`pods/eviction` for a subresource); and what it names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// `get`, `list`, `watch`, `create`, `patch`, `update` or `delete`.
    pub verb: String,
    /// The API group.
    pub group: String,
    /// The resource, with its subresource if any.
    pub resource: String,
    /// The namespace (`""` for a cluster-scoped resource or all namespaces).
    pub namespace: String,
    /// The object named in the path (none for a collection).
    pub name: Option<String>,
}

impl Request {
    /// What an authorizer would check of its sender for this request
    /// (`None` for a path that is not a resource, such as `/version`): for
    /// a request acting as a node, what constrained impersonation checks of
    /// the resource, `impersonate-on:associated-node:VERB`.
    pub fn access(&self) -> Option<Access> {
        let path = self.uri.split('?').next().unwrap_or_default();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", "v1", rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (*namespace, rest),
            rest => ("", rest),
        };
        let (resource, name) = match rest {
            [resource] => ((*resource).to_owned(), None),
            [resource, name] => ((*resource).to_owned(), Some(*name)),
            [resource, name, sub] => (format!("{resource}/{sub}"), Some(*name)),
            _ => return None,
        };
        let named = name.is_some();
        let watching = self.uri.contains("watch=true") || self.uri.contains("watch=1");
        let verb = match (self.method.as_str(), named) {
            ("GET", false) if watching => "watch",
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PATCH", _) => "patch",
            ("PUT", _) => "update",
            ("DELETE", _) => "delete",
            _ => return None,
        };
        let verb = match &self.impersonated {
            Some(user) if user.starts_with("system:node:") => {
                format!("impersonate-on:associated-node:{verb}")
            }
            Some(user) => format!("impersonate-on:user-info:{verb} as {user}"),
            None => verb.to_owned(),
        };
        Some(Access {
            verb,
            group: group.to_owned(),
            resource,
            namespace: namespace.to_owned(),
            name: name.map(str::to_owned),
        })
    }
}

/// Faults to inject.
#[derive(Debug, Default)]
struct Faults {
    outage: bool,
    kubelet_off: bool,
    watches_paused: bool,
    next: VecDeque<(String, Injected)>,
    /// Requests whose path and query contain one of these never get an answer.
    hanging: Vec<String>,
    latency: Duration,
    /// The next request whose path and query contain the first is answered
    /// after the second, as a slow API server (etcd, a large list) answers.
    slow: VecDeque<(String, Duration)>,
}

/// An answer injected instead of the real one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Injected {
    pub(crate) status: u16,
    /// For a throttling 429: the `Retry-After` header, in seconds.
    pub(crate) retry_after: Option<u64>,
}

/// Everything the handlers share.
#[derive(Debug)]
pub(crate) struct Shared {
    store: Mutex<Store>,
    faults: Mutex<Faults>,
    requests: Mutex<Vec<Request>>,
    /// The path and query of every request as it arrives, before it is answered.
    arrived: Mutex<Vec<String>>,
    /// Bumped on every write and request: what [`ApiServer::until`] waits on.
    changed: watch::Sender<u64>,
    /// Bumped to end every open watch stream.
    drop_watches: watch::Sender<u64>,
    /// `410 Gone` errors sent on watch streams.
    gone: std::sync::atomic::AtomicUsize,
    /// Watch streams open now, by what they watch.
    open_watches: Mutex<BTreeMap<String, usize>>,
    /// Condition types each (node, field manager) applied last.
    applied: Mutex<BTreeMap<(String, String), Vec<String>>>,
    /// The kubelet's statistics summary, once set.
    summary: Mutex<Option<Value>>,
}

impl Shared {
    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn arrive(&self, uri: &str) {
        self.arrived.lock().unwrap().push(uri.to_owned());
        self.bump();
    }

    fn record(&self, request: Request) {
        self.requests.lock().unwrap().push(request);
        self.bump();
    }

    /// Serves a request with `serve` and records it with `record` as one
    /// step: the log is held while the store changes, so whoever sees a
    /// request's effect and then reads the log finds the request in it.
    fn serve_recorded(
        &self,
        written: Option<Key>,
        serve: impl FnOnce() -> (u16, Value),
        record: impl FnOnce(u16, &Value, Option<Value>) -> Request,
    ) -> (u16, Value) {
        let mut log = self.requests.lock().unwrap();
        let before = written.and_then(|key| self.read(|store| store.objects.get(&key).cloned()));
        let answer = serve();
        log.push(record(answer.0, &answer.1, before));
        drop(log);
        self.bump();
        answer
    }

    fn write<T>(&self, change: impl FnOnce(&mut Store) -> T) -> T {
        let out = change(&mut self.store.lock().unwrap());
        self.bump();
        out
    }

    fn read<T>(&self, look: impl FnOnce(&Store) -> T) -> T {
        look(&self.store.lock().unwrap())
    }
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiServer {
    /// Starts a server on a free loopback port.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("bound");
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            faults: Mutex::new(Faults::default()),
            requests: Mutex::new(Vec::new()),
            arrived: Mutex::new(Vec::new()),
            changed: watch::Sender::new(0),
            drop_watches: watch::Sender::new(0),
            applied: Mutex::new(BTreeMap::new()),
            gone: Default::default(),
            open_watches: Mutex::new(BTreeMap::new()),
            summary: Mutex::new(None),
        });
        let app = routes::router(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the test API server runs");
        });
        Self { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig file's text pointing at this server, without credentials.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\nusers:\n- name: test\n  user: {{}}\ncurrent-context: test\n",
            self.url()
        )
    }

    /// Serves `summary` as the kubelet's `/stats/summary` from now on.
    pub fn kubelet_summary(&self, summary: Value) {
        *self.shared.summary.lock().unwrap() = Some(summary);
    }

    /// Creates or replaces an object; returns it as stored.
    pub fn put(&self, resource: &str, namespace: &str, object: Value) -> Value {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("objects have a name")
            .to_owned();
        self.shared
            .write(|s| s.put(Key::new(resource, namespace, &name), object))
    }

    /// Deletes an object at once.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared
            .write(|s| s.delete(&Key::new(resource, namespace, name)))
    }

    /// The object, if it exists.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared
            .read(|s| s.objects.get(&Key::new(resource, namespace, name)).cloned())
    }

    /// Every object of `resource`.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        self.shared
            .read(|s| s.list(resource, None).map(|(_, v)| v.clone()).collect())
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests_since(0)
    }

    /// How many requests have arrived: a mark for [`Self::requests_since`].
    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// How many requests since `mark` `matching` holds for (nothing is copied).
    pub fn count_since(&self, mark: usize, matching: impl Fn(&Request) -> bool) -> usize {
        let requests = self.shared.requests.lock().unwrap();
        requests.iter().skip(mark).filter(|r| matching(r)).count()
    }

    /// The requests since `mark`, in order.
    pub fn requests_since(&self, mark: usize) -> Vec<Request> {
        let requests = self.shared.requests.lock().unwrap();
        requests.iter().skip(mark).cloned().collect()
    }

    /// The path and query of every request that arrived, answered or not.
    pub fn arrived(&self) -> Vec<String> {
        self.shared.arrived.lock().unwrap().clone()
    }

    /// Every eviction request (`POST …/pods/NAME/eviction`, with or
    /// without a query) so far.
    pub fn evictions(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| {
                let path = r.uri.split('?').next().unwrap_or_default();
                r.method == "POST" && path.ends_with("/eviction")
            })
            .collect()
    }

    /// How many watches were told `410 Gone` (resuming from compacted history).
    pub fn gone_sent(&self) -> usize {
        self.shared.gone.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many watch streams are open whose path and field selector
    /// (`PATH?fieldSelector=SELECTOR`) contain `watched` (a stream the
    /// client closed counts until the next bookmark fails to send).
    pub fn open_watches(&self, watched: &str) -> usize {
        let open = self.shared.open_watches.lock().unwrap();
        open.iter()
            .filter(|(w, _)| w.contains(watched))
            .map(|(_, n)| n)
            .sum()
    }

    /// Forgets the change log: watches resuming from before now get `410 Gone`.
    pub fn compact(&self) {
        self.shared.write(Store::compact);
    }

    /// A restart that lost the history: no version a client holds can be
    /// resumed from (every watch resuming gets `410 Gone` and lists again,
    /// even one a bookmark brought up to date), and every watch ends.
    pub fn restart(&self) {
        self.shared.write(|s| {
            s.rv += 1;
            s.compact();
        });
        self.drop_watches();
    }

    /// Ends every open watch stream now (clients must resume).
    pub fn drop_watches(&self) {
        self.shared.drop_watches.send_modify(|n| *n += 1);
    }

    /// The kubelet's eviction manager evicting pod `name` for `resource`
    /// (`memory`, `ephemeral-storage`, `inodes`, `pids`), as it writes the
    /// status while the containers stop: the `DisruptionTarget` condition
    /// with reason `TerminationByKubelet` and its eviction message; the phase
    /// stays `Running` (the kubelet makes no pod terminal while containers
    /// may run) and the object is not deleted.
    pub fn kubelet_evicting(&self, namespace: &str, name: &str, resource: &str) {
        let message = format!(
            "The node was low on resource: {resource}. Threshold quantity: 100Mi, available: 81204Ki. "
        );
        self.update_pod(namespace, name, |pod| {
            let conditions = pod["status"]["conditions"].as_array_mut();
            let condition = json!({"type": "DisruptionTarget", "status": "True",
                "reason": "TerminationByKubelet", "message": message,
                "lastTransitionTime": jiff::Timestamp::now().to_string()});
            match conditions {
                Some(list) => list.push(condition),
                None => pod["status"]["conditions"] = json!([condition]),
            }
        });
    }

    /// The kubelet's eviction of pod `name` done (its containers stopped):
    /// phase `Failed`, reason `Evicted` and the condition's message.
    pub fn kubelet_evicted(&self, namespace: &str, name: &str) {
        self.update_pod(namespace, name, |pod| {
            let message = pod["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget"))
                .map(|c| c["message"].clone())
                .expect("kubelet_evicting first");
            pod["status"]["phase"] = json!("Failed");
            pod["status"]["reason"] = json!("Evicted");
            pod["status"]["message"] = message;
        });
    }

    fn update_pod(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Value)) {
        let key = Key::new("pods", namespace, name);
        self.shared.write(|s| {
            let mut pod = s.objects.get(&key).cloned().expect("the pod exists");
            change(&mut pod);
            s.put(key, pod)
        });
    }

    /// Whether the kubelet removes pods after their grace period (on by
    /// default); a test that keeps its own time removes them itself.
    pub fn kubelet(&self, on: bool) {
        self.shared.faults.lock().unwrap().kubelet_off = !on;
    }

    /// While on, open watches send nothing (changes are held back, as a
    /// slow or partitioned stream would).
    pub fn pause_watches(&self, on: bool) {
        self.shared.faults.lock().unwrap().watches_paused = on;
        self.shared.bump();
    }

    /// While on, every request is answered 503.
    pub fn outage(&self, on: bool) {
        self.shared.faults.lock().unwrap().outage = on;
        if on {
            self.drop_watches();
        }
    }

    /// The next request whose path contains `path` is answered `status`.
    pub fn fail_next(&self, path: &str, status: u16) {
        let mut faults = self.shared.faults.lock().unwrap();
        let injected = Injected {
            status,
            retry_after: None,
        };
        faults.next.push_back((path.to_owned(), injected));
    }

    /// The next `n` requests whose path contains `path` are throttled: 429
    /// `TooManyRequests` with `Retry-After: retry_after` seconds and no
    /// `DisruptionBudget` cause, as API Priority and Fairness answers.
    pub fn throttle_next(&self, path: &str, n: usize, retry_after: u64) {
        let mut faults = self.shared.faults.lock().unwrap();
        let injected = Injected {
            status: 429,
            retry_after: Some(retry_after),
        };
        faults
            .next
            .extend(std::iter::repeat_n((path.to_owned(), injected), n));
    }

    /// Every request whose path and query contain `path` from now on hangs:
    /// it arrives and is never answered.
    pub fn hang(&self, path: &str) {
        self.shared
            .faults
            .lock()
            .unwrap()
            .hanging
            .push(path.to_owned());
    }

    /// The next request whose path and query contain `path` is answered
    /// normally, after `delay`.
    pub fn slow_next(&self, path: &str, delay: Duration) {
        let mut faults = self.shared.faults.lock().unwrap();
        faults.slow.push_back((path.to_owned(), delay));
    }

    /// Every request waits `latency` before it is handled.
    pub fn latency(&self, latency: Duration) {
        self.shared.faults.lock().unwrap().latency = latency;
    }

    /// Waits until `condition` holds, checking again on every change and
    /// request; panics after `limit` (a bound for a broken test, not a wait).
    ///
    /// # Panics
    /// If `condition` does not hold within `limit`.
    pub async fn until(&self, limit: Duration, what: &str, condition: impl Fn(&Self) -> bool) {
        let mut changes = self.shared.changed.subscribe();
        let wait = async {
            loop {
                if condition(self) {
                    return;
                }
                changes.changed().await.expect("the server lives");
            }
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            panic!("timed out after {limit:?} waiting for: {what}");
        }
    }
}
