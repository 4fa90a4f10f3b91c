//! katalyst's `TestNewReclaimedResourcesEvictionPlugin` and
//! `TestNewResourcesEvictionPlugin` (`resource/`), then what vigil adds
//! around them: a resource per scope, what the node does not offer, the
//! zero-quantity skip and the config's errors.
use super::*;
use crate::{Amount, KeyValue, QosClass, Resources, Usage};
use policy_kit::pod;

/// A pod requesting `millicpu` of reclaimed CPU, at `reclaimed_cores` or not.
fn requesting(name: &str, millicpu: u64, reclaimed_cores: bool) -> Pod {
    let mut pod = pod!(name, QosClass::BestEffort, priority: 0, usage_mib: 0, request_mib: 0);
    if reclaimed_cores {
        pod.annotations = vec![KeyValue {
            key: katalyst::QOS_LEVEL.into(),
            value: "reclaimed_cores".into(),
        }];
    }
    if millicpu > 0 {
        pod.extended_requests = vec![Amount {
            name: RECLAIMED_MILLICPU.into(),
            value: millicpu,
        }];
    }
    pod
}

fn offered(resource: &str, value: f64) -> Signal {
    Signal {
        name: format!("node.allocatable.{}", scope(resource)),
        value,
        capacity: None,
    }
}

fn names(victims: &[Eviction]) -> Vec<&str> {
    victims.iter().map(|v| v.uid.as_str()).collect()
}

#[test]
fn new_reclaimed_resources_eviction_plugin() {
    // Two reclaimed pods of 5000 each, one shared pod; the node offers 1000.
    let pods = [
        requesting("test-pod-1", 5000, true),
        requesting("test-pod-2", 5000, true),
        requesting("test-pod-3", 0, false),
    ];
    let signals = [offered(RECLAIMED_MILLICPU, 1000.0)];
    let decision = evaluate(&signals, &pods, "").unwrap();
    let [threshold] = &decision.thresholds[..] else {
        panic!("{:?}", decision.thresholds);
    };
    assert_eq!(threshold.met, MetLevel::Hard);
    assert_eq!(threshold.scope, "reclaimed_millicpu");
    assert_eq!((threshold.observed, threshold.threshold), (10000.0, 5000.0));
    assert_eq!(threshold.grace_period_seconds, 0, "katalyst's tolerance: 0");
    assert!(threshold.condition.is_none(), "katalyst sets no condition");
    let victims = top_victims(&pods, "", &threshold.scope).unwrap();
    // katalyst asserts a victim; the two request as much (either may go).
    assert_eq!(names(&victims), ["uid-test-pod-1", "uid-test-pod-2"]);
    assert_eq!(victims[0].grace_period_seconds, Some(60));
}

#[test]
fn new_resources_eviction_plugin() {
    // 100 + 50 requested against 90 offered: under 5 × 90.
    let pods = [
        requesting("test-pod-1", 100, true),
        requesting("test-pod-2", 50, true),
        requesting("test-pod-3", 0, false),
    ];
    let signals = [offered(RECLAIMED_MILLICPU, 90.0)];
    let decision = evaluate(&signals, &pods, "").unwrap();
    // katalyst's generic plugin meets its soft rate here (1.5 × 90 = 135);
    // the reclaimed plugin passes no soft rate, and neither does vigil.
    assert!(decision.thresholds.is_empty(), "{:?}", decision.thresholds);
    // Its victims for the scope: the larger request first, the shared pod never.
    let victims = top_victims(&pods, "", "reclaimed_millicpu").unwrap();
    assert_eq!(names(&victims), ["uid-test-pod-1", "uid-test-pod-2"]);
    let reversed = [pods[1].clone(), pods[0].clone()];
    let victims = top_victims(&reversed, "", "reclaimed_millicpu").unwrap();
    assert_eq!(names(&victims), ["uid-test-pod-1", "uid-test-pod-2"]);
    assert!(
        top_victims(&[], "", "reclaimed_millicpu")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn each_resource_over_its_rate_is_its_own_scope() {
    let mut pod = requesting("big", 6000, true);
    pod.extended_requests.push(Amount {
        name: RECLAIMED_MEMORY.into(),
        value: 6 << 30,
    });
    let signals = [
        offered(RECLAIMED_MILLICPU, 1000.0),
        offered(RECLAIMED_MEMORY, (1u64 << 30) as f64),
    ];
    let config = r#"{"toleranceSeconds": 30}"#;
    let decision = evaluate(&signals, &[pod], config).unwrap();
    let scopes: Vec<(&str, u64)> = (decision.thresholds.iter())
        .map(|t| (t.scope.as_str(), t.grace_period_seconds))
        .collect();
    assert_eq!(
        scopes,
        [("reclaimed_memory", 30), ("reclaimed_millicpu", 30)],
        "sorted by name"
    );
}

#[test]
fn what_the_node_does_not_offer_or_offers_none_of_is_judged_as_configured() {
    let pods = [requesting("p", 100, true)];
    // Not offered at all: not judged (katalyst: "doesn't exist in allocatable").
    assert!(evaluate(&[], &pods, "").unwrap().thresholds.is_empty());
    // Offered as 0: any request is over, unless listed to skip.
    let zero = [offered(RECLAIMED_MILLICPU, 0.0)];
    assert_eq!(evaluate(&zero, &pods, "").unwrap().thresholds.len(), 1);
    let skip = format!(r#"{{"skipZeroQuantity": ["{RECLAIMED_MILLICPU}"]}}"#);
    assert!(evaluate(&zero, &pods, &skip).unwrap().thresholds.is_empty());
    // A resource with no rate is not judged.
    let only_memory = format!(r#"{{"thresholds": {{"{RECLAIMED_MEMORY}": 5}}}}"#);
    assert!(
        evaluate(&zero, &pods, &only_memory)
            .unwrap()
            .thresholds
            .is_empty()
    );
    // A shared pod's requests do not count.
    let shared = [requesting("p", 100, false)];
    assert!(evaluate(&zero, &shared, "").unwrap().thresholds.is_empty());
}

#[test]
fn the_offer_is_read_where_configured_and_only_that_source_is_asked_for() {
    let pods = [requesting("p", 100, true)];
    let cnr = [Signal {
        name: "cnr.allocatable.reclaimed_millicpu".into(),
        value: 10.0,
        capacity: None,
    }];
    // From the Node unless told: the CNR's signal is not the offer.
    assert!(evaluate(&cnr, &pods, "").unwrap().thresholds.is_empty());
    let decision = evaluate(&cnr, &pods, r#"{"offered": "cnr"}"#).unwrap();
    assert_eq!(
        decision.thresholds[0].signal,
        "cnr.allocatable.reclaimed_millicpu"
    );
    assert_eq!(interest("").signals, ["node.allocatable.*"]);
    assert_eq!(
        interest(r#"{"offered": "cnr"}"#).signals,
        ["cnr.allocatable.*"]
    );
}

#[test]
fn a_bad_config_is_an_error_naming_the_field() {
    for (config, why) in [
        (r#"{"thresholds": []}"#, "thresholds must map"),
        (
            r#"{"thresholds": {"x": 0}}"#,
            "thresholds.x must be a positive",
        ),
        (r#"{"gracePeriodSeconds": 0}"#, "gracePeriodSeconds must be"),
        (r#"{"toleranceSeconds": -1}"#, "toleranceSeconds must be"),
        (r#"{"skipZeroQuantity": [1]}"#, "skipZeroQuantity must list"),
        (r#"{"rate": 1}"#, "unknown field \"rate\""),
        (r#"{"offered": "crd"}"#, "offered must be"),
    ] {
        let error = Config::parse(config).unwrap_err();
        assert!(error.contains(why), "{config}: {error}");
    }
    let config = Config::parse(r#"{"gracePeriodSeconds": null}"#).unwrap();
    assert_eq!(config.grace_period_seconds, None, "null: the pod's own");
}
