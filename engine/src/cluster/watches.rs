//! Reflectors: this node's pods (field selector `spec.nodeName`), this
//! Node (field selector `metadata.name`), the `VigilConfig` and the
//! `VigilPolicy` objects, each kept in a local store by a
//! task that lists, watches, resumes after a dropped stream and lists again
//! after `410 Gone`, with backoff. The loop reads the stores, so it keeps
//! deciding from the last known state while a watch reconnects.
//!
//! Every list is served from the API server's watch cache
//! (`resourceVersion=0`), never a consistent read from etcd: when a
//! DaemonSet of thousands rolls, or the API server restarts and every watch
//! lists again, each agent's list by `spec.nodeName` costs the server a
//! scan of its cache, not of the whole pod keyspace in etcd. The list may be
//! a moment old; the watch that follows it brings the rest.

use crate::base::rate::Backoff;
use crate::config::crd::ConfigLayer;
use crate::distribution::crd::VigilPolicy;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A store kept up to date by a watch task.
pub struct Reflected<K: Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    /// The objects.
    pub store: Store<K>,
    /// The task keeping it; aborted when this is dropped.
    pub task: tokio::task::JoinHandle<()>,
    /// Counts what the watch delivered and how often it was interrupted:
    /// changes wake whoever waits for the objects.
    pub progress: watch::Receiver<Progress>,
}

/// What a watch has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Events received (objects listed, changed or deleted).
    pub events: u64,
    /// Interruptions (errors, dropped streams, `410 Gone`).
    pub errors: u64,
}

impl<K: Resource + 'static> Drop for Reflected<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    /// Stops the watch.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches the pods bound to `node`.
pub fn pods(
    client: Client,
    node: &str,
    on_restart: impl Fn(&str) + Send + Sync + 'static,
) -> Reflected<Pod> {
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    reflect(
        Api::all(client),
        config,
        "pods".into(),
        Arc::new(on_restart),
    )
}

/// Watches every `VigilConfig` (cluster-scoped, small, rarely changed:
/// every agent may watch them all). After an interruption it lists them
/// again (from the cache, after a backoff) instead of resuming: a resumed
/// watch says nothing until the next change, and the config controller
/// must learn that its view is current again to follow node relabels and
/// `expiresAfter` meanwhile.
pub fn vigil_configs(
    client: Client,
    on_restart: impl Fn(&str) + Send + Sync + 'static,
) -> Reflected<ConfigLayer> {
    reflect_with(
        Api::all(client),
        watcher::Config::default(),
        "vigilconfigs".into(),
        Arc::new(on_restart),
        Resume::Relist,
    )
}

/// Watches every `VigilPolicy` (cluster-scoped, one per policy name: few
/// and small, every agent may watch them all).
pub fn vigil_policies(
    client: Client,
    on_restart: impl Fn(&str) + Send + Sync + 'static,
) -> Reflected<VigilPolicy> {
    reflect(
        Api::all(client),
        watcher::Config::default(),
        "vigilpolicies".into(),
        Arc::new(on_restart),
    )
}

/// Watches the Node `node`.
pub fn node(
    client: Client,
    node: &str,
    on_restart: impl Fn(&str) + Send + Sync + 'static,
) -> Reflected<Node> {
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    reflect(
        Api::all(client),
        config,
        "node".into(),
        Arc::new(on_restart),
    )
}

/// `config` listing from the watch cache (see the module docs). Unpaged:
/// the cache answers in one piece anyway, and kube sends no
/// `resourceVersion=0` with a page size.
pub(crate) fn from_cache(config: watcher::Config) -> watcher::Config {
    watcher::Config {
        page_size: None,
        ..config.any_semantic()
    }
}

/// How a watch carries on after an interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// From the last resource version seen (kube's watcher, with backoff).
    FromVersion,
    /// With a new list, after a jittered backoff (1 s doubling to 30 s).
    Relist,
}

/// Keeps what `api` lists and watches with `config` in a store;
/// `name` says which watch it is in logs and to `on_restart`.
pub(crate) fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    name: String,
    on_restart: Arc<dyn Fn(&str) + Send + Sync>,
) -> Reflected<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default,
{
    reflect_with(api, config, name, on_restart, Resume::FromVersion)
}

/// [`reflect`], carrying on after an interruption as `resume` says.
pub(crate) fn reflect_with<K>(
    api: Api<K>,
    config: watcher::Config,
    name: String,
    on_restart: Arc<dyn Fn(&str) + Send + Sync>,
    resume: Resume,
) -> Reflected<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default,
{
    use futures::StreamExt;
    let (store, mut writer) = reflector::store();
    let config = from_cache(config);
    let (progress_tx, progress) = watch::channel(Progress::default());
    let task = tokio::spawn(async move {
        let mut failures = 0;
        loop {
            let stream = watcher(api.clone(), config.clone()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        writer.apply_watcher_event(&event);
                        progress_tx.send_modify(|p| p.events += 1);
                        failures = 0;
                    }
                    Err(error) => {
                        tracing::warn!(watch = %name, %error, relist = resume == Resume::Relist, "watch interrupted; deciding from the cached state meanwhile");
                        on_restart(&name);
                        progress_tx.send_modify(|p| p.errors += 1);
                        if resume == Resume::Relist {
                            break;
                        }
                    }
                }
            }
            failures += 1;
            tokio::time::sleep(RELIST.wait(failures)).await;
        }
    });
    Reflected {
        store,
        task,
        progress,
    }
}

/// The waits before a [`Resume::Relist`] watch lists again: 1 s doubling
/// to 30 s, jittered.
const RELIST: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(30)).jittered(0.5, 1.5);
