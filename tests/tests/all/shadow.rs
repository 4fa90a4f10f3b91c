//! A second version of a policy in shadow of a simulation (`vigil simulate
//! --shadow`): real components beside the built-ins, on a bundled scenario.
//! The shadow is asked what the serving version is asked and never acts.

use std::path::{Path, PathBuf};
use vigil::simulate::shadow::{ShadowError, ShadowFile};
use vigil::simulate::{RunOptions, Scenario, SimulateError, Simulation, run};

fn scenario() -> (Scenario, PathBuf) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios/hard-memory-pressure.yaml");
    (Scenario::load(&path).expect("a bundled scenario"), path)
}

async fn simulate(shadows: Vec<ShadowFile>) -> Result<Simulation, SimulateError> {
    let (scenario, path) = scenario();
    let options = RunOptions {
        shadows,
        ..RunOptions::default()
    };
    run(&scenario, path.parent().unwrap(), &options).await
}

/// `bytes` written to `dir/name`, in shadow of `policy`.
fn shadow(dir: &Path, policy: &str, name: &str, bytes: &[u8]) -> ShadowFile {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    ShadowFile {
        policy: policy.into(),
        path,
    }
}

fn evictions(simulation: &Simulation) -> Vec<(f64, String)> {
    (simulation.evictions.iter())
        .map(|e| (e.at, e.pod.clone()))
        .collect()
}

#[tokio::test]
async fn a_sorter_that_reverses_the_order_differs_in_shadow_and_the_evictions_stay_the_serving_ones()
 {
    let dir = tempfile::tempdir().unwrap();
    let alone = simulate(Vec::new()).await.unwrap();
    assert!(alone.shadows.is_empty());
    let file = shadow(
        dir.path(),
        "default-sorter",
        "reverse.wasm",
        vigil_tests::REVERSE_SORTER,
    );
    let beside = simulate(vec![file.clone()]).await.unwrap();
    assert_eq!(
        evictions(&beside),
        evictions(&alone),
        "the shadow never acts"
    );
    let [record] = &beside.shadows[..] else {
        panic!("one shadow: {:?}", beside.shadows);
    };
    assert_eq!(
        (record.policy.as_str(), &record.file),
        ("default-sorter", &file.path)
    );
    // One sort per eviction; each with more than one candidate reversed.
    assert_eq!(record.comparisons, alone.evictions.len() as u64);
    assert_eq!(record.faults, 0);
    assert!(record.divergences >= 1, "{record:?}");
    assert_eq!(
        record.agreements + record.divergences,
        record.comparisons,
        "{record:?}"
    );
    let first = (beside.steps.iter())
        .find(|s| !s.shadow.is_empty())
        .expect("a step with a divergence");
    let digest = &record.digest[..12];
    let words = format!(
        "shadow default-sorter@{digest} differs (sort): serving evicts default/batch-job (rank 1), shadow evicts "
    );
    assert!(first.shadow[0].starts_with(&words), "{:?}", first.shadow);
    assert_eq!(first.decisions[0].pod, "default/batch-job");
    let text = vigil::simulate::render(&beside);
    let tally = format!(
        "shadow default-sorter@{digest}: {} comparison(s), {} agreed, {} differed, 0 faulted",
        record.comparisons, record.agreements, record.divergences
    );
    assert!(text.contains(&tally), "{text}");
    assert!(text.contains(&words), "{text}");
}

#[tokio::test]
async fn a_faulting_shadow_counts_its_faults_and_leaves_the_serving_sorter_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let alone = simulate(Vec::new()).await.unwrap();
    let file = shadow(
        dir.path(),
        "default-sorter",
        "trap.wasm",
        vigil_tests::TRAP_SORTER,
    );
    let beside = simulate(vec![file]).await.unwrap();
    assert_eq!(evictions(&beside), evictions(&alone));
    let record = &beside.shadows[0];
    assert_eq!(record.faults, record.comparisons);
    assert!(record.faults >= 1, "{record:?}");
    // Nothing of the serving side saw it: no policy skipped, nothing rolled
    // back, the same steps as without it but for the shadow's notes.
    assert_eq!(beside.warnings, alone.warnings);
    for (with, without) in beside.steps.iter().zip(&alone.steps) {
        assert_eq!(with.skipped, without.skipped, "at {}", with.t);
        assert_eq!(with.decisions, without.decisions, "at {}", with.t);
    }
    let faulted = beside.steps.iter().flat_map(|s| &s.shadow);
    assert!(
        faulted
            .clone()
            .all(|note| note.contains("faulted (sort):") && note.contains("trap")),
        "{:?}",
        faulted.collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_shadow_must_be_a_version_of_a_policy_that_serves() {
    let dir = tempfile::tempdir().unwrap();
    let reverse = vigil_tests::REVERSE_SORTER;
    let unknown = shadow(dir.path(), "no-such-sorter", "a.wasm", reverse);
    let error = simulate(vec![unknown]).await.unwrap_err();
    assert!(
        matches!(&error, SimulateError::Shadow(ShadowError::NotServing { policy, .. }) if policy == "no-such-sorter"),
        "{error:?}"
    );
    let of_a_strategy = shadow(dir.path(), "memory-pressure", "b.wasm", reverse);
    let error = simulate(vec![of_a_strategy]).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{} is of world candidate-sorter, memory-pressure of eviction-strategy: a shadow is a version of the policy it shadows",
            dir.path().join("b.wasm").display()
        )
    );
    let twice = vec![
        shadow(dir.path(), "default-sorter", "v2.wasm", reverse),
        shadow(dir.path(), "default-sorter", "v3.wasm", reverse),
    ];
    let error = simulate(twice).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{} and {} both shadow default-sorter: one version in shadow per policy",
            dir.path().join("v2.wasm").display(),
            dir.path().join("v3.wasm").display()
        )
    );
    let not_a_policy = shadow(dir.path(), "default-sorter", "c.wasm", b"not wasm");
    let error = simulate(vec![not_a_policy]).await.unwrap_err();
    assert!(
        matches!(&error, SimulateError::Shadow(ShadowError::Load { .. })),
        "{error:?}"
    );
    let missing = ShadowFile {
        policy: "default-sorter".into(),
        path: dir.path().join("missing.wasm"),
    };
    let error = simulate(vec![missing]).await.unwrap_err();
    assert!(
        matches!(&error, SimulateError::Shadow(ShadowError::Read { .. })),
        "{error:?}"
    );
}

#[test]
fn a_shadow_is_given_as_name_equals_file() {
    let parsed: ShadowFile = "default-sorter=v2.wasm".parse().unwrap();
    assert_eq!(parsed.policy, "default-sorter");
    assert_eq!(parsed.path, PathBuf::from("v2.wasm"));
    for bad in ["v2.wasm", "=v2.wasm", "default-sorter="] {
        let error = bad.parse::<ShadowFile>().unwrap_err();
        assert!(error.contains("is not NAME=FILE"), "{error}");
    }
}

/// A scenario whose config is merged three times: at the start, then by a
/// change the schema refuses, then by one that turns dry run off.
const CHANGES: &str = "name: x\nduration: 1m\nnode: {memory: 4Gi}\n\
    config: {dryRun: true, policies: {memory-pressure: {config: {hard: 1Gi}}}}\n\
    configChanges:\n\
    \x20 - {at: 20s, config: {bogus: 1}}\n\
    \x20 - {at: 40s, config: {policies: {memory-pressure: {config: {hard: 1Gi}}}}}\n\
    pods:\n  - name: hog\n    memory: [{at: 0s, value: 3500Mi}]\n";

async fn with_changes(dir: &Path, merger: &[u8]) -> Simulation {
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, CHANGES).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    let options = RunOptions {
        shadows: vec![shadow(dir, "default-merger", "merger.wasm", merger)],
        ..RunOptions::default()
    };
    run(&scenario, dir, &options).await.unwrap()
}

#[tokio::test]
async fn a_merger_in_shadow_merges_each_config_the_serving_one_merges() {
    let dir = tempfile::tempdir().unwrap();
    let same = with_changes(
        dir.path(),
        vigil::policy::builtin("default-merger").unwrap(),
    )
    .await;
    let record = &same.shadows[0];
    assert_eq!(
        (record.comparisons, record.agreements),
        (3, 3),
        "the start and both changes, the refused one refused by both: {record:?}"
    );
    // A merger of the previous contract whose last layer wins whole: the
    // scenario's layer replaces the defaults' policies.
    let other = with_changes(dir.path(), vigil_tests::MERGER_0_1).await;
    let record = &other.shadows[0];
    assert_eq!(
        (record.agreements, record.divergences, record.faults),
        (1, 2, 0),
        "{record:?}"
    );
    let notes: Vec<(f64, &str)> = (other.steps.iter())
        .flat_map(|s| s.shadow.iter().map(|n| (s.t, n.as_str())))
        .collect();
    let words = format!(
        "shadow default-merger@{} differs (merge): serving sets policies.disk-pressure to {{\"config\":{{}},\"dryRun\":false,\"enabled\":true,\"pdbOverride\":true}}, shadow to nothing",
        &record.digest[..12]
    );
    assert_eq!(notes, [(0.0, words.as_str()), (40.0, words.as_str())]);
    assert_eq!(evictions(&other), evictions(&same), "the shadow never acts");
}
