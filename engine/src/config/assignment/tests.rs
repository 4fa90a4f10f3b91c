//! The config state machine on explicit time, with a merge that needs no
//! merger policy.

use super::*;

fn layer(name: &str, json: &str) -> Layer {
    Layer {
        source: format!("VigilConfig/{name}@1"),
        json: json.into(),
    }
}

/// Merges as the agent does, without a merger policy: each layer over
/// the defaults, checked against the schema.
fn merge(layers: &[Layer]) -> Result<VigilConfig, ConfigError> {
    let mut value = serde_json::to_value(VigilConfig::default()).unwrap();
    for layer in layers {
        crate::config::schema::check_layer(layer)?;
        let patch: serde_json::Value = serde_json::from_str(&layer.json).unwrap();
        for (k, v) in patch.as_object().unwrap() {
            value[k] = v.clone();
        }
    }
    serde_json::from_value(value).map_err(ConfigError::Invalid)
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

const DAY: Duration = Duration::from_secs(86_400);

/// A node that runs `{"evictionBurst": 2}` as its last-known-good.
fn settled_on_burst_2() -> Assignment {
    let mut state = fresh();
    let good = r#"{"evictionBurst": 2, "configTrialSeconds": 0}"#;
    state.assign(vec![layer("a", good)], at(0), &merge);
    assert_eq!(state.status().reason, Reason::Active);
    state
}

fn fresh() -> Assignment {
    Assignment::resume(
        None,
        CheckpointLoad::Missing,
        DAY,
        false,
        at(0),
        VigilConfig::default(),
        &merge,
    )
}

#[test]
fn a_new_config_runs_on_trial_and_graduates() {
    let mut state = fresh();
    assert_eq!(state.status().reason, Reason::Defaults);
    let update = state.assign(
        vec![layer(
            "a",
            r#"{"evictionBurst": 7, "configTrialSeconds": 60}"#,
        )],
        at(10),
        &merge,
    );
    assert_eq!(update, Update::Applied);
    assert_eq!(state.config().eviction_burst, 7);
    assert_eq!(state.status().reason, Reason::Trial);
    assert_eq!(state.trial_end(), Some(at(70)));
    state.tick(at(69), InTrial::default(), &merge);
    assert_eq!(state.status().reason, Reason::Trial);
    state.tick(at(70), InTrial::default(), &merge);
    assert_eq!(state.status().reason, Reason::Active);
    assert!(state.checkpoint().last_known_good.is_some());
    assert!(state.checkpoint().trial.is_none());
}

#[test]
fn a_bad_value_is_rejected_with_its_path_and_the_old_config_keeps_running() {
    let mut state = fresh();
    state.assign(
        vec![layer(
            "a",
            r#"{"evictionBurst": 7, "configTrialSeconds": 0}"#,
        )],
        at(0),
        &merge,
    );
    assert_eq!(state.status().reason, Reason::Active);
    let bad = vec![layer("a", r#"{"evictionBurst": 0}"#)];
    assert_eq!(state.assign(bad.clone(), at(5), &merge), Update::Rejected);
    assert_eq!(state.config().eviction_burst, 7);
    let status = state.status();
    assert_eq!(status.reason, Reason::Rejected);
    assert!(
        status
            .message
            .contains("$.evictionBurst: 0 is less than the minimum of 1"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains("VigilConfig/a@1"),
        "{}",
        status.message
    );
    assert_eq!(
        state.assign(bad, at(6), &merge),
        Update::Unchanged,
        "not retried"
    );
}

#[test]
fn a_merger_fault_keeps_the_running_config_and_never_rejects_the_new_one_for_good() {
    let mut state = settled_on_burst_2();
    let faulty = |_: &[Layer]| -> Result<VigilConfig, ConfigError> {
        Err(ConfigError::MergerFault(crate::policy::Fault::Deadline {
            deadline_ms: 100,
        }))
    };
    let next = vec![layer(
        "a",
        r#"{"evictionBurst": 3, "configTrialSeconds": 0}"#,
    )];
    assert_eq!(
        state.assign(next.clone(), at(10), &faulty),
        Update::Deferred
    );
    assert_eq!(state.config().eviction_burst, 2, "the running config stays");
    assert!(state.retrying());
    assert!(
        state.status().message.contains("tried again"),
        "{:?}",
        state.status()
    );
    // No VigilConfig at all: the defaults are not run without the merger either.
    assert_eq!(state.assign(vec![], at(11), &faulty), Update::Deferred);
    assert_eq!(state.config().eviction_burst, 2);
    // Once the merger answers, the same layers apply: nothing was recorded against them.
    assert_eq!(state.assign(next, at(12), &merge), Update::Applied);
    assert_eq!(state.config().eviction_burst, 3);
    assert!(!state.retrying());
}

#[test]
fn faults_during_the_trial_roll_back_to_the_last_known_good() {
    let mut state = settled_on_burst_2();
    let faulty = vec![layer("a", r#"{"evictionBurst": 9}"#)];
    state.assign(faulty.clone(), at(10), &merge);
    assert_eq!(
        (state.status().reason, state.config().eviction_burst),
        (Reason::Trial, 9)
    );
    state.tick(at(20), faults(MAX_FAULTS_IN_TRIAL - 1), &merge);
    assert_eq!(state.status().reason, Reason::Trial);
    state.tick(at(30), faults(MAX_FAULTS_IN_TRIAL), &merge);
    assert_eq!(
        (state.status().reason, state.config().eviction_burst),
        (Reason::RolledBack, 2)
    );
    assert!(!state.status().reason.ok());
    assert_eq!(state.assign(faulty, at(40), &merge), Update::Unchanged);
    let changed = vec![layer("a", r#"{"evictionBurst": 8}"#)];
    assert_eq!(
        state.assign(changed, at(50), &merge),
        Update::Applied,
        "a change is tried"
    );
    assert_eq!(state.status().reason, Reason::Trial);
}

fn faults(faults: u64) -> InTrial {
    InTrial {
        faults,
        evictions: 0,
    }
}

#[test]
fn evictions_past_the_configs_own_trial_bound_roll_it_back() {
    let mut state = settled_on_burst_2();
    let bounded = vec![layer(
        "a",
        r#"{"evictionBurst": 9, "configTrialMaxEvictions": 2}"#,
    )];
    state.assign(bounded, at(10), &merge);
    assert_eq!(state.status().reason, Reason::Trial);
    let evictions = |evictions| InTrial {
        faults: 0,
        evictions,
    };
    state.tick(at(20), evictions(2), &merge);
    assert_eq!(
        state.status().reason,
        Reason::Trial,
        "the bound itself is allowed"
    );
    state.tick(at(30), evictions(3), &merge);
    assert_eq!(
        (state.status().reason, state.config().eviction_burst),
        (Reason::RolledBack, 2)
    );
    assert!(
        (state.status().message)
            .contains("3 evictions during its trial, above its configTrialMaxEvictions 2"),
        "{}",
        state.status().message
    );

    // Without a bound of its own, evictions roll nothing back.
    let unbounded = vec![layer("a", r#"{"evictionBurst": 8}"#)];
    state.assign(unbounded, at(40), &merge);
    state.tick(at(50), evictions(1000), &merge);
    assert_eq!(state.status().reason, Reason::Trial);
}

#[test]
fn restarting_again_and_again_within_a_trial_rolls_it_back() {
    let mut state = settled_on_burst_2();
    state.assign(vec![layer("a", r#"{"evictionBurst": 9}"#)], at(10), &merge);
    let mut saved = state.checkpoint().clone();
    for start in 2..=MAX_STARTS_IN_TRIAL + 1 {
        let resumed = Assignment::resume(
            Some(saved),
            CheckpointLoad::Fresh,
            DAY,
            false,
            at(20),
            VigilConfig::default(),
            &merge,
        );
        saved = resumed.checkpoint().clone();
        let burst = resumed.config().eviction_burst;
        if start <= MAX_STARTS_IN_TRIAL {
            assert_eq!(burst, 9, "start {start} still runs the trial");
        } else {
            assert_eq!(burst, 2, "start {start}: the crash loop is rolled back");
            assert!(saved.rejected[0].reason.contains("crash loop"));
        }
    }
}

#[test]
fn without_the_api_server_a_checkpoint_runs_until_its_grace_time_is_over() {
    let mut state = settled_on_burst_2();
    state.assign(
        vec![layer(
            "a",
            r#"{"evictionBurst": 4, "configTrialSeconds": 0}"#,
        )],
        at(0),
        &merge,
    );
    let saved = state.checkpoint().clone();
    let day = DAY.as_secs() as i64;
    let young = Assignment::resume(
        Some(saved.clone()),
        CheckpointLoad::Fresh,
        DAY,
        false,
        at(day - 1),
        VigilConfig::default(),
        &merge,
    );
    assert_eq!(
        (young.status().reason, young.config().eviction_burst),
        (Reason::CheckpointInUse, 4)
    );
    // Reusing the checkpoint does not make it younger.
    let reused = young.checkpoint().clone();
    assert_eq!(reused.assigned, saved.assigned);
    let old = Assignment::resume(
        Some(reused),
        CheckpointLoad::Expired,
        DAY,
        false,
        at(day + 1),
        VigilConfig::default(),
        &merge,
    );
    assert_eq!(old.status().reason, Reason::CheckpointInUse);
    assert!(
        old.status().message.contains("past the grace time"),
        "{}",
        old.status().message
    );
    assert_eq!(
        old.config().eviction_burst,
        4,
        "the last-known-good (the same config here)"
    );
    let defaults = Assignment::resume(
        Some(saved),
        CheckpointLoad::Expired,
        DAY,
        true,
        at(day + 1),
        VigilConfig::default(),
        &merge,
    );
    assert_eq!(
        (defaults.status().reason, defaults.config().eviction_burst),
        (Reason::Defaults, 3)
    );
    let corrupt = Assignment::resume(
        None,
        CheckpointLoad::Corrupt,
        DAY,
        false,
        at(0),
        VigilConfig::default(),
        &merge,
    );
    assert!(corrupt.status().message.contains("damaged"));
}

#[test]
fn when_the_api_server_confirms_the_checkpoint_nothing_is_applied_twice() {
    let mut state = fresh();
    let layers = vec![layer(
        "a",
        r#"{"evictionBurst": 2, "configTrialSeconds": 0}"#,
    )];
    state.assign(layers.clone(), at(0), &merge);
    let mut resumed = Assignment::resume(
        Some(state.checkpoint().clone()),
        CheckpointLoad::Fresh,
        DAY,
        false,
        at(100),
        VigilConfig::default(),
        &merge,
    );
    assert_eq!(resumed.status().reason, Reason::CheckpointInUse);
    assert_eq!(
        resumed.assign(layers.clone(), at(200), &merge),
        Update::Applied
    );
    assert_eq!(resumed.status().reason, Reason::Active);
    assert_eq!(
        resumed.checkpoint().assigned.as_ref().unwrap().fetched_at,
        at(200)
    );
    assert_eq!(resumed.assign(layers, at(300), &merge), Update::Unchanged);
    assert_eq!(resumed.assign(Vec::new(), at(400), &merge), Update::Applied);
    assert_eq!(resumed.status().reason, Reason::Defaults);
}

#[test]
fn the_defaults_merged_at_start_up_run_when_the_merger_faults() {
    let faulty = |_: &[Layer]| -> Result<VigilConfig, ConfigError> {
        Err(ConfigError::MergerFault(crate::policy::Fault::Deadline {
            deadline_ms: 100,
        }))
    };
    // The agent's own `--config` made these defaults at start-up.
    let own = VigilConfig {
        eviction_burst: 5,
        ..VigilConfig::default()
    };
    let state = Assignment::resume(
        None,
        CheckpointLoad::Missing,
        DAY,
        false,
        at(0),
        own,
        &faulty,
    );
    assert_eq!(
        (state.status().reason, state.config().eviction_burst),
        (Reason::Defaults, 5),
        "the agent's own config, not the built-in defaults"
    );
}

#[test]
fn the_controller_looks_again_at_a_trials_end_an_expiry_or_its_period() {
    let mut state = settled_on_burst_2();
    assert_eq!(state.look_again_in(at(5), None), CONFIRM_EVERY);
    assert_eq!(
        state.look_again_in(at(5), Some(at(65))),
        Duration::from_secs(60)
    );
    assert_eq!(
        state.look_again_in(at(5), Some(at(1))),
        Duration::ZERO,
        "past is now"
    );
    let trial = r#"{"evictionBurst": 7, "configTrialSeconds": 3}"#;
    state.assign(vec![layer("a", trial)], at(10), &merge);
    assert_eq!(state.trial_end(), Some(at(13)));
    assert_eq!(state.look_again_in(at(10), None), Duration::from_secs(3));
    assert_eq!(
        state.look_again_in(at(10), Some(at(11))),
        Duration::from_secs(1)
    );
    state.tick(at(13), InTrial::default(), &merge);
    assert_eq!(state.status().reason, Reason::Active);
    assert_eq!(state.look_again_in(at(13), None), CONFIRM_EVERY);
    let long = r#"{"evictionBurst": 9, "configTrialSeconds": 600}"#;
    state.assign(vec![layer("a", long)], at(20), &merge);
    assert_eq!(
        state.look_again_in(at(20), None),
        FAULT_CHECK,
        "faults counted in a trial"
    );
}
