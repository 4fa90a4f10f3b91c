//! The precompiled-artifact cache: hit on the second load; an entry that is
//! damaged, edited (even with a checksum recomputed), copied from another
//! component or built for another engine is discarded and rebuilt, never run.
//! An entry is the artifact (`.cwasm`, mapped on load) and its `.mac`.

use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vigil::base::digest::Digest;
use vigil::policy::builtin;
use vigil::policy::{CacheOutcome, Host, Origin, Policy};
use vigil_tests::*;

/// Magic, component digest, engine key, origin: the claims of a `.mac`
/// file, which its tag (the rest) covers with the artifact.
const CLAIMS: usize = 8 + 32 + 16 + 1;

fn load_bytes_with_cache(dir: &Path, bytes: &[u8]) -> Policy {
    let host = Host::new(Some(dir.to_owned())).unwrap();
    host.load(
        "default-sorter",
        Arc::from(bytes),
        Origin::Builtin,
        test_limits(),
    )
    .unwrap()
}

fn load_with_cache(dir: &Path) -> Policy {
    load_bytes_with_cache(dir, builtin("default-sorter").unwrap())
}

/// The cache entry of `bytes` (there must be one): its artifact and `.mac`.
fn entry_of(dir: &Path, bytes: &[u8]) -> (PathBuf, PathBuf) {
    let prefix = Digest::of(bytes).hex();
    let artifact = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(&prefix) && name.ends_with(".cwasm")
        })
        .expect("an entry for the component");
    let mac = artifact.with_extension("mac");
    assert!(mac.exists(), "{} has its .mac", artifact.display());
    (artifact, mac)
}

/// Re-authenticates `artifact` under the claims of `mac` with the cache's
/// own key, as only someone who can read the key (the agent's user) could.
fn resign(dir: &Path, mac: &mut [u8], artifact: &[u8]) {
    let key = std::fs::read(dir.join("key")).unwrap();
    let mut hmac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    hmac.update(&mac[..CLAIMS]);
    hmac.update(artifact);
    let tag = hmac.finalize().into_bytes();
    mac[CLAIMS..].copy_from_slice(&tag);
}

fn answers(policy: &Policy) -> Vec<String> {
    let candidates = three_candidates();
    order_of(
        &candidates,
        &policy
            .as_sorter()
            .expect("a sorter")
            .sort(&strategies(), &mut candidates.clone(), "{}")
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
    assert_eq!(answers(&second), ["a", "b", "c"]);

    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one entry per component and engine: {entries:?}"
    );
    let (artifact, mac) = entry_of(dir.path(), builtin("default-sorter").unwrap());
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&artifact, &bytes).unwrap();

    let third = load_with_cache(dir.path());
    assert_eq!(third.cache_outcome(), CacheOutcome::Damaged);
    assert_eq!(answers(&third), ["a", "b", "c"]);
    assert_eq!(
        load_with_cache(dir.path()).cache_outcome(),
        CacheOutcome::Hit
    );

    for (file, what) in [(&artifact, "artifact"), (&mac, ".mac")] {
        std::fs::write(file, b"short").unwrap();
        assert_eq!(
            load_with_cache(dir.path()).cache_outcome(),
            CacheOutcome::Damaged,
            "a truncated {what}"
        );
    }
    std::fs::remove_file(&mac).unwrap();
    assert_eq!(
        load_with_cache(dir.path()).cache_outcome(),
        CacheOutcome::Miss,
        "an artifact nothing vouches for is compiled again"
    );
}

#[test]
fn an_edited_artifact_with_its_checksum_recomputed_is_never_run() {
    let dir = tempfile::tempdir().unwrap();
    load_with_cache(dir.path());
    let (path, mac_path) = entry_of(dir.path(), builtin("default-sorter").unwrap());
    let mut artifact = std::fs::read(&path).unwrap();
    let code = artifact.len() - 4096;
    artifact[code] ^= 0x5a;
    // An unkeyed checksum over claims and artifact, put where the tag goes.
    let mut mac = std::fs::read(&mac_path).unwrap();
    let sum = Sha256::new()
        .chain_update(&mac[..CLAIMS])
        .chain_update(&artifact)
        .finalize();
    mac[CLAIMS..].copy_from_slice(&sum);
    std::fs::write(&path, &artifact).unwrap();
    std::fs::write(&mac_path, &mac).unwrap();

    let reloaded = load_with_cache(dir.path());
    assert_eq!(reloaded.cache_outcome(), CacheOutcome::Damaged);
    assert_eq!(answers(&reloaded), ["a", "b", "c"]);
}

#[test]
fn another_components_artifact_under_this_name_is_recompiled_not_run() {
    let dir = tempfile::tempdir().unwrap();
    load_with_cache(dir.path());
    load_bytes_with_cache(dir.path(), REVERSE_SORTER);
    let mine = entry_of(dir.path(), builtin("default-sorter").unwrap());
    let theirs = entry_of(dir.path(), REVERSE_SORTER);
    std::fs::copy(&theirs.0, &mine.0).unwrap();
    std::fs::copy(&theirs.1, &mine.1).unwrap();

    let reloaded = load_with_cache(dir.path());
    assert_eq!(reloaded.cache_outcome(), CacheOutcome::Damaged);
    assert_eq!(
        answers(&reloaded),
        ["a", "b", "c"],
        "the default sorter's answer, not the reverse sorter's"
    );
    assert_eq!(
        load_with_cache(dir.path()).cache_outcome(),
        CacheOutcome::Hit
    );
}

#[test]
fn an_authentic_artifact_that_claims_another_component_or_engine_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    load_with_cache(dir.path());
    let (path, mac_path) = entry_of(dir.path(), builtin("default-sorter").unwrap());
    let artifact = std::fs::read(&path).unwrap();
    let original = std::fs::read(&mac_path).unwrap();
    for (field, at) in [("component digest", 8), ("engine key", 8 + 32)] {
        let mut mac = original.clone();
        mac[at] ^= 0x01;
        resign(dir.path(), &mut mac, &artifact);
        std::fs::write(&mac_path, &mac).unwrap();
        let reloaded = load_with_cache(dir.path());
        assert_eq!(
            reloaded.cache_outcome(),
            CacheOutcome::Damaged,
            "a changed {field} must not load"
        );
        assert_eq!(answers(&reloaded), ["a", "b", "c"]);
    }
}

#[test]
fn an_authentic_artifact_built_by_an_engine_with_other_settings_is_recompiled_not_run() {
    let dir = tempfile::tempdir().unwrap();
    load_with_cache(dir.path());
    let (path, mac_path) = entry_of(dir.path(), builtin("default-sorter").unwrap());
    // The same component precompiled by a wasmtime engine set up otherwise
    // (no epoch deadlines, no pooling), put in place and vouched for with the
    // cache's key: only wasmtime's own compatibility check can tell.
    let foreign = wasmtime::Engine::new(wasmtime::Config::new().wasm_component_model(true))
        .unwrap()
        .precompile_component(builtin("default-sorter").unwrap())
        .unwrap();
    let mut mac = std::fs::read(&mac_path).unwrap();
    resign(dir.path(), &mut mac, &foreign);
    std::fs::write(&path, &foreign).unwrap();
    std::fs::write(&mac_path, &mac).unwrap();

    let reloaded = load_with_cache(dir.path());
    assert_eq!(reloaded.cache_outcome(), CacheOutcome::Damaged);
    assert_eq!(answers(&reloaded), ["a", "b", "c"]);
    assert_ne!(
        std::fs::read(&path).unwrap(),
        foreign,
        "the foreign artifact is replaced"
    );
    assert_eq!(
        load_with_cache(dir.path()).cache_outcome(),
        CacheOutcome::Hit
    );
}

#[test]
fn a_cache_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    Host::new(Some(dir.clone())).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "created private");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = Host::new(Some(dir.clone())).unwrap_err();
    let text = format!("{:#}", anyhow::Error::from(error));
    assert!(text.contains("mode 777"), "{text}");
}

/// The digests of the components the cache holds entries for, and whether
/// each has both files.
fn entries(dir: &Path) -> Vec<Digest> {
    let mut digests: Vec<Digest> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".cwasm")?;
            assert!(
                dir.join(format!("{stem}.mac")).exists(),
                "{name} has its .mac"
            );
            Digest::from_hex(stem.split_once('-')?.0)
        })
        .collect();
    digests.sort();
    digests
}

#[tokio::test]
async fn the_agents_reloader_removes_artifacts_no_version_needs_and_nothing_else() {
    use vigil::base::clock::ManualClock;
    use vigil::policy::Reloader;
    use vigil::policy::{LimitsTable, Registry};
    let (state, policies) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cache = state.path().join("cache");
    let host = Arc::new(Host::new(Some(cache.clone())).unwrap());
    let clock = Arc::new(ManualClock::new(
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
    ));
    let limits = LimitsTable {
        default: test_limits(),
        overrides: Default::default(),
    };
    let registry = Arc::new(Registry::new(host, clock.clone(), limits, None).unwrap());
    let builtins: Vec<Digest> = vigil::policy::BUILTINS
        .iter()
        .map(|(_, bytes)| Digest::of(bytes))
        .collect();
    let with = |extra: &[&[u8]]| {
        let mut all = builtins.clone();
        all.extend(extra.iter().map(|b| Digest::of(b)));
        all.sort();
        all
    };
    // What the cache does not name stays; what it names for another engine,
    // or half-written by a process gone, goes; what a live process (a
    // compiler child) is writing stays for its rename.
    let foreign = format!("{}-0000000000000000", Digest::of(b"old vigil").hex());
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let writing = format!(".y.cwasm.tmp-{}", std::process::id());
    for file in [
        "notes.txt".to_owned(),
        format!("{foreign}.cwasm"),
        format!("{foreign}.mac"),
        format!(".x.cwasm.tmp-{}", gone.id()),
        writing.clone(),
    ] {
        std::fs::write(cache.join(file), b"x").unwrap();
    }
    let mut reloader =
        Reloader::new(Arc::clone(&registry), policies.path().to_owned()).collecting_garbage();
    let sorter = policies.path().join("extra-sorter.wasm");
    std::fs::write(&sorter, REVERSE_SORTER).unwrap();

    let first = reloader.scan().await;
    assert_eq!(first.collected.map(|c| c.files), Some(3), "{first:?}");
    assert_eq!(entries(&cache), with(&[REVERSE_SORTER]));
    assert!(cache.join("notes.txt").exists() && cache.join("key").exists());
    assert!(cache.join(&writing).exists(), "a live writer's file stays");

    // v2 on trial: v1 is its fallback and keeps its artifact.
    clock.advance(std::time::Duration::from_secs(61));
    registry.graduate_due();
    std::fs::write(&sorter, FLAKY_SORTER).unwrap();
    let second = reloader.scan().await;
    assert_eq!(second.collected.map(|c| c.files), Some(0));
    assert_eq!(entries(&cache), with(&[REVERSE_SORTER, FLAKY_SORTER]));

    // v2 passed its trial: nothing falls back to v1 any more.
    clock.advance(std::time::Duration::from_secs(61));
    registry.graduate_due();
    let third = reloader.scan().await;
    assert_eq!(
        third.collected.map(|c| c.files),
        Some(2),
        "its .cwasm and .mac"
    );
    assert!(third.collected.unwrap().bytes > 0);
    assert_eq!(entries(&cache), with(&[FLAKY_SORTER]));

    // Without collecting (as `simulate` and the author's tools scan a
    // shared cache), nothing is removed.
    std::fs::remove_file(&sorter).unwrap();
    let mut plain = Reloader::new(Arc::clone(&registry), policies.path().to_owned());
    assert_eq!(plain.scan().await.collected, None);
    assert_eq!(entries(&cache), with(&[FLAKY_SORTER]));
}
