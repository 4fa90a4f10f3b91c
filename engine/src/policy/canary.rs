//! The canary: before a new version is swapped in, it is called once on a
//! sample input of its world. A fault there (trap, deadline, memory, invalid
//! answer) keeps the version out; a refusal (`err`) is an answer and passes.

use super::bindings::{
    Candidate, KeyValue, Layer, MetLevel, Pod, QosClass, Resources, Signal, Snapshot, Usage,
};
use super::{Fault, Policy, World};

const MIB: u64 = 1 << 20;

fn pod(name: &str, qos: QosClass, priority: i32, usage_mib: u64, request_mib: u64) -> Pod {
    Pod {
        labels: vec![KeyValue {
            key: "app".into(),
            value: name.into(),
        }],
        owner_kind: Some("ReplicaSet".into()),
        ..policy_kit::pod!(name, qos, priority: priority, usage_mib: usage_mib, request_mib: request_mib)
    }
}

/// A small node under memory pressure with pods of every QoS class.
pub(crate) fn snapshot(config: String) -> Snapshot {
    Snapshot {
        now_ms: 1_700_000_000_000,
        signals: vec![
            Signal {
                name: "memory.available".into(),
                value: (64 * MIB) as f64,
                capacity: Some((4096 * MIB) as f64),
            },
            Signal {
                name: "psi.memory.some.avg10".into(),
                value: 12.5,
                capacity: Some(100.0),
            },
        ],
        pods: vec![
            pod("best-effort", QosClass::BestEffort, 0, 300, 0),
            pod("burstable", QosClass::Burstable, 0, 500, 256),
            pod("guaranteed", QosClass::Guaranteed, 1000, 200, 256),
        ],
        last_met: MetLevel::NotMet,
        config,
    }
}

/// Calls `policy` once on its world's sample input with `config`.
///
/// # Errors
/// The fault the call raised.
pub(crate) fn run(policy: &Policy, config: &str) -> Result<(), Fault> {
    match policy.world() {
        World::EvictionStrategy => {
            let snapshot = snapshot(config.to_owned());
            if let Ok(decision) = policy.evaluate(&snapshot)? {
                policy
                    .top_victims(&snapshot, &decision.threshold.scope, 2)?
                    .ok();
            }
        }
        World::CandidateSorter => {
            let candidates: Vec<Candidate> = snapshot(String::new())
                .pods
                .into_iter()
                .map(|pod| Candidate {
                    pod,
                    strategy: "canary".into(),
                    reason: "canary".into(),
                })
                .collect();
            policy.sort(&candidates, config)?.ok();
        }
        World::ConfigMerger => {
            let layers = [
                Layer {
                    source: "canary-defaults".into(),
                    json: "{}".into(),
                },
                Layer {
                    source: "canary-overlay".into(),
                    json: "{}".into(),
                },
            ];
            policy.merge(&layers)?.ok();
        }
    }
    Ok(())
}
