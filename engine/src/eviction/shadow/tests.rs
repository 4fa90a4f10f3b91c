use super::*;
use crate::model::fixture::pod;
use crate::model::{SortRejection, memory_threshold};
use crate::policy::{Fault, FaultKind};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a scripted sorter answers.
#[derive(Clone, Copy, PartialEq)]
enum Sorting {
    /// In the order given.
    Keep,
    /// In reverse.
    Reverse,
    /// Refuses the last candidate, keeps the others.
    RefuseLast,
    Trap,
    Decline,
}

/// A scripted strategy `s` and sorter `sorter`; counts its calls.
struct Scripted {
    met: MetLevel,
    force: Vec<&'static str>,
    soft: Vec<&'static str>,
    sorting: Sorting,
    calls: AtomicUsize,
    /// The state each `evaluate` was given; each keeps one more byte.
    states: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl Scripted {
    fn new(sorting: Sorting) -> Self {
        Self {
            met: MetLevel::NotMet,
            force: Vec::new(),
            soft: Vec::new(),
            sorting,
            calls: AtomicUsize::new(0),
            states: std::sync::Mutex::new(Vec::new()),
        }
    }
}

/// The eviction of fixture pod `name`.
fn eviction(name: &str) -> Eviction {
    Eviction {
        uid: format!("uid-{name}"),
        reason: "scripted".into(),
        grace_period_seconds: None,
    }
}

fn fault() -> Unanswered {
    Unanswered::Fault {
        kind: FaultKind::Trap,
        message: "wasm trap: unreachable".into(),
    }
}

impl Policies for Scripted {
    fn declared(&self, _: &str, _: &str) -> Option<Arc<crate::policy::Declared>> {
        None
    }

    fn strategies(&self) -> Vec<String> {
        vec!["s".into()]
    }

    fn evaluate(&self, name: &str, snapshot: &mut Snapshot) -> Result<Decision, Unanswered> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if name != "s" {
            return Err(Unanswered::NotLoaded);
        }
        self.states.lock().unwrap().push(snapshot.state.clone());
        Ok(Decision {
            thresholds: vec![memory_threshold(self.met)],
            soft_candidates: self.soft.iter().map(|u| eviction(u)).collect(),
            force_evictions: self.force.iter().map(|u| eviction(u)).collect(),
            state: Some([snapshot.state.as_slice(), &[7]].concat()),
        })
    }

    fn top_victims(
        &self,
        _: &str,
        _: &mut Snapshot,
        _: &str,
        n: u32,
    ) -> Result<Vec<Eviction>, Unanswered> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .soft
            .iter()
            .take(n as usize)
            .map(|u| eviction(u))
            .collect())
    }

    fn sort(
        &self,
        _: &str,
        _: Which,
        _: &[String],
        candidates: &mut [Candidate],
        _: &str,
    ) -> Result<Sorted, Unanswered> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let n = u32::try_from(candidates.len()).unwrap();
        let mut order: Vec<u32> = (0..n).collect();
        let mut rejected = Vec::new();
        match self.sorting {
            Sorting::Keep => {}
            Sorting::Reverse => order.reverse(),
            Sorting::RefuseLast => {
                let last = order.pop().unwrap();
                rejected.push(SortRejection {
                    index: last,
                    reason: "carries skip label keep".into(),
                });
            }
            Sorting::Trap => return Err(fault()),
            Sorting::Decline => return Err(Unanswered::Declined("config is not JSON".into())),
        }
        Ok(Sorted { order, rejected })
    }
}

fn shadowed(serving: Scripted, shadow: Scripted) -> (Shadowed, Arc<Scripted>) {
    let shadow = Arc::new(shadow);
    let names = ["s", "sorter"].map(String::from).into();
    let shadowed = Shadowed::new(Arc::new(serving), shadow.clone(), names);
    (shadowed, shadow)
}

fn candidates() -> Vec<Candidate> {
    ["a", "b", "c"].map(|n| pod(n).candidate()).to_vec()
}

fn sort(policies: &dyn Policies, which: Which) -> Result<Sorted, Unanswered> {
    policies.sort("sorter", which, &["s".into()], &mut candidates(), "{}")
}

fn snapshot() -> Snapshot {
    Snapshot {
        now_ms: 0,
        signals: Vec::new(),
        pods: ["a", "b", "c"].map(|n| pod(n).build()).to_vec(),
        last_met: Vec::new(),
        config: "{}".into(),
        state: Vec::new(),
    }
}

fn one(comparisons: Vec<Comparison>) -> Comparison {
    assert_eq!(comparisons.len(), 1, "{comparisons:?}");
    comparisons.into_iter().next().unwrap()
}

#[test]
fn a_sorter_that_reverses_the_order_differs_at_rank_one_and_the_serving_order_stands() {
    let (shadowed, shadow) = shadowed(
        Scripted::new(Sorting::Keep),
        Scripted::new(Sorting::Reverse),
    );
    let sorted = sort(&shadowed, Which::Serving).unwrap();
    assert_eq!(
        sorted.order,
        [0, 1, 2],
        "the serving answer is the one used"
    );
    assert_eq!(
        shadow.calls.load(Ordering::SeqCst),
        0,
        "the shadow is asked after the cycle, not in it"
    );
    let comparison = one(shadowed.judge());
    assert_eq!(comparison.policy, "sorter");
    assert_eq!(comparison.call, CallKind::Sort);
    assert_eq!(
        comparison.verdict,
        Verdict::Differ("serving evicts default/a (rank 1), shadow evicts default/c".into())
    );
    assert!(shadowed.judge().is_empty(), "each call is judged once");
}

#[test]
fn the_same_order_agrees() {
    let (shadowed, _) = shadowed(Scripted::new(Sorting::Keep), Scripted::new(Sorting::Keep));
    sort(&shadowed, Which::Serving).unwrap();
    assert_eq!(one(shadowed.judge()).verdict, Verdict::Agree);
}

#[test]
fn a_refusal_only_the_shadow_makes_differs_naming_the_pod_and_its_reason() {
    let (shadowed, _) = shadowed(
        Scripted::new(Sorting::Keep),
        Scripted::new(Sorting::RefuseLast),
    );
    sort(&shadowed, Which::Serving).unwrap();
    // Its order of the others is the same: the first difference is rank 3,
    // where the shadow has nobody.
    assert_eq!(
        one(shadowed.judge()).verdict,
        Verdict::Differ("serving evicts default/c (rank 3), shadow evicts nobody".into())
    );
    let words = sorted(
        &Described::Candidates(&candidates()),
        &Sorted {
            order: vec![0, 1],
            rejected: Vec::new(),
        },
        &Sorted {
            order: vec![0, 1],
            rejected: vec![SortRejection {
                index: 2,
                reason: "carries skip label keep".into(),
            }],
        },
    );
    assert_eq!(
        words.as_deref(),
        Some("shadow refuses default/c (carries skip label keep), serving does not")
    );
}

#[test]
fn a_faulting_shadow_is_its_own_fault_and_the_serving_answer_stands() {
    let (shadowed, _) = shadowed(Scripted::new(Sorting::Keep), Scripted::new(Sorting::Trap));
    assert_eq!(sort(&shadowed, Which::Serving).unwrap().order, [0, 1, 2]);
    assert_eq!(
        one(shadowed.judge()).verdict,
        Verdict::Fault("wasm trap: unreachable".into())
    );
}

#[test]
fn a_serving_fault_is_compared_with_nothing_and_the_fault_is_the_serving_answer() {
    let (shadowed, _) = shadowed(Scripted::new(Sorting::Trap), Scripted::new(Sorting::Keep));
    assert!(matches!(
        sort(&shadowed, Which::Serving),
        Err(Unanswered::Fault { .. })
    ));
    assert!(shadowed.judge().is_empty());
    // Both declining agree; one declining differs.
    let (shadowed, _) = shadowed_pair(Sorting::Decline, Sorting::Decline);
    sort(&shadowed, Which::Serving).unwrap_err();
    assert_eq!(one(shadowed.judge()).verdict, Verdict::Agree);
    let (shadowed, _) = shadowed_pair(Sorting::Keep, Sorting::Decline);
    sort(&shadowed, Which::Serving).unwrap();
    assert_eq!(
        one(shadowed.judge()).verdict,
        Verdict::Differ("shadow declined: config is not JSON".into())
    );
}

fn shadowed_pair(serving: Sorting, shadow: Sorting) -> (Shadowed, Arc<Scripted>) {
    shadowed(Scripted::new(serving), Scripted::new(shadow))
}

#[test]
fn the_built_in_asked_in_place_of_a_faulting_sorter_has_no_shadow() {
    let (shadowed, shadow) = shadowed_pair(Sorting::Keep, Sorting::Reverse);
    sort(&shadowed, Which::BuiltIn).unwrap();
    assert!(shadowed.judge().is_empty());
    assert_eq!(shadow.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_policy_without_a_version_in_shadow_is_not_kept() {
    let shadow = Arc::new(Scripted::new(Sorting::Reverse));
    let names = BTreeSet::from(["s".to_owned()]);
    let shadowed = Shadowed::new(
        Arc::new(Scripted::new(Sorting::Keep)),
        shadow.clone(),
        names,
    );
    sort(&shadowed, Which::Serving).unwrap();
    assert!(shadowed.judge().is_empty());
    assert_eq!(shadow.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_strategy_is_compared_on_its_threshold_then_its_force_evictions_then_its_candidates() {
    let judge = |serving: Scripted, shadow: Scripted| {
        let (shadowed, _) = shadowed(serving, shadow);
        shadowed.evaluate("s", &mut snapshot()).unwrap();
        one(shadowed.judge()).verdict
    };
    let with = |met: MetLevel, force: &[&'static str], soft: &[&'static str]| Scripted {
        met,
        force: force.to_vec(),
        soft: soft.to_vec(),
        ..Scripted::new(Sorting::Keep)
    };
    assert_eq!(
        judge(
            with(MetLevel::Hard, &[], &["a"]),
            with(MetLevel::Hard, &[], &["a"])
        ),
        Verdict::Agree
    );
    assert_eq!(
        judge(
            with(MetLevel::Hard, &[], &[]),
            with(MetLevel::NotMet, &[], &[])
        ),
        Verdict::Differ(
            "serving finds memory.available met hard (1 against 2), shadow not met (1 against 2)"
                .into()
        )
    );
    assert_eq!(
        judge(
            with(MetLevel::Hard, &["a"], &[]),
            with(MetLevel::Hard, &["a", "b"], &[])
        ),
        Verdict::Differ("serving force-evicts default/a, shadow default/a, default/b".into())
    );
    assert_eq!(
        judge(
            with(MetLevel::Soft, &[], &["a", "b"]),
            with(MetLevel::Soft, &[], &["b", "a"])
        ),
        Verdict::Differ("serving proposes default/a (rank 1), shadow proposes default/b".into())
    );
}

#[test]
fn top_victims_are_compared_in_order() {
    let with = |soft: &[&'static str]| Scripted {
        soft: soft.to_vec(),
        ..Scripted::new(Sorting::Keep)
    };
    let (shadowed, _) = shadowed(with(&["a", "b"]), with(&["a", "c"]));
    let victims = shadowed
        .top_victims("s", &mut snapshot(), "memory", 2)
        .unwrap();
    assert_eq!(victims.len(), 2);
    let comparison = one(shadowed.judge());
    assert_eq!(comparison.call, CallKind::TopVictims);
    assert_eq!(
        comparison.verdict,
        Verdict::Differ("serving picks default/b (rank 2), shadow picks default/c".into())
    );
}

#[test]
fn calls_nobody_judges_are_kept_up_to_a_bound() {
    let (shadowed, _) = shadowed_pair(Sorting::Keep, Sorting::Keep);
    for _ in 0..MAX_PENDING + 10 {
        sort(&shadowed, Which::Serving).unwrap();
    }
    assert_eq!(shadowed.judge().len(), MAX_PENDING);
}

#[test]
fn two_merges_agree_differ_where_the_configs_part_and_a_shadow_fault_is_its_own() {
    let serving = VigilConfig::default();
    let burst = |n| VigilConfig {
        eviction_burst: n,
        ..VigilConfig::default()
    };
    let fault = || ConfigError::MergerFault(Fault::InvalidAnswer("not JSON".into()));
    assert_eq!(
        merge_verdict(Ok(&serving), Ok(VigilConfig::default())),
        Verdict::Agree
    );
    assert_eq!(
        merge_verdict(Ok(&serving), Ok(burst(7))),
        Verdict::Differ("serving sets evictionBurst to 3, shadow to 7".into())
    );
    assert_eq!(
        merge_verdict(Ok(&serving), Err(fault())),
        Verdict::Fault("gave an invalid answer: not JSON".into())
    );
    assert_eq!(
        merge_verdict(Err("a layer is refused"), Err(fault())),
        Verdict::Fault("gave an invalid answer: not JSON".into()),
        "a shadow's fault counts whatever the serving merger did"
    );
    assert_eq!(
        merge_verdict(Err("a layer is refused"), Err(ConfigError::NoMerger)),
        Verdict::Agree,
        "both refuse"
    );
    let Verdict::Differ(words) = merge_verdict(Ok(&serving), Err(ConfigError::NoMerger)) else {
        panic!("a refusal of the shadow alone differs");
    };
    assert!(words.starts_with("shadow refuses: "), "{words}");
    assert_eq!(
        merge_verdict(Err("a layer is refused"), Ok(burst(3))),
        Verdict::Differ("serving refuses (a layer is refused), shadow merges".into())
    );
}

#[test]
fn a_strategy_in_shadow_keeps_its_own_state_never_the_serving_ones() {
    let (shadowed, shadow) = shadowed(Scripted::new(Sorting::Keep), Scripted::new(Sorting::Keep));
    for serving_state in [vec![42], vec![42, 43]] {
        let mut given = Snapshot {
            state: serving_state,
            ..snapshot()
        };
        shadowed.evaluate("s", &mut given).unwrap();
        shadowed.judge();
    }
    let seen = shadow.states.lock().unwrap().clone();
    assert_eq!(seen, [vec![], vec![7]], "its own, from its first call on");
    // Another config: the shadow starts afresh, as the serving version does.
    let mut other = Snapshot {
        config: r#"{"other":true}"#.into(),
        ..snapshot()
    };
    shadowed.evaluate("s", &mut other).unwrap();
    shadowed.judge();
    assert_eq!(shadow.states.lock().unwrap().last(), Some(&vec![]));
}
