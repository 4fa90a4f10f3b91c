//! Pressure on the Node object: vigil's own condition types
//! (`VigilMemoryPressure`, … — the kubelet owns `MemoryPressure` and would
//! overwrite ours) by server-side apply on `nodes/status` with field manager
//! `vigil`, and taints `vigil.dev/<condition>` with the effects the strategy
//! asked for, by read-modify-write with a resourceVersion precondition
//! (taints are one atomic list: a conflict means someone else wrote it, so
//! read again). Taints vigil did not add are never touched. The
//! `VigilConfigOK` condition, which config runs and why, is applied by its
//! own field manager.
//!
//! What vigil writes heals itself: every apply lists exactly the conditions
//! the loop reports (holding: `True`; ended while their strategy runs:
//! `False`), so server-side apply removes any other condition this field
//! manager wrote — a condition no strategy reports any more, or a `True`
//! left by a process that crashed under pressure. Taints are re-derived the
//! same way from what holds now. A holding condition's heartbeat is
//! refreshed every [`NodeStatus::heartbeat`], so a stale `True` shows as stale.

use super::latest::LatestWriter;
use crate::config::assignment::Status;
use crate::eviction::ActiveCondition;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use std::collections::BTreeMap;

/// The field manager of everything vigil applies.
pub(crate) const FIELD_MANAGER: &str = "vigil";
/// The prefix of every taint key vigil owns.
pub(crate) const TAINT_PREFIX: &str = "vigil.dev/";
/// Attempts at a taint update that keeps losing to concurrent writers.
const TAINT_ATTEMPTS: usize = 5;
/// How often a holding condition's heartbeat is refreshed, by default.
pub(crate) const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(60);

/// What the Node should show, as the eviction loop last decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct NodeConditions {
    /// Conditions that hold: `True`, with their taints.
    pub active: Vec<ActiveCondition>,
    /// Conditions that ended and whose strategy still runs: `False`.
    pub ended: Vec<String>,
    /// Thresholds out of their place beside the kubelet, each its reason
    /// (`BehindKubelet`, `BeforeImageGC`) and description (empty:
    /// [`BESIDE_KUBELET`] holds); `None`: not judged, no such condition
    /// (what an uninstall applies).
    pub misplaced: Option<Vec<(String, String)>>,
}

/// The condition type saying whether every threshold on a signal the
/// kubelet also watches sits ahead of the kubelet's (and behind its image
/// garbage collection): `True`, or `False` naming those that do not.
pub(crate) const BESIDE_KUBELET: &str = "VigilAheadOfKubelet";

/// The [`BESIDE_KUBELET`] condition for `misplaced`: (holds, reason, message).
fn beside_kubelet(misplaced: &[(String, String)]) -> (bool, &str, String) {
    match misplaced.first() {
        None => (
            true,
            "AheadOfKubelet",
            "every threshold on a signal the kubelet watches is ahead of the kubelet's".into(),
        ),
        Some((reason, _)) => {
            let all: Vec<&str> = misplaced.iter().map(|(_, text)| text.as_str()).collect();
            (
                false,
                reason,
                crate::base::text::bounded(&all.join("; "), 1024),
            )
        }
    }
}

/// The node condition type for a strategy's condition name.
pub(crate) fn condition_type(name: &str) -> String {
    if name.starts_with("Vigil") {
        name.to_owned()
    } else {
        format!("Vigil{name}")
    }
}

/// The taint key for a strategy's condition name.
pub(crate) fn taint_key(name: &str) -> String {
    format!(
        "{TAINT_PREFIX}{}",
        name.strip_prefix("Vigil").unwrap_or(name)
    )
}

/// Writes this node's conditions and taints.
pub(crate) struct NodeStatus {
    api: Api<Node>,
    node: String,
    /// Every condition type written by this process, with whether it holds
    /// and since when (its last transition).
    written: BTreeMap<String, (bool, jiff::Timestamp)>,
    heartbeat: std::time::Duration,
}

impl NodeStatus {
    /// A writer for the Node `node`.
    pub(crate) fn new(client: Client, node: &str) -> Self {
        Self {
            api: Api::all(client),
            node: node.to_owned(),
            written: BTreeMap::new(),
            heartbeat: HEARTBEAT,
        }
    }

    /// The same writer refreshing holding conditions every `heartbeat`.
    pub(crate) fn with_heartbeat(mut self, heartbeat: std::time::Duration) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// How often a holding condition is written again.
    pub(crate) fn heartbeat(&self) -> std::time::Duration {
        self.heartbeat
    }

    /// Makes the Node show exactly `conditions`: each active one as a `True`
    /// condition and a taint per effect, each ended one as `False`; any
    /// other condition or taint vigil wrote before is removed.
    ///
    /// # Errors
    /// The API server refused or could not be reached; call again later.
    pub(crate) async fn publish(&mut self, conditions: &NodeConditions) -> Result<(), kube::Error> {
        self.apply_conditions(conditions).await?;
        self.update_taints(&conditions.active).await
    }

    async fn apply_conditions(&mut self, shown: &NodeConditions) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let mut next = BTreeMap::new();
        for name in &shown.ended {
            next.insert(condition_type(name), (false, now));
        }
        for condition in &shown.active {
            next.insert(condition_type(&condition.name), (true, now));
        }
        let beside = shown.misplaced.as_deref().map(beside_kubelet);
        if let Some((ahead, _, _)) = &beside {
            next.insert(BESIDE_KUBELET.to_owned(), (*ahead, now));
        }
        for (kind, (holds, since)) in next.iter_mut() {
            match self.written.get(kind) {
                Some((before, then)) if before == holds => *since = *then,
                _ => *since = now,
            }
        }
        let conditions: Vec<serde_json::Value> = next
            .iter()
            .map(|(kind, (holds, since))| {
                let (reason, message) = if let Some((_, reason, message)) =
                    beside.as_ref().filter(|_| kind == BESIDE_KUBELET)
                {
                    (*reason, message.as_str())
                } else if *holds {
                    (
                        "PressureObserved",
                        "vigil observes this pressure on the node",
                    )
                } else {
                    ("NoPressure", "vigil observes no such pressure")
                };
                serde_json::json!({
                    "type": kind,
                    "status": if *holds { "True" } else { "False" },
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": Time(now),
                    "lastTransitionTime": Time(*since),
                })
            })
            .collect();
        apply_conditions(&self.api, &self.node, FIELD_MANAGER, conditions).await?;
        self.written = next;
        Ok(())
    }

    async fn update_taints(&self, active: &[ActiveCondition]) -> Result<(), kube::Error> {
        let mut last_error = None;
        for _ in 0..TAINT_ATTEMPTS {
            let node = self.api.get(&self.node).await?;
            let current = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            let next = desired_taints(&current, active);
            if same_taints(&current, &next) {
                return Ok(());
            }
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": node.metadata.resource_version},
                "spec": {"taints": next},
            });
            match self
                .api
                .patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!("taints changed meanwhile; reading the node again");
                    last_error = Some(kube::Error::Api(status));
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.expect("every attempt conflicted"))
    }
}

/// The condition type saying which config runs and why.
pub(crate) const CONFIG_CONDITION: &str = "VigilConfigOK";
/// The field manager of [`CONFIG_CONDITION`]: apart from the pressure
/// conditions, so each writer owns exactly its own condition types.
pub(crate) const CONFIG_FIELD_MANAGER: &str = "vigil-config";

/// Writes the `VigilConfigOK` condition of this node.
pub(crate) struct ConfigCondition {
    api: Api<Node>,
    node: String,
    /// Whether the condition held when last written, and since when.
    written: Option<(bool, jiff::Timestamp)>,
}

impl ConfigCondition {
    /// A writer for the Node `node`.
    pub(crate) fn new(client: Client, node: &str) -> Self {
        Self {
            api: Api::all(client),
            node: node.to_owned(),
            written: None,
        }
    }
}

impl LatestWriter<Status> for ConfigCondition {
    async fn write(&mut self, status: &Status) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let holds = status.reason.ok();
        let since = match self.written {
            Some((before, since)) if before == holds => since,
            _ => now,
        };
        let condition = serde_json::json!({
            "type": CONFIG_CONDITION,
            "status": if holds { "True" } else { "False" },
            "reason": status.reason.as_str(),
            "message": status.message,
            "lastHeartbeatTime": Time(now),
            "lastTransitionTime": Time(since),
        });
        apply_conditions(&self.api, &self.node, CONFIG_FIELD_MANAGER, vec![condition]).await?;
        self.written = Some((holds, since));
        Ok(())
    }
}

/// Makes `node` show exactly `conditions` of those `manager` applies: by
/// server-side apply, the conditions it applied before and lists no more are
/// removed (an empty list removes them all).
pub(crate) async fn apply_conditions(
    api: &Api<Node>,
    node: &str,
    manager: &str,
    conditions: Vec<serde_json::Value>,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node},
        "status": {"conditions": conditions},
    });
    let params = PatchParams::apply(manager).force();
    api.patch_status(node, &params, &Patch::Apply(&patch))
        .await?;
    Ok(())
}

/// The taints the node should carry: every taint vigil does not own as it
/// is, then one per active condition and effect (keeping the time a taint
/// already there was added).
fn desired_taints(current: &[Taint], active: &[ActiveCondition]) -> Vec<Taint> {
    let mut next: Vec<Taint> = current
        .iter()
        .filter(|t| !t.key.starts_with(TAINT_PREFIX))
        .cloned()
        .collect();
    for condition in active {
        let key = taint_key(&condition.name);
        for effect in &condition.effects {
            let existing = current.iter().find(|t| t.key == key && &t.effect == effect);
            next.push(existing.cloned().unwrap_or_else(|| Taint {
                key: key.clone(),
                effect: effect.clone(),
                time_added: (effect == "NoExecute").then(|| Time(jiff::Timestamp::now())),
                value: None,
            }));
        }
    }
    next
}

fn same_taints(a: &[Taint], b: &[Taint]) -> bool {
    let keys = |taints: &[Taint]| {
        let mut keys: Vec<(String, String, Option<String>)> = taints
            .iter()
            .map(|t| (t.key.clone(), t.effect.clone(), t.value.clone()))
            .collect();
        keys.sort();
        keys
    };
    keys(a) == keys(b)
}

impl LatestWriter<Option<NodeConditions>> for NodeStatus {
    async fn write(&mut self, value: &Option<NodeConditions>) -> Result<(), kube::Error> {
        match value {
            // Until the first cycle has decided, what the Node shows stays.
            None => Ok(()),
            Some(conditions) => self.publish(conditions).await,
        }
    }

    fn refresh(&self, value: &Option<NodeConditions>) -> Option<std::time::Duration> {
        value
            .as_ref()
            .filter(|c| !c.active.is_empty())
            .map(|_| self.heartbeat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    #[test]
    fn only_vigils_own_taints_change() {
        let current = [
            taint("node.kubernetes.io/memory-pressure", "NoSchedule"),
            taint("vigil.dev/DiskPressure", "NoSchedule"),
            taint("team/dedicated", "NoExecute"),
        ];
        let active = [ActiveCondition {
            name: "MemoryPressure".into(),
            effects: vec!["NoSchedule".into(), "NoExecute".into()],
            last_observed: SystemTime::UNIX_EPOCH,
        }];
        let next = desired_taints(&current, &active);
        let keys: Vec<(&str, &str)> = next
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                ("team/dedicated", "NoExecute"),
                ("vigil.dev/MemoryPressure", "NoSchedule"),
                ("vigil.dev/MemoryPressure", "NoExecute"),
            ]
        );
        assert!(
            next[3].time_added.is_some(),
            "NoExecute taints carry their time"
        );
        assert!(same_taints(&next, &desired_taints(&next, &active)));
        assert_eq!(desired_taints(&next, &[]).len(), 2);
    }

    #[test]
    fn condition_types_and_taint_keys_are_vigils_own() {
        assert_eq!(condition_type("MemoryPressure"), "VigilMemoryPressure");
        assert_eq!(condition_type("VigilPIDPressure"), "VigilPIDPressure");
        assert_eq!(taint_key("VigilDiskPressure"), "vigil.dev/DiskPressure");
        assert_eq!(taint_key("MemoryPressure"), "vigil.dev/MemoryPressure");
    }
}
