//! The fleet's cost on the real API server: 100 agents, each under its own
//! pod-bound token, through the fleet simulation's phases (start, rest, a
//! `VigilConfig` change, a policy rollout from a registry, the fleet paused
//! and resumed, a restart of every agent, a restart of kube-apiserver itself), held to the same per-node
//! targets as on the project's test server, read from the audit log; and the
//! API server's own metrics for each phase, which must account for at least
//! what the audit log saw. `cargo bench -p vigil --bench fleet` with
//! `VIGIL_FLEET_SERVER=upstream` prints the figures docs/operating.md quotes.

use super::root;
use std::time::Duration;
use vigil::testing::turn;
use vigil_testbed::Request;
use vigil_testbed::fleet::{Fleet, FleetOptions, POLICY, Phase, UpstreamPlane, phase};
use vigil_testbed::upstream::Upstream;

const NODES: usize = 100;
const SPREAD: Duration = Duration::from_secs(10);
/// A phase that changes something ends when no agent has written for
/// longer than the agents' `--status-interval` (15 s).
const QUIET: Duration = Duration::from_secs(16);

/// An audit event's answer's message.
fn message(event: &serde_json::Value) -> &str {
    event["responseStatus"]["message"]
        .as_str()
        .unwrap_or_default()
}

/// Whether the status object `write` rewrites said, when last written
/// before `phase`, that its policy had faulted.
fn had_faults(phases: &[Phase], phase: &Phase, write: &Request) -> bool {
    let name = |r: &Request| {
        (r.body.as_ref())
            .and_then(|b| b["metadata"]["name"].as_str())
            .map(str::to_owned)
    };
    let earlier = phases
        .iter()
        .take_while(|p| p.name != phase.name)
        .flat_map(|p| p.writes())
        .filter(|r| r.uri.contains("/vigilpolicystatuses") && name(r) == name(write));
    earlier
        .last()
        .and_then(|r| r.body.as_ref())
        .is_some_and(|b| {
            b["status"]["faults"].as_u64().unwrap_or(0) > 0 || !b["status"]["lastFault"].is_null()
        })
}

/// What the server counted of `kind` (`VERB resource`) in `phase`.
fn counted(phase: &Phase, kind: &str) -> f64 {
    let server = phase.server.as_ref().expect("the server's metrics");
    server.requests.get(kind).copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_agents_on_the_real_api_server_meet_the_per_node_targets() {
    let plane = UpstreamPlane::install(Upstream::start(), &root().join("deploy"));
    let options = FleetOptions {
        binary: env!("CARGO_BIN_EXE_vigil").into(),
        nodes: NODES,
        rest: Duration::from_secs(30),
        config_spread: SPREAD,
        policy: Some(root().join("examples/policies/c-sorter/c-sorter.wasm")),
        wave: NODES,
        warm_cache: true,
        quiet: QUIET,
    };
    let (plane, names, phases) = Fleet::simulate(plane, options).await;

    // Under its real identity, RBAC and admission: nothing refused, but
    // what the restarted API server refused before it was ready (its port
    // opens before its RBAC caches are filled: the agents reconnect at once,
    // are told 403 and retry). (Throttling is no refusal: 100 agents starting
    // at once share one priority level and are told 429 to wait.)
    let ready = plane
        .cluster()
        .restarted()
        .expect("the API server restarted");
    let audit = plane.cluster().audit();
    let refused: Vec<String> = (audit.iter())
        .filter(|e| [401, 403, 422].contains(&e["responseStatus"]["code"].as_u64().unwrap_or(0)))
        .filter(|e| {
            let received: jiff::Timestamp = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .expect("a time");
            received > ready
        })
        .map(|e| format!("{} {} {}", e["verb"], e["requestURI"], message(e)))
        .collect();
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));

    phase(&phases, "start").assert_lists_from_the_cache();
    let rest = phase(&phases, "at rest");
    rest.assert_at_rest();
    let open = rest.open_watches.expect("counted at rest");
    assert!(open >= NODES, "{open} watches open for {NODES} nodes");
    // The server's own count covers the agents' watches (and its other
    // clients': the controller manager's informers).
    let server = rest.server.as_ref().expect("the server's metrics");
    assert!(
        server.watches >= open as f64,
        "the server counts {} watches, the audit log {open} of the agents",
        server.watches
    );

    let change = phase(&phases, "VigilConfig change");
    change.assert_config_change(&names, |n| turn(n, SPREAD));
    let patches = change
        .writes()
        .filter(|r| r.method == "PATCH" && r.uri.starts_with("/api/v1/nodes/"))
        .count();
    // Server-side apply is its own verb in the server's count.
    let counted_patches =
        ["PATCH", "APPLY"].map(|verb| counted(change, &format!("{verb} nodes/status")));
    assert!(
        counted_patches.iter().sum::<f64>() >= patches as f64,
        "the server counted fewer node status patches than the agents made ({patches})"
    );

    let rollout = phase(&phases, "policy rollout");
    for node in &names {
        // Its pull's status object (created, then Pulled), the node's, and
        // a policy's whose call faulted on this loaded machine.
        let writes: Vec<_> = (rollout.writes_of(node))
            .map(|r| (r.at - rollout.began, &r.method, &r.uri))
            .collect();
        assert!((1..=4).contains(&writes.len()), "{node}: {writes:#?}");
    }
    // A rollout changes no condition: no node status patch, no Event (a
    // strategy missing a cycle under load used to flap VigilAheadOfKubelet).
    let flaps: Vec<_> = (rollout.writes())
        .filter(|r| {
            r.uri.contains("/status?") && r.uri.starts_with("/api/v1/nodes/")
                || r.uri.contains("/events")
        })
        .map(|r| (&r.method, &r.uri))
        .collect();
    assert!(flaps.is_empty(), "{flaps:?}");

    // The brake, on the watch event alone: no read, one status write a node.
    for brake in ["pause", "resume"].map(|name| phase(&phases, name)) {
        brake.assert_brake(&names);
        let reached = brake.reached.expect("timed to the last agent");
        eprintln!(
            "{}: every agent's vigil_paused said so after {reached:?}; {} requests, {} of them writes",
            brake.name,
            brake.non_watch().count(),
            brake.writes().count()
        );
    }

    for restart in [
        "restart every agent",
        "after the restart",
        "API server restart",
    ]
    .map(|name| phase(&phases, name))
    {
        if restart.name == "restart every agent" {
            restart.assert_lists_from_the_cache();
        }
        // A restart rewrites no built-in's object but to record a fault, or
        // one whose faults the restart forgets (a policy's fault count and
        // last fault are the process's): 100 debug-build agents on 2 cores
        // miss a deadline now and then.
        let rewritten: Vec<_> = (restart.writes())
            .filter(|r| r.uri.contains("/vigilpolicystatuses") && !r.uri.contains(POLICY))
            .filter(|r| (r.body.as_ref()).is_none_or(|b| b["status"]["lastFault"].is_null()))
            .filter(|r| !had_faults(&phases, restart, r))
            .map(|r| (&r.method, &r.uri, r.body.as_ref().map(|b| &b["status"])))
            .collect();
        assert!(rewritten.is_empty(), "{}: {rewritten:?}", restart.name);
        let server = restart.server.as_ref().expect("the server's metrics");
        assert!(server.cpu > Duration::ZERO && server.resident_mib > 0.0);
    }
}
