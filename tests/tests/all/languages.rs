//! The example policies in C, JavaScript, Python and Go (`examples/policies/`,
//! built by `examples/policies/build.sh`) against vigil's own Rust policies:
//! the same answers call by call, and the same evictions at the same virtual
//! times on every bundled scenario.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use vigil::base::digest::Digest;
use vigil::model::{
    Candidate, Decision, Eviction, Layer, MetLevel, Pod, QosClass, ScopeMet, Signal, Snapshot,
};
use vigil::policy::builtin;
use vigil::policy::{Host, Limits, Origin, Policy};
use vigil::simulate::{RunOptions, Scenario, run};
use vigil_tests::*;

/// Compiled components, kept for the whole test run: a JS or Python
/// component compiles for seconds, then loads in milliseconds.
fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-cache")
}

/// Loads `bytes` from `source` as the policy `name` through the shared cache.
/// Loads take turns, so two tests needing the same component compile it once.
fn load(name: &str, bytes: &[u8], source: Origin) -> Policy {
    static TURN: Mutex<()> = Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let host = Host::new(Some(cache_dir())).expect("host starts");
    host.load(name, bytes.to_vec(), source, Limits::default())
        .unwrap_or_else(|e| panic!("{name} does not load: {e}"))
}

fn rust_policy(name: &str) -> Policy {
    load(name, builtin(name).unwrap(), Origin::Builtin)
}

fn example(name: &str) -> Policy {
    load(name, &example_policy(name), Origin::File(name.into()))
}

// ---- Sorters ----------------------------------------------------------------

/// Configs every sorter must accept.
const CONFIGS: [&str; 6] = [
    "{}",
    "  ",
    r#"{"skipLabels": ["vigil.io\/skip", "\u0061pp", "\ud83e\udd80"]}"#,
    r#"{"skipLabels": ["vigil.io/skip"]}"#,
    r#"{"skipAnnotations": ["vigil.io/keep", "team"], "skipLabels": []}"#,
    r#"{"skipLabels": ["app"], "skipLabels": ["vigil.io/skip"]}"#,
];

/// Configs every sorter must refuse, with the exact message where the
/// contract fixes it (a JSON syntax error is described by each parser).
const BAD_CONFIGS: [(&str, &str); 7] = [
    ("[]", "config must be a JSON object"),
    (
        r#"{"skipLabels": "app"}"#,
        "$.skipLabels: must be a list of strings",
    ),
    (
        r#"{"skipLabels": ["app", 7]}"#,
        "$.skipLabels[1]: must be a string",
    ),
    (r#"{"skipPods": []}"#, "$.skipPods: unknown field"),
    (r#"{"skipLabels": ["#, "config is not JSON"),
    ("{} {}", "config is not JSON"),
    (r#"{"skipLabels": ["app\"#, "config is not JSON"),
];

type SortAnswer = Result<(Vec<u32>, Vec<(u32, String)>), String>;

fn sort(policy: &Policy, candidates: &[Candidate], config: &str) -> SortAnswer {
    let sorted = policy
        .as_sorter()
        .expect("a sorter")
        .sort(&strategies(), &mut candidates.to_vec(), config)
        .unwrap_or_else(|fault| panic!("{} faulted: {fault}", policy.label()))?;
    let rejected = sorted.rejected.into_iter().map(|r| (r.index, r.reason));
    Ok((sorted.order, rejected.collect()))
}

/// `name` answers every generated candidate list and every config exactly as
/// the Rust default sorter does.
fn assert_sorts_as_rust(name: &str) {
    let (rust, other) = (rust_policy("default-sorter"), example(name));
    let mut rng = Rng::new(0x5eed);
    let mut refused = 0;
    for round in 0..90 {
        let n = rng.below(30) as usize;
        let candidates = random_candidates(&mut rng, n);
        for config in CONFIGS {
            let want = sort(&rust, &candidates, config).expect("a good config");
            refused += want.1.len();
            assert_eq!(
                sort(&other, &candidates, config),
                Ok(want),
                "{name}, round {round}, config {config:?}"
            );
        }
    }
    assert!(refused > 0, "the generated pods include refusable ones");
    let candidates = random_candidates(&mut rng, 3);
    for (config, message) in BAD_CONFIGS {
        let rust_error = sort(&rust, &candidates, config).unwrap_err();
        let error = sort(&other, &candidates, config).unwrap_err();
        assert!(
            rust_error.starts_with(message) && error.starts_with(message),
            "{name} on {config:?}: {error:?}, Rust: {rust_error:?}"
        );
    }
}

#[test]
fn the_c_sorter_sorts_as_the_rust_sorter() {
    assert_sorts_as_rust("c-sorter");
}

#[test]
fn the_javascript_sorter_sorts_as_the_rust_sorter() {
    assert_sorts_as_rust("js-sorter");
}

#[test]
fn the_python_sorter_sorts_as_the_rust_sorter() {
    assert_sorts_as_rust("python-sorter");
}

#[test]
fn the_go_sorter_sorts_as_the_rust_sorter() {
    assert_sorts_as_rust("go-sorter");
}

// ---- Scenarios --------------------------------------------------------------

/// With the example `name` serving as `policy`, every bundled scenario
/// evicts the same pods, for the same reasons, at the same virtual times as
/// with vigil's Rust policies.
async fn assert_same_evictions_on_every_scenario(policy: &str, name: &str) {
    let bytes = example_policy(name);
    load(name, &bytes, Origin::File(name.into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(format!("{policy}.wasm")), &bytes).unwrap();
    let options = RunOptions {
        policies_dir: Some(dir.path().to_owned()),
        cache_dir: Some(cache_dir()),
        ..RunOptions::default()
    };
    let mut evictions = 0;
    for path in bundled_scenarios() {
        let scenario = Scenario::load(&path).expect("a bundled scenario is valid");
        let base = path.parent().unwrap();
        let rust = run(&scenario, base, &RunOptions::default()).await.unwrap();
        let other = run(&scenario, base, &options).await.unwrap();
        let served = other.policies.iter().find(|p| p.name == policy).unwrap();
        assert_eq!(served.digest, Digest::of(&bytes).hex(), "{name} served");
        assert_eq!(other.evictions, rust.evictions, "{name} on {scenario:?}");
        for (a, b) in other.steps.iter().zip(&rust.steps) {
            assert_eq!(a.decisions, b.decisions, "{name} at {} s", a.t);
        }
        evictions += rust.evictions.len();
    }
    assert!(evictions > 0, "the scenarios evict");
}

#[tokio::test]
async fn the_c_sorter_evicts_as_the_rust_sorter_on_every_scenario() {
    assert_same_evictions_on_every_scenario("default-sorter", "c-sorter").await;
}

#[tokio::test]
async fn the_javascript_sorter_evicts_as_the_rust_sorter_on_every_scenario() {
    assert_same_evictions_on_every_scenario("default-sorter", "js-sorter").await;
}

#[tokio::test]
async fn the_python_sorter_evicts_as_the_rust_sorter_on_every_scenario() {
    assert_same_evictions_on_every_scenario("default-sorter", "python-sorter").await;
}

#[tokio::test]
async fn the_go_sorter_evicts_as_the_rust_sorter_on_every_scenario() {
    assert_same_evictions_on_every_scenario("default-sorter", "go-sorter").await;
}

#[tokio::test]
async fn the_python_psi_strategy_evicts_as_the_rust_one_on_every_scenario() {
    assert_same_evictions_on_every_scenario("psi-pressure", "python-psi-strategy").await;
}

#[tokio::test]
async fn the_javascript_merger_evicts_as_the_rust_merger_on_every_scenario() {
    assert_same_evictions_on_every_scenario("default-merger", "js-merger").await;
}

// ---- The Python PSI strategy ------------------------------------------------

const PSI: &str = "psi.memory.some.avg10";

fn pod(name: &str, qos: QosClass, priority: i32, usage_mib: u64, request_mib: u64) -> Pod {
    vigil::model::fixture::pod(name)
        .qos(qos)
        .priority(priority)
        .usage_mib(usage_mib)
        .request_mib(request_mib)
        .build()
}

fn snapshot(stall: f64, last_met: MetLevel, config: &str) -> Snapshot {
    Snapshot {
        now_ms: 1_700_000_000_000,
        signals: vec![
            Signal {
                name: "memory.available".into(),
                value: 4e9,
                capacity: Some(8e9),
            },
            Signal {
                name: PSI.into(),
                value: stall,
                capacity: Some(100.0),
            },
        ],
        pods: vec![
            pod("within", QosClass::Burstable, 0, 50, 100),
            pod("over-high-priority", QosClass::Burstable, 1000, 2000, 100),
            pod("best-effort", QosClass::BestEffort, 0, 300, 0),
            pod("over-low-priority", QosClass::Burstable, 0, 900, 100),
        ],
        last_met: vec![ScopeMet {
            scope: "psi-memory".into(),
            met: last_met,
            victim: false,
        }],
        config: config.into(),
        state: Vec::new(),
    }
}

/// The threshold part of a decision: met level, threshold, grace period,
/// and the condition's name.
fn judged(decision: &Decision) -> (MetLevel, f64, u64, Option<String>) {
    let [t] = decision.thresholds.as_slice() else {
        panic!("one threshold, one scope: {:?}", decision.thresholds);
    };
    let condition = t.condition.as_ref().map(|c| c.name.clone());
    (t.met, t.threshold, t.grace_period_seconds, condition)
}

fn evaluate(policy: &Policy, stall: f64, last: MetLevel, config: &str) -> Result<Decision, String> {
    policy
        .as_strategy()
        .expect("a strategy")
        .evaluate(&mut snapshot(stall, last, config))
        .unwrap_or_else(|fault| panic!("{} faulted: {fault}", policy.label()))
}

#[test]
fn the_python_psi_strategy_meets_its_thresholds_with_grace_and_minimum_reclaim() {
    let python = example("python-psi-strategy");
    let judge = |stall, last| judged(&evaluate(&python, stall, last, "{}").unwrap());
    let pressure = Some("MemoryPressure".to_owned());
    assert_eq!(
        judge(10.0, MetLevel::NotMet),
        (MetLevel::NotMet, 20.0, 0, None)
    );
    assert_eq!(
        judge(25.0, MetLevel::NotMet),
        (MetLevel::Soft, 20.0, 30, pressure.clone())
    );
    assert_eq!(
        judge(45.0, MetLevel::Soft),
        (MetLevel::Hard, 40.0, 0, pressure.clone())
    );
    assert_eq!(
        judge(36.0, MetLevel::Hard).0,
        MetLevel::Hard,
        "held within the 5-point minimum reclaim"
    );
    assert_eq!(judge(34.0, MetLevel::Hard).0, MetLevel::Soft);
    assert_eq!(judge(16.0, MetLevel::Soft).0, MetLevel::Soft);
    assert_eq!(judge(14.0, MetLevel::Soft).0, MetLevel::NotMet);

    let decision = evaluate(&python, 45.0, MetLevel::NotMet, "{}").unwrap();
    assert_eq!(
        (
            decision.thresholds[0].scope.as_str(),
            decision.thresholds[0].signal.as_str()
        ),
        ("psi-memory", PSI)
    );
    assert_eq!(decision.thresholds[0].observed, 45.0);
    assert!(decision.soft_candidates.is_empty() && decision.force_evictions.is_empty());

    let configured = r#"{"hard": 50, "soft": "30", "softGracePeriodSeconds": 5}"#;
    assert_eq!(
        judged(&evaluate(&python, 45.0, MetLevel::NotMet, configured).unwrap()),
        (MetLevel::Soft, 30.0, 5, pressure)
    );
    for (config, error) in [
        (r#"{"hrad": 1}"#, "$.hrad: unknown field"),
        (r#"{"hard": "lots"}"#, "$.hard: `lots` is not a number"),
        (
            r#"{"softGracePeriodSeconds": -1}"#,
            "$.softGracePeriodSeconds",
        ),
        ("[]", "config must be a JSON object"),
        (
            r#"{"signal": "psi.io.full.avg10"}"#,
            "signal psi.io.full.avg10 is missing from the snapshot",
        ),
    ] {
        let answer = evaluate(&python, 45.0, MetLevel::NotMet, config).unwrap_err();
        assert!(answer.starts_with(error), "{config}: {answer}");
    }
}

#[test]
fn the_python_psi_strategy_names_victims_in_the_kubelets_memory_order() {
    let python = example("python-psi-strategy");
    let victims = |n| -> Vec<Eviction> {
        python
            .as_strategy()
            .expect("a strategy")
            .top_victims(&mut snapshot(45.0, MetLevel::Hard, "{}"), "psi-memory", n)
            .unwrap()
            .unwrap()
    };
    let uids: Vec<String> = victims(4).into_iter().map(|v| v.uid).collect();
    assert_eq!(
        uids,
        [
            "uid-over-low-priority",
            "uid-best-effort",
            "uid-over-high-priority",
            "uid-within"
        ]
    );
    let first = victims(1);
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].reason,
        "psi.memory.some.avg10 is 45.0; pod uses 900 MiB of memory against a request of 100 MiB"
    );
    assert_eq!(first[0].grace_period_seconds, None);
    let wrong = python
        .as_strategy()
        .expect("a strategy")
        .top_victims(&mut snapshot(45.0, MetLevel::Hard, "{}"), "memory", 1)
        .unwrap();
    assert_eq!(
        wrong.unwrap_err(),
        r#"unknown scope "memory"; psi-pressure answers for "psi-memory""#
    );
}

#[test]
fn the_python_psi_strategy_judges_and_ranks_as_the_rust_one() {
    let (rust, python) = (rust_policy("psi-pressure"), example("python-psi-strategy"));
    for config in [
        "{}",
        r#"{"hard": "60", "soft": "10", "minimumReclaim": "2"}"#,
    ] {
        for last in [MetLevel::NotMet, MetLevel::Soft, MetLevel::Hard] {
            for tenth in (0..=1000).step_by(7) {
                let stall = f64::from(tenth) / 10.0;
                let want = evaluate(&rust, stall, last, config).map(|d| judged(&d));
                let got = evaluate(&python, stall, last, config).map(|d| judged(&d));
                assert_eq!(got, want, "stall {stall}, last {last:?}, config {config}");
            }
        }
    }
    let snapshot = snapshot(45.04, MetLevel::Hard, "{}");
    let victims = |policy: &Policy| -> Vec<(String, String)> {
        let answer = policy
            .as_strategy()
            .expect("a strategy")
            .top_victims(&mut snapshot.clone(), "psi-memory", 3)
            .unwrap();
        answer
            .unwrap()
            .into_iter()
            .map(|v| (v.uid, v.reason))
            .collect()
    };
    assert_eq!(victims(&python), victims(&rust));
}

// ---- The JavaScript merger --------------------------------------------------

/// Layer sets, as (source, JSON) pairs: merge rules (objects merge, `null`
/// deletes, lists and scalars replace, keys JS treats specially) and layers
/// nothing can be merged from.
const LAYER_SETS: &[&[(&str, &str)]] = &[
    &[],
    &[(
        "defaults",
        r#"{"evictionPeriodSeconds": 5, "evictionBurst": 3}"#,
    )],
    &[
        (
            "defaults",
            r#"{"evictionBurst": 3, "dryRun": false, "policies": {"memory-pressure": {"deadlineMs": 100, "config": {"hard": "100Mi", "soft": "1Gi"}}}}"#,
        ),
        (
            "VigilConfig/pool-a@2",
            r#"{"dryRun": true, "policies": {"memory-pressure": {"config": {"hard": "200Mi", "soft": null}}, "psi-pressure": {"enabled": false}}}"#,
        ),
    ],
    &[
        (
            "a",
            r#"{"sorter": "js-sorter", "policies": {"p": {"enabled": true}}}"#,
        ),
        ("b", r#"{"policies": null}"#),
        ("c", r#"{"policies": {"q": {"trialSeconds": 0}}}"#),
    ],
    &[
        (
            "defaults",
            r#"{"policies": {"p": {"config": {"zones": ["a", "b"], "n": {"x": 1}}}}}"#,
        ),
        (
            "pool",
            r#"{"policies": {"p": {"config": {"zones": ["c"], "n": 7}}}}"#,
        ),
        (
            "node",
            r#"{"policies": {"p": {"config": {"n": {"y": 2}}}}}"#,
        ),
    ],
    &[
        ("broken", r#"{"evictionBurst": "#),
        ("array", "[1]"),
        ("fine", r#"{"evictionBurst": 2}"#),
    ],
    &[
        (
            "defaults",
            r#"{"__proto__": {"x": 1}, "policies": {"constructor": {}}}"#,
        ),
        (
            "later",
            r#"{"policies": {"constructor": {"dryRun": true}}}"#,
        ),
    ],
];

type MergeAnswer =
    Result<serde_json::Map<String, serde_json::Value>, Vec<(String, String, String)>>;

fn merge(policy: &Policy, layers: &[(&str, &str)]) -> MergeAnswer {
    let layers: Vec<Layer> = layers
        .iter()
        .map(|(source, json)| Layer {
            source: (*source).into(),
            json: (*json).into(),
        })
        .collect();
    let answer = policy
        .as_merger()
        .expect("a merger")
        .merge(&layers)
        .unwrap_or_else(|fault| panic!("{} faulted: {fault}", policy.label()));
    answer.map_err(|rejections| {
        rejections
            .into_iter()
            .map(|r| {
                // Each JSON parser words its syntax errors its own way.
                let reason = match r.reason.split_once(": ") {
                    Some(("layer is not JSON", _)) => "layer is not JSON".into(),
                    _ => r.reason,
                };
                (r.source, r.field, reason)
            })
            .collect()
    })
}

#[test]
fn the_javascript_merger_merges_and_rejects_as_the_rust_merger() {
    let (rust, js) = (rust_policy("default-merger"), example("js-merger"));
    let mut rejected = 0;
    for layers in LAYER_SETS {
        let want = merge(&rust, layers);
        rejected += want.as_ref().map_or_else(Vec::len, |_| 0);
        assert_eq!(merge(&js, layers), want, "{layers:?}");
    }
    assert_eq!(rejected, 2, "the layers that are not JSON objects");
}

#[test]
fn the_javascript_merger_patches_objects_and_replaces_lists() {
    let js = example("js-merger");
    let merged = merge(&js, LAYER_SETS[2]).unwrap();
    assert_eq!(
        merged["policies"]["memory-pressure"],
        serde_json::json!({"deadlineMs": 100, "config": {"hard": "200Mi"}})
    );
    assert_eq!(merged["dryRun"], true);
    let merged = merge(&js, LAYER_SETS[4]).unwrap();
    assert_eq!(
        merged["policies"]["p"]["config"],
        serde_json::json!({"zones": ["c"], "n": {"y": 2}})
    );
    let refused = merge(&js, LAYER_SETS[5]).unwrap_err();
    let sources: Vec<&str> = refused.iter().map(|(s, ..)| s.as_str()).collect();
    assert_eq!(sources, ["broken", "array"]);
}
