//! The manager alone, with an in-memory fake of its policies: one hard
//! strategy whose victims are the test's, a sorter that refuses what the
//! test says.

use super::select::{candidate, victim};
use super::*;
use crate::eviction::PolicySettings;
use crate::eviction::Unanswered;
use crate::eviction::policies::Which;
use crate::model::{
    Candidate, CandidateUrgency, Decision as Answer, Pod, Signal, SortRejection, Sorted,
};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Every strategy is calm but `fake`.
#[derive(Default)]
struct Fake {
    met: Mutex<Option<MetLevel>>,
    victims: Vec<String>,
    /// (strategy, UID): soft candidates, from strategies besides `fake`.
    soft: Vec<(String, String)>,
    refused_by_sorter: Vec<String>,
    /// The sorter reverses the order it is given.
    sorter_reverses: bool,
    sorter_faults: bool,
    /// `fake`'s evaluation traps (set between cycles).
    strategy_faults: Mutex<bool>,
    /// The hard threshold watches a stall signal.
    stall: bool,
    /// Taint effects the threshold's condition asks for (`NoSchedule` if none).
    effects: Vec<String>,
    /// (strategy, UID): force evictions, from strategies besides `fake`.
    force: Vec<(String, String)>,
    /// What each sort was given: the strategies, and each candidate's
    /// strategy index and urgency.
    sorted: Mutex<Vec<SortInput>>,
    /// What `fake`'s last evaluation was told of its last cycle.
    last_met: Mutex<Vec<ScopeMet>>,
}

/// The strategies a sort was given, and its candidates' strategy index and urgency.
type SortInput = (Vec<String>, Vec<(u32, CandidateUrgency)>);

impl Policies for Fake {
    fn declared(&self, _: &str, _: &str) -> Option<Arc<crate::policy::Declared>> {
        None
    }

    fn strategies(&self) -> Vec<String> {
        let mut names = vec!["fake".to_owned()];
        names.extend(self.soft.iter().map(|(name, _)| name.clone()));
        names.extend(self.force.iter().map(|(name, _)| name.clone()));
        names
    }

    fn evaluate(&self, name: &str, snapshot: &mut Snapshot) -> Result<Answer, Unanswered> {
        if name == "fake" {
            *self.last_met.lock().unwrap() = snapshot.last_met.clone();
        }
        if name == "fake" && *self.strategy_faults.lock().unwrap() {
            return Err(Unanswered::Fault {
                kind: crate::policy::FaultKind::Trap,
                message: "trapped".into(),
            });
        }
        let met = match name {
            "fake" => self.met.lock().unwrap().unwrap_or(MetLevel::NotMet),
            _ => MetLevel::NotMet,
        };
        let proposed = |list: &[(String, String)]| {
            list.iter()
                .filter(|(strategy, _)| strategy == name)
                .map(|(_, uid)| Eviction {
                    uid: uid.clone(),
                    reason: "fake".into(),
                    grace_period_seconds: Some(900),
                })
                .collect()
        };
        let mut threshold = crate::model::memory_threshold(met);
        if self.stall {
            threshold.signal = "psi.memory.some.avg10".into();
        }
        if let Some(condition) = threshold
            .condition
            .as_mut()
            .filter(|_| !self.effects.is_empty())
        {
            condition.effects = self.effects.clone();
        }
        Ok(Answer {
            thresholds: vec![threshold],
            soft_candidates: proposed(&self.soft),
            force_evictions: proposed(&self.force),
            state: None,
        })
    }

    fn top_victims(
        &self,
        _: &str,
        snapshot: &mut Snapshot,
        _: &str,
        _: u32,
    ) -> Result<Vec<Eviction>, Unanswered> {
        Ok(self
            .victims
            .iter()
            .filter(|uid| snapshot.pods.iter().any(|p| &&p.uid == uid))
            .map(|uid| Eviction {
                uid: uid.clone(),
                reason: "fake".into(),
                grace_period_seconds: Some(600),
            })
            .collect())
    }

    fn sort(
        &self,
        _: &str,
        which: Which,
        strategies: &[String],
        candidates: &mut [Candidate],
        _: &str,
    ) -> Result<Sorted, Unanswered> {
        let given = candidates.iter().map(|c| (c.strategy, c.urgency)).collect();
        self.sorted
            .lock()
            .unwrap()
            .push((strategies.to_vec(), given));
        if self.sorter_faults && which == Which::Serving {
            return Err(Unanswered::Fault {
                kind: crate::policy::FaultKind::Trap,
                message: "trapped".into(),
            });
        }
        let (mut order, mut rejected) = (vec![], vec![]);
        for (i, c) in candidates.iter().enumerate() {
            if self.refused_by_sorter.contains(&c.pod.uid) {
                rejected.push(SortRejection {
                    index: i as u32,
                    reason: "refused".into(),
                });
            } else {
                order.push(i as u32);
            }
        }
        if self.sorter_reverses {
            order.reverse();
        }
        Ok(Sorted { order, rejected })
    }
}

/// A pod whose UID and name are `uid`.
fn pod(uid: &str) -> Pod {
    crate::model::fixture::pod(uid).uid(uid).build()
}

fn node(uids: &[&str]) -> NodeState {
    NodeState {
        signals: vec![Signal {
            name: "memory.available".into(),
            value: 1.0,
            capacity: None,
        }],
        pods: uids.iter().map(|u| pod(u)).collect(),
        ..NodeState::default()
    }
}

/// A manager whose every strategy is enforced (`fake` may override budgets).
fn manager(fake: Fake) -> (EvictionManager, Arc<Fake>) {
    let fake = Arc::new(fake);
    let enforced = PolicySettings::enforced();
    let mut policies: BTreeMap<String, PolicySettings> = fake
        .strategies()
        .into_iter()
        .map(|name| (name, enforced.clone()))
        .collect();
    policies.insert(
        "fake".to_owned(),
        PolicySettings {
            pdb_override: true,
            ..enforced
        },
    );
    let settings = EvictionSettings {
        pdb_override_after: Some(Duration::from_secs(10)),
        policies,
        ..EvictionSettings::default()
    };
    (EvictionManager::new(fake.clone(), settings), fake)
}

fn hard(fake: &Fake) {
    *fake.met.lock().unwrap() = Some(MetLevel::Hard);
}

fn uids(victims: &[Victim]) -> Vec<&str> {
    victims.iter().map(|v| v.pod.uid.as_str()).collect()
}

const T0: SystemTime = UNIX_EPOCH;

#[test]
fn a_hard_threshold_requests_its_top_victim_the_sorter_allows() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        refused_by_sorter: vec!["a".into()],
        ..Fake::default()
    });
    assert!(m.cycle(T0, node(&["a", "b"])).requested.is_empty(), "calm");
    hard(&fake);
    let report = m.cycle(T0, node(&["a", "b"]));
    assert_eq!(uids(&report.requested), ["b"]);
    assert_eq!(report.conditions[0].name, "MemoryPressure");
}

#[test]
fn a_threshold_evicts_the_first_pod_in_the_sorters_order_not_the_strategys() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into(), "c".into()],
        refused_by_sorter: vec!["c".into()],
        sorter_reverses: true,
        ..Fake::default()
    });
    hard(&fake);
    let report = m.cycle(T0, node(&["a", "b", "c"]));
    assert_eq!(uids(&report.requested), ["b"], "c refused, then b before a");
    let sorted = fake.sorted.lock().unwrap();
    assert_eq!(sorted[0].1.len(), 3, "the sorter saw the whole ranking");
}

#[test]
fn the_sorter_is_told_which_strategy_proposed_each_candidate_and_how_urgently() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        soft: vec![("zeta".into(), "c".into()), ("alpha".into(), "b".into())],
        ..Fake::default()
    });
    hard(&fake);
    m.cycle(T0, node(&["a", "b", "c"]));
    let sorted = fake.sorted.lock().unwrap();
    let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        *sorted,
        [
            (names(&["fake"]), vec![(0, CandidateUrgency::Hard)]),
            (
                names(&["alpha", "zeta"]),
                vec![(0, CandidateUrgency::Soft), (1, CandidateUrgency::Soft)]
            ),
        ]
    );
}

#[test]
fn a_requested_victim_is_reclaim_in_progress_until_its_pod_is_gone() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let first = m.cycle(T0, node(&["a", "b"])).requested;
    assert_eq!(uids(&first), ["a"]);
    // The call is still running: no second victim.
    assert!(m.cycle(T0, node(&["a", "b"])).requested.is_empty());
    assert!(matches!(
        m.outcome(T0, &first[0], Ok(())),
        Some(Settled::Accepted(_))
    ));
    assert!(m.cycle(T0, node(&["a", "b"])).requested.is_empty());
    // The pod is gone: the next one is picked.
    let report = m.cycle(T0, node(&["b"]));
    assert_eq!(uids(&report.gone), ["a"]);
    assert_eq!(uids(&report.requested), ["b"]);
}

#[test]
fn a_refusal_passes_the_turn_and_the_refused_pod_comes_back_after_a_period() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let all = node(&["a", "b"]);
    let first = m.cycle(T0, all.clone()).requested;
    let refused = m.outcome(T0, &first[0], Err(KillError::Refused("pdb".into())));
    assert!(matches!(refused, Some(Settled::Refused(..))));
    let passed = m.cycle(T0, all.clone()).requested;
    assert_eq!(uids(&passed), ["b"]);
    // Why b: the threshold that held, second in the sorter's order.
    let (threshold, rank) = (&first[0].why.threshold, first[0].why.rank);
    assert!(
        threshold.as_ref().is_some_and(|t| t.ends_with("met hard")),
        "{threshold:?}"
    );
    assert_eq!(rank, Some((1, 2)));
    assert_eq!(passed[0].why.rank, Some((2, 2)));
    assert_eq!(passed[0].why.sorter.as_deref(), Some("default-sorter"));
    let second = m.cycle(T0, all.clone());
    assert!(second.requested.is_empty(), "b's call runs");
    let later = T0 + m.settings().period;
    m.outcome(later, &first[0], Ok(()));
    let b = Victim {
        pod: pod("b"),
        ..first[0].clone()
    };
    m.outcome(later, &b, Err(KillError::Refused("pdb".into())));
    assert_eq!(
        uids(&m.cycle(later, all.clone()).requested),
        ["a"],
        "a's refusal is over"
    );
}

#[test]
fn an_unanswered_call_keeps_the_victim_waiting_and_a_gone_pod_needs_no_eviction() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let all = node(&["a", "b"]);
    let first = m.cycle(T0, all.clone()).requested;
    m.outcome(T0, &first[0], Err(KillError::Unavailable("503".into())));
    let again = m.cycle(T0, all.clone()).requested;
    assert_eq!(uids(&again), ["a"], "the same victim, not the next one");
    let gone = m.outcome(T0, &again[0], Err(KillError::Gone("404".into())));
    assert!(matches!(gone, Some(Settled::Gone(_))));
    assert_eq!(uids(&m.cycle(T0, node(&["b"])).requested), ["b"]);
}

#[test]
fn every_candidate_refused_under_hard_pressure_deletes_the_top_one_after_the_delay() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let all = node(&["a", "b"]);
    let mut now = T0;
    // Each candidate is asked and refused; then the manager waits.
    let refuse_all = |m: &mut EvictionManager, now: SystemTime| {
        for _ in 0..2 {
            let requested = m.cycle(now, all.clone()).requested;
            assert!(!requested[0].override_pdb);
            m.outcome(now, &requested[0], Err(KillError::Refused("pdb".into())));
        }
        m.cycle(now, all.clone())
    };
    let waiting = refuse_all(&mut m, now);
    assert!(waiting.requested.is_empty(), "{waiting:?}");
    now += Duration::from_secs(5);
    // Refusals last a period: every candidate is asked again first.
    assert!(
        refuse_all(&mut m, now).requested.is_empty(),
        "5 s: still waiting"
    );
    now += Duration::from_secs(5);
    // 10 s after every candidate was first refused: the top one is deleted.
    let report = refuse_all(&mut m, now);
    assert_eq!(uids(&report.requested), ["a"]);
    assert!(report.requested[0].override_pdb);
}

#[test]
fn a_faulting_sorter_makes_hard_victims_use_the_builtin_one() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        sorter_faults: true,
        ..Fake::default()
    });
    hard(&fake);
    let report = m.cycle(T0, node(&["a"]));
    assert_eq!(uids(&report.requested), ["a"]);
    assert!(
        report.skipped.iter().any(|s| matches!(
            s,
            Skipped::Sorter { fallback: Some(builtin), .. } if builtin == FALLBACK_SORTER
        )),
        "{:?}",
        report.skipped
    );
}

#[test]
fn a_pod_terminating_for_another_reason_is_reclaim_in_progress_within_its_grace() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    let mut state = node(&["a"]);
    state.terminating.push(Terminating {
        uid: "x".into(),
        name: "default/x".into(),
        until: T0 + Duration::from_secs(30),
    });
    let report = m.cycle(T0, state.clone());
    assert!(report.requested.is_empty());
    assert!(report.skipped.iter().any(|s| matches!(
        s,
        Skipped::Reclaiming { by: Reclaim::Terminating(pod), .. } if pod == "default/x"
    )));
    let later = T0 + Duration::from_secs(30);
    assert_eq!(uids(&m.cycle(later, state.clone()).requested), ["a"]);
}

#[test]
fn force_evictions_are_capped_per_node_and_a_hard_kubelet_threshold_never_is() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["d".into()],
        force: ["a", "b", "c"]
            .into_iter()
            .map(|uid| ("forcing".to_owned(), uid.to_owned()))
            .collect(),
        ..Fake::default()
    });
    let mut settings = m.settings().clone();
    settings.limits.per_node = Some(2);
    m.set_settings(settings);
    let report = m.cycle(T0, node(&["a", "b", "c", "d"]));
    assert_eq!(uids(&report.requested), ["a", "b"]);
    for victim in &report.requested {
        m.outcome(T0, victim, Ok(()));
    }
    assert!(report.skipped.iter().any(|s| matches!(
        s,
        Skipped::Capped { pod, cap: crate::eviction::limits::Cap::Node, .. } if pod == "default/c"
    )), "{:?}", report.skipped);
    // a and b are gone; the node's cap is still full, and a hard threshold
    // on memory.available (the kubelet's signal too) is not held back.
    let (mut rest, fake_rest) = manager(Fake {
        victims: vec!["d".into()],
        force: vec![("forcing".to_owned(), "c".to_owned())],
        ..Fake::default()
    });
    std::mem::swap(&mut m.policies, &mut rest.policies);
    drop((rest, fake));
    hard(&fake_rest);
    let left = node(&["c", "d"]);
    let report = m.cycle(T0 + Duration::from_secs(1), left.clone());
    assert_eq!(uids(&report.requested), ["d"], "{:?}", report.skipped);
    m.outcome(T0, &report.requested[0], Ok(()));
    // Out of the window, the force eviction goes on.
    let report = m.cycle(T0 + Duration::from_secs(600), left);
    assert!(uids(&report.requested).contains(&"c"), "{report:?}");
}

#[test]
fn a_strategy_the_config_does_not_enable_observes_and_evicts_nothing() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    let mut settings = m.settings().clone();
    settings.policies.remove("fake");
    m.set_settings(settings);
    let report = m.cycle(T0, node(&["a"]));
    assert_eq!(uids(&report.requested), ["a"]);
    assert!(report.requested[0].dry_run, "asked as a dry run only");
    assert!(report.decisions.iter().all(|d| d.dry_run));
    assert_eq!(m.queue.in_flight_count(), 0, "nothing queued to evict");
}

#[test]
fn a_kubelet_eviction_holds_back_its_own_pressure_until_released_or_thirty_seconds() {
    use crate::signals::catalogue::Resource;
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    let evicted = |resource, released| KubeletEviction {
        uid: "k".into(),
        name: "default/hog".into(),
        resource,
        released,
    };
    // The kubelet reclaims disk: a memory threshold does not wait for it.
    let mut state = node(&["a"]);
    state.kubelet_evictions = vec![evicted(Some(Resource::Disk), false)];
    let report = m.cycle(T0, state.clone());
    assert_eq!(uids(&report.requested), ["a"], "{report:?}");

    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    state.kubelet_evictions = vec![evicted(Some(Resource::Memory), false)];
    let report = m.cycle(T0, state.clone());
    assert!(report.requested.is_empty(), "{report:?}");
    assert!(report.skipped.iter().any(|s| matches!(
        s,
        Skipped::Reclaiming { by: Reclaim::Kubelet(pod), .. } if pod == "default/hog"
    )));
    // Still not released 29 s on; at 30 s the wait is over.
    let report = m.cycle(T0 + Duration::from_secs(29), state.clone());
    assert!(report.requested.is_empty(), "{report:?}");
    let over = m.cycle(T0 + FOREIGN_TERMINATING_WAIT, state.clone());
    assert_eq!(uids(&over.requested), ["a"]);

    // Released (its cgroup is gone): the pressure that is left gets a victim.
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    state.kubelet_evictions = vec![evicted(Some(Resource::Memory), false)];
    assert!(m.cycle(T0, state.clone()).requested.is_empty());
    state.kubelet_evictions = vec![evicted(Some(Resource::Memory), true)];
    let released = m.cycle(T0 + Duration::from_secs(2), state.clone());
    assert_eq!(uids(&released.requested), ["a"]);
}

#[test]
fn a_pod_terminating_for_another_reason_holds_thresholds_back_for_thirty_seconds_at_most() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    let mut state = node(&["a"]);
    state.terminating.push(Terminating {
        uid: "x".into(),
        name: "default/x".into(),
        until: T0 + Duration::from_secs(3600),
    });
    assert!(m.cycle(T0, state.clone()).requested.is_empty(), "calm");
    hard(&fake);
    let waited = T0 + FOREIGN_TERMINATING_WAIT - Duration::from_secs(1);
    assert!(m.cycle(waited, state.clone()).requested.is_empty());
    let over = T0 + FOREIGN_TERMINATING_WAIT;
    assert_eq!(uids(&m.cycle(over, state.clone()).requested), ["a"]);
}

fn refuse(m: &mut EvictionManager, at: SystemTime, victim: &Victim, error: KillError) {
    assert!(m.outcome(at, victim, Err(error)).is_some());
}

fn not_evictable() -> KillError {
    KillError::NotEvictable("500: more than one PodDisruptionBudget".into())
}

#[test]
fn a_pod_the_api_server_will_not_evict_passes_the_turn_and_waits_longer_each_time() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let mut settings = m.settings().clone();
    settings.pdb_override_after = None;
    m.set_settings(settings);
    let all = node(&["a", "b"]);
    let period = m.settings().period;
    let first = m.cycle(T0, all.clone()).requested;
    refuse(&mut m, T0, &first[0], not_evictable());
    let next = m.cycle(T0, all.clone()).requested;
    assert_eq!(uids(&next), ["b"], "the next candidate at once");
    refuse(&mut m, T0, &next[0], KillError::Refused("pdb".into()));
    // Both passed over: a waits one period, then is asked again.
    assert!(m.cycle(T0, all.clone()).requested.is_empty());
    let again = m.cycle(T0 + period, all.clone()).requested;
    assert_eq!(uids(&again), ["a"]);
    refuse(&mut m, T0 + period, &again[0], not_evictable());
    // The second refusal doubles a's backoff; b's one period is over.
    let later = T0 + period * 2;
    let report = m.cycle(later, all.clone());
    assert_eq!(uids(&report.requested), ["b"]);
    refuse(
        &mut m,
        later,
        &report.requested[0],
        KillError::Refused("pdb".into()),
    );
    assert!(m.cycle(T0 + period * 2, all.clone()).requested.is_empty());
    assert_eq!(
        uids(&m.cycle(T0 + period * 3, all.clone()).requested),
        ["a"]
    );
}

#[test]
fn throttling_holds_every_call_back_and_passes_nobody_over() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let all = node(&["a", "b"]);
    let first = m.cycle(T0, all.clone()).requested;
    let throttled = KillError::Throttled {
        retry_after: Duration::from_secs(3),
        message: "too many requests".into(),
    };
    let settled = m.outcome(T0, &first[0], Err(throttled));
    assert!(
        matches!(settled, Some(Settled::Throttled(..))),
        "{settled:?}"
    );
    assert_eq!(m.throttled_until(), Some(T0 + Duration::from_secs(3)));
    for at in [T0, T0 + Duration::from_secs(2)] {
        let report = m.cycle(at, all.clone());
        assert!(report.requested.is_empty(), "{report:?}");
        assert_eq!(
            uids(
                &report
                    .deferred
                    .iter()
                    .map(|d| d.victim.clone())
                    .collect::<Vec<_>>()
            ),
            ["a"]
        );
    }
    let after = T0 + Duration::from_secs(3);
    assert_eq!(
        uids(&m.cycle(after, all.clone()).requested),
        ["a"],
        "the same victim"
    );
}

#[test]
fn a_refused_force_or_soft_candidate_is_not_proposed_again_until_its_backoff_ends() {
    let (mut m, _) = manager(Fake {
        soft: vec![("soft".into(), "s".into())],
        force: vec![("force".into(), "f".into())],
        ..Fake::default()
    });
    let all = node(&["s", "f"]);
    let first = m.cycle(T0, all.clone()).requested;
    assert_eq!(uids(&first), ["f", "s"]);
    for victim in &first {
        refuse(&mut m, T0, victim, KillError::Refused("pdb".into()));
    }
    let report = m.cycle(T0, all.clone());
    assert!(
        report.requested.is_empty() && report.decisions.is_empty(),
        "{report:?}"
    );
    let later = T0 + m.settings().period;
    assert_eq!(uids(&m.cycle(later, all.clone()).requested), ["f", "s"]);
}

#[test]
fn a_strategys_grace_is_kept_within_the_pods_own_and_the_cap_and_none_gets_zero() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        soft: vec![("soft".into(), "s".into()), ("soft".into(), "own".into())],
        ..Fake::default()
    });
    let mut state = node(&["a", "s"]);
    let own = PodFacts {
        grace_period_seconds: Some(1200),
        budgets: vec![],
    };
    state.facts.insert("own".into(), own);
    let first = m.cycle(T0, state.clone()).requested;
    assert_eq!(uids(&first), ["s"]);
    assert_eq!(
        first[0].grace_period_seconds,
        Some(300),
        "900 asked, capped"
    );
    hard(&fake);
    let hard_victim = m.cycle(T0, state.clone()).requested;
    assert_eq!(uids(&hard_victim), ["a"]);
    assert_eq!(
        hard_victim[0].grace_period_seconds,
        Some(300),
        "600 asked by the strategy for a hard victim, capped"
    );
    // A hard victim whose strategy asks none gets the hard grace period; one
    // that asks gets it within the pod's own; never 0.
    let hard_of = |asked: Option<u64>| Victim {
        grace_period_seconds: asked,
        urgency: Urgency::Hard,
        ..hard_victim[0].clone()
    };
    m.facts = state.facts.clone();
    let hard_grace = m.settings().hard_grace_period.as_secs().max(1);
    assert_eq!(m.grace(&hard_of(None)), Some(hard_grace));
    assert_eq!(m.grace(&hard_of(Some(60))), Some(60), "katalyst's 60 s");
    assert_eq!(m.grace(&hard_of(Some(0))), Some(1), "never a force delete");
    let own = PodFacts {
        grace_period_seconds: Some(30),
        budgets: vec![],
    };
    m.facts.insert(hard_victim[0].pod.uid.clone(), own);
    assert_eq!(m.grace(&hard_of(Some(60))), Some(30), "the pod's own 30 s");
    // A pod's own grace period is capped too when the strategy names none.
    let victim = Victim {
        grace_period_seconds: None,
        urgency: Urgency::Soft,
        ..victim(
            "soft",
            &candidate(0, Urgency::Soft, &pod("own")),
            &Eviction {
                uid: "own".into(),
                reason: String::new(),
                grace_period_seconds: None,
            },
            Urgency::Soft,
            None,
        )
    };
    m.facts = state.facts.clone();
    assert_eq!(m.grace(&victim), Some(300));
    // A pod that asks for none at all still gets a second, and so does a
    // strategy that asks for none.
    m.facts.get_mut("own").unwrap().grace_period_seconds = Some(0);
    assert_eq!(m.grace(&victim), Some(1), "the pod's own 0");
    let asks_zero = Victim {
        grace_period_seconds: Some(0),
        ..victim.clone()
    };
    assert_eq!(m.grace(&asks_zero), Some(1), "the strategy's 0");
    m.facts.clear();
    assert_eq!(m.grace(&victim), None, "unknown: the pod's own");
}

#[test]
fn static_mirror_and_critical_pods_are_refused_by_the_host_whatever_the_sorter_says() {
    let (mut m, fake) = manager(Fake {
        victims: vec![
            "static".into(),
            "mirror".into(),
            "critical".into(),
            "plain".into(),
        ],
        ..Fake::default()
    });
    hard(&fake);
    let mut state = node(&["static", "mirror", "critical", "plain"]);
    state.pods[0].is_static = true;
    state.pods[1].is_mirror = true;
    state.pods[2].is_critical = true;
    let report = m.cycle(T0, state);
    assert_eq!(uids(&report.requested), ["plain"]);
    let refused: Vec<(&str, &str)> = report
        .refusals
        .iter()
        .map(|r| (r.pod.as_str(), r.sorter.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("default/static", HOST),
            ("default/mirror", HOST),
            ("default/critical", HOST)
        ]
    );
}

#[test]
fn taint_effects_are_checked_by_the_host_and_a_dry_run_strategy_taints_nothing() {
    let (mut m, fake) = manager(Fake {
        effects: vec!["NoSchedule".into(), "NoExecute".into(), "NoSchedul".into()],
        ..Fake::default()
    });
    hard(&fake);
    let report = m.cycle(T0, node(&[]));
    assert_eq!(report.conditions[0].effects, ["NoSchedule"]);
    assert_eq!(
        report.refused_effects().collect::<Vec<_>>(),
        [("fake", "NoExecute"), ("fake", "NoSchedul")]
    );
    let mut settings = m.settings().clone();
    settings.allow_no_execute = true;
    m.set_settings(settings.clone());
    let report = m.cycle(T0, node(&[]));
    assert_eq!(report.conditions[0].effects, ["NoSchedule", "NoExecute"]);
    settings.dry_run = true;
    m.set_settings(settings);
    let report = m.cycle(T0, node(&[]));
    assert_eq!(report.conditions[0].name, "MemoryPressure");
    assert!(report.conditions[0].effects.is_empty(), "dry run: no taint");
}

/// Refuses every candidate of `all` once by a budget, then cycles.
fn refuse_all(m: &mut EvictionManager, now: SystemTime, all: &NodeState) -> CycleReport {
    for _ in 0..all.pods.len() {
        let requested = m.cycle(now, all.clone()).requested;
        if let Some(victim) = requested.first() {
            assert!(!victim.override_pdb);
            refuse(m, now, victim, KillError::Refused("pdb".into()));
        }
    }
    m.cycle(now, all.clone())
}

/// Why the report's thresholds wait without overriding a budget.
fn withheld(report: &CycleReport) -> Vec<&Withheld> {
    report
        .skipped
        .iter()
        .filter_map(|s| match s {
            Skipped::Waiting {
                withheld: Some(why),
                ..
            } => Some(why),
            _ => None,
        })
        .collect()
}

#[test]
fn the_pdb_override_needs_the_strategys_consent_and_never_acts_on_a_stall() {
    let stall = Withheld::Stall("psi.memory.some.avg10".into());
    let refused = Withheld::NotAllowed("fake".into());
    for (fake, why) in [
        (
            Fake {
                victims: vec!["a".into()],
                stall: true,
                ..Fake::default()
            },
            &stall,
        ),
        (
            Fake {
                victims: vec!["a".into()],
                ..Fake::default()
            },
            &refused,
        ),
    ] {
        let (mut m, fake) = manager(fake);
        if *why == refused {
            let mut settings = m.settings().clone();
            settings.policies.get_mut("fake").unwrap().pdb_override = false;
            m.set_settings(settings);
        }
        hard(&fake);
        let all = node(&["a"]);
        refuse_all(&mut m, T0, &all);
        let later = T0 + Duration::from_secs(60);
        let report = refuse_all(&mut m, later, &all);
        assert!(report.requested.is_empty(), "{report:?}");
        assert_eq!(withheld(&report), [why], "{:?}", report.skipped);
    }
}

#[test]
fn a_pod_the_api_server_will_not_evict_never_counts_towards_the_override() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    let all = node(&["a"]);
    let mut now = T0;
    for _ in 0..8 {
        let report = m.cycle(now, all.clone());
        if let Some(victim) = report.requested.first() {
            assert!(!victim.override_pdb, "{victim:?}");
            refuse(&mut m, now, victim, not_evictable());
        }
        now += Duration::from_secs(60);
    }
}

#[test]
fn a_budget_is_overridden_at_most_once_per_window() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into(), "b".into()],
        ..Fake::default()
    });
    hard(&fake);
    let mut all = node(&["a", "b"]);
    for uid in ["a", "b"] {
        let facts = PodFacts {
            grace_period_seconds: None,
            budgets: vec!["default/web".into()],
        };
        all.facts.insert(uid.into(), facts);
    }
    refuse_all(&mut m, T0, &all);
    let due = T0 + Duration::from_secs(10);
    let report = refuse_all(&mut m, due, &all);
    assert_eq!(uids(&report.requested), ["a"]);
    assert!(report.requested[0].override_pdb);
    // The strategy asked 600 s: capped at maxPodGracePeriodSeconds.
    assert_eq!(report.requested[0].grace_period_seconds, Some(300));
    m.outcome(due, &report.requested[0], Ok(()));
    // a is gone; b is under the same budget: no second override in the window.
    let rest = node(&["b"]);
    let mut rest_facts = rest.clone();
    rest_facts.facts.insert("b".into(), all.facts["b"].clone());
    let mut now = due + Duration::from_secs(20);
    let report = refuse_all(&mut m, now, &rest_facts);
    assert!(report.requested.is_empty());
    now += Duration::from_secs(60);
    let report = refuse_all(&mut m, now, &rest_facts);
    assert!(
        matches!(withheld(&report)[..], [Withheld::Recent { budget, .. }] if budget == "default/web"),
        "{:?}",
        report.skipped
    );
    let window = due + m.settings().pdb_override_window;
    let report = refuse_all(&mut m, window, &rest_facts);
    assert_eq!(uids(&report.requested), ["b"]);
    assert!(report.requested[0].override_pdb);
}

#[test]
fn a_strategy_that_misses_a_cycle_keeps_its_place_beside_the_kubelet() {
    let (mut m, fake) = manager(Fake::default());
    let answered = m.cycle(T0, node(&[])).misplaced;
    assert_eq!(
        answered.len(),
        1,
        "2 bytes free is behind the kubelet's 100 MiB"
    );
    *fake.strategy_faults.lock().unwrap() = true;
    let missed = m.cycle(T0 + Duration::from_secs(1), node(&[]));
    assert!(
        (missed.skipped.iter())
            .any(|s| matches!(s, Skipped::Strategy { name, .. } if name == "fake")),
        "{:?}",
        missed.skipped
    );
    // No flap: the Node's condition and Warning do not come and go with a
    // fault.
    assert_eq!(missed.misplaced, answered);
}

/// Counts its readings, and gives each pod 1 MiB on NUMA node 0.
#[derive(Debug, Default)]
struct CountedFacts(std::sync::atomic::AtomicUsize);

impl RankingFacts for CountedFacts {
    fn read(&self, pods: &mut [Pod]) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        for pod in pods {
            pod.usage.numa_memory = vec![crate::model::NumaMemory {
                node: 0,
                bytes: 1 << 20,
            }];
        }
    }
}

#[test]
fn the_facts_only_ranking_reads_are_read_in_a_cycle_that_ranks_and_in_no_calm_one() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    let facts = Arc::new(CountedFacts::default());
    let observed = || NodeState {
        ranking: Some(facts.clone()),
        ..node(&["a", "b"])
    };
    let report = m.cycle(T0, observed());
    assert!(report.requested.is_empty(), "calm");
    assert_eq!(facts.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    hard(&fake);
    let report = m.cycle(T0, observed());
    assert_eq!(uids(&report.requested), ["a"]);
    assert_eq!(
        facts.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "read once for the cycle"
    );
    assert_eq!(
        report.requested[0].pod.usage.numa_memory.len(),
        1,
        "the victim was ranked with the facts read"
    );
}

#[test]
fn a_strategy_is_told_which_of_its_thresholds_got_a_victim_last_cycle() {
    let (mut m, fake) = manager(Fake {
        victims: vec!["a".into()],
        ..Fake::default()
    });
    hard(&fake);
    let seen = |m: &mut EvictionManager, node: NodeState| {
        m.cycle(T0, node);
        let met = fake.last_met.lock().unwrap().clone();
        met.iter()
            .map(|s| (s.scope.clone(), s.victim))
            .collect::<Vec<_>>()
    };
    assert!(seen(&mut m, node(&["a", "b"])).is_empty(), "no last cycle");
    assert_eq!(
        seen(&mut m, node(&["b"])),
        [("memory".to_owned(), true)],
        "the first cycle chose a"
    );
    assert_eq!(
        seen(&mut m, node(&["b"])),
        [("memory".to_owned(), false)],
        "the second had no candidate: b is not among the strategy's victims"
    );
}
