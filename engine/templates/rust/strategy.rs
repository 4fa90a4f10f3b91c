//! __NAME__: an eviction strategy for vigil.
//!
//! The threshold is met (hard) while `memory.available` is below a tenth of
//! the node's memory; the victims are the pods using the most memory. Make it
//! yours: read your settings from `config` (JSON, `policies.__NAME__.config`),
//! answer `Err` when they are wrong or a signal is missing.

wit_bindgen::generate!({ path: "wit", world: "eviction-strategy" });

use exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, Guest, MetLevel, Snapshot, StrategyInterest, Threshold,
};
use vigil::policy::types::Interest;

const SIGNAL: &str = "memory.available";
const SCOPE: &str = "memory";

struct Policy;

impl Guest for Policy {
    fn declare_interest(_config: String) -> StrategyInterest {
        // No labels, annotations or pod facts read; `evaluate` judges the
        // kubelet's signals only (name others in `signals` to get them).
        StrategyInterest {
            keys: Interest {
                labels: vec![],
                annotations: vec![],
                facts: Vec::new(),
            },
            pods_in_evaluate: false,
            signals: vec![],
        }
    }

    fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
        let signal = snapshot
            .signals
            .iter()
            .find(|s| s.name == SIGNAL)
            .ok_or(format!("{SIGNAL} is missing"))?;
        let capacity = signal.capacity.ok_or(format!("{SIGNAL} has no capacity"))?;
        let threshold = capacity / 10.0;
        let met = if signal.value < threshold {
            MetLevel::Hard
        } else {
            MetLevel::NotMet
        };
        let condition = (met == MetLevel::Hard).then(|| Condition {
            name: "MemoryPressure".into(),
            effects: vec!["NoSchedule".into()],
        });
        Ok(Decision {
            thresholds: vec![Threshold {
                met,
                scope: SCOPE.into(),
                signal: SIGNAL.into(),
                observed: signal.value,
                threshold,
                grace_period_seconds: 0,
                condition,
            }],
            soft_candidates: vec![],
            force_evictions: vec![],
            state: None,
        })
    }

    fn top_victims(snapshot: Snapshot, scope: String, n: u32) -> Result<Vec<Eviction>, String> {
        if scope != SCOPE {
            return Err(format!("unknown scope {scope}"));
        }
        let mut pods = snapshot.pods;
        pods.sort_by(|a, b| {
            // A usage the host could not read is absent: ranked as 0 here.
            let used = |p: &vigil::policy::types::Pod| p.usage.memory_working_set_bytes.unwrap_or(0);
            let (a_used, b_used) = (used(a), used(b));
            b_used.cmp(&a_used).then_with(|| a.uid.cmp(&b.uid))
        });
        Ok(pods
            .into_iter()
            .take(n as usize)
            .map(|pod| Eviction {
                reason: format!(
                    "uses {} MiB of memory",
                    pod.usage.memory_working_set_bytes.unwrap_or(0) >> 20
                ),
                uid: pod.uid,
                grace_period_seconds: None,
            })
            .collect())
    }
}

export!(Policy);
