//! HTTP: one handler that reads the method and path, applies faults,
//! answers from the store, and records the request.

use super::store::{Change, Key, Selector, merge_patch};
use super::{Injected, Request, Shared, eviction};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How often an open watch sends a bookmark.
const BOOKMARK_EVERY: Duration = Duration::from_secs(2);

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// A Kubernetes `Status` answer.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "code": code, "reason": reason, "message": message,
    });
    (code, body)
}

fn respond((code, body): (u16, Value)) -> Response {
    let code = StatusCode::from_u16(code).expect("a valid status");
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn handle(State(shared): State<Arc<Shared>>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let method = parts.method.clone();
    let uri = parts.uri.to_string();
    let query: HashMap<String, String> =
        axum::extract::Query::try_from_uri(&parts.uri).map_or_else(|_| HashMap::new(), |q| q.0);
    let bytes = axum::body::to_bytes(body, 16 << 20)
        .await
        .unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    shared.arrive(&uri);
    let latency = {
        let mut faults = shared.faults.lock().unwrap();
        let slow = faults
            .slow
            .iter()
            .position(|(p, _)| uri.contains(p.as_str()));
        let delay = slow.and_then(|i| faults.slow.remove(i)).map(|(_, d)| d);
        faults.latency + delay.unwrap_or_default()
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let path: Vec<&str> = parts.uri.path().trim_matches('/').split('/').collect();
    let hangs = {
        let faults = shared.faults.lock().unwrap();
        faults.hanging.iter().any(|p| uri.contains(p.as_str()))
    };
    if hangs {
        return std::future::pending().await;
    }
    let injected = {
        let mut faults = shared.faults.lock().unwrap();
        if faults.outage {
            Some(Injected {
                status: 503,
                retry_after: None,
            })
        } else if let Some(i) = faults
            .next
            .iter()
            .position(|(p, _)| uri.contains(p.as_str()))
        {
            faults.next.remove(i).map(|(_, injected)| injected)
        } else {
            None
        }
    };
    let impersonated = (parts.headers.get("impersonate-user"))
        .and_then(|user| user.to_str().ok())
        .map(str::to_owned);
    let record = |status: u16, answer: Option<Value>, before: Option<Value>| Request {
        method: method.to_string(),
        uri: uri.clone(),
        status,
        body: body.clone(),
        at: std::time::Instant::now(),
        impersonated: impersonated.clone(),
        answer,
        before,
    };
    if let Some(injected) = injected {
        shared.record(record(injected.status, None, None));
        return inject(injected);
    }
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    if method == Method::GET
        && watching
        && let Some((resource, namespace)) = collection(&path)
    {
        shared.record(record(200, None, None));
        let watched = match query.get("fieldSelector") {
            Some(fields) => format!("{}?fieldSelector={fields}", parts.uri.path()),
            None => parts.uri.path().to_owned(),
        };
        return watch(&shared, &watched, resource, namespace, &query);
    }
    let written = (method != Method::GET).then(|| written(&path)).flatten();
    let answer = shared.serve_recorded(
        written,
        || route(&shared, &method, &path, &query, body.clone()),
        |status, answer, before| record(status, Some(answer.clone()), before),
    );
    respond(answer)
}

/// The object a write to `path` changes (its subresource's too).
fn written(path: &[&str]) -> Option<Key> {
    match path {
        ["api", "v1", "namespaces", ns, resource, name, ..]
        | ["apis", _, _, "namespaces", ns, resource, name, ..] => {
            Some(Key::new(resource, ns, name))
        }
        ["api", "v1", resource, name, ..] | ["apis", _, _, resource, name, ..] => {
            Some(Key::new(resource, "", name))
        }
        _ => None,
    }
}

/// The answer for an injected fault: a throttling 429 as API Priority and
/// Fairness sends it (with `Retry-After`, no cause), any other status as an
/// internal error.
fn inject(injected: Injected) -> Response {
    let Some(seconds) = injected.retry_after else {
        return respond(status(injected.status, "InternalError", "injected fault"));
    };
    let (code, body) = status(
        injected.status,
        "TooManyRequests",
        "Too many requests, please try again later.",
    );
    let mut response = respond((code, body));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, seconds.into());
    response
}

/// The resource and namespace of a collection path.
fn collection<'a>(path: &[&'a str]) -> Option<(&'a str, Option<&'a str>)> {
    match path {
        ["api", "v1", resource] | ["apis", _, _, resource] => Some((resource, None)),
        ["api", "v1", "namespaces", ns, resource] | ["apis", _, _, "namespaces", ns, resource] => {
            Some((resource, Some(ns)))
        }
        _ => None,
    }
}

fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &[&str],
    query: &HashMap<String, String>,
    body: Option<Value>,
) -> (u16, Value) {
    let body = body.unwrap_or(Value::Null);
    match (method.as_str(), path) {
        ("GET", _) if collection(path).is_some() => {
            let (resource, namespace) = collection(path).expect("checked");
            list(shared, resource, namespace, query)
        }
        ("GET", ["api", "v1", "nodes", name]) => get(shared, Key::new("nodes", "", name)),
        ("GET", ["stats", "summary"]) => match shared.summary.lock().unwrap().clone() {
            Some(summary) => (200, summary),
            None => status(404, "NotFound", "no summary set"),
        },
        ("GET", ["api", "v1", "namespaces", ns, resource, name]) => {
            get(shared, Key::new(resource, ns, name))
        }
        ("PATCH", ["api", "v1", "nodes", name]) => {
            patch(shared, Key::new("nodes", "", name), &body)
        }
        ("PATCH", ["api", "v1", "nodes", name, "status"]) => {
            let manager = query.get("fieldManager").cloned().unwrap_or_default();
            apply_node_status(shared, name, &manager, &body)
        }
        ("POST", ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            eviction::evict(shared, ns, name, &body)
        }
        ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => {
            eviction::delete(shared, ns, name, &body)
        }
        ("POST", ["apis", "events.k8s.io", "v1", "namespaces", ns, "events"]) => {
            create_event(shared, ns, body)
        }
        (
            "PATCH",
            [
                "apis",
                "events.k8s.io",
                "v1",
                "namespaces",
                ns,
                "events",
                name,
            ],
        ) => patch_event(shared, ns, name, &body),
        ("POST", ["apis", _, _, resource]) => create(shared, resource, body),
        ("GET", ["apis", _, _, resource, name]) => get(shared, Key::new(resource, "", name)),
        ("PUT", ["apis", _, _, resource, name]) => replace(shared, resource, name, body),
        ("PATCH", ["apis", _, _, resource, name]) => {
            patch(shared, Key::new(resource, "", name), &body)
        }
        ("DELETE", ["apis", _, _, resource, name]) => {
            let key = Key::new(resource, "", name);
            match shared.write(|s| s.delete(&key)) {
                Some(object) => (200, object),
                None => not_found(&key),
            }
        }
        _ => status(404, "NotFound", "this test API server does not serve that"),
    }
}

fn get(shared: &Shared, key: Key) -> (u16, Value) {
    match shared.read(|s| s.objects.get(&key).cloned()) {
        Some(object) => (200, object),
        None => not_found(&key),
    }
}

fn not_found(key: &Key) -> (u16, Value) {
    status(
        404,
        "NotFound",
        &format!("{} \"{}\" not found", key.resource, key.name),
    )
}

/// Creates a cluster-scoped object, naming it from `metadata.generateName`
/// (plus five characters) when it has no name.
fn create(shared: &Shared, resource: &str, mut object: Value) -> (u16, Value) {
    shared.write(|s| {
        let name = match (
            object["metadata"]["name"].as_str(),
            object["metadata"]["generateName"].as_str(),
        ) {
            (Some(name), _) => name.to_owned(),
            (None, Some(prefix)) => format!("{prefix}{:05x}", s.rv + 1),
            (None, None) => return status(422, "Invalid", "metadata.name: Required value"),
        };
        let key = Key::new(resource, "", &name);
        if s.objects.contains_key(&key) {
            let message = format!("{resource} \"{name}\" already exists");
            return status(409, "AlreadyExists", &message);
        }
        object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        (201, s.put(key, object))
    })
}

/// Replaces a cluster-scoped object; a `metadata.resourceVersion` must be
/// the current one.
fn replace(shared: &Shared, resource: &str, name: &str, object: Value) -> (u16, Value) {
    let key = Key::new(resource, "", name);
    shared.write(|s| {
        let Some(current) = s.objects.get(&key) else {
            return not_found(&key);
        };
        let wanted = object["metadata"]["resourceVersion"].as_str();
        if wanted.is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str()) {
            return status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again");
        }
        (200, s.put(key, object))
    })
}

fn selectors(query: &HashMap<String, String>) -> (Selector, Selector) {
    let fields = Selector::fields(query.get("fieldSelector").map_or("", String::as_str));
    let labels = Selector::labels(query.get("labelSelector").map_or("", String::as_str));
    (fields, labels)
}

fn list(
    shared: &Shared,
    resource: &str,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
) -> (u16, Value) {
    let (fields, labels) = selectors(query);
    let (rv, items): (u64, Vec<Value>) = shared.read(|s| {
        let items = s
            .list(resource, namespace)
            .map(|(_, v)| v)
            .filter(|v| fields.matches(v) && labels.matches(v))
            .cloned()
            .collect();
        (s.rv, items)
    });
    let body = json!({
        "kind": "List", "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    });
    (200, body)
}

/// A streamed watch: changes after `resourceVersion` that match the
/// selectors, bookmarks, `410 Gone` if that version was compacted away;
/// ends at `timeoutSeconds` or when the test drops watches.
fn watch(
    shared: &Arc<Shared>,
    watched: &str,
    resource: &str,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
) -> Response {
    let (fields, labels) = selectors(query);
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(290), Duration::from_secs);
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let (resource, namespace) = (resource.to_owned(), namespace.map(str::to_owned));
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let shared = Arc::clone(shared);
    let open = OpenWatch::new(&shared, watched);
    tokio::spawn(async move {
        use futures::SinkExt;
        let _open = open;
        let mut changes = shared.changed.subscribe();
        let mut drops = shared.drop_watches.subscribe();
        drops.borrow_and_update();
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticks = tokio::time::interval(BOOKMARK_EVERY);
        let mut from = from;
        let matches = |c: &Change| {
            c.key.resource == resource
                && namespace.as_deref().is_none_or(|ns| ns == c.key.namespace)
                && fields.matches(&c.object)
                && labels.matches(&c.object)
        };
        loop {
            let paused = shared.faults.lock().unwrap().watches_paused;
            let batch = shared.read(|s| {
                if paused {
                    return Ok((Vec::new(), from));
                }
                if from < s.compacted {
                    return Err(());
                }
                let batch: Vec<Change> = s
                    .log
                    .iter()
                    .filter(|c| c.rv > from && matches(c))
                    .cloned()
                    .collect();
                Ok((batch, s.rv))
            });
            let Ok((batch, now)) = batch else {
                shared
                    .gone
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (_, gone) = status(410, "Expired", "too old resource version");
                let _ = tx
                    .send(Ok(line(json!({"type": "ERROR", "object": gone}))))
                    .await;
                return;
            };
            for change in batch {
                let event = json!({"type": change.kind, "object": change.object});
                if tx.send(Ok(line(event))).await.is_err() {
                    return;
                }
            }
            from = now;
            tokio::select! {
                _ = changes.changed() => {}
                _ = drops.changed() => return,
                () = &mut deadline => return,
                _ = ticks.tick(), if bookmarks => {
                    let mark = json!({"type": "BOOKMARK", "object": {
                        "kind": "Bookmark", "apiVersion": "v1",
                        "metadata": {"resourceVersion": from.to_string()},
                    }});
                    if tx.send(Ok(line(mark))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(rx))
        .expect("a valid response")
}

/// Counts a watch stream as open on what it watches (path and field
/// selector) while it lives.
struct OpenWatch(Arc<Shared>, String);

impl OpenWatch {
    fn new(shared: &Arc<Shared>, path: &str) -> Self {
        *shared
            .open_watches
            .lock()
            .unwrap()
            .entry(path.to_owned())
            .or_default() += 1;
        shared.bump();
        Self(Arc::clone(shared), path.to_owned())
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        if let Some(n) = self.0.open_watches.lock().unwrap().get_mut(&self.1) {
            *n -= 1;
        }
        self.0.bump();
    }
}

fn line(event: Value) -> Bytes {
    let mut text = event.to_string();
    text.push('\n');
    Bytes::from(text)
}

/// A JSON merge patch of a cluster-scoped object (a node, a custom
/// object); `metadata.resourceVersion` in the patch must be the current one.
fn patch(shared: &Shared, key: Key, patch: &Value) -> (u16, Value) {
    shared.write(|s| {
        let Some(mut object) = s.objects.get(&key).cloned() else {
            return not_found(&key);
        };
        let wanted = patch["metadata"]["resourceVersion"].as_str();
        if wanted.is_some_and(|rv| Some(rv) != object["metadata"]["resourceVersion"].as_str()) {
            return status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again");
        }
        let mut patch = patch.clone();
        if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        merge_patch(&mut object, &patch);
        (200, s.put(key, object))
    })
}

/// Server-side apply of node conditions: each applied condition replaces
/// the one of its type; types this manager applied before and leaves out now
/// are removed (the manager owned them alone).
fn apply_node_status(shared: &Shared, name: &str, manager: &str, body: &Value) -> (u16, Value) {
    let key = Key::new("nodes", "", name);
    let applied: Vec<Value> = body["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let types: Vec<String> = applied
        .iter()
        .filter_map(|c| c["type"].as_str().map(str::to_owned))
        .collect();
    let owned_key = (name.to_owned(), manager.to_owned());
    let before = shared
        .applied
        .lock()
        .unwrap()
        .insert(owned_key, types.clone())
        .unwrap_or_default();
    shared.write(|s| {
        let Some(mut node) = s.objects.get(&key).cloned() else {
            return status(404, "NotFound", "node not found");
        };
        let mut conditions: Vec<Value> = node["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| {
            let kind = c["type"].as_str().unwrap_or_default().to_owned();
            !types.contains(&kind) && !before.contains(&kind)
        });
        conditions.extend(applied);
        node["status"]["conditions"] = Value::Array(conditions);
        (200, s.put(key, node))
    })
}

fn create_event(shared: &Shared, namespace: &str, mut event: Value) -> (u16, Value) {
    let name = match event["metadata"]["name"].as_str() {
        Some(name) => name.to_owned(),
        None => {
            let name = format!("event-{}", shared.read(|s| s.rv + 1));
            event["metadata"]["name"] = json!(name);
            name
        }
    };
    (
        201,
        shared.write(|s| s.put(Key::new("events", namespace, &name), event)),
    )
}

fn patch_event(shared: &Shared, namespace: &str, name: &str, patch: &Value) -> (u16, Value) {
    let key = Key::new("events", namespace, name);
    shared.write(|s| match s.objects.get(&key).cloned() {
        Some(mut event) => {
            merge_patch(&mut event, patch);
            (200, s.put(key, event))
        }
        None => status(404, "NotFound", "event not found"),
    })
}
