//! Makes the eviction loop visible on the cluster: reads the runner's
//! reports, queues Kubernetes Events ([`Events`], written off this path) on
//! the pod for each eviction started, refused, failed, completed or dry-run
//! and on the Node when a condition starts or ends, hands the conditions to
//! the node status writer ([`write_latest`]) — nothing before the first
//! cycle has decided, so taints already there stay until then — which
//! retries with backoff while the API server is unreachable, always writes
//! the latest state and refreshes it while a condition holds, and keeps the
//! loop's [`Activity`] for the node's status object.

use super::events::Events;
use super::node_status::{NodeConditions, NodeStatus, condition_type};
use crate::clock::Clock;
use crate::eviction::runner::Report;
use crate::eviction::{Settled, Victim};
use crate::fleet::activity::Activity;
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Longest wait between two attempts at writing the node's status.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Reads reports until the runner is gone.
pub struct Publisher {
    /// Queues events.
    pub events: Events,
    /// The Node, for node events.
    pub node: ObjectReference,
    /// Counts what happens.
    pub metrics: Arc<Metrics>,
    /// Where the conditions go; none until the first cycle.
    pub conditions: watch::Sender<Option<NodeConditions>>,
    /// Where the loop's recent activity goes.
    pub activity: watch::Sender<Activity>,
    /// The time of each activity.
    pub clock: Arc<dyn Clock>,
}

impl Publisher {
    /// A publisher for Node `node`, queueing its Events on `events`.
    pub fn new(
        events: Events,
        node: &str,
        metrics: Arc<Metrics>,
        conditions: watch::Sender<Option<NodeConditions>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            events,
            node: node_reference(node),
            metrics,
            conditions,
            activity: watch::Sender::new(Activity::default()),
            clock,
        }
    }

    /// Handles every report until the channel closes.
    pub async fn run(self, mut reports: mpsc::Receiver<Report>) {
        while let Some(report) = reports.recv().await {
            self.metrics.record(&report);
            match report {
                Report::Cycle(cycle, _) => {
                    let now = self.clock.now();
                    let mut changes = (Vec::new(), Vec::new());
                    self.activity.send_if_modified(|activity| {
                        changes = activity.conditions(&cycle.conditions, now);
                        !changes.0.is_empty() || !changes.1.is_empty()
                    });
                    for started in &changes.0 {
                        self.node_event(started, true);
                    }
                    for ended in &changes.1 {
                        self.node_event(ended, false);
                    }
                    let next = NodeConditions {
                        active: cycle.conditions.clone(),
                        ended: cycle.ended_conditions.clone(),
                    };
                    self.conditions.send_if_modified(|current| {
                        let changed = current.as_ref().is_none_or(|c| shown(c) != shown(&next));
                        if changed {
                            *current = Some(next);
                        }
                        changed
                    });
                    for victim in &cycle.gone {
                        let note = format!("evicted by {}: {}", victim.strategy, victim.reason);
                        self.pod_event(victim, EventType::Normal, "EvictionCompleted", note);
                    }
                }
                Report::Settled { settled, .. } => {
                    let now = self.clock.now();
                    self.activity
                        .send_modify(|activity| activity.settled(&settled, now));
                    self.settled(settled);
                }
            }
        }
    }

    fn settled(&self, settled: Settled) {
        let (victim, kind, reason, note) = match settled {
            Settled::Accepted(v) if v.dry_run => {
                let note = format!("dry run: would evict ({}: {})", v.strategy, v.reason);
                (v, EventType::Normal, "EvictionDryRun", note)
            }
            Settled::Accepted(v) if v.override_pdb => {
                let note = format!(
                    "deleted despite its PodDisruptionBudget: every candidate was refused under hard pressure ({}: {})",
                    v.strategy, v.reason
                );
                (v, EventType::Warning, "EvictionOverridePDB", note)
            }
            Settled::Accepted(v) => {
                let note = format!("{}: {}", v.strategy, v.reason);
                (v, EventType::Normal, "Evicting", note)
            }
            Settled::Refused(v, why) | Settled::NotEvictable(v, why) => {
                (v, EventType::Warning, "EvictionRefused", why)
            }
            // Throttling is about the API server, not the pod: metrics say it.
            Settled::Throttled(..) => return,
            Settled::Waiting(v, why) => (v, EventType::Warning, "EvictionFailed", why),
            Settled::Gone(v) => {
                let note = "the pod was gone before it could be evicted".to_owned();
                (v, EventType::Normal, "EvictionSkipped", note)
            }
        };
        self.pod_event(&victim, kind, reason, note);
    }

    fn pod_event(&self, victim: &Victim, kind: EventType, reason: &str, note: String) {
        let pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(victim.pod.name.clone()),
            namespace: Some(victim.pod.namespace.clone()),
            uid: Some(victim.pod.uid.clone()),
            ..ObjectReference::default()
        };
        self.publish(pod, kind, reason, note);
    }

    fn node_event(&self, condition: &str, started: bool) {
        let kind = condition_type(condition);
        let (reason, note) = if started {
            (
                format!("{kind}Started"),
                format!("vigil observes {condition} on this node"),
            )
        } else {
            (
                format!("{kind}Ended"),
                format!("{condition} is over on this node"),
            )
        };
        self.publish(self.node.clone(), EventType::Normal, &reason, note);
    }

    fn publish(&self, regarding: ObjectReference, kind: EventType, reason: &str, note: String) {
        let event = Event {
            type_: kind,
            reason: reason.into(),
            note: Some(note),
            action: "Evict".into(),
            secondary: None,
        };
        self.events.send(regarding, event);
    }
}

/// What of the conditions the Node shows: names, effects, and which ended.
fn shown(conditions: &NodeConditions) -> (Vec<(&str, &[String])>, &[String]) {
    let active = conditions
        .active
        .iter()
        .map(|c| (c.name.as_str(), c.effects.as_slice()))
        .collect();
    (active, &conditions.ended)
}

fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_owned()),
        ..ObjectReference::default()
    }
}

/// A recorder of Events reporting as `vigil` on `node`, and a reference
/// to that Node.
pub fn node_recorder(client: Client, node: &str) -> (Recorder, ObjectReference) {
    let reporter = Reporter {
        controller: "vigil".into(),
        instance: Some(node.to_owned()),
    };
    (Recorder::new(client, reporter), node_reference(node))
}

/// Something written to the API server that only its latest value matters for.
pub trait LatestWriter<T> {
    /// Writes `value`.
    fn write(&mut self, value: &T) -> impl Future<Output = Result<(), kube::Error>> + Send;

    /// How soon `value`, once written, must be written again though it did
    /// not change (a heartbeat); never by default.
    fn refresh(&self, _value: &T) -> Option<Duration> {
        None
    }
}

impl LatestWriter<Option<NodeConditions>> for NodeStatus {
    async fn write(&mut self, value: &Option<NodeConditions>) -> Result<(), kube::Error> {
        match value {
            // Until the first cycle has decided, what the Node shows stays.
            None => Ok(()),
            Some(conditions) => self.publish(conditions).await,
        }
    }

    fn refresh(&self, value: &Option<NodeConditions>) -> Option<Duration> {
        value
            .as_ref()
            .filter(|c| !c.active.is_empty())
            .map(|_| self.heartbeat())
    }
}

/// Writes the latest value of `latest` with `writer` whenever it changes
/// (and again after the writer's refresh interval, if it has one for that
/// value), retrying with exponential backoff (up to [`MAX_BACKOFF`]) while
/// writes fail, until the sender is gone; `what` names it in logs.
pub async fn write_latest<T: Clone + Send + Sync>(
    mut writer: impl LatestWriter<T>,
    mut latest: watch::Receiver<T>,
    what: &str,
) {
    let mut backoff = Duration::from_millis(250);
    loop {
        let current = latest.borrow_and_update().clone();
        match writer.write(&current).await {
            Ok(()) => {
                backoff = Duration::from_millis(250);
                let refresh = writer.refresh(&current);
                tokio::select! {
                    changed = latest.changed() => if changed.is_err() { return },
                    () = sleep_or_pending(refresh) => {}
                }
            }
            Err(error) => {
                tracing::warn!(error = %crate::report::Chain(&error), retry_in = ?backoff, "cannot write {what}");
                tokio::select! {
                    changed = latest.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Sleeps `wait`; pending forever without one.
async fn sleep_or_pending(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}
