//! Checks a policy's answer against the contract before the core acts on it.
//! A policy that breaks the contract has faulted, exactly as if it trapped.
//!
//! Answers are bounded too, so whatever a guest says costs the host little to
//! keep and print: free text (reasons, declined messages) is cut to a few
//! hundred bytes with control characters escaped ([`crate::base::text`]); names the
//! host acts on (scope, signal, condition, taint effects) must be short and
//! plain, or the answer is invalid; lists are bounded by what was offered.

use crate::base::text;
use crate::model::bindings::{Decision, Eviction, MergeRejection, Snapshot, Sorted, Threshold};
use crate::policy::Fault;
use std::collections::HashSet;

/// Longest reason or declined message kept; longer ones are cut.
pub(crate) const MAX_TEXT: usize = 512;
/// Longest name (scope, signal, condition, taint effect) an answer may use.
const MAX_NAME: usize = 63;
/// Most taint effects a condition may carry.
const MAX_EFFECTS: usize = 3;
/// Most merge rejections kept; the rest are summed up in one.
const MAX_REJECTIONS: usize = 32;
/// Most thresholds (scopes) one decision may report.
pub(crate) const MAX_THRESHOLDS: usize = 64;
/// Most state a strategy may keep between calls.
pub(crate) const MAX_STATE_BYTES: usize = 64 * 1024;
/// Largest merged config accepted.
const MAX_MERGED_BYTES: usize = 1 << 20;

fn invalid(message: String) -> Result<(), Fault> {
    Err(Fault::InvalidAnswer(message))
}

/// A policy's own refusal, made safe to keep and print.
pub(crate) trait Declined {
    /// Cuts and escapes the refusal's text.
    fn bound(&mut self);
}

impl Declined for String {
    fn bound(&mut self) {
        text::bound(self, MAX_TEXT);
    }
}

impl Declined for Vec<MergeRejection> {
    fn bound(&mut self) {
        if self.len() > MAX_REJECTIONS {
            let more = self.len() - MAX_REJECTIONS + 1;
            self.truncate(MAX_REJECTIONS - 1);
            self.push(MergeRejection {
                source: String::new(),
                field: "$".into(),
                reason: format!("… and {more} more rejections, cut"),
            });
        }
        for rejection in self {
            text::bound(&mut rejection.source, MAX_TEXT);
            text::bound(&mut rejection.field, MAX_TEXT);
            text::bound(&mut rejection.reason, MAX_TEXT);
        }
    }
}

/// A name the host acts on: short, and letters, digits, `.`, `-`, `_` only.
fn name(what: &str, value: &str) -> Result<(), Fault> {
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if value.is_empty() || value.len() > MAX_NAME || !plain {
        return invalid(format!(
            "{what} {:?} is not a name (1-{MAX_NAME} letters, digits, '.', '-', '_')",
            text::bounded(value, MAX_NAME)
        ));
    }
    Ok(())
}

/// Every pod an answer names must be in the snapshot, and only once per
/// list; reasons are cut to [`MAX_TEXT`].
fn offered(snapshot: &Snapshot, what: &str, evictions: &mut [Eviction]) -> Result<(), Fault> {
    let pods: HashSet<&str> = snapshot.pods.iter().map(|p| p.uid.as_str()).collect();
    let mut seen = HashSet::with_capacity(evictions.len());
    for eviction in evictions.iter_mut() {
        if !pods.contains(eviction.uid.as_str()) {
            return invalid(format!(
                "{what} names pod {:?}, which was not offered",
                text::bounded(&eviction.uid, MAX_NAME)
            ));
        }
        if !seen.insert(eviction.uid.clone()) {
            return invalid(format!("{what} names pod {:?} twice", eviction.uid));
        }
        text::bound(&mut eviction.reason, MAX_TEXT);
    }
    Ok(())
}

/// Checks a strategy's decision against the snapshot it was given: at most
/// [`MAX_THRESHOLDS`] thresholds, each of its own scope, and at most
/// [`MAX_STATE_BYTES`] of state.
pub(crate) fn decision(snapshot: &Snapshot, decision: &mut Decision) -> Result<(), Fault> {
    if decision.thresholds.len() > MAX_THRESHOLDS {
        return invalid(format!(
            "{} thresholds; at most {MAX_THRESHOLDS} (one per scope)",
            decision.thresholds.len()
        ));
    }
    let mut scopes = HashSet::with_capacity(decision.thresholds.len());
    for threshold in &decision.thresholds {
        self::threshold(threshold)?;
        if !scopes.insert(threshold.scope.as_str()) {
            return invalid(format!("scope {} is reported twice", threshold.scope));
        }
    }
    if let Some(state) = &decision.state
        && state.len() > MAX_STATE_BYTES
    {
        return invalid(format!(
            "state of {} bytes; at most {MAX_STATE_BYTES} are kept",
            state.len()
        ));
    }
    offered(snapshot, "soft-candidates", &mut decision.soft_candidates)?;
    offered(snapshot, "force-evictions", &mut decision.force_evictions)
}

/// Checks one threshold: finite values, plain names, a few taint effects.
fn threshold(threshold: &Threshold) -> Result<(), Fault> {
    if !threshold.observed.is_finite() || !threshold.threshold.is_finite() {
        return invalid(format!(
            "threshold values must be finite (observed {}, threshold {})",
            threshold.observed, threshold.threshold
        ));
    }
    name("scope", &threshold.scope)?;
    name("signal", &threshold.signal)?;
    if let Some(condition) = &threshold.condition {
        name("condition", &condition.name)?;
        if condition.effects.len() > MAX_EFFECTS {
            return invalid(format!(
                "condition {} has {} taint effects; at most {MAX_EFFECTS}",
                condition.name,
                condition.effects.len()
            ));
        }
        for effect in &condition.effects {
            name("taint effect", effect)?;
        }
    }
    Ok(())
}

/// Checks a strategy's top victims: at most `n`, each offered, none repeated.
pub(crate) fn victims(snapshot: &Snapshot, n: u32, victims: &mut [Eviction]) -> Result<(), Fault> {
    if victims.len() > n as usize {
        return invalid(format!(
            "asked for at most {n} victims, got {}",
            victims.len()
        ));
    }
    offered(snapshot, "top-victims", victims)
}

/// Checks that a sorter placed each of `count` candidates exactly once.
pub(crate) fn sorted(count: usize, sorted: &mut Sorted) -> Result<(), Fault> {
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
    if let Some(missing) = placed.iter().position(|p| !p) {
        return invalid(format!(
            "candidate {missing} is neither ordered nor rejected"
        ));
    }
    for rejection in &mut sorted.rejected {
        text::bound(&mut rejection.reason, MAX_TEXT);
    }
    Ok(())
}

/// Parses a merger's result, which must be a JSON object of bounded size.
pub(crate) fn merged(json: &str) -> Result<serde_json::Map<String, serde_json::Value>, Fault> {
    if json.len() > MAX_MERGED_BYTES {
        return Err(Fault::InvalidAnswer(format!(
            "merged config is {} bytes; at most {MAX_MERGED_BYTES}",
            json.len()
        )));
    }
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
    use crate::model::bindings::SortRejection;
    use crate::policy::runtime::canary;

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
        assert!(sorted(3, &mut sorted_of(&[2, 0], &[1])).is_ok());
        let message = |mut s: Sorted| match sorted(3, &mut s) {
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
        assert!(victims(&snapshot, 1, &mut [eviction(&known)]).is_ok());
        assert!(victims(&snapshot, 0, &mut [eviction(&known)]).is_err());
        assert!(victims(&snapshot, 2, &mut [eviction(&known), eviction(&known)]).is_err());
        assert!(victims(&snapshot, 1, &mut [eviction("stranger")]).is_err());
    }

    #[test]
    fn free_text_is_cut_and_escaped() {
        let snapshot = canary::snapshot("{}".into());
        let mut answer = [Eviction {
            uid: snapshot.pods[0].uid.clone(),
            reason: format!("forged\nINFO line {}", "x".repeat(50 << 20)),
            grace_period_seconds: None,
        }];
        victims(&snapshot, 1, &mut answer).unwrap();
        let reason = &answer[0].reason;
        assert!(reason.starts_with("forged\\nINFO line xxx"), "{reason}");
        assert!(reason.len() < MAX_TEXT + 64, "{} bytes kept", reason.len());
        assert!(reason.ends_with("more bytes cut]"));
        let mut sorted = sorted_of(&[], &[0]);
        sorted.rejected[0].reason = "r\u{7}".repeat(MAX_TEXT);
        super::sorted(1, &mut sorted).unwrap();
        assert!(sorted.rejected[0].reason.len() < MAX_TEXT + 64);
        let mut declined = "no\r\n".repeat(1000);
        declined.bound();
        assert!(!declined.contains('\n') && declined.len() < MAX_TEXT + 64);
        let mut rejections: Vec<MergeRejection> = (0..1000)
            .map(|i| MergeRejection {
                source: "s".into(),
                field: format!("$.f{i}"),
                reason: "bad".into(),
            })
            .collect();
        rejections.bound();
        assert_eq!(rejections.len(), MAX_REJECTIONS);
        assert_eq!(
            rejections.last().unwrap().reason,
            format!("… and {} more rejections, cut", 1000 - MAX_REJECTIONS + 1)
        );
    }

    fn plain_decision() -> Decision {
        Decision {
            thresholds: vec![crate::model::memory_threshold(crate::model::MetLevel::Hard)],
            soft_candidates: vec![],
            force_evictions: vec![],
            state: None,
        }
    }

    #[test]
    fn names_the_host_acts_on_must_be_plain() {
        let snapshot = canary::snapshot("{}".into());
        let mut decision = plain_decision();
        assert!(super::decision(&snapshot, &mut decision).is_ok());
        for bad in ["", "memory\nMemoryPressure", &"m".repeat(64), "a b"] {
            let mut decision = plain_decision();
            decision.thresholds[0].scope = bad.to_owned();
            assert!(
                super::decision(&snapshot, &mut decision).is_err(),
                "{bad:?}"
            );
        }
        let mut decision = plain_decision();
        decision.thresholds[0].condition.as_mut().unwrap().effects = vec!["NoSchedule".into(); 4];
        assert!(super::decision(&snapshot, &mut decision).is_err());
    }

    #[test]
    fn scopes_are_one_threshold_each_and_state_is_bounded() {
        let snapshot = canary::snapshot("{}".into());
        let numa = |node: usize| {
            let mut t = crate::model::memory_threshold(crate::model::MetLevel::Soft);
            t.scope = format!("numa.{node}");
            t
        };
        let mut decision = plain_decision();
        decision.thresholds = (0..MAX_THRESHOLDS).map(numa).collect();
        decision.state = Some(vec![7; MAX_STATE_BYTES]);
        assert!(super::decision(&snapshot, &mut decision).is_ok());
        let message = |decision: &mut Decision| match super::decision(&snapshot, decision) {
            Err(Fault::InvalidAnswer(m)) => m,
            other => panic!("expected an invalid answer, got {other:?}"),
        };
        decision.state = Some(vec![7; MAX_STATE_BYTES + 1]);
        assert_eq!(
            message(&mut decision),
            "state of 65537 bytes; at most 65536 are kept"
        );
        decision.state = None;
        decision.thresholds.push(numa(MAX_THRESHOLDS));
        assert_eq!(
            message(&mut decision),
            "65 thresholds; at most 64 (one per scope)"
        );
        decision.thresholds = vec![numa(1), numa(0), numa(1)];
        assert_eq!(message(&mut decision), "scope numa.1 is reported twice");
        // No threshold at all: nothing is met anywhere.
        decision.thresholds.clear();
        assert!(super::decision(&snapshot, &mut decision).is_ok());
    }

    #[test]
    fn merged_config_must_be_an_object() {
        assert!(merged(r#"{"a":1}"#).is_ok());
        assert!(merged("[1]").is_err());
        assert!(merged("{").is_err());
    }
}
