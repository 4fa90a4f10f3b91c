//! katalyst's `TestSystemPressureEvictionPlugin_ThresholdMet` round by round
//! (100 GiB of memory, a scale factor of 100, a 5 GiB minimum: its kswapd
//! steal, which katalyst no longer reads, is left out) and
//! `TestSystemPressureEvictionPlugin_GetTopEvictionPods` case by case (its
//! file-less zoneinfo: every pod a candidate; its cool-down of 40 s), then
//! the rules katalyst's tests do not reach: the workload PSI, the target
//! NUMA node, and where vigil does not copy katalyst.
use super::*;
use crate::{KeyValue, NumaMemory, QosClass, Resources, ScopeMet, Usage};
use policy_kit::pod;

const GI: f64 = (1u64 << 30) as f64;

/// katalyst's test knobs (`makeConf`).
const TEST_CONFIG: &str = r#"{"freeMemoryThresholdMinimum": "5Gi", "coolDownSeconds": 40}"#;

fn signal(name: &str, value: f64, capacity: Option<f64>) -> Signal {
    Signal {
        name: name.into(),
        value,
        capacity,
    }
}

fn memory(free: f64) -> Vec<Signal> {
    vec![
        signal("memory.free", free, Some(100.0 * GI)),
        signal("vm.watermarkScaleFactor", 100.0, None),
    ]
}

fn seen<'a>(
    now_ms: i64,
    signals: &'a [Signal],
    pods: &'a [Pod],
    last_met: &'a [ScopeMet],
) -> Seen<'a> {
    Seen {
        now_ms,
        signals,
        pods,
        last_met,
    }
}

#[test]
fn threshold_met_round_by_round() {
    let mut kept = Vec::new();
    for (round, free_gib) in [(0, 45.0), (2, 11.0), (6, 12.0), (7, 12.0), (8, 12.0)] {
        let signals = memory(free_gib * GI);
        let decision = evaluate(
            &seen(round * 30_000, &signals, &[], &[]),
            TEST_CONFIG,
            &kept,
        )
        .unwrap();
        assert!(decision.thresholds.is_empty(), "round {round}: not met");
        kept = decision.state.unwrap();
        assert_eq!(State::decode(&kept).unwrap().action, None);
    }
    // Under the 5 GiB line: met, hard, MemoryPressure with NoSchedule.
    let signals = memory(4.0 * GI);
    let decision = evaluate(&seen(0, &signals, &[], &[]), TEST_CONFIG, &[]).unwrap();
    let threshold = &decision.thresholds[0];
    assert_eq!(
        (threshold.met, threshold.scope.as_str()),
        (MetLevel::Hard, SCOPE)
    );
    assert_eq!(
        (threshold.observed, threshold.threshold),
        (4.0 * GI, 5.0 * GI)
    );
    let condition = threshold.condition.as_ref().unwrap();
    assert_eq!(
        (condition.name.as_str(), condition.effects.as_slice()),
        ("MemoryPressure", &["NoSchedule".to_owned()][..])
    );
    let state = State::decode(&decision.state.unwrap()).unwrap();
    assert_eq!(state.action, Some(Action::Reclaimed));
}

fn katalysts_pod(n: u32) -> Pod {
    let mut pod = pod!(&format!("pod-{n}"), QosClass::BestEffort, priority: 100_000, usage_mib: 0, request_mib: 0);
    pod.uid = format!("00000{n}");
    pod.annotations = vec![KeyValue {
        key: katalyst::QOS_LEVEL.into(),
        value: "reclaimed_cores".into(),
    }];
    pod.usage.memory_usage_bytes = None;
    pod
}

/// The pod `top-victims` puts first for a state with `action`, if any.
fn first(pods: &[Pod], signals: &[Signal], state: &State) -> Option<String> {
    let victims = top_victims(signals, pods, TEST_CONFIG, &state.encode(), SCOPE).unwrap();
    let first = victims.first()?;
    Some(pods.iter().find(|p| p.uid == first.uid)?.name.clone())
}

#[test]
fn get_top_eviction_pods_case_by_case() {
    let pods = [katalysts_pod(1), katalysts_pod(2)];
    // "not under pressure": no action, no victim.
    assert_eq!(first(&pods, &[], &State::default()), None);
    // "under pressure, need reclaim" and "need eviction": both pods tie on
    // every metric (no usage known); katalyst's order keeps pod-1 first.
    for action in [Action::Reclaimed, Action::Evict] {
        let state = State {
            action: Some(action),
            ..State::default()
        };
        assert_eq!(
            first(&pods, &[], &state).as_deref(),
            Some("pod-1"),
            "{action:?}"
        );
    }
    // The last "need eviction", 10 s after the last eviction in a 40 s
    // cool-down: katalyst returns no pod. vigil's threshold only reports,
    // so the host asks for no victim.
    let signals = memory(4.0 * GI);
    let before = seen(0, &signals, &[], &[]);
    let kept = evaluate(&before, TEST_CONFIG, &[]).unwrap().state.unwrap();
    let chosen = [ScopeMet {
        scope: SCOPE.into(),
        met: MetLevel::Hard,
        victim: true,
    }];
    let decision = evaluate(&seen(10_000, &signals, &[], &chosen), TEST_CONFIG, &kept).unwrap();
    assert_eq!(
        decision.thresholds[0].met,
        MetLevel::Report,
        "cooling down: the condition holds"
    );
    let kept = decision.state.unwrap();
    let decision = evaluate(&seen(45_000, &signals, &[], &[]), TEST_CONFIG, &kept).unwrap();
    assert_eq!(
        decision.thresholds[0].met,
        MetLevel::Hard,
        "40 s after the victim"
    );
}

#[test]
fn a_cycle_without_a_victim_starts_no_cool_down() {
    let signals = memory(4.0 * GI);
    let kept = evaluate(&seen(0, &signals, &[], &[]), TEST_CONFIG, &[])
        .unwrap()
        .state
        .unwrap();
    let none_chosen = [ScopeMet {
        scope: SCOPE.into(),
        met: MetLevel::Hard,
        victim: false,
    }];
    let decision = evaluate(
        &seen(5_000, &signals, &[], &none_chosen),
        TEST_CONFIG,
        &kept,
    )
    .unwrap();
    assert_eq!(decision.thresholds[0].met, MetLevel::Hard);
}

fn stalling(name: &str, level: &str, some: f64) -> Pod {
    let mut pod = pod!(name, QosClass::Burstable, priority: 0, usage_mib: 100, request_mib: 100);
    pod.annotations = vec![KeyValue {
        key: katalyst::QOS_LEVEL.into(),
        value: level.into(),
    }];
    pod.usage.memory_pressure = Some(crate::Pressure {
        some_avg10: some,
        full_avg10: 0.0,
    });
    pod
}

#[test]
fn the_workload_psi_presses_after_its_duration_and_for_every_pod_after_three() {
    let mut signals = memory(50.0 * GI);
    signals.push(signal("psi.workload.memory.some.avg10", 20.0, Some(100.0)));
    let pods = [
        stalling("a", "shared_cores", 6.0),
        stalling("b", "dedicated_cores", 5.0),
        stalling("c", "shared_cores", 4.5),
        stalling("reclaimed", "reclaimed_cores", 90.0),
    ];
    let mut kept = Vec::new();
    let mut levels = Vec::new();
    for t in [0, 10, 15, 30, 45] {
        let decision = evaluate(&seen(t * 1000, &signals, &pods, &[]), "", &kept).unwrap();
        kept = decision.state.unwrap();
        levels.push(State::decode(&kept).unwrap().action);
    }
    use Action::{Evict, Reclaimed};
    assert_eq!(
        levels,
        [None, None, Some(Reclaimed), Some(Reclaimed), Some(Evict)]
    );
    // Two pods stalling are not enough, and the timer starts over after.
    let two = &pods[..2];
    let decision = evaluate(&seen(50_000, &signals, two, &[]), "", &kept).unwrap();
    assert!(decision.thresholds.is_empty());
    let kept = decision.state.unwrap();
    assert_eq!(
        State::decode(&kept).unwrap().psi_since_ms,
        None,
        "katalyst would keep the old start"
    );
    let decision = evaluate(&seen(55_000, &signals, &pods, &[]), "", &kept).unwrap();
    assert!(decision.thresholds.is_empty(), "a fresh start");
}

#[test]
fn without_the_psi_rule_pods_are_not_read_in_evaluate() {
    assert!(interest("").pods_in_evaluate);
    let off = interest(r#"{"workloadPsi": null}"#);
    assert!(!off.pods_in_evaluate);
    assert!(!off.keys.facts.contains(&PodFact::MemoryPressure));
}

#[test]
fn victims_come_from_the_numa_node_with_the_fewest_free_pages() {
    let mut signals = memory(4.0 * GI);
    for (node, free) in [(0, 3.0 * GI), (1, 0.5 * GI)] {
        signals.push(signal(
            &format!("numa.{node}.zone.normal.free"),
            free,
            Some(16.0 * GI),
        ));
        signals.push(signal(
            &format!("numa.{node}.memory.free"),
            free,
            Some(16.0 * GI),
        ));
    }
    let on = |name: &str, node: u32, gib: f64, usage: f64| {
        let mut pod = pod!(name, QosClass::Burstable, priority: 0, usage_mib: 0, request_mib: 0);
        pod.usage.numa_memory = vec![NumaMemory {
            node,
            bytes: (gib * GI) as u64,
        }];
        pod.usage.memory_usage_bytes = Some((usage * GI) as u64);
        pod
    };
    let pods = [
        on("big-on-0", 0, 8.0, 8.0),
        on("small-on-1", 1, 2.0, 2.0),
        on("mid-on-1", 1, 3.0, 3.0),
    ];
    let state = State {
        action: Some(Action::Evict),
        ..State::default()
    };
    let victims = top_victims(&signals, &pods, "", &state.encode(), SCOPE).unwrap();
    let names: Vec<&str> = victims
        .iter()
        .map(|v| pods.iter().find(|p| p.uid == v.uid).unwrap().name.as_str())
        .collect();
    assert_eq!(
        names,
        ["mid-on-1", "small-on-1"],
        "node 1, the larger user first"
    );
    assert_eq!(
        victims[0].grace_period_seconds, None,
        "the pod's own, as katalyst's GracePeriod"
    );
}

#[test]
fn a_bad_config_is_refused_naming_the_field() {
    for (config, expected) in [
        (
            r#"{"freeMemoryThresholdMinimum": "lots"}"#,
            "freeMemoryThresholdMinimum",
        ),
        (r#"{"workloadPsi": {"some": 1}}"#, "workloadPsi.some"),
        (r#"{"coolDownSeconds": -1}"#, "coolDownSeconds"),
        (r#"{"kswapd": 1}"#, "unknown field \"kswapd\""),
    ] {
        let error = evaluate(&seen(0, &[], &[], &[]), config, &[]).unwrap_err();
        assert!(error.contains(expected), "{config}: {error}");
    }
}

#[test]
fn the_guide_states_the_defaults() {
    let guide = include_str!("../../../../docs/policies.md");
    let defaults = Config::default();
    let psi = defaults.workload_psi.unwrap();
    for row in [
        format!(
            "| `--eviction-system-pressure-cool-down-period` | `config.coolDownSeconds` | {} |",
            defaults.cool_down_seconds
        ),
        format!(
            "| `--eviction-system-pressure-some-threshold` | `config.workloadPsi.someThreshold` | {} |",
            psi.some_threshold
        ),
        format!(
            "| `--eviction-system-pressure-full-threshold` | `config.workloadPsi.fullThreshold` | {} |",
            psi.full_threshold
        ),
        format!(
            "| `--eviction-system-pressure-duration` | `config.workloadPsi.durationSeconds` | {} |",
            psi.duration_seconds
        ),
    ] {
        assert!(guide.contains(&row), "docs/policies.md: {row}");
    }
    assert_eq!(Config::parse("").unwrap(), defaults);
}

#[test]
fn a_kept_state_not_its_own_is_refused() {
    for kept in [&b"not json"[..], br#"{"action": "maybe"}"#] {
        let error = evaluate(&seen(0, &memory(GI), &[], &[]), "", kept).unwrap_err();
        assert!(error.contains("kept"), "{error}");
    }
}
