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
    !evaluate(&signals(), &[], config)
        .unwrap()
        .thresholds
        .is_empty()
}

#[test]
fn threshold_met_no_metric_data_no_conf() {
    assert!(!met(""));
}

#[test]
fn threshold_met_no_metric_data() {
    let decision = evaluate(
        &[],
        &[],
        r#"{"minimumFree": "90%", "minimumInodesFree": "90%"}"#,
    )
    .unwrap();
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
    let decision = evaluate(&signals(), &[], config).unwrap();
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
    let decision = evaluate(&signals, &[], r#"{"minimumFree": "30%"}"#).unwrap();
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
    let decision = evaluate(&signals(), &[], config).unwrap();
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
        let error = evaluate(&[], &[], config).unwrap_err();
        assert!(error.contains(expected), "{config}: {error}");
    }
}

/// katalyst's six pods of `TestRootfsOveruseEvictionPlugin_GetEvictPods`:
/// podUIDn writes n × 100 GiB, on an image filesystem of 3000 GiB.
fn overuse_pods() -> (Vec<Signal>, Vec<Pod>) {
    const GIB: u64 = 1 << 30;
    let signals = vec![Signal {
        name: "nodefs.available".into(),
        value: (2100 * GIB) as f64,
        capacity: Some((3000 * GIB) as f64),
    }];
    let levels = [
        ("default", "shared_cores"),
        ("", "reclaimed_cores"),
        ("test", "shared_cores"),
        ("", "reclaimed_cores"),
        ("default", "shared_cores"),
        ("", "dedicated_cores"),
    ];
    let pods = (levels.iter().enumerate())
        .map(|(i, (namespace, level))| {
            let uid = format!("podUID{}", i + 1);
            let mut pod =
                pod!(&uid, QosClass::BestEffort, priority: 0, usage_mib: 0, request_mib: 0);
            pod.uid = uid;
            pod.namespace = (*namespace).into();
            pod.annotations = vec![KeyValue {
                key: katalyst::QOS_LEVEL.into(),
                value: (*level).into(),
            }];
            pod.writable_layers = Some(WritableLayers {
                bytes: (i as u64 + 1) * 100 * GIB,
                inodes: 0,
                age_ms: 0,
            });
            pod
        })
        .collect();
    (signals, pods)
}

#[test]
fn get_evict_pods_rootfs_overuse_case_by_case() {
    let (signals, pods) = overuse_pods();
    let forced = |overuse: &str| -> Vec<String> {
        let config = match overuse {
            "" => "{}".to_owned(),
            overuse => format!(r#"{{"overuse": {overuse}}}"#),
        };
        let decision = evaluate(&signals, &pods, &config).unwrap();
        assert!(
            decision.thresholds.is_empty(),
            "no pressure threshold is set"
        );
        decision
            .force_evictions
            .into_iter()
            .map(|e| e.uid)
            .collect()
    };
    // "disable rootfs overuse eviction"
    assert!(forced("").is_empty());
    // "zero evict count"
    assert!(forced(r#"{"count": 0, "sharedThreshold": "50Gi"}"#).is_empty());
    // "support dedicated cores": no line for them
    assert!(forced(r#"{"qosLevels": ["dedicated_cores"], "sharedThreshold": "50Gi"}"#).is_empty());
    // "only supported shared cores, no threshold"
    assert!(forced(r#"{"sharedNamespaces": ["default", "test"]}"#).is_empty());
    let shared = r#""qosLevels": ["shared_cores"], "sharedNamespaces": ["default", "test"], "sharedThreshold": "50Gi""#;
    // "shared threshold 50Gi, limit evict count 1"
    assert_eq!(forced(&format!("{{{shared}, \"count\": 1}}")), ["podUID5"]);
    // "shared threshold 50Gi"
    assert_eq!(
        forced(&format!("{{{shared}, \"count\": 10}}")),
        ["podUID5", "podUID3", "podUID1"]
    );
    // "shared threshold 50Gi, namespace filter"
    assert_eq!(
        forced(r#"{"count": 10, "sharedThreshold": "50Gi", "sharedNamespaces": ["default"]}"#),
        ["podUID5", "podUID1"]
    );
    // "only supported reclaimed cores, reclaimed threshold 100Gi"
    assert_eq!(
        forced(r#"{"count": 10, "qosLevels": ["reclaimed_cores"], "reclaimedThreshold": "100Gi"}"#),
        ["podUID4", "podUID2"]
    );
    let both = r#""qosLevels": ["shared_cores", "reclaimed_cores"], "sharedNamespaces": ["default", "test"]"#;
    // "100Gi shared and 200Gi reclaimed cores"
    assert_eq!(
        forced(&format!(
            r#"{{{both}, "count": 10, "sharedThreshold": "100Gi", "reclaimedThreshold": "200Gi"}}"#
        )),
        ["podUID5", "podUID4", "podUID3"]
    );
    // "0.15 shared and 0.1 reclaimed cores, limit evict count 2"
    assert_eq!(
        forced(&format!(
            r#"{{{both}, "count": 2, "sharedThreshold": "15%", "reclaimedThreshold": "10%"}}"#
        )),
        ["podUID5", "podUID4"]
    );
}

#[test]
fn an_overuse_line_under_katalysts_floor_is_raised_to_it() {
    let (signals, mut pods) = overuse_pods();
    // podUID1 writes 10 GiB: over the 1 GiB asked, under katalyst's 20 GiB floor.
    pods[0].writable_layers.as_mut().unwrap().bytes = 10 << 30;
    let config = r#"{"overuse": {"count": 10, "sharedNamespaces": ["default", "test"], "sharedThreshold": "1Gi"}}"#;
    let decision = evaluate(&signals, &pods, config).unwrap();
    let forced: Vec<&str> = decision
        .force_evictions
        .iter()
        .map(|e| e.uid.as_str())
        .collect();
    assert_eq!(forced, ["podUID5", "podUID3"], "held to 20 GiB, not 1 GiB");
    assert!(interest(config).pods_in_evaluate, "the rule needs the pods");
    assert!(!interest("{}").pods_in_evaluate);
}
