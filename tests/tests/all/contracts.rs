//! Contract skew: components really built from the previous contract,
//! `vigil:policy@0.1.0` (`wit/0.1.0/`, the `contract-0-1` test guest), pass
//! the check saying which contract they speak, get what a 0.1.0 agent gave
//! them through the host's adapter, and evict on a scenario through the
//! real eviction manager.

use vigil::authoring::check_bytes;
use vigil::model::{
    Candidate, CandidateUrgency, KeyValue, Layer, OwnerKind, Pod, Signal, Snapshot,
};
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
                "contract: vigil:policy@0.1.0 (an earlier one: this agent adapts it to 0.2.0"
            ),
            "{text}"
        );
        assert!(text.contains("canary call passed"), "{text}");
    }
    let current = check_bytes(
        &host,
        "builtin".into(),
        "default-sorter",
        builtin("default-sorter").to_vec(),
        Origin::Builtin,
        "{}",
    )
    .unwrap();
    assert_eq!(
        (current.world, current.contract),
        (World::CandidateSorter, Contract::V0_2)
    );
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
