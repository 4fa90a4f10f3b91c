//! The summary of a rollout, from status objects as the agents write them.

use super::*;
use crate::fleet::activity::time;
use crate::fleet::kinds::{
    Divergence, Fault, PolicyView, PullView, ShadowView, VigilPolicyStatusSpec,
};
use std::time::SystemTime;

fn view(state: &str, version: &str, stage: Option<&str>) -> PolicyView {
    PolicyView {
        state: state.into(),
        since: time(SystemTime::UNIX_EPOCH),
        world: Some("candidate-sorter".into()),
        digest: None,
        version: Some(version.into()),
        source: Some("file".into()),
        trial_end: None,
        last_known_good: None,
        last_fault: None,
        faults: 0,
        pull: stage.map(|stage| PullView {
            reference: format!("r@sha256:{version}"),
            stage: stage.into(),
            state: "Pulled".into(),
            since: time(SystemTime::UNIX_EPOCH),
            signature: Some("verified".into()),
            reason: None,
            message: None,
            next_retry: None,
        }),
        shadow: None,
    }
}

fn shadow(state: &str, comparisons: u64, agreements: u64, faults: u64) -> ShadowView {
    ShadowView {
        reference: "r@sha256:new".into(),
        version: Some("new000000000".into()),
        state: state.into(),
        since: time(SystemTime::UNIX_EPOCH),
        message: (state == "Rejected").then(|| "30 of 40 comparisons diverged".into()),
        comparisons,
        agreements,
        faults,
        last_divergence: Some(Divergence {
            time: time(SystemTime::UNIX_EPOCH),
            call: "sort".into(),
            message: "serving evicts a/x (rank 1), shadow evicts a/y".into(),
        }),
    }
}

fn object(node: &str, policy: &str, status: PolicyView) -> VigilPolicyStatus {
    let spec = VigilPolicyStatusSpec {
        node: node.into(),
        policy: policy.into(),
    };
    let mut object = VigilPolicyStatus::new(&format!("{node}.{policy}"), spec);
    object.status = Some(status);
    object
}

#[test]
fn nodes_are_counted_by_version_stage_and_state_with_the_shadow_agreement_and_the_failures() {
    let mut statuses = vec![
        object("n1", "s", view("Active", "new000000000", Some("newest"))),
        object("n2", "s", view("Trial", "new000000000", Some("newest"))),
        object("other", "t", view("Active", "zzz", None)),
    ];
    for (node, shadowing) in [
        ("n3", shadow("Comparing", 100, 90, 2)),
        ("n4", shadow("Rejected", 40, 10, 20)),
    ] {
        let mut old = view("Active", "old000000000", Some("previous"));
        old.shadow = Some(shadowing);
        statuses.push(object(node, "s", old));
    }
    let mut rolled = view("RolledBack", "old000000000", Some("previous"));
    rolled.last_fault = Some(Fault {
        time: time(SystemTime::UNIX_EPOCH),
        message: "wasm trap: unreachable".into(),
    });
    statuses.push(object("n5", "s", rolled));
    // A node without a verification key takes the old version unsigned.
    let mut unsigned = view("Active", "old000000000", Some("previous"));
    (unsigned.pull.as_mut().unwrap()).signature = Some("unsigned".into());
    statuses.push(object("n6", "s", unsigned));

    let summary = Summary::of("s", &statuses);
    assert_eq!(summary.nodes, 6);
    let rows: Vec<(&str, &str, &str, &str, usize)> = (summary.rows.iter())
        .map(|((v, s, g, t), n)| (v.as_str(), s.as_str(), g.as_str(), t.as_str(), *n))
        .collect();
    assert_eq!(
        rows,
        [
            ("new000000000", "newest", "verified", "Active", 1),
            ("new000000000", "newest", "verified", "Trial", 1),
            ("new000000000", "shadow", "-", "Comparing", 1),
            ("new000000000", "shadow", "-", "Rejected", 1),
            ("old000000000", "previous", "unsigned", "Active", 1),
            ("old000000000", "previous", "verified", "Active", 2),
            ("old000000000", "previous", "verified", "RolledBack", 1),
        ]
    );
    let agreement = &summary.shadow["new000000000"];
    assert_eq!(
        (
            agreement.nodes,
            agreement.comparisons,
            agreement.agreements,
            agreement.faults
        ),
        (2, 140, 100, 22)
    );
    let failed: Vec<&str> = summary.failed.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(failed, ["n4", "n5"]);

    let text = summary.to_string();
    assert!(
        text.starts_with("policy s: 6 node(s) report it\n"),
        "{text}"
    );
    assert!(
        text.contains("\nold000000000   previous  verified  Active           2\n"),
        "{text}"
    );
    assert!(
        text.contains("shadow new000000000 on 2 node(s): 140 comparison(s), 100 agreed (71.4%), 18 differed, 22 faulted"),
        "{text}"
    );
    assert!(
        text.contains("  n4: shadow Rejected: 30 of 40 comparisons diverged\n"),
        "{text}"
    );
    assert!(
        text.contains("  n5: RolledBack: wasm trap: unreachable\n"),
        "{text}"
    );
}

#[test]
fn a_policy_no_node_reports_says_so() {
    let summary = Summary::of("s", &[]);
    assert_eq!(summary.to_string(), "policy s: 0 node(s) report it\n");
}
