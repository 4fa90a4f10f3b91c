//! Starting and stopping: what stops the start with a clear error, and SIGTERM
//! while a policy compiles.

use super::*;

#[test]
fn the_agent_refuses_to_start_without_a_node_name() {
    let output = crate::vigil()
        .args(["agent", "--kubeconfig", "/nonexistent"])
        .env_remove("NODE_NAME")
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--node-name"), "{stderr}");
}

/// Runs `vigil agent` for node `n1` with `args` and state in a temp dir; its stderr, if it failed.
fn failed_start(args: &[&str]) -> String {
    let state = tempfile::tempdir().expect("temp dir");
    let output = crate::vigil()
        .args(["agent", "--node-name", "n1", "--state-dir"])
        .arg(state.path())
        .args(args)
        .output()
        .expect("runs");
    assert!(!output.status.success(), "the agent should refuse to start");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_config_layer_with_a_mistyped_field_stops_the_start_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "evictionBursts: 2\n").expect("write");
    let stderr = failed_start(&["--config", &config.display().to_string()]);
    assert!(stderr.contains("evictionBursts"), "{stderr}");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "evictionBurst: [\n").expect("write");
    let stderr = failed_start(&["--config", &broken.display().to_string()]);
    assert!(stderr.contains("is not YAML or JSON"), "{stderr}");
}

#[test]
fn an_unreadable_kubeconfig_stops_the_start_naming_the_file() {
    let stderr = failed_start(&["--kubeconfig", "/nonexistent/kubeconfig"]);
    assert!(
        stderr.contains("cannot read the kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn a_state_directory_others_can_write_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("temp dir");
    let state = root.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let output = crate::vigil()
        .args(["agent", "--node-name", "n1", "--state-dir"])
        .arg(&state)
        .output()
        .expect("runs");
    assert!(!output.status.success(), "the agent should refuse to start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{} is owned by uid", state.display()))
            && stderr.contains("mode 777")
            && stderr.contains("run native code"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_agent_while_a_policy_compiles() {
    let (server, fixture) = test_node().await;
    let js = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/js-sorter/js-sorter.wasm");
    std::fs::create_dir_all(fixture.path("policies")).expect("policies dir");
    std::fs::copy(&js, fixture.path("policies/js-sorter.wasm")).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the example policies with examples/policies/build.sh",
            js.display()
        )
    });
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    // The JavaScript component compiles for seconds, from an empty cache.
    let logs = terminated_cleanly(agent).await;
    assert!(
        !logs.contains("js-sorter@"),
        "the exit waited for the compile to finish: {logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_list_ends_in_a_ready_agent_cycling_on_its_period() {
    let (server, fixture) = test_node().await;
    // The first LIST of each thing the agent follows is answered (200)
    // after eight of the tests' one-second periods; the watches then start
    // normally. The endpoints are asked all along, as the kubelet's probes
    // do: a probe that polled the pod store once took the loop's wake-up,
    // and the loop never started (kube-runtime 5.0 wakes one waiter).
    let lists = [
        "/api/v1/pods?",
        "/api/v1/nodes?",
        "vigilconfigs?",
        "vigilpolicies?",
    ];
    for list in lists {
        server.slow_next(list, Duration::from_secs(8));
    }
    let agent = start(&server, &fixture, &[]);
    let ok = |a: &AgentProcess, path: &str| a.get(path).starts_with("HTTP/1.1 200");
    until_agent(&agent, "ready", |a| {
        let health = a.get("/healthz");
        // Not listening yet (the built-ins compile first), or alive.
        assert!(
            health.is_empty() || health.starts_with("HTTP/1.1 200"),
            "alive while the lists are slow: {health} {}",
            a.logs()
        );
        ok(a, "/readyz")
    })
    .await;
    let cycles = |a: &AgentProcess| a.metric("vigil_cycle_seconds_count").unwrap_or(0.0);
    let first = cycles(&agent);
    until_agent(&agent, "three more cycles, one a period", |a| {
        assert!(ok(a, "/healthz") && ok(a, "/readyz"), "{}", a.logs());
        cycles(a) >= first + 3.0
    })
    .await;
}

/// The DaemonSet's memory limit (`deploy/daemonset.yaml`), in KiB.
const CONTAINER_LIMIT_KIB: u64 = 128 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_leave_healthz_answering_within_the_agents_memory() {
    let (server, fixture) = test_node().await;
    let agent = start(&server, &fixture, &[]);
    until_agent(&agent, "ready", |a| {
        a.get("/readyz").starts_with("HTTP/1.1 200")
    })
    .await;
    let addr = agent.addr().expect("listening").to_owned();
    let before = agent.usage().resident_kib;
    // Connected and silent, as a client that means to hold the port.
    let idle: Vec<std::net::TcpStream> = (0..1000)
        .map(|_| std::net::TcpStream::connect(&addr).expect("connects"))
        .collect();
    let health = agent.get("/healthz");
    assert!(
        health.starts_with("HTTP/1.1 200"),
        "{health}\n{}",
        agent.logs()
    );
    let with = agent.usage().resident_kib;
    assert!(
        with < CONTAINER_LIMIT_KIB,
        "{with} KiB with 1000 idle connections"
    );
    eprintln!("resident: {before} KiB, with 1000 idle connections {with} KiB");
    drop(idle);
}
