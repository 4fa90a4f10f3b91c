//! katalyst's `TestCPUSystemPressureEvictionPlugin_*` (PR #1141) case by
//! case: `ThresholdMet`'s rings (100 CPUs, a ring of 10, 50 % of it to
//! meet) fed one sample a cycle, `GetTopEvictionPods`' busier pod, and
//! `collectMetrics`' samples in node mode (with and without the CPU
//! manager) and in pod-aggregated mode. katalyst's soft level is vigil's
//! `report`.
use super::*;
use crate::{KeyValue, Resources, ScopeMet, Usage};
use policy_kit::pod;

fn signals(metric: &str, value: f64) -> Vec<Signal> {
    vec![Signal {
        name: metric.into(),
        value,
        capacity: Some(100.0),
    }]
}

/// The decision after `samples` cycles of `value` on `metric`.
fn after(config: &str, metric: &str, value: f64, samples: usize) -> Decision {
    let mut kept = Vec::new();
    let mut decision = None;
    for cycle in 0..samples {
        let signals = signals(metric, value);
        let seen = Seen {
            now_ms: cycle as i64 * 5000,
            signals: &signals,
            pods: &[],
            last_met: &[],
        };
        let answer = evaluate(&seen, config, &kept).unwrap();
        kept = answer.state.clone().unwrap();
        decision = Some(answer);
    }
    decision.unwrap()
}

fn met(decision: &Decision) -> Option<(MetLevel, &str)> {
    (decision.thresholds.first()).map(|t| (t.met, t.scope.as_str()))
}

#[test]
fn threshold_met_threshold_not_met() {
    let config = r#"{"loadUpperBoundRatio": 0.8, "loadLowerBoundRatio": 0.5, "thresholdMetPercentage": 0.5, "metricRingSize": 10}"#;
    assert_eq!(met(&after(config, "cpu.load1", 10.0, 10)), None);
}

#[test]
fn threshold_met_soft_threshold_met() {
    let config = r#"{"loadUpperBoundRatio": 0.8, "loadLowerBoundRatio": 0.5, "thresholdMetPercentage": 0.5, "metricRingSize": 10}"#;
    let decision = after(config, "cpu.load1", 60.0, 6);
    assert_eq!(met(&decision), Some((MetLevel::Report, "cpu.load1")));
    let condition = decision.thresholds[0].condition.as_ref().unwrap();
    assert_eq!(
        (condition.name.as_str(), &condition.effects[..]),
        ("SystemCPU", &["NoSchedule".to_owned()][..])
    );
    // Four of ten slots over the bound are not half the ring; six are.
    assert_eq!(met(&after(config, "cpu.load1", 60.0, 4)), None);
}

#[test]
fn threshold_met_hard_threshold_met_with_usage() {
    let config = r#"{"usageUpperBoundRatio": 0.9, "usageLowerBoundRatio": 0.6, "thresholdMetPercentage": 0.5, "metricRingSize": 10}"#;
    assert_eq!(
        met(&after(config, "cpu.usage", 95.0, 6)),
        Some((MetLevel::Hard, "cpu.usage"))
    );
}

#[test]
fn threshold_met_hard_threshold_only() {
    let config = r#"{"usageUpperBoundRatio": 0.9, "usageLowerBoundRatio": 0.0, "thresholdMetPercentage": 0.5, "metricRingSize": 10}"#;
    assert_eq!(
        met(&after(config, "cpu.usage", 95.0, 6)),
        Some((MetLevel::Hard, "cpu.usage"))
    );
}

#[test]
fn threshold_met_soft_threshold_only() {
    let config = r#"{"usageUpperBoundRatio": 0.0, "usageLowerBoundRatio": 0.6, "thresholdMetPercentage": 0.5, "metricRingSize": 10}"#;
    assert_eq!(
        met(&after(config, "cpu.usage", 95.0, 6)),
        Some((MetLevel::Report, "cpu.usage"))
    );
}

#[test]
fn with_katalysts_defaults_nothing_is_judged() {
    assert_eq!(met(&after("", "cpu.usage", 100.0, 10)), None);
}

fn busy(name: &str, millis: u64) -> Pod {
    let mut pod = pod!(name, QosClass::Burstable, priority: 0, usage_mib: 0, request_mib: 0);
    pod.usage.cpu_millis = Some(millis);
    pod
}

#[test]
fn get_top_eviction_pods_the_busier_pod_first() {
    let pods = [busy("pod1", 10_000), busy("pod2", 50_000)];
    let victims = top_victims(&pods, "", "cpu.load1").unwrap();
    assert_eq!(victims[0].uid, "uid-pod2");
    assert_eq!(
        victims[0].grace_period_seconds, None,
        "katalyst's -1: the pod's own"
    );
}

#[test]
fn after_a_victim_the_threshold_reports_until_the_cool_down_ends() {
    let config =
        r#"{"usageUpperBoundRatio": 0.9, "thresholdMetPercentage": 0.5, "metricRingSize": 2}"#;
    let signals = signals("cpu.usage", 95.0);
    let chosen = [ScopeMet {
        scope: "cpu.usage".into(),
        met: MetLevel::Hard,
        victim: true,
    }];
    let mut kept = Vec::new();
    let mut levels = Vec::new();
    for (t, last_met) in [
        (0, &[][..]),
        (5, &chosen[..]),
        (10, &[][..]),
        (305, &[][..]),
    ] {
        let seen = Seen {
            now_ms: t * 1000,
            signals: &signals,
            pods: &[],
            last_met,
        };
        let decision = evaluate(&seen, config, &kept).unwrap();
        kept = decision.state.unwrap();
        levels.push(decision.thresholds[0].met);
    }
    assert_eq!(
        levels,
        [
            MetLevel::Hard,
            MetLevel::Report,
            MetLevel::Report,
            MetLevel::Hard
        ],
        "300 s from the cycle that chose the victim"
    );
}

fn guaranteed(name: &str, cpus: u64, millis: u64) -> Pod {
    let mut pod = busy(name, millis);
    pod.qos = QosClass::Guaranteed;
    pod.requests.cpu_millis = cpus * 1000;
    pod
}

#[test]
fn collect_metrics_node_mode() {
    let config = Config::parse(r#"{"loadUpperBoundRatio": 0.8}"#).unwrap();
    let sample = sample(&config, "cpu.load1", &signals("cpu.load1", 100.0), &[]).unwrap();
    assert_eq!((sample.value, sample.upper), (100.0, 80.0));
}

#[test]
fn collect_metrics_node_metric_with_cpu_manager() {
    let config =
        Config::parse(r#"{"usageUpperBoundRatio": 0.8, "checkCpuManager": true}"#).unwrap();
    let pods = [guaranteed("pod1", 2, 30_000), busy("pod2", 40_000)];
    let sample = sample(&config, "cpu.usage", &signals("cpu.usage", 100.0), &pods).unwrap();
    assert_eq!(sample.value, 70.0, "the guaranteed pod's 30 cores left out");
    assert_eq!(sample.upper, 98.0 * 0.8, "and its two CPUs");
    let victims = top_victims(&pods, r#"{"checkCpuManager": true}"#, "cpu.usage").unwrap();
    assert_eq!(
        victims.len(),
        1,
        "a guaranteed pod with whole CPUs is never a victim"
    );
    assert!(interest(r#"{"checkCpuManager": true}"#).pods_in_evaluate);
}

#[test]
fn collect_metrics_pod_aggregated() {
    let config =
        Config::parse(r#"{"usageUpperBoundRatio": 0.8, "metricMode": "PodAggregatedMetric"}"#)
            .unwrap();
    let pods = [busy("pod1", 30_000), busy("pod2", 40_000)];
    let sample = sample(&config, "cpu.usage", &signals("cpu.usage", 5.0), &pods).unwrap();
    assert_eq!(sample.value, 70.0);
}

#[test]
fn ties_on_usage_go_by_katalysts_qos_then_priority() {
    let mut reclaimed = busy("reclaimed", 1000);
    reclaimed.annotations = vec![KeyValue {
        key: katalyst::QOS_LEVEL.into(),
        value: "reclaimed_cores".into(),
    }];
    let mut low = busy("low", 1000);
    low.priority = -5;
    let pods = [busy("shared", 1000), low, reclaimed];
    let order: Vec<String> = (top_victims(&pods, "", "cpu.usage").unwrap().into_iter())
        .map(|e| e.uid)
        .collect();
    assert_eq!(order, ["uid-reclaimed", "uid-low", "uid-shared"]);
}

#[test]
fn a_bad_config_is_refused_naming_the_field() {
    for (config, expected) in [
        (r#"{"loadUpperBoundRatio": -1}"#, "loadUpperBoundRatio"),
        (r#"{"metricRingSize": 0}"#, "metricRingSize"),
        (r#"{"metricMode": "Other"}"#, "metricMode"),
        (
            r#"{"rankingLabels": {}}"#,
            "unknown field \"rankingLabels\"",
        ),
    ] {
        let seen = Seen {
            now_ms: 0,
            signals: &[],
            pods: &[],
            last_met: &[],
        };
        let error = evaluate(&seen, config, &[]).unwrap_err();
        assert!(error.contains(expected), "{config}: {error}");
    }
}

#[test]
fn the_guide_states_the_defaults() {
    let guide = include_str!("../../../../docs/policies.md");
    let defaults = Config::default();
    for row in [
        format!(
            "| `ThresholdMetPercentage` | `config.thresholdMetPercentage` | {} |",
            defaults.threshold_met_percentage
        ),
        format!(
            "| `MetricRingSize` | `config.metricRingSize` | {} |",
            defaults.metric_ring_size
        ),
        format!(
            "| `EvictionCoolDownTime` | `config.coolDownSeconds` | {} |",
            defaults.cool_down_seconds
        ),
    ] {
        assert!(guide.contains(&row), "docs/policies.md: {row}");
    }
    assert_eq!(Config::parse("").unwrap(), defaults);
}

#[test]
fn a_kept_state_not_its_own_is_refused() {
    let signals = signals("cpu.usage", 50.0);
    let seen = Seen {
        now_ms: 0,
        signals: &signals,
        pods: &[],
        last_met: &[],
    };
    let config = r#"{"usageUpperBoundRatio": 0.9}"#;
    for kept in [&b"{"[..], br#"{"rings": {"cpu.usage": [["a", 1, 2]]}}"#] {
        let error = evaluate(&seen, config, kept).unwrap_err();
        assert!(error.contains("kept"), "{error}");
    }
}
