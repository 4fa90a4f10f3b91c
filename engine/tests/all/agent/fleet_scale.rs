//! The fleet simulation at a small N (the benchmark `fleet` runs it at full
//! size): real agents against one test API server, through start, rest, a
//! config change, a policy rollout, a pause and resume of the fleet, a
//! restart of every agent and of the API server, each held to the per-node
//! targets; then `kubectl vigil
//! status` of the policy rolled out and of the config, `version` and
//! `where`, as an admin would ask.

use super::pulled::example;
use std::time::Duration;
use vigil::testing::turn;
use vigil_testbed::ApiServer;
use vigil_testbed::fleet::{Fleet, FleetOptions, POLICY, phase};

const NODES: usize = 4;
const SPREAD: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_meets_the_per_node_targets_in_every_phase() {
    let (c_sorter, c_sorter_bytes) = example("c-sorter");
    let options = FleetOptions {
        binary: env!("CARGO_BIN_EXE_vigil").into(),
        nodes: NODES,
        rest: Duration::from_secs(20),
        config_spread: SPREAD,
        policy: Some(c_sorter.into()),
        wave: NODES,
        warm_cache: false,
        quiet: Duration::ZERO,
    };
    let (server, names, phases) = Fleet::simulate(ApiServer::start().await, options).await;

    phase(&phases, "start").assert_lists_from_the_cache();
    phase(&phases, "at rest").assert_at_rest();
    phase(&phases, "VigilConfig change").assert_config_change(&names, |n| turn(n, SPREAD));

    let rollout = phase(&phases, "policy rollout");
    for node in &names {
        let writes = rollout.writes_of(node).count();
        assert!((1..=3).contains(&writes), "{node}: {writes} writes");
    }

    // The brake: every agent paused, then resumed, reading nothing.
    for name in ["pause", "resume"] {
        phase(&phases, name).assert_brake(&names);
    }

    let restarts = [
        "restart every agent",
        "after the restart",
        "API server restart",
    ];
    for restart in restarts.map(|name| phase(&phases, name)) {
        if restart.name != "after the restart" {
            restart.assert_lists_from_the_cache();
        }
        // Every built-in is as it was: a restart rewrites none of their
        // objects. (The pulled policy's trial, 5 min, starts again.)
        let rewritten: Vec<_> = (restart.writes())
            .filter(|r| r.uri.contains("/vigilpolicystatuses") && !r.uri.contains(POLICY))
            .map(|r| (&r.method, &r.uri, &r.body))
            .collect();
        assert!(rewritten.is_empty(), "{}: {rewritten:?}", restart.name);
    }

    // The rollout as `kubectl vigil status` shows it: the binary on the
    // PATH under the plugin's name, the admin's kubeconfig.
    let version = vigil::base::digest::Digest::of(&c_sorter_bytes).to_string();
    let status = kubectl_vigil(&server, &["status", POLICY]);
    let expected = format!(
        "policy {POLICY}: {NODES} node(s) report it\n\
         VERSION        STAGE     SIGNED    STATE        NODES\n\
         {version:<14} newest    unsigned  Trial            {NODES}\n"
    );
    assert_eq!(status, expected);
    let builtin = kubectl_vigil(&server, &["status", "default-sorter"]);
    assert!(
        builtin.contains(&format!(" -         -         Active           {NODES}\n")),
        "{builtin}"
    );

    // The config's rollout: every node runs what it was assigned.
    let config = kubectl_vigil(&server, &["status", "--config"]);
    assert!(
        config.starts_with(&format!("config: {NODES} node(s) report\n")),
        "{config}"
    );
    assert!(!config.contains("not running"), "{config}");
    let rows: usize = (config.lines().skip(2))
        .filter_map(|l| l.split_whitespace().last()?.parse::<usize>().ok())
        .sum();
    assert_eq!(rows, NODES, "{config}");

    // Which build runs where: this one, on every node.
    let version = kubectl_vigil(&server, &["version"]);
    let build = vigil::base::build::BUILD;
    assert_eq!(
        version,
        format!("client: {build}\nagents: {NODES} node(s) report\n{NODES:>6}  {build}\n")
    );

    // Where a node's agent pod runs, found by its label in any namespace.
    let node = &names[0];
    server.put(
        "pods",
        "ops",
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "team-vigil-x7k2p", "namespace": "ops",
                         "labels": {"app.kubernetes.io/name": "vigil"}},
            "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "vigil:test"}]},
            "status": {"phase": "Running"}}),
    );
    let found = kubectl_vigil(&server, &["where", node]);
    assert_eq!(
        found,
        format!(
            "ops/team-vigil-x7k2p on {node}: Running, ready 0/1, 0 restart(s), image vigil:test\n"
        )
    );
}

/// What `kubectl vigil ARGS` prints: the vigil binary linked as
/// `kubectl-vigil` and run by that name with `server`'s kubeconfig.
fn kubectl_vigil(server: &ApiServer, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-vigil");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vigil"), &plugin).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let args = [args, &["--kubeconfig", &kubeconfig]].concat();
    vigil_testbed::cli::run(&plugin, &args)
}
