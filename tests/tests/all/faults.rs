//! Every way a component can be bad, proven with real guests built from
//! source: each is a clear error for that policy only, and the version that
//! served before keeps answering.

use std::sync::Arc;
use std::time::{Duration, SystemTime};
use vigil::base::clock::ManualClock;
use vigil::model::bindings::Snapshot;
use vigil::policy::builtin;
use vigil::policy::{Contract, Fault, Host, Limits, LoadError, Origin};
use vigil_tests::*;

fn load(bytes: &[u8]) -> Result<vigil::policy::Policy, LoadError> {
    let host = Host::new(None).unwrap();
    host.load(
        "under-test",
        Arc::from(bytes),
        Origin::Builtin,
        test_limits(),
    )
}

fn sort_fault(bytes: &[u8]) -> Fault {
    let policy = load(bytes).expect("guest loads");
    match policy
        .as_sorter()
        .expect("a sorter")
        .sort(&strategies(), &mut three_candidates(), "{}")
    {
        Err(fault) => fault,
        Ok(answer) => panic!("expected a fault, got {answer:?}"),
    }
}

#[test]
fn an_endless_loop_is_interrupted_at_the_deadline_every_time() {
    let policy = load(ENDLESS_SORTER).unwrap();
    for _ in 0..2 {
        let fault = policy
            .as_sorter()
            .expect("a sorter")
            .sort(&strategies(), &mut three_candidates(), "{}")
            .unwrap_err();
        assert!(
            matches!(fault, Fault::Deadline { deadline_ms: 50 }),
            "{fault:?}"
        );
    }
    // Its interest, asked once for the config, then the two sorts.
    assert_eq!((policy.calls(), policy.faults()), (1 + 2, 2));
}

#[test]
fn a_memory_hog_hits_the_cap() {
    let fault = sort_fault(HUNGRY_SORTER);
    assert!(
        matches!(fault, Fault::MemoryLimit { limit_mib: 16 }),
        "{fault:?}"
    );
}

#[test]
fn a_panic_is_a_trap() {
    assert!(matches!(sort_fault(TRAP_SORTER), Fault::Trap(_)));
}

#[test]
fn an_index_out_of_range_is_an_invalid_answer() {
    match sort_fault(BAD_INDEX_SORTER) {
        Fault::InvalidAnswer(message) => {
            assert_eq!(message, "index 10 is out of range for 3 candidates")
        }
        other => panic!("expected an invalid answer, got {other:?}"),
    }
}

#[test]
fn a_policy_offers_only_the_handle_of_its_own_world() {
    let strategy = load(builtin("memory-pressure").unwrap()).unwrap();
    assert!(strategy.as_strategy().is_some());
    assert!(strategy.as_sorter().is_none() && strategy.as_merger().is_none());
    let sorter = load(builtin("default-sorter").unwrap()).unwrap();
    assert!(sorter.as_sorter().is_some());
    assert!(sorter.as_strategy().is_none() && sorter.as_merger().is_none());
    let merger = load(builtin("default-merger").unwrap()).unwrap();
    assert!(merger.as_merger().is_some());
    assert!(merger.as_strategy().is_none() && merger.as_sorter().is_none());
}

#[test]
fn components_that_cannot_be_policies_are_refused_with_the_reason() {
    let sorter = builtin("default-sorter").unwrap();
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    type Expected = fn(&LoadError) -> bool;
    let cases: Vec<(&str, Vec<u8>, Expected)> = vec![
        ("random bytes", random, |e| matches!(e, LoadError::NotWasm)),
        ("truncated", sorter[..sorter.len() / 2].to_vec(), |e| {
            matches!(e, LoadError::Invalid(_))
        }),
        ("core module", wat::parse_str("(module)").unwrap(), |e| {
            matches!(e, LoadError::CoreModule)
        }),
        (
            "wrong world",
            NOT_A_POLICY.to_vec(),
            |e| matches!(e, LoadError::NoWorld { exports } if exports.contains("wasi:cli/run")),
        ),
        (
            "unsatisfiable import",
            hollow_sorter_wat(Some("acme:missing/thing"), "0.2.0"),
            |e| matches!(e, LoadError::UnsatisfiedImport(_)),
        ),
        (
            "built for a contract this agent does not know",
            hollow_sorter_wat(None, "0.4.0"),
            |e| {
                e.to_string().starts_with(
                    "built for vigil:policy@0.4.0, this agent serves 0.1.0, 0.2.0 and 0.3.0",
                )
            },
        ),
        (
            "the previous contract's export without its functions",
            hollow_sorter_wat(None, "0.1.0"),
            |e| {
                matches!(
                    e,
                    LoadError::WrongExports {
                        world: "candidate-sorter",
                        contract: Contract::V0_1,
                        ..
                    }
                )
            },
        ),
        (
            "exports of the wrong shape",
            hollow_sorter_wat(None, "0.3.0"),
            |e| {
                matches!(
                    e,
                    LoadError::WrongExports {
                        world: "candidate-sorter",
                        contract: Contract::V0_3,
                        ..
                    }
                )
            },
        ),
        (
            "the contract before this one's export without its functions",
            hollow_sorter_wat(None, "0.2.0"),
            |e| {
                matches!(
                    e,
                    LoadError::WrongExports {
                        world: "candidate-sorter",
                        contract: Contract::V0_2,
                        ..
                    }
                )
            },
        ),
    ];
    for (what, bytes, expected) in cases {
        match load(&bytes) {
            Err(error) => assert!(expected(&error), "{what}: unexpected error {error:?}"),
            Ok(policy) => panic!("{what}: loaded as {policy:?}"),
        }
    }
}

#[test]
fn a_bad_new_version_never_replaces_the_serving_one() {
    let (registry, _clock) = registry(None);
    let serving = registry.get("default-sorter").unwrap();
    let merger = builtin("default-merger").unwrap();
    let bad: [(&str, &[u8]); 8] = [
        ("endless", ENDLESS_SORTER),
        ("hungry", HUNGRY_SORTER),
        ("trap", TRAP_SORTER),
        ("bad index", BAD_INDEX_SORTER),
        ("wrong world", NOT_A_POLICY),
        ("another world under this name", merger),
        ("truncated", &REVERSE_SORTER[..1000]),
        ("not wasm", b"#!/bin/sh\nexit 0\n"),
    ];
    for (what, bytes) in bad {
        let error = registry
            .prepare("default-sorter", Arc::from(bytes), Origin::Builtin)
            .expect_err(what);
        if what == "another world under this name" {
            assert_eq!(
                error.to_string(),
                "is a config-merger component, but default-sorter serves as a candidate-sorter"
            );
        }
        let now = registry.get("default-sorter").unwrap();
        assert_eq!(
            now.digest(),
            serving.digest(),
            "{what} replaced the serving version"
        );
        assert_eq!(
            sort_names(&registry, "default-sorter"),
            ["a", "b", "c"],
            "after {what}"
        );
    }
}

#[test]
fn a_fault_is_logged_with_the_policy_name_and_version_and_the_guest_output() {
    let (registry, _clock) = registry(None);
    let policy = registry
        .prepare("flaky", Arc::from(FLAKY_SORTER), Origin::Builtin)
        .unwrap();
    registry.install(Arc::clone(&policy));
    let logs = CapturedLogs::default();
    let subscriber = logs.subscriber();
    let candidates = vec![candidate(TRIGGER, 1)];
    let outcome = tracing::subscriber::with_default(subscriber, || {
        registry
            .sorter(&policy)
            .expect("a sorter")
            .sort(&strategies(), &mut candidates.clone(), "")
    });
    assert!(matches!(outcome, Err(Fault::Trap(_))));
    let text = logs.text();
    let label = format!("flaky@{}", policy.digest());
    assert!(
        text.contains(&label) && text.contains("policy call faulted"),
        "{text}"
    );
    assert!(
        text.contains("fault-sorter (flaky) met its trigger"),
        "guest stderr not forwarded: {text}"
    );
}

/// Runs `call` on its own thread; a call still running after `limit` fails
/// the test (a bound for a broken host, not a measurement).
fn bounded<T: Send + 'static>(limit: Duration, call: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(call()));
    result
        .recv_timeout(limit)
        .expect("the policy call was still blocked")
}

#[test]
fn a_guest_sleeping_through_wasi_cannot_hold_a_call_even_after_passing_the_canary() {
    let (registry, _clock) = registry(None);
    let policy = registry
        .prepare("sleepy", Arc::from(SLEEPY_SORTER), Origin::Builtin)
        .expect("it passes the canary: it sleeps only on its trigger");
    registry.install(Arc::clone(&policy));
    let candidates = vec![candidate("a", 1), candidate(TRIGGER, 1)];
    let sorted = bounded(Duration::from_secs(60), move || {
        registry.sorter(&policy).expect("a sorter").sort(
            &strategies(),
            &mut candidates.clone(),
            "{}",
        )
    });
    let order = sorted.expect("no fault").expect("an answer").order;
    assert_eq!(order, [1, 0], "the sleep returned at once and it answered");
}

#[test]
fn a_guest_reads_the_hosts_clock_and_its_sleeps_do_not_wait() {
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_123_456),
    ));
    let host = Host::with_clock(None, clock.clone()).unwrap();
    let policy = host
        .load(
            "probe",
            Arc::from(SCRIPTED_STRATEGY),
            Origin::Builtin,
            test_limits(),
        )
        .unwrap();
    let snapshot = |config: &str| Snapshot {
        now_ms: 0,
        signals: vec![],
        pods: vec![],
        last_met: Vec::new(),
        state: Vec::new(),
        config: config.into(),
    };
    let probe = |policy: &vigil::policy::Policy| {
        let strategy = policy.as_strategy().expect("a strategy");
        strategy
            .evaluate(&mut snapshot(r#"{"probeClock": true}"#))
            .expect("no fault")
            .expect_err("the probe declines with its readings")
    };
    assert_eq!(probe(&policy), "wall=1700000123456 slept=0");
    clock.advance(Duration::from_secs(90));
    assert_eq!(probe(&policy), "wall=1700000213456 slept=0");
}

#[test]
fn a_log_flood_is_cut_to_the_call_budget_counted_and_cannot_forge_lines() {
    let host = Host::new(None).unwrap();
    // Room for 2 000 host calls in a debug build on a busy machine.
    let patient = Limits {
        deadline: Duration::from_secs(5),
        ..test_limits()
    };
    let policy = host
        .load("chatty", Arc::from(CHATTY_SORTER), Origin::Builtin, patient)
        .unwrap();
    let logs = CapturedLogs::default();
    let subscriber = logs.subscriber();
    let answers = tracing::subscriber::with_default(subscriber, || {
        (0..2)
            .map(|_| {
                policy.as_sorter().expect("a sorter").sort(
                    &strategies(),
                    &mut three_candidates(),
                    "{}",
                )
            })
            .collect::<Vec<_>>()
    });
    for answer in answers {
        assert_eq!(
            answer.expect("no fault").expect("an answer").order,
            [2, 1, 0]
        );
    }
    let text = logs.text();
    let guest_lines = text
        .lines()
        .filter(|l| l.contains("chatter") || l.contains("printed") || l.contains("first"))
        .count();
    assert_eq!(guest_lines, 2 * 100, "100 lines a call");
    assert!(text.contains(r"first\nINFO vigil: forged line"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("INFO vigil: forged")),
        "a guest forged a log line"
    );
    assert_eq!(policy.log_lines_dropped(), 2 * (2_001 - 100));
    assert_eq!(
        text.matches("the excess is dropped").count(),
        1,
        "reported once"
    );
}

#[test]
fn a_huge_answer_is_refused_before_the_host_copies_it() {
    let host = Host::new(None).unwrap();
    // Room to build the 50 MiB answer, even in a debug build on a busy machine.
    let roomy = Limits {
        memory_bytes: 256 << 20,
        deadline: Duration::from_secs(10),
        ..test_limits()
    };
    let policy = host
        .load("verbose", Arc::from(VERBOSE_SORTER), Origin::Builtin, roomy)
        .unwrap();
    let fault = policy
        .as_sorter()
        .expect("a sorter")
        .sort(&strategies(), &mut three_candidates(), "{}")
        .expect_err("a 50 MiB answer is a fault");
    assert_eq!(
        fault.to_string(),
        "gave an invalid answer: more than 1048576 bytes passed to the host at once"
    );
}

#[test]
fn new_limits_apply_to_a_loaded_policy_without_recompiling_it() {
    let (registry, _clock) = registry(None);
    let policy = registry
        .prepare("extra-sorter", Arc::from(REVERSE_SORTER), Origin::Builtin)
        .unwrap();
    registry.install(Arc::clone(&policy));
    let sort = || {
        let serving = registry.get("extra-sorter").unwrap();
        assert!(Arc::ptr_eq(&serving, &policy), "the same loaded version");
        serving
            .as_sorter()
            .expect("a sorter")
            .sort(&strategies(), &mut three_candidates(), "{}")
    };
    assert!(sort().is_ok());
    let mut limits = registry.limits();
    let tight = Limits {
        memory_bytes: 1 << 20,
        ..limits.default
    };
    limits.overrides.insert("extra-sorter".into(), tight);
    registry.set_limits(limits.clone());
    assert!(matches!(sort(), Err(Fault::MemoryLimit { limit_mib: 1 })));
    limits.overrides.clear();
    registry.set_limits(limits);
    assert!(sort().is_ok());
}

#[test]
fn no_call_sees_anything_a_call_before_it_left_in_the_instance() {
    let cache = tempfile::tempdir().unwrap();
    // Compiled here, then mapped from the cache, as the agent runs it.
    for cache_dir in [
        None,
        Some(cache.path().to_owned()),
        Some(cache.path().to_owned()),
    ] {
        let host = Host::new(cache_dir).unwrap();
        // The calls at once share the machine's cores: a deadline that none
        // of them can miss, as this is about state, not time.
        let patient = Limits {
            deadline: Duration::from_secs(30),
            ..test_limits()
        };
        let policy = host
            .load(
                "remembering",
                Arc::from(REMEMBERING_SORTER),
                Origin::Builtin,
                patient,
            )
            .unwrap();
        let sorter = policy.as_sorter().expect("a sorter");
        let declined = || match sorter.sort(&strategies(), &mut three_candidates(), "{}") {
            Ok(Err(answer)) => answer,
            other => panic!("expected the guest's count, got {other:?}"),
        };
        let first = declined();
        assert!(first.starts_with("call 1, "), "{first}");
        // One after another, and many at once (more than the calls that hold
        // pooled instances at a time): each sees its instance as new.
        for _ in 0..5 {
            assert_eq!(declined(), first);
        }
        std::thread::scope(|scope| {
            let calls: Vec<_> = (0..24).map(|_| scope.spawn(declined)).collect();
            for call in calls {
                assert_eq!(call.join().unwrap(), first);
            }
        });
    }
}

#[test]
fn policy_test_reports_a_fault_as_data_with_the_guests_message() {
    use vigil::authoring::replay::{Answer, Input, call};
    let input = || Input {
        strategies: Some(strategies()),
        candidates: Some(three_candidates()),
        ..Input::default()
    };
    let invalid = call(&load(BAD_INDEX_SORTER).unwrap(), input(), "{}").unwrap();
    assert_eq!(
        invalid,
        Answer::Fault("gave an invalid answer: index 10 is out of range for 3 candidates".into())
    );
    match call(&load(TRAP_SORTER).unwrap(), input(), "{}").unwrap() {
        Answer::Fault(fault) => {
            assert!(
                fault.contains("fault-sorter (trap) always panics"),
                "the guest's panic message: {fault}"
            );
            // The guest is stripped: the trap says so, on the same line,
            // instead of listing addresses.
            assert!(
                fault.contains("wasm `unreachable` instruction executed (its ")
                    && fault.ends_with(" frames are unnamed: the component keeps no name section)")
                    && !fault.contains('\n'),
                "{fault}"
            );
        }
        other => panic!("expected a fault, got {other:?}"),
    }
}
