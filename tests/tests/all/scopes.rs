//! Contract 0.3.0's semantics through the real eviction manager and a real
//! component (the scripted strategy): several thresholds in one decision,
//! each its own pressure; state kept between calls and reset when it must
//! be; a level that reports without evicting; a strategy's grace for hard
//! victims; signals and pod facts only for the strategies that asked.

use super::eviction::{Node, config, names, settings, shown};
use std::sync::Arc;
use vigil::model::{NumaMemory, PodFact, Signal};
use vigil::policy::Origin;
use vigil_tests::*;

/// The scripted strategy's bytes with a custom section appended: the same
/// code under another digest, so another version of it.
fn another_version() -> Vec<u8> {
    let name = b"vigil-test-version";
    let payload = [1u8];
    let mut bytes = SCRIPTED_STRATEGY.to_vec();
    bytes.push(0); // custom section
    bytes.push((1 + name.len() + payload.len()) as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&payload);
    bytes
}

/// The value the strategy's counter showed this cycle (its thresholds'
/// observed value, with `count`).
fn counted(report: &vigil::eviction::CycleReport) -> f64 {
    report
        .reported
        .iter()
        .find(|(name, _)| name == "script")
        .map(|(_, t)| t.observed)
        .expect("the script reported a threshold")
}

#[tokio::test]
async fn each_scope_of_one_decision_is_its_own_pressure_with_its_own_victim_grace_and_condition() {
    // Two NUMA nodes starved at once, each ranking its own pods first: one
    // victim for each, in one cycle; a third scope is soft with a 10 s grace
    // period and waits it out. (Scopes whose first pick is the same pod
    // share it, as any two pressures do.)
    let script = config(
        r#"{"scopes":[
            {"scope":"numa.0","met":"hard","condition":"VigilNUMA0Pressure",
             "victims":["uid-hog"]},
            {"scope":"numa.1","met":"hard","condition":"VigilNUMA1Pressure",
             "victims":["uid-steady","uid-hog"]},
            {"scope":"numa.2","met":"soft","grace":10,"victims":["uid-within-request"]}]}"#,
    );
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    let first = node.cycle().await;
    let scoped: Vec<(&str, Option<&str>)> = (first.started.iter())
        .map(|v| (v.pod.name.as_str(), v.scope.as_deref()))
        .collect();
    assert_eq!(
        scoped,
        [("hog", Some("numa.0")), ("steady", Some("numa.1"))],
        "one victim per hard scope: {first:?}"
    );
    let conditions: Vec<&str> = first.conditions.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(conditions, ["VigilNUMA0Pressure", "VigilNUMA1Pressure"]);
    // While both victims terminate each scope waits for its own; the soft
    // one is within its grace period.
    let second = node.cycle().await;
    assert!(second.started.is_empty(), "{second:?}");
    node.finish_evictions();
    let graced = node.cycle().await;
    assert_eq!(
        (graced.started.iter())
            .map(|v| (v.pod.name.as_str(), v.scope.as_deref()))
            .collect::<Vec<_>>(),
        [("within-request", Some("numa.2"))],
        "the soft scope's victim once its 10 s held: {graced:?}"
    );
}

#[tokio::test]
async fn a_report_only_threshold_holds_its_condition_and_evicts_nobody() {
    let script = config(r#"{"met":"report","condition":"VigilCPUPressure"}"#);
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    for _ in 0..3 {
        let report = node.cycle().await;
        assert_eq!(
            (report.conditions.iter())
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["VigilCPUPressure"]
        );
        assert!(
            report.decisions.is_empty() && report.started.is_empty(),
            "{report:?}"
        );
    }
    assert!(node.killer.evicted().is_empty());
}

#[tokio::test]
async fn state_is_kept_between_calls_and_reset_by_a_new_config_or_version() {
    let counting = |extra: &str| config(&format!(r#"{{"count":true{extra}}}"#));
    let mut node = Node::new(
        settings(&[("script", counting(""))]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(counted(&node.cycle().await));
    }
    assert_eq!(seen, [1.0, 2.0, 3.0], "the counter it kept");
    // A new config of the strategy starts afresh.
    node.manager
        .set_settings(settings(&[("script", counting(r#","scope":"other""#))]));
    assert_eq!(counted(&node.cycle().await), 1.0);
    assert_eq!(counted(&node.cycle().await), 2.0);
    // So does a new version of it.
    let next = node
        .registry
        .prepare("script", Arc::from(another_version()), Origin::Builtin)
        .expect("the other version loads");
    node.registry.install(next);
    assert_eq!(counted(&node.cycle().await), 1.0, "a new version's state");
    // A state over 64 KiB is a contract breach, not kept: checked where the
    // host checks every answer (the policy runtime's validation).
}

#[tokio::test]
async fn a_hard_victim_gets_the_grace_its_strategy_asks_within_the_cap() {
    for (asked, granted) in [
        (Some(7), Some(7)),
        (Some(0), Some(1)),
        (Some(900), Some(300)),
    ] {
        let script = config(&format!(
            r#"{{"met":"hard","victims":["uid-hog"],"victimGrace":{}}}"#,
            asked.unwrap()
        ));
        let mut node = Node::new(
            settings(&[("script", script)]),
            &[("script", SCRIPTED_STRATEGY)],
        );
        let report = node.cycle().await;
        assert_eq!(names(&report.started), ["hog"], "{report:?}");
        assert_eq!(
            report.started[0].grace_period_seconds, granted,
            "asked {asked:?}"
        );
    }
}

#[tokio::test]
async fn signals_and_pod_facts_reach_only_the_strategies_that_asked() {
    let asks = config(
        r#"{"showSignals":true,"interest":{"signals":["numa.*","vm.oomKill"],"facts":["numa-memory"]}}"#,
    );
    // Asked first (strategies go by name), the blind one has what it was
    // not shown only set aside for its call: the one that asks sees it.
    let blind = config(r#"{"showSignals":true}"#);
    let mut node = Node::new(
        settings(&[("asks", asks), ("a-blind", blind)]),
        &[("asks", SCRIPTED_STRATEGY), ("a-blind", SCRIPTED_STRATEGY)],
    );
    let signal = |name: &str| Signal {
        name: name.into(),
        value: 1.0,
        capacity: None,
    };
    node.signals = vec![
        signal("numa.0.memory.free"),
        signal("vm.oomKill"),
        signal("cpu.load1"),
    ];
    node.pods.truncate(2);
    for pod in &mut node.pods {
        pod.usage.numa_memory = vec![NumaMemory {
            node: 0,
            bytes: 1 << 20,
        }];
        pod.usage.memory_usage_bytes = Some(2 << 20);
    }
    // What the node source is told to read: what was declared, each once.
    let wanted = node.manager.wanted();
    assert_eq!(wanted.signals, ["numa.*", "vm.oomKill"]);
    assert_eq!(wanted.facts, [PodFact::NumaMemory]);
    assert!(wanted.ranking_facts.is_empty());
    let report = node.cycle().await;
    assert_eq!(
        shown(&report, "asks"),
        "memory.available,numa.0.memory.free,vm.oomKill; critical-hog: numa-memory; hog: numa-memory"
    );
    assert_eq!(
        shown(&report, "a-blind"),
        "memory.available; critical-hog: ; hog: ",
        "the kubelet's signals only, no pod fact"
    );
}

/// The agent on the testbed's node: a 0.3.0 strategy that declines unless it
/// is given the signals beyond the kubelet's it declared and the pods carry
/// the facts it declared evicts, so what it asked for reached it through the
/// agent's own node source (the rates and the pod's cpu throttling over a
/// window from the second cycle on, its writable layers once the kubelet's
/// summary is fetched; `cpu.usage` is not asked: the testbed's `/proc/stat`
/// never moves, and a CPU share over no ticks is absent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reads_the_declared_signals_and_pod_facts_on_the_node() {
    evicted_with_what_it_declared(true).await;
}

/// As above, by a strategy that judges signals alone (no pods in
/// `evaluate`): the facts it declared reach its `top-victims`, read only in
/// the cycle that ranks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facts_a_signal_only_strategy_ranks_by_reach_its_top_victims() {
    evicted_with_what_it_declared(false).await;
}

async fn evicted_with_what_it_declared(pods_in_evaluate: bool) {
    use std::time::Duration;
    use vigil_testbed::{ApiServer, NodeFiles, objects};
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node("node-1"));
    let files = NodeFiles::default();
    let pod = objects::best_effort_pod("node-1", "shop", "numa-hog", 3);
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    files.best_effort_pod(&uid, 100);
    files.write(
        "cgroup/kubepods/memory.pressure",
        "some avg10=4.00 avg60=1.00 avg300=0.00 total=40\nfull avg10=1.00 avg60=0.25 avg300=0.00 total=10\n",
    );
    let cgroup = format!("cgroup/kubepods/besteffort/pod{uid}");
    files.write(
        &format!("{cgroup}/memory.numa_stat"),
        "anon N0=104857600\nfile N0=0\n",
    );
    files.write(
        &format!("{cgroup}/memory.pressure"),
        "some avg10=1.50 avg60=0.00 avg300=0.00 total=9\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=3\n",
    );
    files.write(
        &format!("{cgroup}/cpu.stat"),
        "usage_usec 1000\nnr_periods 40\nnr_throttled 3\nthrottled_usec 25000\n",
    );
    server.put("pods", "shop", pod);
    server.kubelet_summary(serde_json::json!({"pods": [
        {"podRef": {"name": "numa-hog", "namespace": "shop", "uid": uid},
         "containers": [{"name": "main", "rootfs": {"time": "2026-11-28T10:00:00Z",
                                                     "usedBytes": 4096000, "inodesUsed": 12}}]}
    ]}));
    files.write("kubeconfig", &server.kubeconfig());
    let needs = r#"{"met": "hard", "victims": ["uid-numa-hog"],
        "needSignals": ["memory.free", "memory.watermark.min", "numa.0.memory.free",
                        "numa.0.zone.normal.min", "vm.watermarkScaleFactor", "vm.oomKill",
                        "vm.kswapd.steal", "vm.workingset.refault", "cpu.load1",
                        "psi.workload.memory.some.avg10"],
        "needFacts": ["memory-usage", "numa-memory", "memory-pressure", "cpu-throttling",
                      "writable-layers"],
        "interest": {"signals": ["memory.*", "numa.*", "vm.*", "cpu.*", "psi.workload.*"],
                     "facts": ["memory-usage", "numa-memory", "memory-pressure",
                               "cpu-throttling", "writable-layers"],
                     "podsInEvaluate": PODS}}"#
        .replace("PODS", &pods_in_evaluate.to_string());
    files.write(
        "config.yaml",
        &format!(
            "evictionPeriodSeconds: 1\npolicies:\n  disk-pressure: {{enabled: false}}\n  \
             script:\n    dryRun: false\n    config: {needs}\n"
        ),
    );
    std::fs::create_dir_all(files.path("policies")).unwrap();
    std::fs::write(files.path("policies/script.wasm"), SCRIPTED_STRATEGY).unwrap();
    let mut config = agent_config(&files);
    config.kubelet = Some(vigil::cluster::kubelet_stats::KubeletEndpoint {
        url: server.url().parse().unwrap(),
        ca: None,
    });
    let agent = InProcessAgent::start(config);
    server
        .until(Duration::from_secs(60), "the pod is evicted", |s| {
            !s.evictions().is_empty()
        })
        .await;
    assert!(
        server.evictions()[0]
            .uri
            .ends_with("/namespaces/shop/pods/numa-hog/eviction")
    );
    let summaries = (server.requests().iter())
        .filter(|r| r.uri == "/stats/summary")
        .count();
    assert!(summaries >= 1, "the layers came from the kubelet's summary");
    agent.stop().await;
}

#[test]
fn a_fact_only_ranking_reads_is_wanted_for_ranking_unless_it_is_a_rate() {
    let ranks = config(
        r#"{"interest":{"podsInEvaluate":false,"facts":["numa-memory","memory-pressure","cpu-throttling"]}}"#,
    );
    let judges = config(r#"{"interest":{"facts":["memory-pressure"]}}"#);
    let node = Node::new(
        settings(&[("ranks", ranks), ("judges", judges)]),
        &[("ranks", SCRIPTED_STRATEGY), ("judges", SCRIPTED_STRATEGY)],
    );
    let wanted = node.manager.wanted();
    let mut every_cycle = wanted.facts.clone();
    every_cycle.sort_by_key(|fact| format!("{fact:?}"));
    assert_eq!(
        every_cycle,
        [PodFact::CpuThrottling, PodFact::MemoryPressure],
        "a rate, and what a strategy judges by"
    );
    assert_eq!(wanted.ranking_facts, [PodFact::NumaMemory]);
}
