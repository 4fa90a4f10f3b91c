//! Trial, rollback and last-known-good, on a manual clock and a real state
//! directory: the kubelet config controller's pattern applied to policies.

use std::sync::Arc;
use std::time::Duration;
use vigil::base::digest::Digest;
use vigil::policy::Reloader;
use vigil::policy::{Fault, LoadError, Origin, Phase, Registry};
use vigil_tests::*;

const PAST_TRIAL: Duration = Duration::from_secs(61);

fn install(registry: &Registry, name: &str, bytes: &[u8], source: Origin) -> Digest {
    let policy = registry
        .prepare(name, Arc::from(bytes), source)
        .expect("prepares");
    let digest = policy.digest();
    registry.install(policy);
    digest
}

fn phase(registry: &Registry, name: &str) -> Phase {
    registry
        .status()
        .into_iter()
        .find(|s| s.name == name)
        .expect("has status")
        .phase
}

/// Makes the serving version of `name` fault (it must be the flaky sorter).
fn trigger(registry: &Registry, name: &str) -> Fault {
    let policy = registry.get(name).unwrap();
    let candidates = vec![candidate(TRIGGER, 1)];
    registry
        .sorter(&policy)
        .expect("a sorter")
        .sort(&strategies(), &mut candidates.clone(), "{}")
        .unwrap_err()
}

#[test]
fn a_fault_during_the_trial_rolls_back_to_the_last_known_good_and_rejects_those_bytes() {
    let (registry, clock) = registry(None);
    let good = install(&registry, "sorter", REVERSE_SORTER, Origin::Builtin);
    clock.advance(PAST_TRIAL);
    assert_eq!(registry.graduate_due(), ["sorter"]);
    assert_eq!(phase(&registry, "sorter"), Phase::Active);

    let flaky = install(&registry, "sorter", FLAKY_SORTER, Origin::Builtin);
    assert!(matches!(phase(&registry, "sorter"), Phase::Trial { .. }));
    assert!(matches!(trigger(&registry, "sorter"), Fault::Trap(_)));

    assert_eq!(registry.get("sorter").unwrap().digest(), good);
    assert!(matches!(phase(&registry, "sorter"), Phase::RolledBack { from, .. } if from == flaky));
    assert_eq!(sort_names(&registry, "sorter"), ["c", "b", "a"]);
    let again = registry.prepare("sorter", Arc::from(FLAKY_SORTER), Origin::Builtin);
    assert!(matches!(again, Err(LoadError::Rejected { digest }) if digest == flaky));
}

#[test]
fn a_failed_override_of_a_builtin_falls_back_to_the_builtin() {
    let (registry, _clock) = registry(None);
    let builtin = registry.get("default-sorter").unwrap().digest();
    install(&registry, "default-sorter", FLAKY_SORTER, Origin::Builtin);
    assert_eq!(sort_names(&registry, "default-sorter"), ["c", "b", "a"]);
    trigger(&registry, "default-sorter");
    assert_eq!(registry.get("default-sorter").unwrap().digest(), builtin);
    assert_eq!(sort_names(&registry, "default-sorter"), ["a", "b", "c"]);
}

#[test]
fn a_failing_new_policy_with_nothing_to_fall_back_to_is_deregistered() {
    let (registry, _clock) = registry(None);
    install(&registry, "extra", FLAKY_SORTER, Origin::Builtin);
    trigger(&registry, "extra");
    assert!(registry.get("extra").is_none());
    assert!(
        registry.get("default-sorter").is_some(),
        "other policies are untouched"
    );
}

#[test]
fn after_graduation_a_fault_is_counted_but_not_rolled_back() {
    let (registry, clock) = registry(None);
    let flaky = install(&registry, "default-sorter", FLAKY_SORTER, Origin::Builtin);
    clock.advance(PAST_TRIAL);
    registry.graduate_due();
    trigger(&registry, "default-sorter");
    let serving = registry.get("default-sorter").unwrap();
    assert_eq!((serving.digest(), serving.faults()), (flaky, 1));
    assert_eq!(phase(&registry, "default-sorter"), Phase::Active);
}

#[test]
fn the_trial_ends_exactly_at_its_duration() {
    let (registry, clock) = registry(None);
    install(&registry, "sorter", REVERSE_SORTER, Origin::Builtin);
    clock.advance(test_limits().trial - Duration::from_millis(1));
    assert!(registry.graduate_due().is_empty());
    clock.advance(Duration::from_millis(1));
    assert_eq!(registry.graduate_due(), ["sorter"]);
}

#[test]
fn calls_already_holding_a_version_finish_on_it_after_a_swap() {
    let (registry, _clock) = registry(None);
    let old = registry.get("default-sorter").unwrap();
    install(&registry, "default-sorter", REVERSE_SORTER, Origin::Builtin);
    let candidates = three_candidates();
    let from_old = old
        .as_sorter()
        .expect("a sorter")
        .sort(&strategies(), &mut candidates.clone(), "{}")
        .unwrap()
        .unwrap();
    assert_eq!(order_of(&candidates, &from_old.order), ["a", "b", "c"]);
    assert_eq!(sort_names(&registry, "default-sorter"), ["c", "b", "a"]);
}

#[tokio::test]
async fn a_restart_with_a_bad_file_on_disk_serves_the_last_known_good() {
    let state = tempfile::tempdir().unwrap();
    let policies = tempfile::tempdir().unwrap();
    let file = policies.path().join("default-sorter.wasm");
    std::fs::write(&file, REVERSE_SORTER).unwrap();
    {
        let (registry, clock) = registry(Some(state.path().to_owned()));
        let report = Reloader::new(Arc::clone(&registry), policies.path().to_owned())
            .scan()
            .await;
        assert_eq!(report.loaded.len(), 1, "{report:?}");
        clock.advance(PAST_TRIAL);
        registry.graduate_due();
    }
    std::fs::write(&file, &REVERSE_SORTER[..REVERSE_SORTER.len() - 100]).unwrap();

    let (registry, _clock) = registry(Some(state.path().to_owned()));
    let serving = registry.get("default-sorter").unwrap();
    assert!(matches!(serving.origin(), Origin::LastKnownGood(_)));
    let report = Reloader::new(Arc::clone(&registry), policies.path().to_owned())
        .scan()
        .await;
    assert!(
        matches!(report.failed.as_slice(), [(name, LoadError::Invalid(_))] if name == "default-sorter")
    );
    assert_eq!(
        registry.get("default-sorter").unwrap().digest(),
        Digest::of(REVERSE_SORTER)
    );
    assert_eq!(sort_names(&registry, "default-sorter"), ["c", "b", "a"]);
}

#[tokio::test]
async fn bytes_that_failed_their_trial_stay_rejected_after_a_restart() {
    let state = tempfile::tempdir().unwrap();
    let policies = tempfile::tempdir().unwrap();
    std::fs::write(policies.path().join("default-sorter.wasm"), FLAKY_SORTER).unwrap();
    {
        let (registry, _clock) = registry(Some(state.path().to_owned()));
        Reloader::new(Arc::clone(&registry), policies.path().to_owned())
            .scan()
            .await;
        trigger(&registry, "default-sorter");
    }
    let (registry, _clock) = registry(Some(state.path().to_owned()));
    let report = Reloader::new(Arc::clone(&registry), policies.path().to_owned())
        .scan()
        .await;
    assert!(
        matches!(report.failed.as_slice(), [(_, LoadError::Rejected { .. })]),
        "{report:?}"
    );
    assert_eq!(
        registry.get("default-sorter").unwrap().origin(),
        &Origin::Builtin
    );
}

#[tokio::test]
async fn deleting_the_file_forgets_its_last_known_good_too() {
    let state = tempfile::tempdir().unwrap();
    let policies = tempfile::tempdir().unwrap();
    let file = policies.path().join("default-sorter.wasm");
    std::fs::write(&file, REVERSE_SORTER).unwrap();
    let (registry, clock) = registry(Some(state.path().to_owned()));
    let mut reloader = Reloader::new(Arc::clone(&registry), policies.path().to_owned());
    reloader.scan().await;
    clock.advance(PAST_TRIAL);
    registry.graduate_due();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(reloader.scan().await.removed, ["default-sorter"]);
    assert_eq!(
        registry.get("default-sorter").unwrap().origin(),
        &Origin::Builtin
    );
    drop(registry);

    let (restarted, _clock) = vigil_tests::registry(Some(state.path().to_owned()));
    assert_eq!(
        restarted.get("default-sorter").unwrap().origin(),
        &Origin::Builtin
    );
}
