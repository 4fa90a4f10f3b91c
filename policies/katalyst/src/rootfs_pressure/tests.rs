//! katalyst's `TestPodRootfsPressureEvictionPlugin_*` test by test: an
//! image filesystem of 10000 bytes and 10000 inodes with 2000 of each free,
//! two pods writing what each case sets, katalyst asking for one pod
//! (vigil's first victim is compared). A metric older than 60 s is, for
//! vigil, a writable-layers reading as old (the node's signals are read
//! fresh every cycle, so katalyst's stale node metric has no counterpart).
use super::*;
use crate::{KeyValue, QosClass, Resources, Usage, WritableLayers};
use policy_kit::pod;

fn signals() -> Vec<Signal> {
    let signal = |name: &str, value: f64| Signal {
        name: name.into(),
        value,
        capacity: Some(10000.0),
    };
    vec![
        signal("nodefs.available", 2000.0),
        signal("nodefs.inodesFree", 2000.0),
    ]
}

fn met(config: &str) -> bool {
    !evaluate(&signals(), config).unwrap().thresholds.is_empty()
}

#[test]
fn threshold_met_no_metric_data_no_conf() {
    assert!(!met(""));
}

#[test]
fn threshold_met_no_metric_data() {
    let decision = evaluate(&[], r#"{"minimumFree": "90%", "minimumInodesFree": "90%"}"#).unwrap();
    assert!(decision.thresholds.is_empty());
}

#[test]
fn threshold_met_not_met() {
    assert!(!met(
        r#"{"minimumFree": "10%", "minimumInodesFree": "10%"}"#
    ));
    assert!(!met(r#"{"minimumFree": 1000, "minimumInodesFree": 1000}"#));
}

#[test]
fn threshold_met_used_met() {
    assert!(met(r#"{"minimumFree": "30%", "minimumInodesFree": "10%"}"#));
    assert!(met(r#"{"minimumFree": 3000, "minimumInodesFree": 1000}"#));
}

#[test]
fn threshold_met_inodes_met() {
    assert!(met(r#"{"minimumFree": "10%", "minimumInodesFree": "30%"}"#));
    assert!(met(r#"{"minimumFree": 1000, "minimumInodesFree": 3000}"#));
}

#[test]
fn threshold_met() {
    let config = r#"{"minimumFree": "30%", "minimumInodesFree": "30%"}"#;
    let decision = evaluate(&signals(), config).unwrap();
    let threshold = &decision.thresholds[0];
    assert_eq!(
        (threshold.met, threshold.scope.as_str()),
        (MetLevel::Hard, SCOPE)
    );
    assert_eq!(
        threshold.signal, "nodefs.available",
        "bytes first, as katalyst"
    );
    assert_eq!(threshold.condition.as_ref().unwrap().name, "SystemRootfs");
    assert!(met(r#"{"minimumFree": 3000, "minimumInodesFree": 3000}"#));
}

#[test]
fn the_image_filesystem_goes_before_the_nodes_and_a_small_one_is_not_judged_by_bytes() {
    let mut signals = signals();
    signals.push(Signal {
        name: "imagefs.available".into(),
        value: 9000.0,
        capacity: Some(10000.0),
    });
    let decision = evaluate(&signals, r#"{"minimumFree": "30%"}"#).unwrap();
    assert!(
        decision.thresholds.is_empty(),
        "the image filesystem has room"
    );
    let small = r#"{"minimumFree": "30%", "minimumDiskCapacity": "10Gi"}"#;
    assert!(
        !met(small),
        "katalyst ignores a disk under the minimum capacity"
    );
}

/// katalyst's two pods, writing `(bytes, inodes)` each, at `levels`, measured `age_ms` ago.
fn pods(written: [(u64, u64); 2], levels: [Option<&str>; 2], ages: [u64; 2]) -> Vec<Pod> {
    (0..2)
        .map(|i| {
            let mut pod = pod!(&format!("podUID{}", i + 1), QosClass::BestEffort, priority: 0, usage_mib: 0, request_mib: 0);
            pod.uid = pod.name.clone();
            pod.writable_layers = Some(WritableLayers {
                bytes: written[i].0,
                inodes: written[i].1,
                age_ms: ages[i],
            });
            if let Some(level) = levels[i] {
                pod.annotations = vec![KeyValue {
                    key: katalyst::QOS_LEVEL.into(),
                    value: level.into(),
                }];
            }
            pod
        })
        .collect()
}

/// The first victim under `config`, for pods writing `written`.
fn first_with(
    config: &str,
    written: [(u64, u64); 2],
    levels: [Option<&str>; 2],
    ages: [u64; 2],
) -> Option<String> {
    let decision = evaluate(&signals(), config).unwrap();
    if decision.thresholds.is_empty() {
        return None;
    }
    let kept = decision.state.unwrap();
    let pods = pods(written, levels, ages);
    let victims = top_victims(&signals(), &pods, config, &kept, SCOPE).unwrap();
    victims.first().map(|v| v.uid.clone())
}

fn first(config: &str, written: [(u64, u64); 2]) -> Option<String> {
    first_with(config, written, [None, None], [0, 0])
}

const BOTH_30: &str = r#"{"minimumFree": "30%", "minimumInodesFree": "30%"}"#;
const BYTES_30: &str = r#"{"minimumFree": "30%", "minimumInodesFree": "10%"}"#;
const INODES_30: &str = r#"{"minimumFree": "10%", "minimumInodesFree": "30%"}"#;

#[test]
fn get_top_eviction_pods_not_met() {
    let config = r#"{"minimumFree": "10%", "minimumInodesFree": "10%"}"#;
    assert_eq!(first(config, [(800, 800), (799, 799)]), None);
}

#[test]
fn get_top_eviction_pods_met() {
    assert_eq!(
        first(BOTH_30, [(800, 800), (799, 799)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(BOTH_30, [(800, 800), (801, 801)]).as_deref(),
        Some("podUID2")
    );
}

#[test]
fn get_top_eviction_pods_used_met() {
    assert_eq!(
        first(BYTES_30, [(800, 799), (799, 800)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(BYTES_30, [(800, 799), (801, 699)]).as_deref(),
        Some("podUID2")
    );
}

#[test]
fn get_top_eviction_pods_inodes_met() {
    assert_eq!(
        first(INODES_30, [(799, 800), (800, 799)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(INODES_30, [(799, 800), (699, 801)]).as_deref(),
        Some("podUID2")
    );
}

#[test]
fn get_top_eviction_pods_used_met_protection() {
    let quantity = r#"{"minimumFree": "30%", "minimumInodesFree": "10%", "podMinimumUsed": 900}"#;
    assert_eq!(first(quantity, [(800, 799), (799, 800)]), None);
    assert_eq!(
        first(quantity, [(1000, 1000), (800, 800)]).as_deref(),
        Some("podUID1")
    );
    let share = r#"{"minimumFree": "30%", "minimumInodesFree": "10%", "podMinimumUsed": "10%"}"#;
    assert_eq!(first(share, [(800, 799), (799, 800)]), None);
    assert_eq!(
        first(share, [(1100, 799), (799, 1100)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(share, [(1100, 799), (1200, 1100)]).as_deref(),
        Some("podUID2")
    );
    assert_eq!(
        first(BYTES_30, [(2, 799), (1, 800)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(BYTES_30, [(1, 799), (2, 800)]).as_deref(),
        Some("podUID2")
    );
}

#[test]
fn get_top_eviction_pods_inodes_met_protection() {
    let quantity =
        r#"{"minimumFree": "10%", "minimumInodesFree": "30%", "podMinimumInodesUsed": 900}"#;
    assert_eq!(first(quantity, [(799, 800), (800, 799)]), None);
    assert_eq!(
        first(quantity, [(800, 1000), (1000, 800)]).as_deref(),
        Some("podUID1")
    );
    let share =
        r#"{"minimumFree": "10%", "minimumInodesFree": "30%", "podMinimumInodesUsed": "10%"}"#;
    assert_eq!(first(share, [(799, 800), (800, 799)]), None);
    assert_eq!(
        first(share, [(799, 1100), (800, 799)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(share, [(799, 1100), (800, 1200)]).as_deref(),
        Some("podUID2")
    );
    assert_eq!(
        first(INODES_30, [(799, 2), (800, 1)]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        first(INODES_30, [(799, 2), (800, 3)]).as_deref(),
        Some("podUID2")
    );
}

const RECLAIMED: Option<&str> = Some("reclaimed_cores");

#[test]
fn get_top_eviction_pods_met_reclaimed_priority() {
    let quantity =
        r#"{"minimumFree": "30%", "minimumInodesFree": "30%", "reclaimedPriorityUsed": 500}"#;
    let second = [None, RECLAIMED];
    let first_reclaimed = [RECLAIMED, None];
    let case = |config, written, levels| first_with(config, written, levels, [0, 0]);
    assert_eq!(
        case(quantity, [(800, 800), (799, 799)], second).as_deref(),
        Some("podUID2")
    );
    assert_eq!(
        case(quantity, [(800, 800), (400, 400)], second).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        case(quantity, [(800, 800), (801, 801)], first_reclaimed).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        case(quantity, [(400, 400), (801, 801)], first_reclaimed).as_deref(),
        Some("podUID2")
    );
    let share =
        r#"{"minimumFree": "30%", "minimumInodesFree": "30%", "reclaimedPriorityUsed": "10%"}"#;
    assert_eq!(
        case(share, [(1200, 1200), (1100, 1100)], second).as_deref(),
        Some("podUID2")
    );
    assert_eq!(
        case(share, [(1200, 1200), (900, 900)], second).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        case(share, [(1200, 1200), (1300, 1300)], first_reclaimed).as_deref(),
        Some("podUID1")
    );
}

#[test]
fn get_top_eviction_pods_inodes_met_reclaimed_priority() {
    let config =
        r#"{"minimumFree": "10%", "minimumInodesFree": "30%", "reclaimedPriorityInodesUsed": 500}"#;
    let case = |written, levels| first_with(config, written, levels, [0, 0]);
    assert_eq!(
        case([(800, 800), (799, 799)], [None, RECLAIMED]).as_deref(),
        Some("podUID2")
    );
    assert_eq!(
        case([(800, 800), (400, 400)], [None, RECLAIMED]).as_deref(),
        Some("podUID1")
    );
    assert_eq!(
        case([(800, 800), (801, 801)], [RECLAIMED, None]).as_deref(),
        Some("podUID1")
    );
}

#[test]
fn get_top_eviction_pods_met_expire() {
    let stale = 65_000;
    assert_eq!(
        first_with(BOTH_30, [(800, 800), (799, 799)], [None, None], [stale, 0]).as_deref(),
        Some("podUID2")
    );
    assert_eq!(
        first_with(
            BOTH_30,
            [(800, 800), (799, 799)],
            [None, None],
            [stale, stale]
        ),
        None
    );
}

#[test]
fn a_bad_config_is_refused_naming_the_field() {
    for (config, expected) in [
        (r#"{"minimumFree": "lots"}"#, "minimumFree"),
        (r#"{"minimumFree": "120%"}"#, "minimumFree"),
        (r#"{"minimumDiskCapacity": "5%"}"#, "minimumDiskCapacity"),
        (r#"{"free": 1}"#, "unknown field \"free\""),
    ] {
        let error = evaluate(&[], config).unwrap_err();
        assert!(error.contains(expected), "{config}: {error}");
    }
}
