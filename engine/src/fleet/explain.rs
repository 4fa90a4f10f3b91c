//! Why a pod was evicted, from the `VigilNodeStatus` objects: each node
//! keeps its last evictions with what decided them (the strategy and its
//! version, the threshold that held, the sorter, its version and the pod's
//! rank). What `vigil explain NAMESPACE/NAME` prints.

use super::activity::LAST_EVICTIONS;
use super::kinds::VigilNodeStatus;
use std::fmt::Write as _;

/// Every eviction call about `pod` (`NAMESPACE/NAME`) the nodes in
/// `statuses` still keep, oldest first, in words; or why none is found.
pub(crate) fn explain(pod: &str, statuses: &[VigilNodeStatus]) -> String {
    let mut found: Vec<(&str, &super::kinds::Eviction)> = statuses
        .iter()
        .filter_map(|o| Some((o.spec.node.as_str(), o.status.as_ref()?)))
        .flat_map(|(node, s)| s.last_evictions.iter().map(move |e| (node, e)))
        .filter(|(_, e)| e.pod == pod)
        .collect();
    found.sort_by_key(|(_, e)| e.time.0);
    if found.is_empty() {
        return format!(
            "{pod}: no node's last {LAST_EVICTIONS} eviction calls name it (its Events say more while they last: \
             kubectl get events -n {} --field-selector involvedObject.name={})\n",
            pod.split('/').next().unwrap_or_default(),
            pod.rsplit('/').next().unwrap_or_default()
        );
    }
    let mut text = String::new();
    for (node, e) in found {
        let _ = write!(
            text,
            "{pod} on {node} at {}: {} ({} eviction by {}: {})",
            e.time.0, e.result, e.urgency, e.strategy, e.reason
        );
        if let Some(message) = &e.message {
            let _ = write!(text, ", {message}");
        }
        let _ = writeln!(text);
        if let Some(why) = &e.why {
            let _ = writeln!(text, "  {why}");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::activity::time;
    use crate::fleet::kinds::{ConfigState, Eviction, NodeView, VigilNodeStatusSpec};
    use std::time::{Duration, SystemTime};

    fn node(name: &str, evictions: Vec<Eviction>) -> VigilNodeStatus {
        let spec = VigilNodeStatusSpec { node: name.into() };
        let mut object = VigilNodeStatus::new(name, spec);
        object.status = Some(NodeView {
            agent: None,
            mode: None,
            config: ConfigState {
                state: "Active".into(),
                message: String::new(),
                assigned: None,
                active: None,
                last_known_good: None,
                trial_end: None,
                last_error: None,
            },
            conditions: Vec::new(),
            beside_kubelet: Vec::new(),
            last_evictions: evictions,
            last_eviction_time: None,
            evictions: Default::default(),
            policies: None,
        });
        object
    }

    fn eviction(pod: &str, result: &str, second: u64, why: Option<&str>) -> Eviction {
        Eviction {
            pod: pod.into(),
            strategy: "memory-pressure".into(),
            urgency: "hard".into(),
            reason: "largest usage".into(),
            result: result.into(),
            message: (result == "refused").then(|| "budget shop/web allows 0".into()),
            time: time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + second)),
            why: why.map(str::to_owned),
        }
    }

    #[test]
    fn each_call_about_the_pod_is_told_oldest_first_with_why() {
        let statuses = [
            node(
                "n2",
                vec![eviction(
                    "shop/big",
                    "accepted",
                    20,
                    Some("chosen by memory-pressure@0123456789ab"),
                )],
            ),
            node(
                "n1",
                vec![
                    eviction("shop/big", "refused", 10, None),
                    eviction("shop/other", "accepted", 5, None),
                ],
            ),
        ];
        let text = explain("shop/big", &statuses);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("shop/big on n1 at 2027-01-15T08:00:10Z: refused (hard eviction by memory-pressure: largest usage), budget shop/web allows 0"), "{text}");
        assert!(
            lines[1].starts_with("shop/big on n2 at 2027-01-15T08:00:20Z: accepted"),
            "{text}"
        );
        assert_eq!(lines[2], "  chosen by memory-pressure@0123456789ab");
        let none = explain("shop/gone", &statuses);
        assert!(
            none.starts_with("shop/gone: no node's last 10 eviction calls name it"),
            "{none}"
        );
        assert!(
            none.contains("kubectl get events -n shop --field-selector involvedObject.name=gone"),
            "{none}"
        );
    }
}
