//! What a simulated fleet needs of the API server its agents talk to — put
//! objects as the admin, read the agents' status objects, count the agents'
//! requests, restart it — and that for the project's test [`ApiServer`]
//! (the upstream control plane's is in [`super::upstream`]).

use super::server_use::Sample;
use crate::{ApiServer, Request};
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// An API server under a simulated fleet.
pub trait ControlPlane {
    /// Creates or replaces `objects` of `resource` (each names its
    /// namespace, if any), status included, as the cluster's admin.
    fn put(&self, resource: &str, objects: Vec<Value>);

    /// The cluster-scoped object `resource/name`, if it exists.
    fn get(&self, resource: &str, name: &str) -> Option<Value>;

    /// Deletes the cluster-scoped object `resource/name`, as the admin.
    fn delete(&self, resource: &str, name: &str);

    /// Each node's agent's kubeconfig text, in order: the identity it runs
    /// under on this server.
    fn agent_kubeconfigs(&self, nodes: &[String]) -> Vec<String>;

    /// How many of the agents' requests the server has seen: a mark for
    /// [`ControlPlane::requests_since`].
    fn request_count(&self) -> usize;

    /// The agents' requests since `mark`, in order.
    fn requests_since(&self, mark: usize) -> Vec<Request>;

    /// How many of the agents' requests since `mark` `matching` holds for.
    fn count_since(&self, mark: usize, matching: impl Fn(&Request) -> bool) -> usize {
        self.requests_since(mark)
            .iter()
            .filter(|r| matching(r))
            .count()
    }

    /// The agents' watch streams open now.
    fn open_watches(&self) -> usize;

    /// A reading of the server's own metrics, if it has them.
    fn usage(&self) -> Option<Sample>;

    /// Waits until `condition` holds of the server; panics after `limit`
    /// (a bound for a broken run, not a wait) naming `what`.
    fn until(
        &self,
        limit: Duration,
        what: &str,
        condition: impl Fn(&Self) -> bool,
    ) -> impl Future<Output = ()>;

    /// Restarts the server, and waits until every one of `nodes`' agents
    /// watches its pods and its Node again.
    fn restart(&mut self, nodes: &[String], limit: Duration) -> impl Future<Output = ()>;
}

impl ControlPlane for ApiServer {
    fn put(&self, resource: &str, objects: Vec<Value>) {
        for object in objects {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            ApiServer::put(self, resource, &namespace, object);
        }
    }

    fn get(&self, resource: &str, name: &str) -> Option<Value> {
        ApiServer::get(self, resource, "", name)
    }

    fn delete(&self, resource: &str, name: &str) {
        ApiServer::delete(self, resource, "", name);
    }

    fn agent_kubeconfigs(&self, nodes: &[String]) -> Vec<String> {
        nodes.iter().map(|_| self.kubeconfig()).collect()
    }

    fn request_count(&self) -> usize {
        ApiServer::request_count(self)
    }

    fn requests_since(&self, mark: usize) -> Vec<Request> {
        ApiServer::requests_since(self, mark)
    }

    fn count_since(&self, mark: usize, matching: impl Fn(&Request) -> bool) -> usize {
        ApiServer::count_since(self, mark, matching)
    }

    fn open_watches(&self) -> usize {
        ApiServer::open_watches(self, "")
    }

    fn usage(&self) -> Option<Sample> {
        None
    }

    async fn until(&self, limit: Duration, what: &str, condition: impl Fn(&Self) -> bool) {
        ApiServer::until(self, limit, what, condition).await;
    }

    /// Forgets its history and drops every watch, as a restarted API server
    /// does; every watch resuming is told its version is gone (410), so each
    /// agent lists and watches again: done when each watches its pods again
    /// after a LIST, and its Node again.
    async fn restart(&mut self, nodes: &[String], limit: Duration) {
        let mark = ApiServer::request_count(self);
        ApiServer::restart(self);
        ApiServer::until(self, limit, "every agent watching again", |s| {
            let requests = s.requests_since(mark);
            nodes.iter().all(|node| {
                let of = |path: &'static str| {
                    move |r: &&Request| r.uri.starts_with(path) && r.uri.contains(node.as_str())
                };
                let pods = || requests.iter().filter(of("/api/v1/pods?"));
                let listed = pods().position(Request::is_list);
                listed.is_some_and(|at| pods().skip(at).any(Request::is_watch))
                    && requests
                        .iter()
                        .filter(of("/api/v1/nodes?"))
                        .any(Request::is_watch)
            })
        })
        .await;
    }
}
