//! The precompiled-artifact cache: hit on the second load, a damaged entry is
//! discarded and rebuilt, never trusted.

use std::sync::Arc;
use vigil::policy::{CacheOutcome, Host, Policy, Source};
use vigil_tests::*;

fn load_with_cache(dir: &std::path::Path) -> Policy {
    let host = Host::new(Some(dir.to_owned())).unwrap();
    host.load(
        "default-sorter",
        Arc::from(builtin("default-sorter")),
        Source::Builtin,
        test_limits(),
    )
    .unwrap()
}

fn answers(policy: &Policy) -> Vec<String> {
    let candidates = three_candidates();
    order_of(
        &candidates,
        &policy
            .as_sorter()
            .expect("a sorter")
            .sort(&candidates, "{}")
            .unwrap()
            .unwrap()
            .order,
    )
}

#[test]
fn the_second_load_hits_and_a_damaged_entry_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let first = load_with_cache(dir.path());
    assert_eq!(first.cache_outcome(), CacheOutcome::Miss);
    let second = load_with_cache(dir.path());
    assert_eq!(second.cache_outcome(), CacheOutcome::Hit);
    assert_eq!(answers(&second), ["b", "c", "a"]);

    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one entry per component and engine: {entries:?}"
    );
    let mut bytes = std::fs::read(&entries[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entries[0], &bytes).unwrap();

    let third = load_with_cache(dir.path());
    assert_eq!(third.cache_outcome(), CacheOutcome::Damaged);
    assert_eq!(answers(&third), ["b", "c", "a"]);
    assert_eq!(
        load_with_cache(dir.path()).cache_outcome(),
        CacheOutcome::Hit
    );

    std::fs::write(&entries[0], b"short").unwrap();
    assert_eq!(
        load_with_cache(dir.path()).cache_outcome(),
        CacheOutcome::Damaged
    );
}
