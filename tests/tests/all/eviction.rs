//! The eviction manager with the real policies, a scripted strategy and a
//! recording killer, on virtual time: exact victims at exact cycles.

use std::sync::Arc;
use std::time::Duration;
use vigil::base::clock::{Clock, ManualClock};
use vigil::eviction::{
    Call, CycleReport, Deferral, EvictionManager, EvictionSettings, KillError, NodeState,
    PolicySettings, Skipped, Unanswered, Withheld,
};
use vigil::model::bindings::{KeyValue, Pod, QosClass, Signal};
use vigil::policy::FaultKind;
use vigil::policy::{Origin, Registry};
use vigil_tests::*;

pub(crate) struct Node {
    pub(crate) registry: Arc<Registry>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) killer: Arc<RecordingKiller>,
    pub(crate) manager: EvictionManager,
    pub(crate) pods: Vec<Pod>,
    pub(crate) available_mib: u64,
    /// Signals beside `memory.available`.
    pub(crate) signals: Vec<Signal>,
}

fn pod(name: &str, qos: QosClass, usage_mib: u64, request_mib: u64) -> Pod {
    vigil::model::fixture::pod(name)
        .qos(qos)
        .usage_mib(usage_mib)
        .request_mib(request_mib)
        .build()
}

/// The pods most tests use; `hog` is the kubelet's first choice once the
/// critical pod is refused.
fn pods() -> Vec<Pod> {
    vec![
        Pod {
            is_critical: true,
            ..pod("critical-hog", QosClass::BestEffort, 900, 0)
        },
        pod("hog", QosClass::BestEffort, 600, 0),
        pod("within-request", QosClass::Burstable, 50, 100),
        pod("steady", QosClass::Guaranteed, 200, 200),
    ]
}

/// The default settings with `policies`' settings in place of theirs.
pub(crate) fn settings(policies: &[(&str, PolicySettings)]) -> EvictionSettings {
    let mut settings = EvictionSettings::default();
    for (name, policy) in policies {
        settings.policies.insert((*name).to_owned(), policy.clone());
    }
    settings
}

pub(crate) fn config(json: &str) -> PolicySettings {
    PolicySettings {
        config: json.into(),
        ..PolicySettings::enforced()
    }
}

impl Node {
    pub(crate) fn new(settings: EvictionSettings, extra: &[(&str, &[u8])]) -> Self {
        let (registry, clock) = registry(None);
        for (name, bytes) in extra {
            let policy = registry
                .prepare(name, Arc::from(*bytes), Origin::Builtin)
                .expect("loads");
            registry.install(policy);
        }
        let killer = Arc::new(RecordingKiller::default());
        let manager = EvictionManager::new(registry.clone(), settings);
        Self {
            registry,
            clock,
            killer,
            manager,
            pods: pods(),
            available_mib: 4096,
            signals: Vec::new(),
        }
    }

    pub(crate) async fn cycle(&mut self) -> CycleReport {
        let signal = Signal {
            name: "memory.available".into(),
            value: (self.available_mib << 20) as f64,
            capacity: Some((8192u64 << 20) as f64),
        };
        let node = NodeState {
            signals: [vec![signal], self.signals.clone()].concat(),
            pods: self.pods.clone(),
            ..NodeState::default()
        };
        let report = self
            .manager
            .cycle_through(self.clock.now(), &node, self.killer.as_ref())
            .await;
        self.clock.advance(Duration::from_secs(5));
        report
    }

    /// The evicted pods disappear, as they do once terminated.
    pub(crate) fn finish_evictions(&mut self) {
        let evicted: Vec<String> = self
            .killer
            .evicted()
            .into_iter()
            .map(|v| v.pod.uid)
            .collect();
        self.pods.retain(|p| !evicted.contains(&p.uid));
    }
}

/// How many thresholds this cycle waited on reclaim in progress.
fn reclaiming(report: &CycleReport) -> usize {
    report
        .skipped
        .iter()
        .filter(|s| matches!(s, Skipped::Reclaiming { .. }))
        .count()
}

/// Whether `strategy`'s `evaluate` trapped this cycle.
fn evaluate_trapped(report: &CycleReport, strategy: &str) -> bool {
    report.skipped.iter().any(|s| {
        matches!(
            s,
            Skipped::Strategy {
                name,
                call: Call::Evaluate,
                why: Unanswered::Fault { kind: FaultKind::Trap, .. },
            } if name == strategy
        )
    })
}

pub(crate) fn names(victims: &[vigil::eviction::Victim]) -> Vec<&str> {
    victims.iter().map(|v| v.pod.name.as_str()).collect()
}

#[tokio::test]
async fn hard_pressure_evicts_the_kubelet_ranked_pod_never_a_critical_one_and_waits_for_it() {
    let mut node = Node::new(EvictionSettings::default(), &[]);
    node.available_mib = 50;
    let first = node.cycle().await;
    assert_eq!(names(&first.started), ["hog"], "{first:?}");
    assert_eq!(first.conditions[0].name, "MemoryPressure");

    let second = node.cycle().await;
    assert!(
        second.started.is_empty(),
        "the hog is still terminating: {second:?}"
    );
    assert!(reclaiming(&second) > 0, "{:?}", second.skipped);

    node.finish_evictions();
    let third = node.cycle().await;
    assert_eq!(names(&third.gone), ["hog"]);
    // Nobody else exceeds its request; the larger usage above request goes next.
    assert_eq!(names(&third.started), ["steady"]);
    let evicted: Vec<_> = node
        .killer
        .evicted()
        .into_iter()
        .map(|v| v.pod.name)
        .collect();
    assert!(!evicted.contains(&"critical-hog".to_owned()));
}

#[tokio::test]
async fn a_soft_threshold_with_a_30s_grace_period_evicts_at_30s_not_25s() {
    let memory = config(r#"{"hard":"10Mi","soft":"500Mi","softGracePeriodSeconds":30}"#);
    let mut node = Node::new(settings(&[("memory-pressure", memory)]), &[]);
    node.available_mib = 300;
    let start = node.clock.now();
    for second in (0..30).step_by(5) {
        let report = node.cycle().await;
        assert!(report.started.is_empty(), "evicted at {second}s");
        assert!(!report.thresholds[0].past_grace);
    }
    let at = node.clock.now();
    let report = node.cycle().await;
    assert_eq!(names(&report.started), ["hog"]);
    assert_eq!(at.duration_since(start).unwrap(), Duration::from_secs(30));
}

#[tokio::test]
async fn the_burst_is_never_exceeded_and_the_rest_waits_its_turn() {
    let uids: Vec<String> = (0..5).map(|i| format!("\"uid-p{i}\"")).collect();
    let script = config(&format!(r#"{{"force":[{}]}}"#, uids.join(",")));
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    node.pods = (0..5)
        .map(|i| pod(&format!("p{i}"), QosClass::BestEffort, 10, 0))
        .collect();
    let first = node.cycle().await;
    assert_eq!(names(&first.started), ["p0", "p1", "p2"]);
    assert_eq!(first.deferred.len(), 2);
    assert_eq!(first.deferred[0].why, Deferral::Burst(3));
    let second = node.cycle().await;
    assert_eq!(names(&second.started), ["p3", "p4"]);
    assert!(
        node.cycle().await.started.is_empty(),
        "nothing is evicted twice"
    );
}

#[tokio::test]
async fn hard_evictions_go_first_and_a_terminating_soft_victim_never_blocks_them() {
    let script = config(r#"{"soft":["uid-within-request"]}"#);
    let settings = EvictionSettings {
        burst: 1,
        ..settings(&[("script", script)])
    };
    let mut node = Node::new(settings, &[("script", SCRIPTED_STRATEGY)]);
    // Calm memory: the soft candidate goes, and stays terminating.
    assert_eq!(names(&node.cycle().await.started), ["within-request"]);
    // Now hard pressure: the hard victim goes at once, not after the soft one.
    node.available_mib = 50;
    let report = node.cycle().await;
    assert_eq!(names(&report.started), ["hog"], "{report:?}");
}

#[tokio::test]
async fn with_one_eviction_allowed_the_hard_victim_wins_over_a_soft_candidate() {
    let script = config(r#"{"soft":["uid-within-request"]}"#);
    let settings = EvictionSettings {
        burst: 1,
        ..settings(&[("script", script)])
    };
    let mut node = Node::new(settings, &[("script", SCRIPTED_STRATEGY)]);
    node.available_mib = 50;
    let report = node.cycle().await;
    assert_eq!(names(&report.started), ["hog"]);
    assert_eq!(
        report
            .deferred
            .iter()
            .map(|d| d.victim.pod.name.as_str())
            .collect::<Vec<_>>(),
        ["within-request"]
    );
}

#[tokio::test]
async fn a_strategy_that_traps_is_skipped_while_the_others_act() {
    let script = config(&format!(
        r#"{{"force":["uid-steady"],"trapOnPod":"{TRIGGER}"}}"#
    ));
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    assert_eq!(names(&node.cycle().await.started), ["steady"]);
    node.finish_evictions();
    node.pods.push(pod(TRIGGER, QosClass::Guaranteed, 1, 1));
    node.available_mib = 50;
    let report = node.cycle().await;
    assert!(evaluate_trapped(&report, "script"), "{:?}", report.skipped);
    assert_eq!(
        names(&report.started),
        ["hog"],
        "memory-pressure still acts"
    );
    assert!(
        node.registry.get("script").is_none(),
        "it failed on trial with nothing to fall back to"
    );
}

#[tokio::test]
async fn a_failing_sorter_makes_soft_candidates_wait_while_hard_victims_use_the_builtin_sorter() {
    let script = config(&format!(r#"{{"soft":["uid-{TRIGGER}"]}}"#));
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    let sorter = node
        .registry
        .prepare("default-sorter", Arc::from(FLAKY_SORTER), Origin::Builtin)
        .unwrap();
    node.registry.install(sorter);
    node.clock.advance(test_limits().trial);
    node.registry.graduate_due();
    // The flaky sorter faults on every call that offers it the trigger pod.
    node.pods.push(pod(TRIGGER, QosClass::BestEffort, 1, 0));
    node.available_mib = 50;
    let report = node.cycle().await;
    assert_eq!(
        names(&report.started),
        ["hog"],
        "the hard victim, validated by the built-in sorter"
    );
    let fallbacks: Vec<Option<&str>> = report
        .skipped
        .iter()
        .filter_map(|s| match s {
            Skipped::Sorter { fallback, .. } => Some(fallback.as_deref()),
            _ => None,
        })
        .collect();
    assert!(fallbacks.contains(&Some("default-sorter")), "{report:?}");
    assert!(fallbacks.contains(&None), "soft evictions wait: {report:?}");
    assert!(
        report
            .decisions
            .iter()
            .all(|d| d.victim.pod.name != TRIGGER)
    );
}

#[tokio::test]
async fn a_dry_run_strategy_decides_and_asks_once_but_nothing_is_evicted() {
    let memory = PolicySettings {
        dry_run: true,
        ..PolicySettings::enforced()
    };
    let mut node = Node::new(settings(&[("memory-pressure", memory)]), &[]);
    node.available_mib = 50;
    for _ in 0..2 {
        let report = node.cycle().await;
        assert_eq!(report.decisions.len(), 1);
        assert!(report.decisions[0].dry_run && report.decisions[0].victim.pod.name == "hog");
        assert!(report.started.is_empty());
    }
    let asked = node.killer.asked();
    assert_eq!(asked.len(), 1, "one dry-run request per in-flight timeout");
    assert!(asked[0].dry_run);
    assert!(node.killer.evicted().is_empty());
}

#[tokio::test]
async fn a_victim_refused_by_its_pdb_passes_its_turn_to_the_next_candidate_at_once() {
    let mut node = Node::new(EvictionSettings::default(), &[]);
    node.killer.refuse_next([KillError::Refused(
        "Cannot evict pod as it would violate the pod's disruption budget.".into(),
    )]);
    node.available_mib = 50;
    let first = node.cycle().await;
    assert_eq!(first.started.len(), 1, "{first:?}");
    assert_ne!(first.started[0].pod.name, "hog");
    assert_eq!(first.deferred[0].victim.pod.name, "hog");
    assert!(
        matches!(&first.deferred[0].why, Deferral::Refused(why) if why.contains("disruption budget")),
        "{:?}",
        first.deferred[0].why
    );
    // One pressure, one victim at a time: nothing more while it terminates.
    assert!(node.cycle().await.started.is_empty());
}

#[tokio::test]
async fn when_every_candidate_is_refused_under_hard_pressure_the_top_one_is_deleted_after_the_override_delay()
 {
    let allowed = PolicySettings {
        pdb_override: true,
        ..PolicySettings::enforced()
    };
    let settings = EvictionSettings {
        pdb_override_after: Some(Duration::from_secs(20)),
        policies: [("memory-pressure".to_owned(), allowed)].into(),
        ..EvictionSettings::default()
    };
    let mut node = Node::new(settings, &[]);
    node.killer.protect_all();
    node.available_mib = 50;
    let start = node.clock.now();
    for _ in 0..4 {
        let report = node.cycle().await;
        assert!(report.started.is_empty(), "{report:?}");
        assert!(
            report.skipped.iter().any(|s| matches!(
                s,
                Skipped::Waiting {
                    withheld: Some(Withheld::TooSoon { .. }),
                    ..
                }
            )),
            "{:?}",
            report.skipped
        );
    }
    let at = node.clock.now();
    let report = node.cycle().await;
    assert_eq!(at.duration_since(start).unwrap(), Duration::from_secs(20));
    assert_eq!(names(&report.started), ["hog"]);
    assert!(report.started[0].override_pdb);
}

#[tokio::test]
async fn without_an_override_delay_refused_candidates_are_never_deleted() {
    let settings = EvictionSettings {
        pdb_override_after: None,
        ..EvictionSettings::default()
    };
    let mut node = Node::new(settings, &[]);
    node.killer.protect_all();
    node.available_mib = 50;
    for _ in 0..30 {
        assert!(node.cycle().await.started.is_empty());
    }
}

#[tokio::test]
async fn a_waiting_victim_is_dropped_once_its_pressure_is_gone() {
    let mut node = Node::new(EvictionSettings::default(), &[]);
    node.killer
        .refuse_next([KillError::Unavailable("503: the API server is down".into())]);
    node.available_mib = 50;
    assert_eq!(node.cycle().await.deferred.len(), 1);
    node.available_mib = 4096;
    let report = node.cycle().await;
    assert!(
        report.started.is_empty() && report.deferred.is_empty(),
        "{report:?}"
    );
    assert!(node.killer.evicted().is_empty());
}

#[tokio::test]
async fn two_pressures_that_pick_the_same_pod_share_it_and_pick_no_second_one() {
    // Both strategies are hard and rank the hog first.
    let script = config(r#"{"met":"hard","scope":"other","victims":["uid-hog"]}"#);
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    node.available_mib = 50;
    let first = node.cycle().await;
    assert_eq!(names(&first.started), ["hog"], "{first:?}");
    // The hog is terminating: neither pressure may pick another pod meanwhile.
    let second = node.cycle().await;
    assert!(
        second.started.is_empty() && second.decisions.is_empty(),
        "{second:?}"
    );
    assert_eq!(reclaiming(&second), 2, "{:?}", second.skipped);
}

/// `pods()`, each with labels `app`, `team`, `vigil.dev/tier` and
/// annotations `note`, `vigil.dev/owner`.
fn labelled_pods() -> Vec<Pod> {
    let pair = |key: &str| KeyValue {
        key: key.into(),
        value: format!("{key} value"),
    };
    pods()
        .into_iter()
        .map(|pod| Pod {
            labels: ["app", "team", "vigil.dev/tier"].map(pair).to_vec(),
            annotations: ["note", "vigil.dev/owner"].map(pair).to_vec(),
            ..pod
        })
        .collect()
}

/// What `script` declined with this cycle (its `showKeys` answer).
pub(crate) fn shown(report: &CycleReport, script: &str) -> String {
    report
        .skipped
        .iter()
        .find_map(|s| match s {
            Skipped::Strategy {
                name,
                why: Unanswered::Declined(answer),
                ..
            } if name == script => Some(answer.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{script} declined: {:?}", report.skipped))
}

#[tokio::test]
async fn a_strategy_sees_only_the_labels_and_annotations_it_declared_and_the_pods_stay_whole() {
    let narrow = config(
        r#"{"showKeys":true,"interest":{"labels":["team","vigil.dev/*"],"annotations":["note"]}}"#,
    );
    let blind = config(r#"{"showKeys":true}"#);
    let mut node = Node::new(
        settings(&[("narrow", narrow), ("blind", blind)]),
        &[("narrow", SCRIPTED_STRATEGY), ("blind", SCRIPTED_STRATEGY)],
    );
    node.pods = labelled_pods();
    let report = node.cycle().await;
    assert!(
        shown(&report, "narrow").starts_with(
            "critical-hog: labels=team,vigil.dev/tier annotations=note; hog: labels=team,vigil.dev/tier annotations=note;"
        ),
        "{report:?}"
    );
    assert!(
        shown(&report, "blind").starts_with("critical-hog: labels= annotations=; hog: labels="),
        "{report:?}"
    );
    // A skip label the sorter asked for still reaches it: what one policy
    // was not shown was only set aside for its call.
    let sorter = config(r#"{"skipLabels":["app"]}"#);
    let script = config(r#"{"met":"hard","victims":["uid-hog","uid-steady"]}"#);
    let mut node = Node::new(
        settings(&[("script", script), ("default-sorter", sorter)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    node.pods = labelled_pods();
    node.pods[3].labels.retain(|kv| kv.key != "app");
    node.available_mib = 50;
    let report = node.cycle().await;
    assert_eq!(names(&report.started), ["steady"], "{report:?}");
    assert_eq!(
        node.killer.evicted()[0].pod.labels.len(),
        2,
        "the victim's labels are whole"
    );
}

#[tokio::test]
async fn a_new_config_is_asked_for_its_interest_and_a_faulty_interest_is_a_fault() {
    let shows = |labels: &str| {
        config(&format!(
            r#"{{"showKeys":true,"interest":{{"labels":{labels}}}}}"#
        ))
    };
    let mut node = Node::new(
        settings(&[("script", shows(r#"["app"]"#))]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    node.pods = labelled_pods();
    let report = node.cycle().await;
    assert!(shown(&report, "script").starts_with("critical-hog: labels=app annotations=;"));
    node.manager
        .set_settings(settings(&[("script", shows(r#"["team"]"#))]));
    let report = node.cycle().await;
    assert!(shown(&report, "script").starts_with("critical-hog: labels=team annotations=;"));

    // Too many keys: the answer breaks the contract.
    let many: Vec<String> = (0..65).map(|i| format!("\"k{i}\"")).collect();
    node.manager.set_settings(settings(&[(
        "script",
        shows(&format!("[{}]", many.join(","))),
    )]));
    let report = node.cycle().await;
    assert!(
        report.skipped.iter().any(|s| matches!(
            s,
            Skipped::Strategy {
                name,
                why: Unanswered::Fault { kind: FaultKind::InvalidAnswer, message },
                ..
            } if name == "script"
                && message.starts_with("gave an invalid answer: interest lists 65 labels; at most 64 keys")
        )),
        "{:?}",
        report.skipped
    );
    // An interest that traps.
    let mut node = Node::new(
        settings(&[("script", config(r#"{"interest":7}"#))]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    let report = node.cycle().await;
    assert!(evaluate_trapped(&report, "script"), "{:?}", report.skipped);
}

#[tokio::test]
async fn a_strategy_that_judges_only_signals_gets_no_pods_to_evaluate_but_ranks_them_all() {
    let shows = config(r#"{"showKeys":true,"interest":{"podsInEvaluate":false}}"#);
    let mut node = Node::new(
        settings(&[("script", shows)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    let report = node.cycle().await;
    assert_eq!(shown(&report, "script"), "", "no pod in its snapshot");
    // Its hard threshold, met on a calm node: `top-victims` ranks every pod.
    let script =
        config(r#"{"met":"hard","interest":{"podsInEvaluate":false},"victims":["uid-steady"]}"#);
    let mut node = Node::new(
        settings(&[("script", script)]),
        &[("script", SCRIPTED_STRATEGY)],
    );
    let report = node.cycle().await;
    assert_eq!(names(&report.started), ["steady"], "{report:?}");
}
