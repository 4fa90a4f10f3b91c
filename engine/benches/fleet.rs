//! The fleet simulation at full size (not a test: it prints figures and
//! asserts nothing; `agent::fleet_scale` runs it small in CI with the
//! targets asserted). Run with `cargo bench -p vigil --bench fleet`;
//! `VIGIL_FLEET_NODES` (default 200), `VIGIL_FLEET_REST_SECONDS` (default
//! 120) and `VIGIL_FLEET_WAVE` (agents started together, default a tenth of
//! the fleet: the DaemonSet's `maxUnavailable`) size it. Each agent takes
//! inotify instances: past ~120 agents raise
//! `/proc/sys/fs/inotify/max_user_instances` (128 on Debian), or the agents
//! fall back to polling (they log it). One test API server and that many release `vigil agent`
//! processes, each with its own node files, Node and 4 pods, go through the
//! phases of [`vigil_testbed::fleet`]; for each it prints what the API
//! server saw, per node, and extrapolates to 1000 and 5000 nodes (per-node
//! figures times the fleet: every agent acts alone, on its own node's
//! objects, so its cost does not grow with the fleet).
//!
//! The first node's agent starts alone and its compiled built-ins are
//! copied to the other nodes' artifact caches (`FleetOptions::warm_cache`):
//! each node's compiles are its own CPU, measured by the `agent` benchmark.
//!
//! `VIGIL_FLEET_SERVER=upstream` runs it against the upstream control plane
//! (`tests/cluster/`, `deploy/` installed, each agent under its own
//! pod-bound token) instead, and prints the API server's own account of
//! each phase beside the agents' requests (from its audit log).

use std::path::Path;
use std::time::Duration;
use vigil_testbed::ApiServer;
use vigil_testbed::fleet::{Fleet, FleetOptions, Phase, UpstreamPlane};
use vigil_testbed::upstream::Upstream;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let nodes = usize::try_from(env_or("VIGIL_FLEET_NODES", 200)).expect("a count");
    let rest = Duration::from_secs(env_or("VIGIL_FLEET_REST_SECONDS", 120));
    let wave =
        usize::try_from(env_or("VIGIL_FLEET_WAVE", nodes.div_ceil(10) as u64)).expect("a count");
    let upstream = std::env::var("VIGIL_FLEET_SERVER").is_ok_and(|s| s == "upstream");
    let c_sorter =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/c-sorter/c-sorter.wasm");
    let options = FleetOptions {
        binary: env!("CARGO_BIN_EXE_vigil").into(),
        nodes,
        rest,
        config_spread: Duration::from_secs(30),
        policy: c_sorter.exists().then_some(c_sorter),
        wave,
        warm_cache: true,
        // On the real server a phase's last writes (rate-limited to one per
        // object per 15 s) come after its condition holds.
        quiet: Duration::from_secs(if upstream { 16 } else { 0 }),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let phases = if upstream {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        let plane = UpstreamPlane::install(Upstream::start(), &deploy);
        runtime.block_on(Fleet::simulate(plane, options)).2
    } else {
        runtime
            .block_on(async { Fleet::simulate(ApiServer::start().await, options).await })
            .2
    };
    let server = if upstream {
        "the upstream kube-apiserver"
    } else {
        "one test API server"
    };
    println!("{nodes} agents started {wave} at a time, {server}; per node unless said\n");
    println!(
        "| phase | took | non-watch requests | writes | LISTs (from cache) | watch requests | writes spread over |"
    );
    println!("|---|---|---|---|---|---|---|");
    for phase in &phases {
        print_row(phase);
    }
    let rest = phases
        .iter()
        .find(|p| p.name == "at rest")
        .expect("at rest");
    let open = rest.open_watches.unwrap_or_default();
    let per_minute = rest.per_node_minute(rest.non_watch().count());
    println!(
        "\nat rest: {:.1} watches open per node; {per_minute:.3} non-watch requests per node per minute over {:?}",
        open as f64 / nodes as f64,
        rest.elapsed
    );
    let resident: Vec<u64> = rest.agents.iter().map(|a| a.resident_kib).collect();
    let cpu: Vec<f64> = rest.agents.iter().map(|a| a.cpu.as_secs_f64()).collect();
    let minutes = rest.elapsed.as_secs_f64() / 60.0;
    println!(
        "at rest: resident memory per agent {:.1} MiB mean, {:.1} MiB max; CPU per agent {:.0} ms a minute mean, {:.0} ms max",
        resident.iter().sum::<u64>() as f64 / resident.len().max(1) as f64 / 1024.0,
        resident.iter().max().copied().unwrap_or_default() as f64 / 1024.0,
        cpu.iter().sum::<f64>() / cpu.len().max(1) as f64 / minutes * 1000.0,
        cpu.iter().copied().fold(0.0, f64::max) / minutes * 1000.0,
    );
    println!(
        "\n| nodes | at rest: watches open | config change: writes (per second over the spread) | restart of every agent: LISTs |"
    );
    println!("|---|---|---|---|");
    let change = phases
        .iter()
        .find(|p| p.name == "VigilConfig change")
        .expect("change");
    let restart = phases
        .iter()
        .find(|p| p.name == "restart every agent")
        .expect("restart");
    for fleet in [nodes, 1000, 5000] {
        let scale = fleet as f64 / nodes as f64;
        let writes = change.writes().count() as f64 * scale;
        let span = change.write_span().as_secs_f64().max(1.0);
        println!(
            "| {fleet} | {:.0} | {writes:.0} ({:.0}/s) | {:.0} |",
            open as f64 * scale,
            writes / span,
            restart.lists().count() as f64 * scale,
        );
    }
    if upstream {
        print_server(&phases);
    }
    for phase in &phases {
        println!("\n{} ({:?}):", phase.name, phase.elapsed);
        if let Some(reached) = phase.reached {
            println!("  every agent's vigil_paused said so after {reached:?}");
        }
        for (kind, count) in phase.by_kind() {
            println!("  {kind}: {count} ({:.2} per node)", phase.per_node(count));
        }
    }
}

fn print_row(phase: &Phase) {
    let lists = phase.lists().count();
    let cached = phase.lists().filter(|r| r.from_cache()).count();
    println!(
        "| {} | {:.1} s | {:.2} | {:.2} | {:.2} ({cached} of {lists}) | {:.2} | {:.1} s |",
        phase.name,
        phase.elapsed.as_secs_f64(),
        phase.per_node(phase.non_watch().count()),
        phase.per_node(phase.writes().count()),
        phase.per_node(lists),
        phase.per_node(phase.watches().count()),
        phase.write_span().as_secs_f64(),
    );
}

/// The API server's own account of each phase (every client: the agents,
/// the controller manager, the harness's own reads).
fn print_server(phases: &[Phase]) {
    println!("\nthe API server's metrics, every client, per node:\n");
    println!(
        "| phase | non-watch requests | etcd requests | watches open at its end | API server CPU | its resident memory |"
    );
    println!("|---|---|---|---|---|---|");
    for phase in phases {
        let Some(server) = &phase.server else {
            continue;
        };
        println!(
            "| {} | {:.2} | {:.2} | {:.1} | {:.2} s ({:.0} ms per node) | {:.0} MiB |",
            phase.name,
            phase.per_node(server.non_watch() as usize),
            phase.per_node(server.etcd_total() as usize),
            phase.per_node(server.watches as usize),
            server.cpu.as_secs_f64(),
            phase.per_node(server.cpu.as_millis() as usize),
            server.resident_mib,
        );
    }
    for phase in phases {
        let Some(server) = &phase.server else {
            continue;
        };
        println!("\n{}: the API server counted", phase.name);
        for (kind, count) in &server.requests {
            println!("  {kind}: {count}");
        }
        for (operation, count) in &server.etcd {
            println!("  etcd {operation}: {count}");
        }
    }
}
