//! The bundled scenarios through the real eviction manager and the real
//! policies: exact victims at exact virtual times.

use std::path::PathBuf;
use vigil::simulate::{RunOptions, Scenario, Simulation, run};

fn scenario_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios")
        .join(format!("{name}.yaml"))
}

async fn simulate(name: &str) -> Simulation {
    let path = scenario_path(name);
    let scenario = Scenario::load(&path).expect("the bundled scenario is valid");
    run(&scenario, path.parent().unwrap(), &RunOptions::default())
        .await
        .expect("the scenario runs")
}

/// `(seconds, pod)` of every eviction.
fn evictions(simulation: &Simulation) -> Vec<(f64, &str)> {
    simulation
        .evictions
        .iter()
        .map(|e| (e.at, e.pod.as_str()))
        .collect()
}

#[tokio::test]
async fn hard_pressure_evicts_the_batch_job_then_the_web_server_over_its_request() {
    let simulation = simulate("hard-memory-pressure").await;
    assert_eq!(
        evictions(&simulation),
        [(35.0, "default/batch-job"), (140.0, "default/web")]
    );
    // A hard eviction has no grace period (hardGracePeriodSeconds 0): the
    // pod is gone by the next step.
    let recovered = simulation.steps.iter().find(|s| s.t == 40.0).unwrap();
    assert_eq!(recovered.gone, ["default/batch-job"]);
    assert!(
        recovered.signals["memory.available"] > (3u64 << 30) as f64,
        "memory comes back once the pod is gone"
    );
}

#[tokio::test]
async fn a_soft_threshold_with_a_30s_grace_period_evicts_at_50s_not_45s() {
    let simulation = simulate("soft-threshold-grace").await;
    assert_eq!(evictions(&simulation), [(50.0, "default/report-job")]);
    let at_45 = simulation.steps.iter().find(|s| s.t == 45.0).unwrap();
    assert_eq!(
        at_45.conditions,
        ["MemoryPressure"],
        "the condition is reported during the grace period"
    );
    assert!(
        at_45
            .thresholds
            .iter()
            .any(|t| t.met == vigil::simulate::Met::Soft && !t.past_grace)
    );
}

#[tokio::test]
async fn the_noisy_neighbour_alone_is_evicted() {
    assert_eq!(
        evictions(&simulate("noisy-neighbour").await),
        [(90.0, "default/leaky")]
    );
}

#[tokio::test]
async fn a_critical_static_or_mirror_pod_is_never_chosen() {
    let simulation = simulate("critical-pod").await;
    assert_eq!(evictions(&simulation), [(20.0, "default/analytics")]);
    for step in &simulation.steps {
        assert!(
            step.decisions
                .iter()
                .all(|d| !d.pod.starts_with("kube-system/")),
            "{step:?}"
        );
    }
}

/// katalyst's NUMA strategy on a NUMA node starved while the node is not:
/// the reclaimed_cores job goes at once, the analytics job holding the most
/// of node 1 after the fast-eviction wait, and nobody on node 0 alone.
#[tokio::test]
async fn a_starved_numa_node_evicts_reclaimed_pods_first_then_its_largest_holder() {
    let simulation = simulate("numa-pressure").await;
    assert_eq!(
        evictions(&simulation),
        [(30.0, "default/batch"), (35.0, "default/analytics")]
    );
    for step in &simulation.steps {
        assert!(
            step.signals["memory.available"] >= (3u64 << 30) as f64,
            "the node as a whole is never short: {step:?}"
        );
    }
}

/// katalyst's system memory strategy on free memory under the scaled
/// watermark while `memory.available` looks healthy: the larger
/// reclaimed_cores pod goes, and the dip at 40 s, inside the cool-down,
/// holds the condition and evicts nobody.
#[tokio::test]
async fn free_memory_under_the_watermark_evicts_one_reclaimed_pod_then_cools_down() {
    let simulation = simulate("system-memory-pressure").await;
    assert_eq!(evictions(&simulation), [(20.0, "default/offline-training")]);
    let at_40 = simulation.steps.iter().find(|s| s.t == 40.0).unwrap();
    assert!(
        at_40
            .thresholds
            .iter()
            .any(|t| t.met == vigil::simulate::Met::Report),
        "{at_40:?}"
    );
    assert_eq!(at_40.conditions, ["MemoryPressure"]);
    for step in &simulation.steps {
        assert!(step.signals["memory.available"] > (20u64 << 30) as f64);
    }
}

/// katalyst's system CPU strategy: a saturated node is tainted at the soft
/// bound with nobody evicted, and the busiest pod goes once half of the
/// ring is over the hard one.
#[tokio::test]
async fn a_cpu_saturated_node_is_tainted_before_anyone_is_evicted() {
    let simulation = simulate("system-cpu-pressure").await;
    assert_eq!(evictions(&simulation), [(75.0, "default/encoder")]);
    let tainted = (simulation.steps.iter())
        .find(|s| s.conditions.iter().any(|c| c == "SystemCPU"))
        .expect("SystemCPU is reported");
    assert_eq!(tainted.t, 20.0, "three of six samples over 80 %");
    assert!(
        tainted.decisions.is_empty(),
        "nobody is evicted at the soft bound"
    );
}

/// Simulates the scenario `yaml` from `dir`, which must fail; the error chain.
async fn refused(dir: &std::path::Path, yaml: &str) -> String {
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, yaml).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    let error = run(&scenario, dir, &RunOptions::default())
        .await
        .unwrap_err();
    vigil::base::report::Chain(&error).to_string()
}

#[tokio::test]
async fn a_scenario_with_a_bad_config_layer_is_rejected_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = refused(
        dir.path(),
        "name: bad\nduration: 10s\nnode: {memory: 1Gi}\nconfig: {evictionBurst: 0}\npods: []\n",
    )
    .await;
    assert!(
        text.contains(
            "config layer scenario does not match the config schema: $.evictionBurst: 0 is less than the minimum of 1"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn psi_pressure_evicts_the_thrashing_pod_while_memory_is_still_free() {
    let simulation = simulate("psi-pressure").await;
    assert_eq!(evictions(&simulation), [(50.0, "default/indexer")]);
    let at_eviction = simulation.steps.iter().find(|s| s.t == 50.0).unwrap();
    assert!(at_eviction.signals["memory.available"] > (3u64 << 30) as f64);
    let after = simulation.steps.iter().find(|s| s.t == 60.0).unwrap();
    assert!(
        after.signals["psi.memory.some.avg10"] < 5.0,
        "the stall ends with the pod"
    );
}

#[tokio::test]
async fn disk_then_pid_pressure_each_evict_their_own_culprit() {
    let simulation = simulate("disk-and-pid-pressure").await;
    assert_eq!(
        evictions(&simulation),
        [
            (40.0, "default/chatty-service"),
            (150.0, "default/fork-job")
        ]
    );
    let strategies: Vec<&str> = simulation
        .evictions
        .iter()
        .map(|e| e.strategy.as_str())
        .collect();
    assert_eq!(strategies, ["disk-pressure", "pid-pressure"]);
    let at_pid = simulation.steps.iter().find(|s| s.t == 150.0).unwrap();
    assert_eq!(
        at_pid.conditions,
        ["DiskPressure", "PIDPressure"],
        "DiskPressure lingers for its transition period"
    );
}

#[tokio::test]
async fn a_pdb_protected_top_victim_is_passed_over_for_the_next_pod_at_the_same_instant() {
    let path = scenario_path("hard-memory-pressure");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "  - name: batch-job\n",
        "  - name: batch-job\n    pdbDisruptionsAllowed: 0\n",
    );
    assert!(text.contains("pdbDisruptionsAllowed: 0"));
    let scenario = Scenario::parse(&text, &path).expect("valid");
    let simulation = run(&scenario, path.parent().unwrap(), &RunOptions::default())
        .await
        .expect("runs");
    let evicted = evictions(&simulation);
    // Without the budget the batch job goes at 35 s; with it, another pod
    // goes at that very step instead.
    assert_eq!(evicted[0].0, 35.0, "{evicted:?}");
    assert_ne!(evicted[0].1, "default/batch-job", "{evicted:?}");
    let overridden: Vec<_> = simulation
        .evictions
        .iter()
        .filter(|e| e.pod == "default/batch-job")
        .collect();
    assert!(
        overridden.iter().all(|e| e.at >= 35.0 + 60.0),
        "deleted despite its budget only after pdbOverrideAfterSeconds: {evicted:?}"
    );
}

#[tokio::test]
async fn a_scenarios_per_policy_limits_apply_from_the_first_load() {
    let simulation = simulate_text(
        "name: limits\nduration: 10s\nnode: {memory: 1Gi}\npoliciesDir: policies\n\
         config: {policies: {extra-sorter: {memoryLimitMiB: 1}}}\npods: []\n",
        &[("extra-sorter", vigil_tests::REVERSE_SORTER)],
    )
    .await;
    let warning = &simulation.warnings[0];
    assert!(
        warning.starts_with(
            "policy extra-sorter in the policies directory did not load; nothing of that name serves: "
        ) && warning.contains("memory limit of 1 MiB"),
        "the canary ran with the scenario's limit, and the run went on: {warning}"
    );
    assert!(simulation.policies.iter().all(|p| p.name != "extra-sorter"));
}

/// Runs the scenario `yaml`, with `policies` (name, component) in its
/// policies directory.
async fn simulate_text(yaml: &str, policies: &[(&str, &[u8])]) -> Simulation {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    for (name, bytes) in policies {
        std::fs::write(dir.path().join(format!("policies/{name}.wasm")), bytes).unwrap();
    }
    let scenario = Scenario::parse(yaml, &dir.path().join("s.yaml")).expect("valid");
    run(&scenario, dir.path(), &RunOptions::default())
        .await
        .expect("the scenario runs")
}

#[tokio::test]
async fn pods_start_when_their_age_says_and_arrive_and_leave_on_time() {
    // A strategy that always wants the oldest pod gone, one per cycle (every
    // 5 s); each pod is gone 1 s after its eviction. By hand: at 0 s `b`
    // (2 days old) beats `a` (1 hour) and `d` (started with the scenario);
    // at 5 s `a`; at 10 s `d` (started at 0 s) beats `c` (arrived at 7 s);
    // at 15 s `c`. `e` is there only from 1 s to 4 s, between two cycles.
    let pod = |name: &str, when: &str| {
        format!("  - {{name: {name}, gracePeriod: 1s, memory: [{{at: 0s, value: 100Mi}}]{when}}}\n")
    };
    let yaml = format!(
        "name: ages\nduration: 15s\nnode: {{memory: 8Gi}}\npoliciesDir: policies\n\
         config: {{evictionBurst: 1, policies: {{script: {{dryRun: false, config: {{met: hard, oldestFirst: true}}}}}}}}\n\
         pods:\n{}{}{}{}{}",
        pod("a", ", age: 1h"),
        pod("b", ", age: 2d"),
        pod("c", ", arrivesAt: 7s"),
        pod("d", ""),
        pod("e", ", arrivesAt: 1s, leavesAt: 4s"),
    );
    let simulation = simulate_text(&yaml, &[("script", vigil_tests::SCRIPTED_STRATEGY)]).await;
    assert_eq!(
        evictions(&simulation),
        [
            (0.0, "default/b"),
            (5.0, "default/a"),
            (10.0, "default/d"),
            (15.0, "default/c")
        ]
    );
}

#[tokio::test]
async fn memory_follows_the_pods_that_are_there() {
    let yaml = "name: presence\nduration: 15s\nnode: {memory: 4Gi}\npods:\n\
                - {name: always, memory: [{at: 0s, value: 1Gi}]}\n\
                - {name: visitor, arrivesAt: 5s, leavesAt: 10s, memory: [{at: 0s, value: 1Gi}]}\n";
    let simulation = simulate_text(yaml, &[]).await;
    let available: Vec<(f64, f64)> = simulation
        .steps
        .iter()
        .map(|s| (s.t, s.signals["memory.available"] / f64::from(1u32 << 30)))
        .collect();
    assert_eq!(
        available,
        [(0.0, 3.0), (5.0, 2.0), (10.0, 3.0), (15.0, 3.0)]
    );
}

#[tokio::test]
async fn a_policy_fault_is_recorded_with_the_guests_message_and_the_simulation_goes_on() {
    // Both policies trap when a pod named `trigger-fault` is offered: the
    // strategy in every cycle, the sorter when asked to sort. The built-in
    // memory strategy still acts, and under hard pressure the built-in sorter
    // stands in for the faulting one.
    let yaml = "name: faults\nduration: 10s\nnode: {memory: 4Gi}\npoliciesDir: policies\n\
                config: {sorter: flaky-sorter, policies: {\
                memory-pressure: {config: {hard: 1Gi}}, \
                script: {config: {met: not-met, trapOnPod: trigger-fault}}}}\n\
                pods:\n\
                - {name: trigger-fault, memory: [{at: 0s, value: 512Mi}]}\n\
                - {name: hog, gracePeriod: 30s, memory: [{at: 0s, value: 3Gi}]}\n";
    let simulation = simulate_text(
        yaml,
        &[
            ("flaky-sorter", vigil_tests::FLAKY_SORTER),
            ("script", vigil_tests::SCRIPTED_STRATEGY),
        ],
    )
    .await;
    let skipped = &simulation.steps[0].skipped;
    let said = |who: &str, message: &str| {
        skipped
            .iter()
            .any(|s| s.starts_with(who) && s.contains("trapped: it wrote: ") && s.contains(message))
    };
    assert!(
        said(
            "strategy script skipped: ",
            "scripted-strategy met its trigger"
        ),
        "{skipped:?}"
    );
    assert!(
        said(
            "sorter flaky-sorter ",
            "fault-sorter (flaky) met its trigger"
        ) && skipped[1].ends_with("; using the built-in default-sorter"),
        "{skipped:?}"
    );
    assert_eq!(evictions(&simulation), [(0.0, "default/hog")]);
    // Both were on trial: their faults withdrew them, as in the agent, and
    // the run says so; later cycles go on without them.
    let withdrawn = |name: &str| {
        format!("policy {name} faulted in its trial and was withdrawn: nothing of that name serves")
    };
    let expected = [withdrawn("flaky-sorter"), withdrawn("script")];
    assert_eq!(simulation.warnings, expected);
    assert_eq!(skipped[2..], expected);
    assert!(
        simulation.steps[1..]
            .iter()
            .all(|s| s.skipped.iter().all(|s| !s.starts_with("strategy script")))
    );
    let text = vigil::simulate::render(&simulation);
    assert!(
        text.contains(".. strategy script skipped: trapped: it wrote: ")
            && text.contains(".. sorter flaky-sorter "),
        "{text}"
    );
    let json = serde_json::to_value(&simulation).unwrap();
    assert_eq!(json["steps"][0]["skipped"][0], skipped[0].as_str());
}

#[tokio::test]
async fn the_kubelets_image_gc_gets_its_chance_and_vigil_evicts_before_the_kubelet_would() {
    let simulation = simulate("disk-beside-the-kubelet").await;
    // In the image GC band for 70 s, below the soft threshold: no eviction
    // until the logger fills the disk; then one, at the hard threshold.
    assert_eq!(evictions(&simulation), [(285.0, "default/logger")]);
    let collecting = |s: &&vigil::simulate::Step| {
        s.kubelet
            .iter()
            .any(|a| a.starts_with("deletes unused images"))
    };
    let first_gc = simulation.steps.iter().find(collecting).unwrap();
    assert!(
        first_gc.t < 90.0,
        "the kubelet's image GC runs first: {first_gc:?}"
    );
    assert!(
        simulation
            .steps
            .iter()
            .all(|s| !s.kubelet.iter().any(|a| a.starts_with("evicts"))),
        "the kubelet never had to evict"
    );
    assert!(simulation.steps.iter().all(|s| s.misplaced.is_empty()));
    // The same disk with vigil set behind the kubelet: it says so.
    let behind = std::fs::read_to_string(scenario_path("disk-beside-the-kubelet"))
        .unwrap()
        .replace(
            "pods:\n",
            "config:\n  policies:\n    disk-pressure: {config: {hard: '9%', soft: '16%'}}\npods:\n",
        );
    let misplaced = simulate_text(&behind, &[]).await;
    let said: std::collections::BTreeSet<&String> =
        misplaced.steps.iter().flat_map(|s| &s.misplaced).collect();
    assert!(
        said.iter()
            .any(|t| t.contains("comes before the kubelet's image GC")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|t| t.contains("is not ahead of the kubelet's")),
        "{said:?}"
    );
}

#[tokio::test]
async fn a_decision_of_several_scopes_a_report_only_level_kept_state_and_a_hard_grace_simulate() {
    // One strategy: `numa.0` hard (its victim asks a 3 s grace), `cpu`
    // report-only with its condition, and a counter kept in its state.
    let yaml = "name: contract-0-3\nduration: 10s\nnode: {memory: 8Gi}\npoliciesDir: policies\n\
                config: {policies: {script: {dryRun: false, config: {count: true, victimGrace: 3, \
                scopes: [{scope: numa.0, met: hard}, \
                {scope: cpu, met: report, condition: VigilCPUPressure}]}}}}\n\
                pods:\n\
                - {name: a, gracePeriod: 30s, memory: [{at: 0s, value: 100Mi}]}\n";
    let simulation = simulate_text(yaml, &[("script", vigil_tests::SCRIPTED_STRATEGY)]).await;
    let evicted: Vec<(f64, &str, f64)> = (simulation.evictions.iter())
        .map(|e| (e.at, e.pod.as_str(), e.gone_at))
        .collect();
    assert_eq!(
        evicted,
        [(0.0, "default/a", 3.0)],
        "numa.0's victim, gone after the 3 s its strategy asked (not its own 30 s)"
    );
    for step in &simulation.steps {
        let script: Vec<(&str, f64)> = (step.thresholds.iter())
            .filter(|t| t.strategy == "script")
            .map(|t| (t.scope.as_str(), t.observed))
            .collect();
        let count = step.t / 5.0 + 1.0;
        assert_eq!(script, [("numa.0", count), ("cpu", count)], "at {}", step.t);
        assert!(
            step.conditions.iter().any(|c| c == "VigilCPUPressure"),
            "the report-only condition holds at {}",
            step.t
        );
    }
}

/// katalyst's reclaimed resources strategy: once the node offers a third of
/// what its reclaimed pods request, the pod requesting most goes, and the
/// rest, within 1.5x the offer, stay; memory is fine all along.
#[tokio::test]
async fn reclaimed_pods_promised_more_than_the_node_offers_lose_the_largest() {
    let simulation = simulate("reclaimed-resources").await;
    assert_eq!(evictions(&simulation), [(30.0, "default/batch-a")]);
    let before = (simulation.steps.iter())
        .filter(|s| s.t < 30.0)
        .all(|s| s.decisions.is_empty());
    assert!(
        before,
        "nothing is judged over while the node offers 16 cores"
    );
    for step in &simulation.steps {
        assert!(step.signals["memory.available"] > (20u64 << 30) as f64);
    }
}
