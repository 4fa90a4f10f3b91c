//! __NAME__: a candidate sorter for vigil.
//!
//! Refuses static, mirror and system-critical pods; orders the rest by
//! memory used, most first, then by UID. vigil evicts in this order: under a
//! threshold it gives the strategy's ranking and evicts the first pod of
//! yours. Make it yours: change `evict_first`, read your settings from
//! `config` (JSON, `policies.__NAME__.config`) and answer `Err` when they are
//! wrong; declare the labels and annotations you read.

wit_bindgen::generate!({ path: "wit", world: "candidate-sorter" });

use exports::vigil::policy::sorter::{Candidate, Guest, Rejection, Sorted};
use vigil::policy::types::{Interest, Pod};

/// Why `pod` must not be evicted, if it must not.
fn refusal(pod: &Pod) -> Option<&'static str> {
    if pod.is_static {
        Some("static pod")
    } else if pod.is_mirror {
        Some("mirror pod")
    } else if pod.is_critical {
        Some("system-critical pod")
    } else {
        None
    }
}

/// The eviction order: the pod with the larger key goes first, ties by UID.
/// Here the pod using the most memory; newest first would be
/// `pod.start_time_ms.into()`.
fn evict_first(pod: &Pod) -> i128 {
    // A usage the host could not read is absent: 0 here.
    pod.usage.memory_working_set_bytes.unwrap_or(0).into()
}

struct Policy;

impl Guest for Policy {
    fn declare_interest(_config: String) -> Interest {
        Interest {
            labels: vec![],
            annotations: vec![],
            facts: Vec::new(),
        }
    }

    fn sort(
        _strategies: Vec<String>,
        candidates: Vec<Candidate>,
        _config: String,
    ) -> Result<Sorted, String> {
        let (mut order, mut rejected) = (vec![], vec![]);
        for (index, candidate) in (0u32..).zip(&candidates) {
            match refusal(&candidate.pod) {
                Some(reason) => rejected.push(Rejection {
                    index,
                    reason: reason.into(),
                }),
                None => order.push(index),
            }
        }
        order.sort_by(|&a, &b| {
            let (a, b) = (&candidates[a as usize].pod, &candidates[b as usize].pod);
            evict_first(b)
                .cmp(&evict_first(a))
                .then_with(|| a.uid.cmp(&b.uid))
        });
        Ok(Sorted { order, rejected })
    }
}

export!(Policy);
