//! Kubernetes Events, written off the critical path.
//!
//! Whoever records an Event only queues it ([`Events::send`] never waits):
//! a hung or slow Events API must not delay an eviction, a condition or a
//! taint. One writer task ([`EventWriter::run`]) drains the bounded queue
//! with kube's `Recorder`. The same reason on the same object is queued at
//! most once per [`REPEAT_EVERY`] (a pod refused every cycle makes one
//! Event, not one per cycle); a full queue drops the Event. Both are
//! counted in `vigil_events_dropped_total`.

use crate::metrics::{Metrics, NameLabel};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Events waiting for the writer; more are dropped.
pub(crate) const EVENT_BACKLOG: usize = 256;
/// The shortest time between two Events of one reason on one object.
pub(crate) const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// The sending side: cheap to clone, never waits.
#[derive(Clone)]
pub(crate) struct Events {
    queue: mpsc::Sender<(ObjectReference, Event)>,
    last: Arc<Mutex<HashMap<(String, String), Instant>>>,
    metrics: Arc<Metrics>,
}

/// The writing side: one task.
pub(crate) struct EventWriter {
    recorder: Recorder,
    queue: mpsc::Receiver<(ObjectReference, Event)>,
}

/// A queue of Events written by `recorder`, counting drops in `metrics`.
pub(crate) fn queue(recorder: Recorder, metrics: Arc<Metrics>) -> (Events, EventWriter) {
    let (tx, rx) = mpsc::channel(EVENT_BACKLOG);
    let events = Events {
        queue: tx,
        last: Arc::default(),
        metrics,
    };
    (
        events,
        EventWriter {
            recorder,
            queue: rx,
        },
    )
}

impl Events {
    /// Queues `event` about `regarding`, unless the same reason on the same
    /// object was queued within [`REPEAT_EVERY`] or the queue is full.
    pub(crate) fn send(&self, regarding: ObjectReference, event: Event) {
        let object = regarding
            .uid
            .clone()
            .or_else(|| regarding.name.clone())
            .unwrap_or_default();
        let key = (object, event.reason.clone());
        let now = Instant::now();
        let mut last = self.last.lock().expect("events lock poisoned");
        last.retain(|_, at| now.duration_since(*at) < REPEAT_EVERY);
        match last.entry(key) {
            Entry::Occupied(_) => self.dropped("repeated"),
            Entry::Vacant(slot) => {
                if self.queue.try_send((regarding, event)).is_ok() {
                    // Only a queued Event holds its repeats back.
                    slot.insert(now);
                } else {
                    tracing::warn!("the Events queue is full; an Event was dropped");
                    self.dropped("queue-full");
                }
            }
        }
    }

    fn dropped(&self, why: &str) {
        self.metrics
            .events_dropped
            .get_or_create(&NameLabel { name: why.into() })
            .inc();
    }
}

impl EventWriter {
    /// Writes every queued Event until every sender is gone.
    pub(crate) async fn run(mut self) {
        while let Some((regarding, event)) = self.queue.recv().await {
            if let Err(error) = self.recorder.publish(&event, &regarding).await {
                let reason = &event.reason;
                tracing::warn!(%reason, error = %crate::base::report::Chain(&error), "event not recorded");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::{EventType, Reporter};

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: "Evict".into(),
            secondary: None,
        }
    }

    fn pod(uid: &str) -> ObjectReference {
        ObjectReference {
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    fn dropped(metrics: &Metrics, why: &str) -> u64 {
        metrics
            .events_dropped
            .get_or_create(&NameLabel { name: why.into() })
            .get()
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeated_event_is_queued_once_per_interval_and_a_full_queue_drops_without_waiting() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let reporter = Reporter {
            controller: "vigil".into(),
            instance: None,
        };
        let metrics = Arc::new(Metrics::default());
        let (events, mut writer) = queue(Recorder::new(client, reporter), Arc::clone(&metrics));
        events.send(pod("a"), event("EvictionRefused"));
        events.send(pod("a"), event("EvictionRefused"));
        events.send(pod("a"), event("Evicting"));
        assert_eq!(dropped(&metrics, "repeated"), 1);
        tokio::time::advance(REPEAT_EVERY).await;
        events.send(pod("a"), event("EvictionRefused"));
        assert_eq!(dropped(&metrics, "repeated"), 1);
        // Nobody writes: the queue fills, and sending still returns at once.
        for i in 0..EVENT_BACKLOG {
            events.send(pod(&format!("p{i}")), event("Evicting"));
        }
        assert_eq!(dropped(&metrics, "queue-full"), 3);
        let mut queued = 0;
        while writer.queue.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, EVENT_BACKLOG);
        // A dropped Event did not count as sent: once there is room, it goes.
        events.send(pod(&format!("p{}", EVENT_BACKLOG - 1)), event("Evicting"));
        assert_eq!(dropped(&metrics, "repeated"), 1);
        assert!(writer.queue.try_recv().is_ok());
    }
}
