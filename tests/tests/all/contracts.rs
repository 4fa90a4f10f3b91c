//! Contract skew: components really built from earlier contracts,
//! `vigil:policy@0.1.0` and `0.2.0` (`wit/0.1.0/`, `wit/0.2.0/`, the
//! `contract-0-1` and `contract-0-2` test guests), pass the check saying
//! which contract they speak, get what an agent of their contract gave them
//! through the host's adapters, and evict through the real eviction manager.

use vigil::authoring::check_bytes;
use vigil::model::{
    Candidate, CandidateUrgency, KeyValue, Layer, MetLevel, OwnerKind, Pod, ScopeMet, Signal,
    Snapshot,
};
use vigil::policy::builtin;
use vigil::policy::{Contract, Host, Limits, Origin, Policy, World};
use vigil::simulate::{RunOptions, Scenario, run};
use vigil_tests::*;

fn load(name: &str, bytes: &[u8]) -> Policy {
    let host = Host::new(None).expect("host starts");
    host.load(name, bytes.to_vec(), Origin::Builtin, Limits::default())
        .unwrap_or_else(|e| panic!("{name} does not load: {e}"))
}

fn pair(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
    }
}

/// A pod with `labels` and `annotations`, owned by a controller of `owner`.
fn pod(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)], owner: OwnerKind) -> Pod {
    let mut pod = vigil::model::fixture::pod(name).usage_mib(100).build();
    pod.labels = labels.iter().map(|(k, v)| pair(k, v)).collect();
    pod.annotations = annotations.iter().map(|(k, v)| pair(k, v)).collect();
    pod.owner_kind = Some(owner);
    pod
}

fn snapshot(available: f64, pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        now_ms: 1_700_000_000_000,
        signals: vec![Signal {
            name: "memory.available".into(),
            value: available,
            capacity: Some(8e9),
        }],
        pods,
        last_met: Vec::new(),
        state: Vec::new(),
        config: "{}".into(),
    }
}

/// Records compared as data (the generated types have no `PartialEq`).
fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("records serialise")
}

fn names(snapshot: &Snapshot, uids: impl IntoIterator<Item = String>) -> Vec<String> {
    uids.into_iter()
        .map(|uid| {
            snapshot
                .pods
                .iter()
                .find(|p| p.uid == uid)
                .expect("a pod of the snapshot")
                .name
                .clone()
        })
        .collect()
}

#[test]
fn a_0_1_0_component_passes_the_check_and_says_which_contract_it_speaks() {
    let host = Host::new(None).unwrap();
    for (bytes, world) in [
        (STRATEGY_0_1, "eviction-strategy"),
        (SORTER_0_1, "candidate-sorter"),
    ] {
        let report = check_bytes(
            &host,
            "legacy.wasm".into(),
            "legacy",
            bytes.to_vec(),
            Origin::Builtin,
            "{}",
        )
        .unwrap_or_else(|e| panic!("the 0.1.0 {world} fails the check: {e}"));
        assert_eq!(report.contract, Contract::V0_1);
        let text = report.to_string();
        assert!(
            text.contains(&format!("world:    vigil:policy/{world}@0.1.0\n")),
            "{text}"
        );
        assert!(
            text.contains(
                "contract: vigil:policy@0.1.0 (an earlier one: this agent adapts it to 0.3.0"
            ),
            "{text}"
        );
        assert!(text.contains("canary call passed"), "{text}");
    }
    let current = check_bytes(
        &host,
        "builtin".into(),
        "default-sorter",
        builtin("default-sorter").unwrap().to_vec(),
        Origin::Builtin,
        "{}",
    )
    .unwrap();
    assert_eq!(
        (current.world, current.contract),
        (World::CandidateSorter, Contract::V0_3)
    );
    for (bytes, world) in [
        (STRATEGY_0_2, World::EvictionStrategy),
        (SORTER_0_2, World::CandidateSorter),
    ] {
        let report = check_bytes(
            &host,
            "v2.wasm".into(),
            "v2",
            bytes.to_vec(),
            Origin::Builtin,
            "{}",
        )
        .unwrap_or_else(|e| panic!("the 0.2.0 {world} fails the check: {e}"));
        assert_eq!((report.world, report.contract), (world, Contract::V0_2));
        assert!(
            report.to_string().contains("canary call passed"),
            "{report}"
        );
    }
}

#[test]
fn a_0_2_0_strategy_gets_one_threshold_its_last_level_and_zero_for_an_unread_usage() {
    let policy = load("v2", STRATEGY_0_2);
    assert_eq!(policy.contract(), Contract::V0_2);
    let strategy = policy.as_strategy().expect("a strategy");
    let mut batch = pod("batch", &[("tier", "batch")], &[], OwnerKind::Job);
    batch.usage = vigil::model::Usage::unread();
    let pods = vec![
        pod(
            "web",
            &[("tier", "web")],
            &[("note", "x")],
            OwnerKind::ReplicaSet,
        ),
        batch,
    ];
    let level = |snapshot: &mut Snapshot| {
        let decision = strategy.evaluate(snapshot).unwrap().unwrap();
        assert_eq!(decision.thresholds.len(), 1, "one threshold, as 0.2.0 had");
        assert!(decision.state.is_none(), "0.2.0 keeps no state");
        decision.thresholds[0].met
    };
    // 1.2 GB free of 8: not under a tenth, but under a fifth once it was hard.
    let mut snapshot = snapshot(1.2e9, pods.clone());
    assert_eq!(level(&mut snapshot), MetLevel::NotMet);
    snapshot.last_met = vec![ScopeMet {
        scope: "memory".into(),
        met: MetLevel::Hard,
        victim: false,
    }];
    assert_eq!(level(&mut snapshot), MetLevel::Hard, "it read last-met");
    // Signals beyond the kubelet's are not its: it declared none.
    snapshot.signals.push(Signal {
        name: "numa.0.memory.free".into(),
        value: 1.0,
        capacity: None,
    });
    strategy.evaluate(&mut snapshot).unwrap().unwrap();
    let victims = strategy
        .top_victims(&mut snapshot, "memory", 2)
        .unwrap()
        .unwrap();
    // The batch pod first by the label it declared; its unread usage is 0
    // to it, as a 0.2.0 agent said.
    assert_eq!(
        names(&snapshot, victims.iter().map(|e| e.uid.clone())),
        ["batch", "web"]
    );
    assert_eq!(victims[0].reason, "working set 0 bytes, batch");
    assert_eq!(json(&snapshot.pods), json(&pods), "given back whole");
}

#[test]
fn a_0_2_0_sorter_is_told_its_strategy_by_index_and_its_order_counts() {
    let policy = load("v2", SORTER_0_2);
    let sorter = policy.as_sorter().expect("a sorter");
    let strategies = strategies();
    for urgency in [CandidateUrgency::Hard, CandidateUrgency::Soft] {
        let mut given = candidates(urgency);
        let sorted = sorter.sort(&strategies, &mut given, "{}").unwrap().unwrap();
        assert_eq!(
            order_of(&given, &sorted.order),
            ["c", "b", "a"],
            "{urgency:?}"
        );
        let why = if urgency == CandidateUrgency::Hard {
            "hard"
        } else {
            "soft"
        };
        assert_eq!(
            sorted.rejected[0].reason,
            format!("kept: memory-pressure proposed it ({why})")
        );
    }
}

#[test]
fn a_0_1_0_strategy_reads_every_label_annotation_and_owner_kind_without_declaring_them() {
    let policy = load("legacy", STRATEGY_0_1);
    assert_eq!(
        (policy.world(), policy.contract()),
        (World::EvictionStrategy, Contract::V0_1)
    );
    let strategy = policy.as_strategy().expect("a strategy");
    let pods = vec![
        pod("web", &[("tier", "web")], &[], OwnerKind::ReplicaSet),
        pod("report", &[], &[], OwnerKind::Job),
        pod(
            "stale",
            &[],
            &[("legacy.vigil.dev/evict-now", "yes")],
            OwnerKind::Other("Rollout".into()),
        ),
        pod("etl", &[("tier", "batch")], &[], OwnerKind::StatefulSet),
    ];
    let mut calm = snapshot(4e9, pods.clone());
    let decision = strategy.evaluate(&mut calm).unwrap().unwrap();
    assert_eq!(decision.thresholds[0].met, vigil::model::MetLevel::NotMet);
    assert_eq!(
        decision.thresholds[0]
            .condition
            .as_ref()
            .map(|c| c.name.as_str()),
        Some("MemoryPressure")
    );
    // The owner's kind arrives as its name, the annotation whole.
    let soft = names(&calm, decision.soft_candidates.into_iter().map(|e| e.uid));
    assert_eq!(soft, ["report"]);
    let forced = &decision.force_evictions;
    assert_eq!(
        names(&calm, forced.iter().map(|e| e.uid.clone())),
        ["stale"]
    );
    assert_eq!(forced[0].reason, "asked to by its annotation");
    assert_eq!(
        json(&calm.pods),
        json(&pods),
        "the pods are given back as they were"
    );

    let mut pressed = snapshot(1e8, pods.clone());
    let decision = strategy.evaluate(&mut pressed).unwrap().unwrap();
    assert_eq!(decision.thresholds[0].met, vigil::model::MetLevel::Hard);
    let victims = strategy
        .top_victims(&mut pressed, "memory", 4)
        .unwrap()
        .unwrap();
    // The labels it never declared rank the batch pod first.
    assert_eq!(
        names(&pressed, victims.iter().map(|e| e.uid.clone())),
        ["etl", "web", "report", "stale"]
    );
    assert_eq!(victims[0].reason, "tier batch");
    assert_eq!(victims[1].reason, "tier web");
    let two = strategy
        .top_victims(&mut pressed, "memory", 2)
        .unwrap()
        .unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(json(&pressed.pods), json(&pods));
}

fn candidates(urgency: CandidateUrgency) -> Vec<Candidate> {
    ["b", "kept", "a", "c"]
        .into_iter()
        .map(|name| {
            let labels: &[(&str, &str)] = if name == "kept" {
                &[("legacy.vigil.dev/keep", "")]
            } else {
                &[]
            };
            Candidate {
                pod: pod(name, labels, &[], OwnerKind::ReplicaSet),
                strategy: 1,
                urgency,
            }
        })
        .collect()
}

#[test]
fn a_0_1_0_sorter_is_told_strategy_and_reason_and_its_order_counts_where_0_1_0_let_it() {
    let policy = load("legacy", SORTER_0_1);
    let sorter = policy.as_sorter().expect("a sorter");
    let strategies = strategies();
    let sort = |urgency| {
        let mut given = candidates(urgency);
        let sorted = sorter.sort(&strategies, &mut given, "{}").unwrap().unwrap();
        assert_eq!(json(&given), json(&candidates(urgency)), "given back whole");
        let refusals: Vec<(u32, String)> = sorted
            .rejected
            .iter()
            .map(|r| (r.index, r.reason.clone()))
            .collect();
        (order_of(&given, &sorted.order), refusals)
    };
    // Soft candidates and force evictions follow the sorter's order (name,
    // last first); a hard threshold keeps its strategy's ranking and takes
    // only the refusals, as a 0.1.0 agent did.
    for (urgency, order, why) in [
        (CandidateUrgency::Soft, ["c", "b", "a"], "soft candidate"),
        (
            CandidateUrgency::Force,
            ["c", "b", "a"],
            "forced by its strategy",
        ),
        (
            CandidateUrgency::Hard,
            ["b", "a", "c"],
            "hard threshold met",
        ),
    ] {
        let (sorted, refusals) = sort(urgency);
        assert_eq!(sorted, order, "{urgency:?}");
        assert_eq!(
            refusals,
            [(1, format!("kept: memory-pressure proposed it ({why})"))],
            "{urgency:?}: the strategy's name and why it proposed the pod"
        );
    }
}

#[test]
fn a_0_1_0_merger_merges_and_its_rejections_name_the_layer() {
    let policy = load("legacy", MERGER_0_1);
    assert_eq!(
        (policy.world(), policy.contract()),
        (World::ConfigMerger, Contract::V0_1)
    );
    let merger = policy.as_merger().expect("a merger");
    let layer = |source: &str, json: &str| Layer {
        source: source.into(),
        json: json.into(),
    };
    let merged = merger
        .merge(&[
            layer("defaults", r#"{"evictionPeriodSeconds": 10}"#),
            layer("VigilConfig/pool-a", r#"{"evictionPeriodSeconds": 5}"#),
        ])
        .unwrap()
        .unwrap();
    assert_eq!(merged["evictionPeriodSeconds"], 5);
    let rejections = merger
        .merge(&[layer("defaults", "{}"), layer("VigilConfig/bad", "[1]")])
        .unwrap()
        .unwrap_err();
    let rejections: Vec<(&str, &str, &str)> = rejections
        .iter()
        .map(|r| (r.source.as_str(), r.field.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(rejections, [("VigilConfig/bad", "$", "not a JSON object")]);
}

/// Hard memory pressure with the 0.1.0 strategy and sorter in the policies
/// directory: the strategy ranks the batch pods first by a label it never
/// declared, the sorter refuses the kept one, and under the hard threshold
/// the strategy's ranking decides (the sorter alone would pick `zz-web`); the
/// pod annotated for it is forced out.
const SCENARIO: &str = r"
name: contract-0-1
description: policies built for vigil:policy@0.1.0 evict on a 0.2.0 agent
duration: 60s
node:
  memory: 8Gi
  systemMemory:
    - {at: 0s, value: 1Gi}
config:
  sorter: legacy-sorter
  policies:
    memory-pressure: {enabled: false}
    legacy-strategy: {dryRun: false}
pods:
  - name: aa-batch
    labels: {tier: batch}
    gracePeriod: 5s
    memory:
      - {at: 0s, value: 2Gi}
  - name: kept
    labels: {tier: batch, legacy.vigil.dev/keep: 'true'}
    memory:
      - {at: 0s, value: 2Gi}
  - name: zz-web
    memory:
      - {at: 0s, value: 2560Mi}
  - name: forced
    annotations: {legacy.vigil.dev/evict-now: 'true'}
    memory:
      - {at: 0s, value: 16Mi}
";

#[tokio::test]
async fn a_0_1_0_strategy_and_sorter_evict_through_the_eviction_manager() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("legacy-strategy.wasm"), STRATEGY_0_1).unwrap();
    std::fs::write(dir.path().join("legacy-sorter.wasm"), SORTER_0_1).unwrap();
    let scenario_path = dir.path().join("scenario.yaml");
    std::fs::write(&scenario_path, SCENARIO).unwrap();
    let scenario = Scenario::load(&scenario_path).expect("the scenario is valid");
    let options = RunOptions {
        policies_dir: Some(dir.path().to_owned()),
        ..RunOptions::default()
    };
    let simulation = run(&scenario, dir.path(), &options).await.unwrap();
    for name in ["legacy-strategy", "legacy-sorter"] {
        assert!(
            simulation.policies.iter().any(|p| p.name == name),
            "{name} serves: {:?}",
            simulation.warnings
        );
    }
    let evicted: Vec<(&str, &str, &str)> = simulation
        .evictions
        .iter()
        .map(|e| (e.pod.as_str(), e.strategy.as_str(), e.urgency))
        .collect();
    assert!(
        evicted.contains(&("default/forced", "legacy-strategy", "force")),
        "{evicted:?}"
    );
    let hard: Vec<&str> = evicted
        .iter()
        .filter(|(_, _, urgency)| *urgency == "hard")
        .map(|(pod, _, _)| *pod)
        .collect();
    assert_eq!(hard, ["default/aa-batch"], "{evicted:?}");
    let refused = simulation
        .steps
        .iter()
        .flat_map(|s| &s.refusals)
        .find(|r| r.pod.ends_with("/kept"))
        .expect("the sorter refused the kept pod");
    assert_eq!(
        refused.reason,
        "kept: legacy-strategy proposed it (hard threshold met)"
    );
}
