use super::*;

const MI: f64 = (1 << 20) as f64;

fn pod(name: &str, priority: i32, usage_mi: u64, request_mi: u64) -> Pod {
    policy_kit::pod!(name, QosClass::Burstable, priority: priority, usage_mib: usage_mi, request_mib: request_mi)
}

fn snapshot(available_mi: f64, last_met: MetLevel, config: &str) -> Snapshot {
    Snapshot {
        now_ms: 0,
        signals: vec![Signal {
            name: "memory.available".into(),
            value: available_mi * MI,
            capacity: Some(8192.0 * MI),
        }],
        pods: vec![
            pod("a", 0, 100, 200),
            pod("b", 0, 300, 100),
            pod("c", -10, 150, 100),
            pod("d", 0, 500, 100),
        ],
        last_met,
        config: config.into(),
    }
}

fn met(available_mi: f64, last_met: MetLevel, config: &str) -> (MetLevel, u64) {
    let t = evaluate(&snapshot(available_mi, last_met, config))
        .unwrap()
        .threshold;
    (t.met, t.grace_period_seconds)
}

#[test]
fn default_hard_threshold_is_100_mebibytes() {
    assert_eq!(met(99.0, MetLevel::NotMet, ""), (MetLevel::Hard, 0));
    assert_eq!(met(100.0, MetLevel::NotMet, ""), (MetLevel::NotMet, 0));
    let decision = evaluate(&snapshot(50.0, MetLevel::NotMet, "{}")).unwrap();
    assert_eq!(decision.threshold.condition.unwrap().name, "MemoryPressure");
    assert_eq!(decision.threshold.scope, SCOPE);
}

#[test]
fn soft_threshold_carries_its_grace_period_and_percentages_resolve_against_capacity() {
    let config = r#"{"hard":"1%","soft":"10%","softGracePeriodSeconds":30}"#;
    assert_eq!(met(800.0, MetLevel::NotMet, config), (MetLevel::Soft, 30));
    assert_eq!(met(80.0, MetLevel::NotMet, config), (MetLevel::Hard, 0));
    assert_eq!(met(900.0, MetLevel::NotMet, config), (MetLevel::NotMet, 0));
    assert!(
        evaluate(&snapshot(900.0, MetLevel::NotMet, config))
            .unwrap()
            .threshold
            .condition
            .is_none()
    );
}

#[test]
fn minimum_reclaim_keeps_a_met_threshold_until_memory_recovers_past_it() {
    let config = r#"{"hard":"100Mi","minimumReclaim":"50Mi"}"#;
    assert_eq!(met(120.0, MetLevel::NotMet, config).0, MetLevel::NotMet);
    assert_eq!(met(120.0, MetLevel::Hard, config).0, MetLevel::Hard);
    assert_eq!(met(150.0, MetLevel::Hard, config).0, MetLevel::NotMet);
}

#[test]
fn top_victims_follow_the_kubelet_memory_ranking() {
    let victims = top_victims(&snapshot(50.0, MetLevel::Hard, "{}"), SCOPE, 3).unwrap();
    let uids: Vec<_> = victims.iter().map(|v| v.uid.as_str()).collect();
    // c has the lowest priority; d exceeds its request by more than b; a is within its request.
    assert_eq!(uids, ["uid-c", "uid-d", "uid-b"]);
    assert!(
        victims[1].reason.contains("uses 500 MiB"),
        "{}",
        victims[1].reason
    );
}

#[test]
fn refuses_unknown_scopes_missing_signals_and_bad_config() {
    let snap = snapshot(50.0, MetLevel::NotMet, "{}");
    assert!(
        top_victims(&snap, "disk", 1)
            .unwrap_err()
            .contains("unknown scope")
    );
    let mut no_signal = snap.clone();
    no_signal.signals.clear();
    assert_eq!(
        evaluate(&no_signal).unwrap_err(),
        "signal memory.available is missing from the snapshot"
    );
    let bad = |config: &str| evaluate(&snapshot(50.0, MetLevel::NotMet, config)).unwrap_err();
    assert_eq!(bad(r#"{"hard": 5}"#), "$.hard: must be a string");
    assert!(bad(r#"{"hard": "lots"}"#).starts_with("$.hard: `lots` is not a quantity"));
    assert_eq!(bad(r#"{"grace": 1}"#), "$.grace: unknown field");
    assert_eq!(
        bad(r#"{"softGracePeriodSeconds": -1}"#),
        "$.softGracePeriodSeconds: must be a non-negative integer"
    );
}
