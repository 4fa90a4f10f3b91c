//! The fleet simulation at a small N (the benchmark `fleet` runs it at full
//! size): real agents against one test API server, through start, rest, a
//! config change, a policy rollout, a restart of every agent and of the
//! API server, each held to the per-node targets.

use super::pulled::example;
use std::time::Duration;
use vigil::testing::turn;
use vigil_testbed::fleet::{Fleet, FleetOptions, POLICY, Phase};

const NODES: usize = 4;
const SPREAD: Duration = Duration::from_secs(6);

fn phase<'a>(phases: &'a [Phase], name: &str) -> &'a Phase {
    phases
        .iter()
        .find(|p| p.name == name)
        .expect("the phase ran")
}

fn all_lists_from_the_cache(phase: &Phase) {
    let consistent: Vec<&str> = (phase.lists())
        .filter(|r| !r.from_cache())
        .map(|r| r.uri.as_str())
        .collect();
    assert!(
        consistent.is_empty(),
        "{}: consistent reads {consistent:?}",
        phase.name
    );
    assert!(phase.lists().count() >= NODES, "{}: lists", phase.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_meets_the_per_node_targets_in_every_phase() {
    let (c_sorter, _) = example("c-sorter");
    let options = FleetOptions {
        binary: env!("CARGO_BIN_EXE_vigil").into(),
        nodes: NODES,
        rest: Duration::from_secs(20),
        config_spread: SPREAD,
        policy: Some(c_sorter.into()),
        wave: NODES,
    };
    let (names, phases) = Fleet::simulate(options).await;

    let start = phase(&phases, "start");
    all_lists_from_the_cache(start);

    let rest = phase(&phases, "at rest");
    let quiet: Vec<_> = (rest.non_watch())
        .map(|r| (&r.method, r.status, &r.uri, &r.body))
        .collect();
    assert!(
        rest.per_node_minute(quiet.len()) <= 0.1,
        "at rest: {quiet:?}"
    );
    let open = rest.open_watches.expect("counted at rest");
    assert!(open <= 4 * NODES, "{open} watches open for {NODES} nodes");

    // Each node writes at most twice, and not before its turn.
    let change = phase(&phases, "VigilConfig change");
    for node in &names {
        let writes: Vec<_> = change.writes_of(node).collect();
        assert!(
            (1..=2).contains(&writes.len()),
            "{node}: {:?}",
            writes
                .iter()
                .map(|r| (&r.method, &r.uri))
                .collect::<Vec<_>>()
        );
        let due = change.began + turn(node, SPREAD);
        assert!(
            writes.iter().all(|w| w.at >= due),
            "{node} wrote before its turn"
        );
    }
    assert_eq!(
        change.writes().count(),
        names
            .iter()
            .map(|n| change.writes_of(n).count())
            .sum::<usize>(),
        "every write is a node's own"
    );

    let rollout = phase(&phases, "policy rollout");
    for node in &names {
        let writes = rollout.writes_of(node).count();
        assert!((1..=3).contains(&writes), "{node}: {writes} writes");
    }

    let restarts = [
        "restart every agent",
        "after the restart",
        "API server restart",
    ];
    for restart in restarts.map(|name| phase(&phases, name)) {
        if restart.name != "after the restart" {
            all_lists_from_the_cache(restart);
        }
        // Every built-in is as it was: a restart rewrites none of their
        // objects. (The pulled policy's trial, 5 min, starts again.)
        let rewritten: Vec<_> = (restart.writes())
            .filter(|r| r.uri.contains("/vigilpolicystatuses") && !r.uri.contains(POLICY))
            .map(|r| (&r.method, &r.uri, &r.body))
            .collect();
        assert!(rewritten.is_empty(), "{}: {rewritten:?}", restart.name);
    }
}
