//! Makes the eviction loop visible on the cluster: reads the runner's
//! reports, records Kubernetes Events (events.k8s.io/v1, kube's `Recorder`)
//! on the pod for each eviction started, refused, failed, completed or
//! dry-run and on the Node when a condition starts or ends, hands the
//! current conditions to the node status writer ([`write_latest`]), which
//! retries with backoff while the API server is unreachable and always
//! writes the latest state, and keeps the loop's [`Activity`] for the
//! node's status object.

use super::node_status::{NodeStatus, condition_type};
use crate::clock::Clock;
use crate::eviction::runner::Report;
use crate::eviction::{ActiveCondition, Settled, Victim};
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
    /// Records events.
    pub recorder: Recorder,
    /// The Node, for node events.
    pub node: ObjectReference,
    /// Counts what happens.
    pub metrics: Arc<Metrics>,
    /// Where the current conditions go.
    pub conditions: watch::Sender<Vec<ActiveCondition>>,
    /// Where the loop's recent activity goes.
    pub activity: watch::Sender<Activity>,
    /// The time of each activity.
    pub clock: Arc<dyn Clock>,
}

impl Publisher {
    /// A publisher for Node `node`, reporting as `vigil` on `node`.
    pub fn new(
        client: Client,
        node: &str,
        metrics: Arc<Metrics>,
        conditions: watch::Sender<Vec<ActiveCondition>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let (recorder, node) = node_recorder(client, node);
        Self {
            recorder,
            node,
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
                        self.node_event(started, true).await;
                    }
                    for ended in &changes.1 {
                        self.node_event(ended, false).await;
                    }
                    self.conditions.send_if_modified(|current| {
                        let changed = names(current) != names(&cycle.conditions);
                        if changed {
                            *current = cycle.conditions.clone();
                        }
                        changed
                    });
                    for victim in &cycle.gone {
                        let note = format!("evicted by {}: {}", victim.strategy, victim.reason);
                        self.pod_event(victim, EventType::Normal, "EvictionCompleted", note)
                            .await;
                    }
                }
                Report::Settled { settled, .. } => {
                    let now = self.clock.now();
                    self.activity
                        .send_modify(|activity| activity.settled(&settled, now));
                    self.settled(settled).await;
                }
            }
        }
    }

    async fn settled(&self, settled: Settled) {
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
            Settled::Refused(v, why) => (v, EventType::Warning, "EvictionRefused", why),
            Settled::Waiting(v, why) => (v, EventType::Warning, "EvictionFailed", why),
            Settled::Gone(v) => {
                let note = "the pod was gone before it could be evicted".to_owned();
                (v, EventType::Normal, "EvictionSkipped", note)
            }
        };
        self.pod_event(&victim, kind, reason, note).await;
    }

    async fn pod_event(&self, victim: &Victim, kind: EventType, reason: &str, note: String) {
        let pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(victim.pod.name.clone()),
            namespace: Some(victim.pod.namespace.clone()),
            uid: Some(victim.pod.uid.clone()),
            ..ObjectReference::default()
        };
        self.publish(&pod, kind, reason, note).await;
    }

    async fn node_event(&self, condition: &str, started: bool) {
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
        self.publish(&self.node, EventType::Normal, &reason, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        kind: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_: kind,
            reason: reason.into(),
            note: Some(note),
            action: "Evict".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(%reason, error = %crate::report::Chain(&error), "event not recorded");
        }
    }
}

fn names(conditions: &[ActiveCondition]) -> Vec<(&str, &[String])> {
    conditions
        .iter()
        .map(|c| (c.name.as_str(), c.effects.as_slice()))
        .collect()
}

/// A recorder of Events reporting as `vigil` on `node`, and a reference
/// to that Node.
pub fn node_recorder(client: Client, node: &str) -> (Recorder, ObjectReference) {
    let reporter = Reporter {
        controller: "vigil".into(),
        instance: Some(node.to_owned()),
    };
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_owned()),
        ..ObjectReference::default()
    };
    (Recorder::new(client, reporter), reference)
}

/// Something written to the API server that only its latest value matters for.
pub trait LatestWriter<T> {
    /// Writes `value`.
    fn write(&mut self, value: &T) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

impl LatestWriter<Vec<ActiveCondition>> for NodeStatus {
    async fn write(&mut self, value: &Vec<ActiveCondition>) -> Result<(), kube::Error> {
        self.publish(value).await
    }
}

/// Writes the latest value of `latest` with `writer` whenever it changes,
/// retrying with exponential backoff (up to [`MAX_BACKOFF`]) while writes
/// fail, until the sender is gone; `what` names it in logs.
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
                if latest.changed().await.is_err() {
                    return;
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
