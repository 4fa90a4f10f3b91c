//! Makes the eviction loop visible on the cluster: reads the runner's
//! reports, queues Kubernetes Events ([`Events`], written off this path) on
//! the pod for each eviction started, refused, failed, completed or dry-run
//! and on the Node when a condition starts or ends, hands the conditions to
//! the node status writer ([`super::latest::write_latest`]) — nothing before the first
//! cycle has decided, so taints already there stay until then — which
//! retries with backoff while the API server is unreachable, always writes
//! the latest state and refreshes it while a condition holds.
//! The fleet view follows the same reports on its own
//! ([`crate::fleet::activity::follow`]).

use super::events::Events;
use super::node_status::{NodeConditions, condition_type};
use crate::eviction::runner::{LoopReport, next_report};
use crate::eviction::tracker::transitions;
use crate::eviction::{Settled, Victim};
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;
use tokio::sync::{broadcast, watch};

/// Reads reports until the runner is gone.
pub(crate) struct Publisher {
    /// Queues events.
    pub events: Events,
    /// The Node, for node events.
    pub node: ObjectReference,
    /// Counts what happens.
    pub metrics: Arc<Metrics>,
    /// Where the conditions go; none until the first cycle.
    pub conditions: watch::Sender<Option<NodeConditions>>,
}

impl Publisher {
    /// A publisher for Node `node`, queueing its Events on `events`.
    pub(crate) fn new(
        events: Events,
        node: &str,
        metrics: Arc<Metrics>,
        conditions: watch::Sender<Option<NodeConditions>>,
    ) -> Self {
        Self {
            events,
            node: node_reference(node),
            metrics,
            conditions,
        }
    }

    /// Handles every report until the runner is gone; a reader that fell
    /// behind skips what it missed.
    pub(crate) async fn run(self, mut reports: broadcast::Receiver<Arc<LoopReport>>) {
        while let Some(report) = next_report(&mut reports, "the publisher").await {
            self.metrics.record(&report);
            match report.as_ref() {
                LoopReport::Cycle(cycle, _) => {
                    // What the Node was last told holds.
                    let holding: Vec<String> = (self.conditions.borrow().iter())
                        .flat_map(|shown| &shown.active)
                        .map(|c| c.name.clone())
                        .collect();
                    let (started, ended) = transitions(&holding, &cycle.conditions);
                    for name in &started {
                        self.node_event(name, true);
                    }
                    for name in &ended {
                        self.node_event(name, false);
                    }
                    let misplaced: Vec<(String, String)> = (cycle.misplaced.iter())
                        .map(|m| (m.place.reason().to_owned(), m.to_string()))
                        .collect();
                    self.beside_kubelet(&misplaced);
                    let next = NodeConditions {
                        active: cycle.conditions.clone(),
                        ended: cycle.ended_conditions.clone(),
                        misplaced: Some(misplaced),
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
                LoopReport::Settled { settled, .. } => self.settled(settled.as_ref().clone()),
            }
        }
    }

    /// A Warning on the Node when a threshold comes out of its place beside
    /// the kubelet that was not out of it in what the Node was last told
    /// (once per change, not per cycle; values that move with the
    /// threshold's level are not a change).
    fn beside_kubelet(&self, misplaced: &[(String, String)]) {
        let subject = |text: &str| text.split(" < ").next().unwrap_or(text).to_owned();
        let before: Vec<(String, String)> = (self.conditions.borrow().iter())
            .flat_map(|shown| shown.misplaced.iter().flatten())
            .map(|(reason, text)| (reason.clone(), subject(text)))
            .collect();
        for (reason, text) in misplaced {
            if !before.contains(&(reason.clone(), subject(text))) {
                self.publish(self.node.clone(), EventType::Warning, reason, text.clone());
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
                let note = format!("{}: {}; {}", v.strategy, v.reason, v.why.words(&v.strategy));
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
            // The API server refuses a note over 1 KiB.
            note: Some(crate::base::text::bounded(&note, 1024)),
            action: "Evict".into(),
            secondary: None,
        };
        self.events.send(regarding, event);
    }
}

/// What of the conditions the Node shows: names, effects, and which ended.
/// What of the Node's conditions is compared: (name, effects) of each
/// active one, the ended ones, and the thresholds out of place.
type Shown<'a> = (
    Vec<(&'a str, &'a [String])>,
    &'a [String],
    Option<&'a [(String, String)]>,
);

fn shown(conditions: &NodeConditions) -> Shown<'_> {
    let active = conditions
        .active
        .iter()
        .map(|c| (c.name.as_str(), c.effects.as_slice()))
        .collect();
    (active, &conditions.ended, conditions.misplaced.as_deref())
}

/// A reference to the Node `node`, for its Events.
pub(crate) fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_owned()),
        ..ObjectReference::default()
    }
}

/// A recorder of Events reporting as `vigil` on `node`, and a reference
/// to that Node.
pub(crate) fn node_recorder(client: Client, node: &str) -> (Recorder, ObjectReference) {
    let reporter = Reporter {
        controller: "vigil".into(),
        instance: Some(node.to_owned()),
    };
    (Recorder::new(client, reporter), node_reference(node))
}
