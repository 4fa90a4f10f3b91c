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
        last_met: vec![ScopeMet {
            scope: "memory".into(),
            met: last_met,
            victim: false,
        }],
        config: config.into(),
        state: vec![],
    }
}

fn met(available_mi: f64, last_met: MetLevel, config: &str) -> (MetLevel, u64) {
    let t = evaluate(&MEMORY, &snapshot(available_mi, last_met, config))
        .unwrap()
        .thresholds
        .remove(0);
    (t.met, t.grace_period_seconds)
}

#[test]
fn default_hard_threshold_is_300_mebibytes_ahead_of_the_kubelets_100() {
    assert_eq!(met(299.0, MetLevel::NotMet, ""), (MetLevel::Hard, 0));
    assert_eq!(met(300.0, MetLevel::NotMet, ""), (MetLevel::NotMet, 0));
    let decision = evaluate(&MEMORY, &snapshot(50.0, MetLevel::NotMet, "{}")).unwrap();
    assert_eq!(
        decision.thresholds[0].condition.clone().unwrap().name,
        "MemoryPressure"
    );
    assert_eq!(decision.thresholds[0].scope, "memory");
}

#[test]
fn soft_threshold_carries_its_grace_period_and_percentages_resolve_against_capacity() {
    let config = r#"{"hard":"1%","soft":"10%","softGracePeriodSeconds":30}"#;
    assert_eq!(met(800.0, MetLevel::NotMet, config), (MetLevel::Soft, 30));
    assert_eq!(met(80.0, MetLevel::NotMet, config), (MetLevel::Hard, 0));
    assert_eq!(met(900.0, MetLevel::NotMet, config), (MetLevel::NotMet, 0));
    assert!(
        evaluate(&MEMORY, &snapshot(900.0, MetLevel::NotMet, config))
            .unwrap()
            .thresholds[0]
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
    let victims = top_victims(&MEMORY, &snapshot(50.0, MetLevel::Hard, "{}"), "memory", 3).unwrap();
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
        top_victims(&MEMORY, &snap, "disk", 1)
            .unwrap_err()
            .contains("unknown scope")
    );
    let mut no_signal = snap.clone();
    no_signal.signals.clear();
    assert_eq!(
        evaluate(&MEMORY, &no_signal).unwrap_err(),
        "signal memory.available is missing from the snapshot"
    );
    let bad =
        |config: &str| evaluate(&MEMORY, &snapshot(50.0, MetLevel::NotMet, config)).unwrap_err();
    assert_eq!(bad(r#"{"hard": 5}"#), "$.hard: must be a string");
    assert!(bad(r#"{"hard": "lots"}"#).starts_with("$.hard: `lots` is not a quantity"));
    assert_eq!(bad(r#"{"grace": 1}"#), "$.grace: unknown field");
    assert_eq!(
        bad(r#"{"softGracePeriodSeconds": -1}"#),
        "$.softGracePeriodSeconds: must be a non-negative integer"
    );
}

fn with_signal(name: &str, value: f64, capacity: f64, pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        now_ms: 0,
        signals: vec![Signal {
            name: name.into(),
            value,
            capacity: Some(capacity),
        }],
        pods,
        last_met: vec![],
        state: vec![],
        config: "{}".into(),
    }
}

#[test]
fn disk_pressure_is_below_eleven_percent_hard_and_thirteen_soft_and_evicts_the_biggest_writer_of_the_lowest_priority()
 {
    let mut pods = vec![
        pod("quiet", 0, 10, 10),
        pod("writer", 0, 10, 10),
        pod("important", 100, 10, 10),
    ];
    pods[0].usage.ephemeral_storage_bytes = Some(1 << 30);
    pods[1].usage.ephemeral_storage_bytes = Some(5 << 30);
    pods[2].usage.ephemeral_storage_bytes = Some(9 << 30);
    let gib = f64::from(1 << 30);
    let snap = with_signal("nodefs.available", 10.5 * gib, 100.0 * gib, pods);
    let decision = evaluate(&DISK, &snap).unwrap();
    assert_eq!(
        (
            decision.thresholds[0].met,
            decision.thresholds[0]
                .condition
                .clone()
                .unwrap()
                .name
                .as_str()
        ),
        (MetLevel::Hard, "DiskPressure")
    );
    let victims = top_victims(&DISK, &snap, "disk", 3).unwrap();
    let uids: Vec<_> = victims.iter().map(|v| v.uid.as_str()).collect();
    assert_eq!(uids, ["uid-writer", "uid-quiet", "uid-important"]);
    assert!(
        victims[0].reason.contains("writes 5120 MiB"),
        "{}",
        victims[0].reason
    );
    let at = |free: f64| {
        evaluate(
            &DISK,
            &with_signal("nodefs.available", free * gib, 100.0 * gib, vec![]),
        )
        .unwrap()
        .thresholds
        .remove(0)
    };
    let soft = at(12.0);
    assert_eq!((soft.met, soft.grace_period_seconds), (MetLevel::Soft, 300));
    assert_eq!(at(13.0).met, MetLevel::NotMet);
}

#[test]
fn pid_pressure_evicts_the_pod_with_most_processes() {
    let mut pods = vec![pod("few", 0, 1, 1), pod("forky", 0, 1, 1)];
    pods[1].usage.pids = Some(3000);
    let snap = with_signal("pid.available", 1000.0, 32768.0, pods);
    assert_eq!(
        evaluate(&PID, &snap).unwrap().thresholds[0].met,
        MetLevel::Hard
    );
    assert_eq!(
        top_victims(&PID, &snap, "pid", 1).unwrap()[0].uid,
        "uid-forky"
    );
}

#[test]
fn psi_pressure_is_met_above_its_thresholds_even_with_free_memory() {
    let soft = evaluate(
        &PSI,
        &with_signal("psi.memory.some.avg10", 25.0, 100.0, vec![]),
    )
    .unwrap()
    .thresholds
    .remove(0);
    assert_eq!(
        (soft.met, soft.grace_period_seconds, soft.threshold),
        (MetLevel::Soft, 30, 20.0)
    );
    let hard = evaluate(
        &PSI,
        &with_signal("psi.memory.some.avg10", 55.0, 100.0, vec![]),
    )
    .unwrap()
    .thresholds
    .remove(0);
    assert_eq!(
        (hard.met, hard.scope.as_str()),
        (MetLevel::Hard, "psi-memory")
    );
    let calm = evaluate(
        &PSI,
        &with_signal("psi.memory.some.avg10", 3.0, 100.0, vec![]),
    )
    .unwrap()
    .thresholds
    .remove(0);
    assert_eq!(calm.met, MetLevel::NotMet);
}

/// `amount` as the guide writes it: `100Mi`, `10%`, `40`.
fn written(amount: Amount) -> String {
    match amount {
        Amount::Percent(pct) => format!("{pct}%"),
        Amount::Absolute(0) => "0".into(),
        Amount::Absolute(n) if n % (1 << 30) == 0 => format!("{}Gi", n >> 30),
        Amount::Absolute(n) if n % (1 << 20) == 0 => format!("{}Mi", n >> 20),
        Amount::Absolute(n) => n.to_string(),
    }
}

#[test]
fn the_policy_guide_states_each_strategys_defaults() {
    let guide = include_str!("../../../docs/policies.md");
    let mut table = String::from(
        "| strategy | signal | pressure when the signal is | hard | soft | soft grace period \
         | minimum reclaim | condition | `top-victims` scope |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for kind in [MEMORY, DISK, PID, PSI] {
        let t = (kind.defaults)();
        table += &format!(
            "| `{}` | `{}` | {} | {} | {} | {} s | {} | `{}` | `{}` |\n",
            kind.name,
            t.signal,
            match t.direction {
                Direction::Below => "below",
                Direction::Above => "above",
            },
            t.hard.map_or("none".into(), written),
            t.soft.map_or("none".into(), written),
            t.soft_grace_period_seconds,
            written(t.minimum_reclaim),
            kind.condition,
            kind.scope,
        );
    }
    assert!(
        guide.contains(&table),
        "docs/policies.md must state the built-in strategies' defaults as:\n{table}"
    );
}
