//! The board's decisions, on explicit time.

use super::*;
use crate::fleet::kinds::PullView;

const REF: &str = "registry.example/vigil/sorter@sha256:new";

fn at(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
}

fn pulled(reference: &str, max_divergence: Option<u8>) -> BTreeMap<String, ShadowPull> {
    let pull = ShadowPull {
        component: Some(PathBuf::from("/state/oci/shadow/sorter.wasm")),
        reference: reference.to_owned(),
        max_divergence,
        pull: None,
    };
    BTreeMap::from([("sorter".to_owned(), pull)])
}

fn comparison(verdict: Verdict) -> Comparison {
    Comparison {
        policy: "sorter".into(),
        call: CallKind::Sort,
        verdict,
    }
}

fn differ() -> Comparison {
    comparison(Verdict::Differ(
        "serving evicts default/a (rank 1), shadow evicts default/b".into(),
    ))
}

/// A board comparing the sorter's version `abc`, its first views taken.
fn comparing(max_divergence: Option<u8>) -> Board {
    let mut board = Board::default();
    let loads = board.follow(&pulled(REF, max_divergence), at(0));
    assert_eq!(loads.len(), 1);
    board.loaded("sorter", Ok("abc".into()), at(1));
    assert!(board.publish(at(1)).is_some());
    board
}

#[test]
fn a_pulled_version_loads_then_compares_and_a_refused_one_says_why() {
    let mut board = Board::default();
    let mut waiting = pulled(REF, None);
    let sorter = waiting.get_mut("sorter").unwrap();
    sorter.component = None;
    sorter.pull = Some(PullView {
        reference: REF.into(),
        stage: "shadow".into(),
        state: "PullFailed".into(),
        since: time(at(0)),
        signature: None,
        reason: Some("not-found".into()),
        message: Some("no such manifest".into()),
        next_retry: None,
    });
    assert!(board.follow(&waiting, at(0)).is_empty());
    let views = board.publish(at(0)).unwrap();
    assert_eq!(views["sorter"].state, "PullFailed");
    assert_eq!(views["sorter"].message.as_deref(), Some("no such manifest"));

    assert_eq!(board.follow(&pulled(REF, None), at(5)).len(), 1);
    board.loaded("sorter", Err("it does not load: bad magic".into()), at(6));
    assert!(board.comparing().is_empty());
    let views = board.publish(at(6)).unwrap();
    assert_eq!(views["sorter"].state, "Refused");
    // A refused version is not loaded again until its reference changes.
    assert!(board.follow(&pulled(REF, None), at(7)).is_empty());
    assert_eq!(board.follow(&pulled("r@sha256:2", None), at(8)).len(), 1);
}

#[test]
fn comparisons_are_counted_with_the_version_and_only_the_first_divergence_of_an_episode_is_told() {
    let mut board = comparing(None);
    let (counted, notices) = board.record(
        vec![comparison(Verdict::Agree), differ(), differ()],
        true,
        at(10),
    );
    let results: Vec<&str> = counted.iter().map(|c| c.result).collect();
    assert_eq!(results, ["agree", "differ", "differ"]);
    assert!(counted.iter().all(|c| c.version == "abc"));
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(matches!(&notices[0], Notice::Differs { words, .. } if words.contains("rank 1")));
    // Still under pressure: no second Event.
    let (_, notices) = board.record(vec![differ()], true, at(11));
    assert!(notices.is_empty());
    // The episode ends (no pressure, no divergence); the next one tells again.
    board.record(vec![comparison(Verdict::Agree)], false, at(12));
    let (_, notices) = board.record(vec![differ()], true, at(13));
    assert_eq!(notices.len(), 1);

    let view = &board.publish(at(13)).unwrap()["sorter"];
    assert_eq!((view.comparisons, view.agreements, view.faults), (6, 2, 0));
    let last = view.last_divergence.as_ref().unwrap();
    assert_eq!(
        (last.time.clone(), last.call.as_str()),
        (time(at(13)), "sort")
    );
}

#[test]
fn counts_reach_the_fleet_view_at_most_every_refresh_but_a_told_divergence_at_once() {
    let mut board = comparing(None);
    board.record(vec![comparison(Verdict::Agree)], false, at(10));
    assert!(board.publish(at(10)).is_none(), "counts alone wait");
    let refreshed = at(1) + REFRESH;
    assert_eq!(board.publish(refreshed).unwrap()["sorter"].comparisons, 1);
    assert!(board.publish(refreshed + REFRESH).is_none(), "nothing new");
    board.record(vec![differ()], true, refreshed + Duration::from_secs(1));
    assert!(board.publish(refreshed + Duration::from_secs(1)).is_some());
}

#[test]
fn a_faulting_shadow_is_counted_against_it_and_a_bound_rejects_it_once_judged() {
    let mut board = comparing(Some(25));
    let fault = || comparison(Verdict::Fault("wasm trap: unreachable".into()));
    // 4 of 19 diverged: not yet judged, whatever the share.
    let mut calls: Vec<Comparison> = (0..15).map(|_| comparison(Verdict::Agree)).collect();
    calls.extend([fault(), fault(), differ(), differ()]);
    let (_, notices) = board.record(calls, true, at(10));
    assert!(notices.iter().all(|n| matches!(n, Notice::Differs { .. })));
    assert_eq!(board.comparing().len(), 1);
    // The 20th: 5 of 20 is 25%, not above the bound.
    let (_, notices) = board.record(vec![differ()], true, at(11));
    assert!(notices.is_empty());
    // The 21st: 6 of 21 is above 25%.
    let (counted, notices) = board.record(vec![fault()], true, at(12));
    assert_eq!(counted[0].result, "fault");
    let [Notice::Rejected { message, .. }] = notices.as_slice() else {
        panic!("{notices:?}");
    };
    assert!(message.contains("6 of 21"), "{message}");
    assert!(board.comparing().is_empty());
    let view = &board.publish(at(12)).unwrap()["sorter"];
    assert_eq!((view.state.as_str(), view.faults), ("Rejected", 3));
    // Nothing more is counted for it, and it is not loaded again.
    assert!(board.record(vec![differ()], true, at(13)).0.is_empty());
    assert!(board.follow(&pulled(REF, Some(25)), at(14)).is_empty());
}

#[test]
fn a_policy_the_pulls_drop_is_forgotten() {
    let mut board = comparing(None);
    board.follow(&BTreeMap::new(), at(20));
    assert!(board.comparing().is_empty());
    assert!(board.publish(at(20)).unwrap().is_empty());
}
