//! Makes the eviction loop visible on the cluster: reads the runner's
//! reports, records Kubernetes Events (events.k8s.io/v1, kube's `Recorder`)
//! on the pod for each eviction started, refused, failed, completed or
//! dry-run and on the Node when a condition starts or ends, and hands the
//! current conditions to the node status writer, which retries with backoff
//! while the API server is unreachable and always writes the latest state.

use super::node_status::{NodeStatus, condition_type};
use crate::eviction::runner::Report;
use crate::eviction::{ActiveCondition, Settled, Victim};
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::BTreeSet;
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
}

impl Publisher {
    /// A publisher for Node `node`, reporting as `vigil` on `node`.
    pub fn new(
        client: Client,
        node: &str,
        metrics: Arc<Metrics>,
        conditions: watch::Sender<Vec<ActiveCondition>>,
    ) -> Self {
        let reporter = Reporter {
            controller: "vigil".into(),
            instance: Some(node.to_owned()),
        };
        let node = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_owned()),
            ..ObjectReference::default()
        };
        Self {
            recorder: Recorder::new(client, reporter),
            node,
            metrics,
            conditions,
        }
    }

    /// Handles every report until the channel closes.
    pub async fn run(self, mut reports: mpsc::Receiver<Report>) {
        let mut shown: BTreeSet<String> = BTreeSet::new();
        while let Some(report) = reports.recv().await {
            self.metrics.record(&report);
            match report {
                Report::Cycle(cycle, _) => {
                    let now: BTreeSet<String> =
                        cycle.conditions.iter().map(|c| c.name.clone()).collect();
                    for started in now.difference(&shown) {
                        self.node_event(started, true).await;
                    }
                    for ended in shown.difference(&now) {
                        self.node_event(ended, false).await;
                    }
                    shown = now;
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
                Report::Settled { settled, .. } => self.settled(settled).await,
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

/// Writes the latest conditions to the Node whenever they change, retrying
/// with exponential backoff (up to [`MAX_BACKOFF`]) while writes fail,
/// until the sender is gone.
pub async fn write_node_status(
    mut status: NodeStatus,
    mut conditions: watch::Receiver<Vec<ActiveCondition>>,
) {
    let mut backoff = Duration::from_millis(250);
    loop {
        let current = conditions.borrow_and_update().clone();
        match status.publish(&current).await {
            Ok(()) => {
                backoff = Duration::from_millis(250);
                if conditions.changed().await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(error = %crate::report::Chain(&error), retry_in = ?backoff, "cannot write the node's conditions and taints");
                tokio::select! {
                    changed = conditions.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
