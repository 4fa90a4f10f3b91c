//! Test guest: policies built from the contract before the current one,
//! `vigil:policy@0.2.0` (`wit/0.2.0/`), as their authors wrote them before
//! 0.3.0 — one threshold per decision, `last-met` one level, no state, usage
//! values that are plain numbers. The host must serve them through its
//! adapter. One world per build, chosen by a cargo feature:
//!
//! - `strategy`: hard when `memory.available` is under a tenth of capacity
//!   (`MemoryPressure`, `NoSchedule`), and, once hard, until it is back over
//!   a fifth (it reads `last-met`); it declares the label `tier` and judges
//!   from signals only; ranks the pods labelled `tier: batch` first, then
//!   the others by working set, largest first (0 for a pod whose usage the
//!   host could not read, as a 0.2.0 agent said), and logs what it saw
//!   through the 0.2.0 `log`;
//! - `sorter`: declares the label `legacy.vigil.dev/keep` and refuses the
//!   pods carrying it, saying which strategy proposed them and how urgently;
//!   orders the rest by name, last first.

#[cfg(feature = "strategy")]
mod strategy {
    /// Bindings generated from the 0.2.0 `eviction-strategy` world.
    #[allow(missing_docs)]
    pub mod bindings {
        wit_bindgen::generate!({ path: "../../../wit/0.2.0", world: "eviction-strategy" });
    }

    use bindings::exports::vigil::policy::strategy::{
        Condition, Decision, Eviction, Guest, MetLevel, Snapshot, StrategyInterest, Threshold,
    };
    use bindings::vigil::policy::log::{Level, log};
    use bindings::vigil::policy::types::{Interest, Pod};

    fn batch(pod: &Pod) -> bool {
        pod.labels
            .iter()
            .any(|kv| kv.key == "tier" && kv.value == "batch")
    }

    /// The strategy; exported only when built as a component.
    pub struct Strategy02;

    impl Guest for Strategy02 {
        fn declare_interest(_config: String) -> StrategyInterest {
            StrategyInterest {
                keys: Interest {
                    labels: vec!["tier".into()],
                    annotations: vec![],
                },
                pods_in_evaluate: false,
            }
        }

        fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
            let memory = snapshot
                .signals
                .iter()
                .find(|s| s.name == "memory.available")
                .ok_or("no memory.available signal")?;
            let capacity = memory.capacity.unwrap_or(f64::MAX);
            let line = match snapshot.last_met {
                MetLevel::Hard => capacity / 5.0,
                _ => capacity / 10.0,
            };
            let hard = memory.value < line;
            log(
                Level::Info,
                &format!("0.2.0 strategy saw {} signals", snapshot.signals.len()),
            );
            Ok(Decision {
                threshold: Threshold {
                    met: if hard {
                        MetLevel::Hard
                    } else {
                        MetLevel::NotMet
                    },
                    scope: "memory".into(),
                    signal: memory.name.clone(),
                    observed: memory.value,
                    threshold: line,
                    grace_period_seconds: 0,
                    condition: Some(Condition {
                        name: "MemoryPressure".into(),
                        effects: vec!["NoSchedule".into()],
                    }),
                },
                soft_candidates: vec![],
                force_evictions: vec![],
            })
        }

        fn top_victims(
            snapshot: Snapshot,
            _scope: String,
            n: u32,
        ) -> Result<Vec<Eviction>, String> {
            let mut ranked: Vec<&Pod> = snapshot.pods.iter().collect();
            ranked.sort_by(|a, b| {
                batch(b).cmp(&batch(a)).then(
                    b.usage
                        .memory_working_set_bytes
                        .cmp(&a.usage.memory_working_set_bytes),
                )
            });
            Ok(ranked
                .into_iter()
                .take(n as usize)
                .map(|p| Eviction {
                    uid: p.uid.clone(),
                    reason: format!(
                        "working set {} bytes{}",
                        p.usage.memory_working_set_bytes,
                        if batch(p) { ", batch" } else { "" }
                    ),
                    grace_period_seconds: None,
                })
                .collect())
        }
    }

    bindings::export!(Strategy02 with_types_in bindings);
}

#[cfg(feature = "sorter")]
mod sorter {
    /// Bindings generated from the 0.2.0 `candidate-sorter` world.
    #[allow(missing_docs)]
    pub mod bindings {
        wit_bindgen::generate!({ path: "../../../wit/0.2.0", world: "candidate-sorter" });
    }

    use bindings::exports::vigil::policy::sorter::{Candidate, Guest, Rejection, Sorted, Urgency};
    use bindings::vigil::policy::types::Interest;

    /// The sorter; exported only when built as a component.
    pub struct Sorter02;

    impl Guest for Sorter02 {
        fn declare_interest(_config: String) -> Interest {
            Interest {
                labels: vec!["legacy.vigil.dev/keep".into()],
                annotations: vec![],
            }
        }

        fn sort(
            strategies: Vec<String>,
            candidates: Vec<Candidate>,
            _config: String,
        ) -> Result<Sorted, String> {
            let mut order = Vec::new();
            let mut rejected = Vec::new();
            for (index, c) in (0u32..).zip(&candidates) {
                if c.pod
                    .labels
                    .iter()
                    .any(|kv| kv.key == "legacy.vigil.dev/keep")
                {
                    let urgency = match c.urgency {
                        Urgency::Hard => "hard",
                        Urgency::Force => "force",
                        Urgency::Soft => "soft",
                    };
                    let by = strategies.get(c.strategy as usize).map_or("?", |s| s);
                    rejected.push(Rejection {
                        index,
                        reason: format!("kept: {by} proposed it ({urgency})"),
                    });
                } else {
                    order.push(index);
                }
            }
            order.sort_by(|&a, &b| {
                candidates[b as usize]
                    .pod
                    .name
                    .cmp(&candidates[a as usize].pod.name)
            });
            Ok(Sorted { order, rejected })
        }
    }

    bindings::export!(Sorter02 with_types_in bindings);
}
