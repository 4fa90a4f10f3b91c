//! One watch per ConfigMap the config references (the kubelet's
//! watch-based manager): a watch starts with the first reference to its
//! object and stops when no reference is left; one whose object nobody read
//! for [`MAX_IDLE`] is stopped and restarts when read again; one whose
//! object is `immutable` stops as soon as the object is read (it cannot
//! change) and is never restarted; all stop on [`ObjectWatches::shutdown`].
//! Every change of an object wakes whoever waits on
//! [`ObjectWatches::changes`]. The config controller reads each referenced
//! object on each of its passes (at least every 5 minutes), so a watch goes
//! idle only while the controller stops reading (its own watch interrupted).
//!
//! Where the objects come from is an [`ObjectSource`]: the API server
//! ([`ApiSource`], a list+watch with the field selector `metadata.name`),
//! or in tests a feed they drive on a paused clock.

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A watch whose object was not read for this long is stopped.
pub(crate) const MAX_IDLE: Duration = Duration::from_secs(15 * 60);
/// How often idle watches are looked for.
const RECYCLE_EVERY: Duration = Duration::from_secs(60);

/// A namespaced object's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a watch says of its object: the object (`None`: it does not exist)
/// after the first list and after each change, or why it was interrupted.
pub(crate) type Observed = Result<Option<ConfigMap>, String>;

/// Follows one object.
pub trait ObjectSource: Send + Sync + 'static {
    /// Lists then watches `key`; dropping the stream stops the watch.
    fn follow(&self, key: &ObjectKey) -> BoxStream<'static, Observed>;
}

/// What is known of a referenced object.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// Its watch has not listed it yet.
    Pending,
    /// Its watch could not list it: why.
    Unavailable(String),
    /// It does not exist.
    Missing,
    /// The object, as last listed or changed.
    Found(Arc<ConfigMap>),
}

/// The reference-counted per-object watches.
pub struct ObjectWatches {
    source: Arc<dyn ObjectSource>,
    inner: Arc<Mutex<Inner>>,
    changes: watch::Sender<u64>,
}

#[derive(Default)]
struct Inner {
    items: BTreeMap<ObjectKey, Item>,
    shut_down: bool,
    /// Numbers the watches started, so a stopped one's last words are ignored.
    started: u64,
}

struct Item {
    references: usize,
    /// The last listed state; cleared when an idle watch stops.
    state: Option<Option<Arc<ConfigMap>>>,
    /// The last interruption before the first list.
    error: Option<String>,
    last_read: Instant,
    immutable: bool,
    running: Option<(u64, AbortHandle)>,
}

impl Item {
    fn stop(&mut self) -> bool {
        let Some((_, task)) = self.running.take() else {
            return false;
        };
        task.abort();
        if !self.immutable {
            self.state = None;
        }
        true
    }
}

impl fmt::Debug for ObjectWatches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("ObjectWatches")
            .field("objects", &inner.items.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ObjectWatches {
    /// No watches yet; objects come from `source`.
    pub fn new(source: impl ObjectSource) -> Self {
        Self {
            source: Arc::new(source),
            inner: Arc::new(Mutex::new(Inner::default())),
            changes: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("object watches lock poisoned")
    }

    /// Counts what the watches observed: every change of an object, every
    /// interruption.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Makes `references` (one entry per reference: an object named twice
    /// counts twice) the objects watched: the first reference to an object
    /// starts its watch, an object no longer referenced has its watch stopped.
    pub fn follow(&self, references: impl IntoIterator<Item = ObjectKey>) {
        let mut counts: BTreeMap<ObjectKey, usize> = BTreeMap::new();
        for key in references {
            *counts.entry(key).or_default() += 1;
        }
        let mut inner = self.lock();
        inner.items.retain(|key, item| {
            let referenced = counts.contains_key(key);
            if !referenced && item.stop() {
                tracing::debug!(object = %key, "no longer referenced: watch stopped");
            }
            referenced
        });
        for (key, references) in counts {
            if let Some(item) = inner.items.get_mut(&key) {
                item.references = references;
                continue;
            }
            let item = Item {
                references,
                state: None,
                error: None,
                last_read: Instant::now(),
                immutable: false,
                running: None,
            };
            inner.items.insert(key.clone(), item);
            self.start(&mut inner, &key);
        }
    }

    /// How many references `key` has.
    pub fn references(&self, key: &ObjectKey) -> usize {
        self.lock().items.get(key).map_or(0, |i| i.references)
    }

    /// How many watches run.
    pub fn watching(&self) -> usize {
        let inner = self.lock();
        inner.items.values().filter(|i| i.running.is_some()).count()
    }

    /// What is known of the referenced `key` (`None`: not referenced).
    /// Reading restarts a watch stopped as idle; reading an immutable
    /// object stops its watch for good.
    pub fn get(&self, key: &ObjectKey) -> Option<Lookup> {
        let mut inner = self.lock();
        let item = inner.items.get_mut(key)?;
        item.last_read = Instant::now();
        if item.running.is_none() && !item.immutable {
            self.start(&mut inner, key);
        }
        let item = inner.items.get_mut(key)?;
        let lookup = match (item.state.clone(), &item.error) {
            (Some(Some(object)), _) => {
                if object.immutable == Some(true) {
                    item.immutable = true;
                    if item.stop() {
                        tracing::debug!(object = %key, "immutable: watch stopped, value kept");
                    }
                }
                Lookup::Found(object)
            }
            (Some(None), _) => Lookup::Missing,
            (None, Some(error)) => Lookup::Unavailable(error.clone()),
            (None, None) => Lookup::Pending,
        };
        Some(lookup)
    }

    /// Stops the watches whose object, listed, was not read for the idle time.
    pub fn stop_idle(&self) {
        let now = Instant::now();
        let mut inner = self.lock();
        for (key, item) in &mut inner.items {
            let listed = item.state.is_some();
            if listed && now.duration_since(item.last_read) > MAX_IDLE && item.stop() {
                tracing::debug!(object = %key, "not read for a while: watch stopped");
            }
        }
    }

    /// Stops idle watches every minute until `stop`, then shuts down.
    pub async fn recycle(&self, stop: CancellationToken) {
        let mut every = tokio::time::interval(RECYCLE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = every.tick() => self.stop_idle(),
            }
        }
        self.shutdown();
    }

    /// Stops every watch; none starts again.
    pub fn shutdown(&self) {
        let mut inner = self.lock();
        inner.shut_down = true;
        for item in inner.items.values_mut() {
            item.stop();
        }
    }

    fn start(&self, inner: &mut Inner, key: &ObjectKey) {
        if inner.shut_down {
            return;
        }
        inner.started += 1;
        let id = inner.started;
        let Some(item) = inner.items.get_mut(key) else {
            return;
        };
        item.error = None;
        let stream = self.source.follow(key);
        let task = tokio::spawn(feed(
            stream,
            Arc::downgrade(&self.inner),
            key.clone(),
            id,
            self.changes.clone(),
        ));
        item.running = Some((id, task.abort_handle()));
        tracing::debug!(object = %key, "watch started");
    }
}

/// Moves what the watch `id` of `key` observes into its item.
async fn feed(
    mut stream: BoxStream<'static, Observed>,
    inner: Weak<Mutex<Inner>>,
    key: ObjectKey,
    id: u64,
    changes: watch::Sender<u64>,
) {
    while let Some(observed) = stream.next().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut inner = inner.lock().expect("object watches lock poisoned");
        let Some(item) = inner.items.get_mut(&key) else {
            return;
        };
        if item.running.as_ref().map(|(i, _)| *i) != Some(id) {
            return;
        }
        match observed {
            Ok(object) => {
                item.state = Some(object.map(Arc::new));
                item.error = None;
            }
            Err(error) => {
                tracing::warn!(object = %key, %error, "ConfigMap watch interrupted");
                // Once listed, the last state stands while the watch resumes.
                if item.state.is_none() {
                    item.error = Some(error);
                }
            }
        }
        drop(inner);
        changes.send_modify(|n| *n += 1);
    }
}

/// ConfigMaps from the API server.
#[derive(Clone)]
pub(crate) struct ApiSource(pub Client);

impl ObjectSource for ApiSource {
    fn follow(&self, key: &ObjectKey) -> BoxStream<'static, Observed> {
        let api: Api<ConfigMap> = Api::namespaced(self.0.clone(), &key.namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", key.name));
        watcher(api, super::watches::from_cache(config))
            .default_backoff()
            .scan(None, |listing: &mut Option<ConfigMap>, event| {
                let observed = match event {
                    Ok(watcher::Event::Init) => {
                        *listing = None;
                        None
                    }
                    Ok(watcher::Event::InitApply(object)) => {
                        *listing = Some(object);
                        None
                    }
                    Ok(watcher::Event::InitDone) => Some(Ok(listing.take())),
                    Ok(watcher::Event::Apply(object)) => Some(Ok(Some(object))),
                    Ok(watcher::Event::Delete(_)) => Some(Ok(None)),
                    Err(error) => Some(Err(error.to_string())),
                };
                futures::future::ready(Some(observed))
            })
            .filter_map(futures::future::ready)
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    /// The sending end of one watch the test drives.
    type Sender = mpsc::UnboundedSender<Observed>;

    /// A source whose objects the test sends; remembers each stream's sender.
    #[derive(Clone, Default)]
    struct Feed(Arc<Mutex<Vec<(ObjectKey, Sender)>>>);

    impl ObjectSource for Feed {
        fn follow(&self, key: &ObjectKey) -> BoxStream<'static, Observed> {
            let (tx, mut rx) = mpsc::unbounded_channel();
            self.0.lock().unwrap().push((key.clone(), tx));
            futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
        }
    }

    impl Feed {
        /// Watches started for `key` so far.
        fn started(&self, key: &ObjectKey) -> usize {
            self.0
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k == key)
                .count()
        }

        /// The newest watch of `key`.
        fn newest(&self, key: &ObjectKey) -> Sender {
            let feeds = self.0.lock().unwrap();
            let (_, tx) = feeds.iter().rev().find(|(k, _)| k == key).unwrap();
            tx.clone()
        }

        /// Whether every watch of `key` was stopped (its stream dropped).
        async fn all_stopped(&self, key: &ObjectKey) {
            let senders: Vec<_> = {
                let feeds = self.0.lock().unwrap();
                feeds
                    .iter()
                    .filter(|(k, _)| k == key)
                    .map(|(_, tx)| tx.clone())
                    .collect()
            };
            for tx in senders {
                tx.closed().await;
            }
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            namespace: "ops".into(),
            name: name.into(),
        }
    }

    fn config_map(name: &str, value: &str, immutable: bool) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ops".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("k".into(), value.into())])),
            immutable: Some(immutable),
            ..Default::default()
        }
    }

    /// Sends `observed` on the newest watch of `key` and waits until it is known.
    async fn send(watches: &ObjectWatches, feed: &Feed, key: &ObjectKey, observed: Observed) {
        let mut changes = watches.changes();
        changes.borrow_and_update();
        feed.newest(key).send(observed).unwrap();
        changes.changed().await.unwrap();
    }

    fn value(lookup: Option<Lookup>) -> String {
        match lookup {
            Some(Lookup::Found(object)) => object.data.as_ref().unwrap()["k"].clone(),
            other => format!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_runs_while_referenced_and_once_for_many_references() {
        let feed = Feed::default();
        let watches = ObjectWatches::new(feed.clone());
        let a = key("a");
        assert!(watches.get(&a).is_none(), "not referenced, not known");
        watches.follow([a.clone(), a.clone()]);
        assert_eq!((feed.started(&a), watches.references(&a)), (1, 2));
        assert!(matches!(watches.get(&a), Some(Lookup::Pending)));
        send(&watches, &feed, &a, Ok(Some(config_map("a", "1", false)))).await;
        assert_eq!(value(watches.get(&a)), "1");
        send(&watches, &feed, &a, Ok(Some(config_map("a", "2", false)))).await;
        assert_eq!(value(watches.get(&a)), "2");

        watches.follow([a.clone()]);
        assert_eq!((watches.references(&a), watches.watching()), (1, 1));
        watches.follow([]);
        assert_eq!((watches.references(&a), watches.watching()), (0, 0));
        feed.all_stopped(&a).await;
        assert!(watches.get(&a).is_none());
        watches.follow([a.clone()]);
        assert_eq!(feed.started(&a), 2, "referenced again: a new watch");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_watch_stops_and_restarts_when_read() {
        let feed = Feed::default();
        let watches = Arc::new(ObjectWatches::new(feed.clone()));
        let stop = CancellationToken::new();
        let recycler = tokio::spawn({
            let (watches, stop) = (Arc::clone(&watches), stop.clone());
            async move { watches.recycle(stop).await }
        });
        let a = key("a");
        watches.follow([a.clone()]);
        tokio::time::sleep(MAX_IDLE * 2).await;
        assert_eq!(
            watches.watching(),
            1,
            "a watch that never listed is not stopped as idle"
        );
        send(&watches, &feed, &a, Ok(Some(config_map("a", "1", false)))).await;
        assert_eq!(value(watches.get(&a)), "1");
        tokio::time::sleep(MAX_IDLE - RECYCLE_EVERY).await;
        assert_eq!(watches.watching(), 1, "read recently enough");
        tokio::time::sleep(RECYCLE_EVERY * 3).await;
        assert_eq!(watches.watching(), 0, "idle: stopped");
        feed.all_stopped(&a).await;
        assert_eq!(watches.references(&a), 1, "still referenced");

        assert!(
            matches!(watches.get(&a), Some(Lookup::Pending)),
            "a read restarts it and waits for a fresh list"
        );
        assert_eq!((feed.started(&a), watches.watching()), (2, 1));
        send(&watches, &feed, &a, Ok(Some(config_map("a", "3", false)))).await;
        assert_eq!(value(watches.get(&a)), "3");

        stop.cancel();
        recycler.await.unwrap();
        assert_eq!(watches.watching(), 0, "all stopped on shutdown");
        feed.all_stopped(&a).await;
        assert!(
            matches!(watches.get(&a), Some(Lookup::Pending)),
            "not restarted by a read"
        );
        watches.follow([a.clone(), key("b")]);
        assert_eq!(
            (watches.watching(), feed.started(&key("b"))),
            (0, 0),
            "nothing starts after shutdown"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_immutable_object_is_read_once() {
        let feed = Feed::default();
        let watches = ObjectWatches::new(feed.clone());
        let a = key("a");
        watches.follow([a.clone()]);
        send(&watches, &feed, &a, Ok(Some(config_map("a", "1", true)))).await;
        assert_eq!(value(watches.get(&a)), "1");
        assert_eq!(watches.watching(), 0, "stopped once read");
        feed.all_stopped(&a).await;
        assert_eq!(value(watches.get(&a)), "1", "kept, not restarted");
        assert_eq!(feed.started(&a), 1);
        watches.follow([]);
        assert!(watches.get(&a).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_interruption_before_the_first_list_is_told_after_it_is_not() {
        let feed = Feed::default();
        let watches = ObjectWatches::new(feed.clone());
        let a = key("a");
        watches.follow([a.clone()]);
        send(&watches, &feed, &a, Err("configmaps is forbidden".into())).await;
        assert!(
            matches!(watches.get(&a), Some(Lookup::Unavailable(e)) if e == "configmaps is forbidden")
        );
        send(&watches, &feed, &a, Ok(None)).await;
        assert!(matches!(watches.get(&a), Some(Lookup::Missing)));
        send(&watches, &feed, &a, Err("stream dropped".into())).await;
        assert!(
            matches!(watches.get(&a), Some(Lookup::Missing)),
            "the listed state stands while the watch resumes"
        );
        send(&watches, &feed, &a, Ok(Some(config_map("a", "1", false)))).await;
        assert_eq!(value(watches.get(&a)), "1");
    }
}
