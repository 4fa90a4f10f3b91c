//! The canary: before a new version is swapped in, it is called once on a
//! sample input of its world. A fault there (trap, deadline, memory, invalid
//! answer) keeps the version out; a refusal (`err`) is an answer and passes.

use crate::model::bindings::{
    Candidate, KeyValue, Layer, OwnerKind, Pod, QosClass, Signal, Snapshot, Urgency,
};
use crate::model::fixture;
use crate::policy::{Fault, Policy};

const MIB: u64 = 1 << 20;

/// A sample pod of the canary's node: the fixture's, with what a running
/// pod of a ReplicaSet carries (a label, cpu, processes, a start time).
fn pod(name: &str, qos: QosClass, priority: i32, usage_mib: u64, request_mib: u64) -> Pod {
    let mut pod = fixture::pod(name)
        .qos(qos)
        .priority(priority)
        .usage_mib(usage_mib)
        .request_mib(request_mib)
        .build();
    pod.labels = vec![KeyValue {
        key: "app".into(),
        value: name.into(),
    }];
    pod.requests.cpu_millis = 100;
    pod.usage.cpu_millis = Some(50);
    pod.usage.pids = Some(3);
    pod.start_time_ms = 1_699_999_000_000;
    pod.owner_kind = Some(OwnerKind::ReplicaSet);
    pod
}

/// A small node under memory pressure (and no other) with pods of every QoS
/// class, and every kind of signal the agent reads, so a strategy declines
/// only for a reason of its own.
pub(crate) fn snapshot(config: String) -> Snapshot {
    const GIB: u64 = 1 << 30;
    let signal = |name: &str, value: u64, capacity: u64| Signal {
        name: name.into(),
        value: value as f64,
        capacity: Some(capacity as f64),
    };
    Snapshot {
        now_ms: 1_700_000_000_000,
        signals: vec![
            signal("memory.available", 64 * MIB, 4096 * MIB),
            signal("allocatable.memory.available", 32 * MIB, 3584 * MIB),
            signal("nodefs.available", 60 * GIB, 100 * GIB),
            signal("nodefs.inodesFree", 5_000_000, 6_000_000),
            signal("imagefs.available", 60 * GIB, 100 * GIB),
            signal("imagefs.inodesFree", 5_000_000, 6_000_000),
            signal("pid.available", 30_000, 32_768),
            Signal {
                name: "psi.memory.some.avg10".into(),
                value: 12.5,
                capacity: Some(100.0),
            },
            signal("psi.memory.full.avg10", 3, 100),
            signal("psi.cpu.some.avg10", 5, 100),
            signal("psi.io.some.avg10", 1, 100),
        ],
        pods: vec![
            pod("best-effort", QosClass::BestEffort, 0, 300, 0),
            pod("burstable", QosClass::Burstable, 0, 500, 256),
            pod("guaranteed", QosClass::Guaranteed, 1000, 200, 256),
        ],
        last_met: Vec::new(),
        config,
        state: Vec::new(),
    }
}

/// Calls `policy` once on its world's sample input with `config`, and
/// says whether it declined (the WIT `result`'s `err`), and why.
///
/// # Errors
/// The fault the call raised.
pub(crate) fn run(policy: &Policy, config: &str) -> Result<Option<String>, Fault> {
    if let Some(strategy) = policy.as_strategy() {
        let mut snapshot = snapshot(config.to_owned());
        let decision = match strategy.evaluate(&mut snapshot)? {
            Ok(decision) => decision,
            Err(declined) => return Ok(Some(declined)),
        };
        // Each scope it reported is asked for victims.
        for scope in decision.thresholds.into_iter().map(|t| t.scope) {
            if let Err(declined) = strategy.top_victims(&mut snapshot, &scope, 2)? {
                return Ok(Some(declined));
            }
        }
        Ok(None)
    } else if let Some(sorter) = policy.as_sorter() {
        let urgencies = [Urgency::Hard, Urgency::Force, Urgency::Soft];
        let mut candidates: Vec<Candidate> = snapshot(String::new())
            .pods
            .into_iter()
            .zip(urgencies)
            .map(|(pod, urgency)| Candidate {
                pod,
                strategy: 0,
                urgency,
            })
            .collect();
        Ok(sorter
            .sort(&["canary".into()], &mut candidates, config)?
            .err())
    } else if let Some(merger) = policy.as_merger() {
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
        Ok(merger
            .merge(&layers)?
            .err()
            .map(|rejections| crate::model::Rejections(rejections).to_string()))
    } else {
        Ok(None)
    }
}
