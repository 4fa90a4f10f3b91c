use super::*;

fn pod(name: &str, qos: QosClass, priority: i32, usage_mi: u64, request_mi: u64) -> Pod {
    policy_kit::pod!(name, qos, priority: priority, usage_mib: usage_mi, request_mib: request_mi)
}

fn candidate(pod: Pod) -> Candidate {
    Candidate {
        pod,
        strategy: 0,
        urgency: Urgency::Hard,
    }
}

fn names(candidates: &[Candidate], sorted: &Sorted) -> Vec<String> {
    sorted
        .order
        .iter()
        .map(|&i| candidates[i as usize].pod.name.clone())
        .collect()
}

#[test]
fn keeps_the_strategies_ranking() {
    // Given in the strategy's order, whatever their QoS class or usage.
    let candidates: Vec<_> = [
        pod("guaranteed", QosClass::Guaranteed, 0, 900, 100),
        pod("burstable", QosClass::Burstable, 100, 300, 100),
        pod("best-effort", QosClass::BestEffort, 0, 500, 0),
    ]
    .into_iter()
    .map(candidate)
    .collect();
    let sorted = sort(&candidates, "{}").unwrap();
    assert_eq!(sorted.order, [0, 1, 2]);
    assert!(sorted.rejected.is_empty());
}

#[test]
fn refuses_static_mirror_critical_and_skipped_pods() {
    let mut pods: Vec<Pod> = (0..7)
        .map(|i| pod(&format!("p{i}"), QosClass::BestEffort, 0, 10, 0))
        .collect();
    pods[0].is_static = true;
    pods[1].is_mirror = true;
    pods[2].is_critical = true;
    pods[3].labels.push(KeyValue {
        key: "vigil.io/keep".into(),
        value: "yes".into(),
    });
    pods[4].annotations.push(KeyValue {
        key: "vigil.io/no-evict".into(),
        value: "".into(),
    });
    pods.swap(5, 6);
    let candidates: Vec<_> = pods.into_iter().map(candidate).collect();
    let config = r#"{"skipLabels":["vigil.io/keep"],"skipAnnotations":["vigil.io/no-evict"]}"#;
    let sorted = sort(&candidates, config).unwrap();
    assert_eq!(
        names(&candidates, &sorted),
        ["p6", "p5"],
        "the rest, in order"
    );
    let reasons: Vec<_> = sorted
        .rejected
        .iter()
        .map(|r| (r.index, r.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (0, "static pod"),
            (1, "mirror pod"),
            (2, "system-critical pod"),
            (3, "carries skip label vigil.io/keep"),
            (4, "carries skip annotation vigil.io/no-evict")
        ]
    );
}

#[test]
fn bad_config_is_an_answer_not_a_panic() {
    let candidates = vec![candidate(pod("p", QosClass::BestEffort, 0, 1, 0))];
    assert_eq!(
        sort(&candidates, "[1]").unwrap_err(),
        "config must be a JSON object"
    );
    assert_eq!(
        sort(&candidates, r#"{"skipLabel":[]}"#).unwrap_err(),
        "$.skipLabel: unknown field"
    );
    assert_eq!(
        sort(&candidates, r#"{"skipLabels":[3]}"#).unwrap_err(),
        "$.skipLabels[0]: must be a string"
    );
    assert!(
        sort(&candidates, "{")
            .unwrap_err()
            .starts_with("config is not JSON")
    );
}

#[test]
fn a_skip_entry_with_a_value_refuses_only_that_value() {
    // katalyst never evicts a pod of QoS level `system_cores`; other levels
    // of the same annotation go as usual.
    let qos = |level: &str| {
        let mut pod = pod(level, QosClass::Burstable, 0, 10, 0);
        pod.annotations.push(KeyValue {
            key: "katalyst.kubewharf.io/qos_level".into(),
            value: level.into(),
        });
        candidate(pod)
    };
    let candidates = vec![
        qos("shared_cores"),
        qos("system_cores"),
        qos("reclaimed_cores"),
    ];
    let config = r#"{"skipAnnotations":["katalyst.kubewharf.io/qos_level=system_cores"]}"#;
    let sorted = sort(&candidates, config).unwrap();
    assert_eq!(
        names(&candidates, &sorted),
        ["shared_cores", "reclaimed_cores"]
    );
    assert_eq!(
        (sorted.rejected[0].index, sorted.rejected[0].reason.as_str()),
        (
            1,
            "carries skip annotation katalyst.kubewharf.io/qos_level=system_cores"
        )
    );
    // It reads the key, once, whatever values are listed.
    let wanted =
        interest(r#"{"skipAnnotations":["k=a","k=b","other"],"skipLabels":["tier=critical"]}"#);
    assert_eq!(wanted.annotations, ["k", "other"]);
    assert_eq!(wanted.labels, ["tier"]);
    assert_eq!(
        sort(&candidates, r#"{"skipLabels":["=x"]}"#).unwrap_err(),
        "$.skipLabels[0]: \"=x\" names no key"
    );
}

#[test]
fn reads_only_its_skip_keys() {
    let config = r#"{"skipLabels":["vigil.io/keep"],"skipAnnotations":["a","b"]}"#;
    let wanted = interest(config);
    assert_eq!(wanted.labels, ["vigil.io/keep"]);
    assert_eq!(wanted.annotations, ["a", "b"]);
    let none = interest("not json");
    assert!(none.labels.is_empty() && none.annotations.is_empty());
}

#[test]
fn the_policy_guide_states_each_refusal_reason_in_order_of_precedence() {
    let guide = include_str!("../../../docs/policies.md");
    let skip = SkipKeys {
        labels: vec![Skip::parse("KEY")],
        annotations: vec![Skip::parse("KEY")],
    };
    let key = || KeyValue {
        key: "KEY".into(),
        value: String::new(),
    };
    // Each pod has its own trait and every one after it, so the reason
    // given is the one that takes precedence.
    let mut pod = pod("p", QosClass::BestEffort, 0, 1, 0);
    pod.annotations.push(key());
    let mut reasons = vec![refusal(&pod, &skip)];
    pod.labels.push(key());
    reasons.push(refusal(&pod, &skip));
    pod.is_critical = true;
    reasons.push(refusal(&pod, &skip));
    pod.is_mirror = true;
    reasons.push(refusal(&pod, &skip));
    pod.is_static = true;
    reasons.push(refusal(&pod, &skip));
    reasons.reverse();
    let rows: Vec<String> = guide
        .lines()
        .skip_while(|l| *l != "### `default-sorter`")
        .filter(|l| l.starts_with("| ") && !l.starts_with("| pod "))
        .take_while(|l| l.ends_with("` |"))
        .map(|l| l.rsplit('`').nth(1).unwrap().to_owned())
        .collect();
    let reasons: Vec<String> = reasons.into_iter().map(Option::unwrap).collect();
    assert_eq!(
        rows, reasons,
        "docs/policies.md, the default-sorter's table"
    );
    // The config fields the guide names are the ones read.
    let config = r#"{"skipLabels": ["KEY"], "skipAnnotations": ["KEY"]}"#;
    assert_eq!(SkipKeys::from_config(config), Ok(skip));
    assert!(
        guide.contains("`{\"skipLabels\": [\"KEY\",")
            && guide.contains("\"skipAnnotations\": [\"KEY\", …]}`")
    );
}
