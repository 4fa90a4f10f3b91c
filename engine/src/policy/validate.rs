//! Checks a policy's answer against the contract before the core acts on it.
//! A policy that breaks the contract has faulted, exactly as if it trapped.

use super::Fault;
use super::bindings::{Decision, Eviction, Snapshot, Sorted};
use std::collections::HashSet;

fn invalid(message: String) -> Result<(), Fault> {
    Err(Fault::InvalidAnswer(message))
}

/// Every pod an answer names must be in the snapshot, and only once per list.
fn offered(snapshot: &Snapshot, what: &str, evictions: &[Eviction]) -> Result<(), Fault> {
    let pods: HashSet<&str> = snapshot.pods.iter().map(|p| p.uid.as_str()).collect();
    let mut seen = HashSet::with_capacity(evictions.len());
    for eviction in evictions {
        if !pods.contains(eviction.uid.as_str()) {
            return invalid(format!(
                "{what} names pod {:?}, which was not offered",
                eviction.uid
            ));
        }
        if !seen.insert(eviction.uid.as_str()) {
            return invalid(format!("{what} names pod {:?} twice", eviction.uid));
        }
    }
    Ok(())
}

/// Checks a strategy's decision against the snapshot it was given.
pub(crate) fn decision(snapshot: &Snapshot, decision: &Decision) -> Result<(), Fault> {
    let threshold = &decision.threshold;
    if !threshold.observed.is_finite() || !threshold.threshold.is_finite() {
        return invalid(format!(
            "threshold values must be finite (observed {}, threshold {})",
            threshold.observed, threshold.threshold
        ));
    }
    offered(snapshot, "soft-candidates", &decision.soft_candidates)?;
    offered(snapshot, "force-evictions", &decision.force_evictions)
}

/// Checks a strategy's top victims: at most `n`, each offered, none repeated.
pub(crate) fn victims(snapshot: &Snapshot, n: u32, victims: &[Eviction]) -> Result<(), Fault> {
    if victims.len() > n as usize {
        return invalid(format!(
            "asked for at most {n} victims, got {}",
            victims.len()
        ));
    }
    offered(snapshot, "top-victims", victims)
}

/// Checks that a sorter placed each of `count` candidates exactly once.
pub(crate) fn sorted(count: usize, sorted: &Sorted) -> Result<(), Fault> {
    let mut placed = vec![false; count];
    let indices = sorted
        .order
        .iter()
        .chain(sorted.rejected.iter().map(|r| &r.index));
    for &index in indices {
        match placed.get_mut(index as usize) {
            None => {
                return invalid(format!(
                    "index {index} is out of range for {count} candidates"
                ));
            }
            Some(true) => return invalid(format!("index {index} is placed twice")),
            Some(slot) => *slot = true,
        }
    }
    match placed.iter().position(|p| !p) {
        Some(missing) => invalid(format!(
            "candidate {missing} is neither ordered nor rejected"
        )),
        None => Ok(()),
    }
}

/// Parses a merger's result, which must be a JSON object.
pub(crate) fn merged(json: &str) -> Result<serde_json::Map<String, serde_json::Value>, Fault> {
    match serde_json::from_str(json) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(Fault::InvalidAnswer(
            "merged config is not a JSON object".into(),
        )),
        Err(e) => Err(Fault::InvalidAnswer(format!(
            "merged config is not JSON: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::bindings::SortRejection;
    use crate::policy::canary;

    fn sorted_of(order: &[u32], rejected: &[u32]) -> Sorted {
        Sorted {
            order: order.to_vec(),
            rejected: rejected
                .iter()
                .map(|&index| SortRejection {
                    index,
                    reason: "no".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_sorter_must_place_every_candidate_exactly_once() {
        assert!(sorted(3, &sorted_of(&[2, 0], &[1])).is_ok());
        let message = |s: Sorted| match sorted(3, &s) {
            Err(Fault::InvalidAnswer(m)) => m,
            other => panic!("expected an invalid answer, got {other:?}"),
        };
        assert_eq!(
            message(sorted_of(&[0, 3], &[1])),
            "index 3 is out of range for 3 candidates"
        );
        assert_eq!(message(sorted_of(&[0, 1], &[1])), "index 1 is placed twice");
        assert_eq!(
            message(sorted_of(&[0, 2], &[])),
            "candidate 1 is neither ordered nor rejected"
        );
    }

    #[test]
    fn a_strategy_may_only_name_offered_pods_once() {
        let snapshot = canary::snapshot("{}".into());
        let eviction = |uid: &str| Eviction {
            uid: uid.into(),
            reason: "r".into(),
            grace_period_seconds: None,
        };
        let known = snapshot.pods[0].uid.clone();
        assert!(victims(&snapshot, 1, &[eviction(&known)]).is_ok());
        assert!(victims(&snapshot, 0, &[eviction(&known)]).is_err());
        assert!(victims(&snapshot, 2, &[eviction(&known), eviction(&known)]).is_err());
        assert!(victims(&snapshot, 1, &[eviction("stranger")]).is_err());
    }

    #[test]
    fn merged_config_must_be_an_object() {
        assert!(merged(r#"{"a":1}"#).is_ok());
        assert!(merged("[1]").is_err());
        assert!(merged("{").is_err());
    }
}
