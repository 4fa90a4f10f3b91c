//! Test guest: policies built from the previous contract,
//! `vigil:policy@0.1.0` (`wit/0.1.0/`), as their authors wrote them before
//! 0.2.0 — no `declare-interest`, an owner's kind as a string, sorter
//! candidates that name their strategy and reason. The host must serve them
//! through its adapter. One world per build, chosen by a cargo feature:
//!
//! - `strategy`: hard when `memory.available` is under a tenth of capacity
//!   (`MemoryPressure`, `NoSchedule`); proposes the pods of a `Job` as soft
//!   candidates and forces out pods annotated `legacy.vigil.dev/evict-now`;
//!   ranks the pods labelled `tier: batch` first, then the others, each in
//!   the snapshot's order, and logs what it saw through the 0.1.0 `log`;
//! - `sorter`: refuses pods labelled `legacy.vigil.dev/keep`, saying which
//!   strategy proposed them and why; orders the rest by name, last first.
//! - `merger`: the last layer wins whole; a layer that is not a JSON object
//!   (by its first character) is rejected, naming its source.

#[cfg(feature = "strategy")]
mod strategy {
    /// Bindings generated from the 0.1.0 `eviction-strategy` world.
    #[allow(missing_docs)]
    pub mod bindings {
        wit_bindgen::generate!({ path: "../../../wit/0.1.0", world: "eviction-strategy" });
    }

    use bindings::exports::vigil::policy::strategy::{
        Condition, Decision, Eviction, Guest, MetLevel, Snapshot, Threshold,
    };
    use bindings::vigil::policy::log::{Level, log};
    use bindings::vigil::policy::types::Pod;

    fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
        pod.labels
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.as_str())
    }

    fn evict(pod: &Pod, reason: String) -> Eviction {
        Eviction {
            uid: pod.uid.clone(),
            reason,
            grace_period_seconds: None,
        }
    }

    /// The strategy; exported only when built as a component.
    pub struct LegacyStrategy;

    impl Guest for LegacyStrategy {
        fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
            let memory = snapshot
                .signals
                .iter()
                .find(|s| s.name == "memory.available")
                .ok_or("no memory.available signal")?;
            let capacity = memory.capacity.unwrap_or(f64::MAX);
            let hard = memory.value < capacity / 10.0;
            log(
                Level::Info,
                &format!("0.1.0 strategy saw {} pods", snapshot.pods.len()),
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
                    threshold: capacity / 10.0,
                    grace_period_seconds: 0,
                    condition: Some(Condition {
                        name: "MemoryPressure".into(),
                        effects: vec!["NoSchedule".into()],
                    }),
                },
                soft_candidates: snapshot
                    .pods
                    .iter()
                    .filter(|p| p.owner_kind.as_deref() == Some("Job"))
                    .map(|p| evict(p, "a Job's pod".into()))
                    .collect(),
                force_evictions: snapshot
                    .pods
                    .iter()
                    .filter(|p| {
                        p.annotations
                            .iter()
                            .any(|kv| kv.key == "legacy.vigil.dev/evict-now")
                    })
                    .map(|p| evict(p, "asked to by its annotation".into()))
                    .collect(),
            })
        }

        fn top_victims(
            snapshot: Snapshot,
            _scope: String,
            n: u32,
        ) -> Result<Vec<Eviction>, String> {
            let batch = |p: &&Pod| label(p, "tier") == Some("batch");
            let ranked = snapshot
                .pods
                .iter()
                .filter(batch)
                .chain(snapshot.pods.iter().filter(|p| !batch(p)));
            Ok(ranked
                .take(n as usize)
                .map(|p| evict(p, format!("tier {}", label(p, "tier").unwrap_or("none"))))
                .collect())
        }
    }

    bindings::export!(LegacyStrategy with_types_in bindings);
}

#[cfg(feature = "sorter")]
mod sorter {
    /// Bindings generated from the 0.1.0 `candidate-sorter` world.
    #[allow(missing_docs)]
    pub mod bindings {
        wit_bindgen::generate!({ path: "../../../wit/0.1.0", world: "candidate-sorter" });
    }

    use bindings::exports::vigil::policy::sorter::{Candidate, Guest, Rejection, Sorted};

    /// The sorter; exported only when built as a component.
    pub struct LegacySorter;

    impl Guest for LegacySorter {
        fn sort(candidates: Vec<Candidate>, _config: String) -> Result<Sorted, String> {
            let mut order = Vec::new();
            let mut rejected = Vec::new();
            for (index, c) in (0u32..).zip(&candidates) {
                if c.pod
                    .labels
                    .iter()
                    .any(|kv| kv.key == "legacy.vigil.dev/keep")
                {
                    rejected.push(Rejection {
                        index,
                        reason: format!("kept: {} proposed it ({})", c.strategy, c.reason),
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

    bindings::export!(LegacySorter with_types_in bindings);
}

#[cfg(feature = "merger")]
mod merger {
    /// Bindings generated from the 0.1.0 `config-merger` world.
    #[allow(missing_docs)]
    pub mod bindings {
        wit_bindgen::generate!({ path: "../../../wit/0.1.0", world: "config-merger" });
    }

    use bindings::exports::vigil::policy::merger::{Guest, Layer, Rejection};

    /// The merger; exported only when built as a component.
    pub struct LegacyMerger;

    impl Guest for LegacyMerger {
        fn merge(layers: Vec<Layer>) -> Result<String, Vec<Rejection>> {
            let rejected: Vec<Rejection> = layers
                .iter()
                .filter(|l| !l.json.trim_start().starts_with('{'))
                .map(|l| Rejection {
                    source: l.source.clone(),
                    field: "$".into(),
                    reason: "not a JSON object".into(),
                })
                .collect();
            if !rejected.is_empty() {
                return Err(rejected);
            }
            Ok(layers
                .last()
                .map_or_else(|| "{}".into(), |l| l.json.clone()))
        }
    }

    bindings::export!(LegacyMerger with_types_in bindings);
}
