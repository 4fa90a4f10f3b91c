//! `vigil policy new`, run as the real binary: every world in every language
//! gives a skeleton whose printed next step — build with its own script, pass
//! its own test (`policy check`, then `policy test` against its expected
//! answers), simulate — works as printed, and which acts in its own scenario;
//! a sorter's order decides whom a threshold evicts. The toolchains are the
//! ones the example policies' build installed under `target/toolchains` (the
//! README's test command builds those first).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `command` in `dir` with the shared toolchains, compile cache and
/// target directory; its standard output, or a panic with everything it printed.
fn run(dir: &Path, command: &mut Command, shared: &Path) -> String {
    vigil_testbed::cli::ok(
        command
            .current_dir(dir)
            .env_remove("VIGIL")
            .env("VIGIL_TOOLCHAINS", repo().join("target/toolchains"))
            .env("VIGIL_CACHE_DIR", shared.join("cache"))
            .env("CARGO_TARGET_DIR", shared.join("target")),
    )
}

/// Writes, builds, tests and simulates the skeletons of every world in `lang`.
fn every_world_builds_tests_and_acts(lang: &str) {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    for world in ["strategy", "sorter", "merger"] {
        let name = format!("my-{lang}-{world}");
        let dir = root.path().join(&name);
        let vigil = || crate::vigil();
        let wrote = run(
            root.path(),
            vigil().args(["policy", "new", &name, "--world", world, "--lang", lang]),
            &shared,
        );
        assert!(wrote.starts_with("wrote a"), "{wrote}");
        // The next step, run as printed (this vigil is not on PATH, so the
        // hint names it).
        let next = wrote
            .lines()
            .find_map(|l| l.strip_prefix("next: "))
            .unwrap_or_else(|| panic!("no next step: {wrote}"));
        assert!(next.contains(env!("CARGO_BIN_EXE_vigil")), "{next}");
        let shown = run(
            root.path(),
            Command::new("bash").args(["-c", next]),
            &shared,
        );
        assert!(shown.contains(&format!("{name}.wasm: ok")), "{shown}");
        let cases = std::fs::read_dir(dir.join("test")).unwrap().count() / 2;
        assert!(cases >= 2, "{lang} {world}: {cases} cases");
        assert_eq!(shown.matches("ok: test/").count(), cases, "{shown}");
        assert!(
            shown.contains(&format!("vigil simulate: {name}")),
            "{shown}"
        );
        let simulate = || {
            let json = run(
                &dir,
                vigil().args(["simulate", "scenario.yaml", "--output", "json"]),
                &shared,
            );
            serde_json::from_str::<serde_json::Value>(&json).unwrap()
        };
        let simulation = simulate();
        let json = simulation.to_string();
        assert_eq!(
            simulation["warnings"],
            serde_json::json!([]),
            "{lang} {world}"
        );
        let served: Vec<&str> = simulation["policies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| !p["file"].is_null())
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        let evictions = simulation["evictions"].as_array().unwrap();
        let steps = simulation["steps"].as_array().unwrap();
        match world {
            "strategy" => {
                assert_eq!(served, [name.as_str()]);
                assert_eq!(evictions.len(), 1, "{json}");
                assert_eq!(evictions[0]["pod"], "default/leaky");
                assert_eq!(evictions[0]["strategy"], name.as_str());
                assert_eq!(evictions[0]["at"], 30.0);
            }
            "sorter" => {
                assert_eq!(served, [name.as_str()]);
                // The strategy ranks batch first; the sorter's order (most
                // memory first) sends warmer.
                assert_eq!(evictions.len(), 1, "{json}");
                assert_eq!(evictions[0]["pod"], "default/warmer");
                let refusal = &steps.iter().find(|s| s["t"] == 20.0).unwrap()["refusals"][0];
                assert_eq!(refusal["sorter"], name.as_str());
                assert_eq!(refusal["pod"], "kube-system/node-cache");
                assert_eq!(refusal["reason"], "system-critical pod");
            }
            _ => {
                assert_eq!(served, ["default-merger"]);
                assert!(evictions.is_empty(), "dry run, merged from the config");
                let decision = &steps[0]["decisions"][0];
                assert_eq!(
                    (&decision["pod"], &decision["dry_run"]),
                    (&"default/hog".into(), &true.into())
                );
            }
        }
        // Every run above compiled into, or loaded from, one cache: the
        // default one (here `$VIGIL_CACHE_DIR`), with no flag given.
        let digest = simulation["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| !p["file"].is_null())
            .unwrap()["digest"]
            .as_str()
            .unwrap()
            .to_owned();
        let cached = std::fs::read_dir(shared.join("cache")).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(&digest)
        });
        assert!(cached, "{lang} {world}: {digest} is not in the cache");
        if (lang, world) == ("js", "sorter") {
            newest_first_sends_another_pod(&dir, &shared, simulate);
        }
    }
}

/// The JavaScript sorter's order changed to newest first: the same
/// threshold of the built-in strategy now evicts web, the newest pod.
fn newest_first_sends_another_pod(
    dir: &Path,
    shared: &Path,
    simulate: impl Fn() -> serde_json::Value,
) {
    let source = dir.join("policy.js");
    let text = std::fs::read_to_string(&source).unwrap();
    let by_memory = "const evictFirst = (pod) => pod.usage.memoryWorkingSetBytes ?? 0n;";
    assert!(text.contains(by_memory), "the skeleton's order is one line");
    std::fs::write(
        &source,
        text.replace(by_memory, "const evictFirst = (pod) => pod.startTimeMs;"),
    )
    .unwrap();
    run(dir, &mut Command::new("./build.sh"), shared);
    let simulation = simulate();
    let evicted: Vec<&serde_json::Value> = simulation["evictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["pod"])
        .collect();
    assert_eq!(evicted, ["default/web"], "{simulation}");
}

#[test]
fn rust_skeletons_build_pass_their_tests_and_act() {
    every_world_builds_tests_and_acts("rust");
}

#[test]
fn c_skeletons_build_pass_their_tests_and_act() {
    every_world_builds_tests_and_acts("c");
}

#[test]
fn javascript_skeletons_build_pass_their_tests_and_act() {
    every_world_builds_tests_and_acts("js");
}

#[test]
fn python_skeletons_build_pass_their_tests_and_act() {
    every_world_builds_tests_and_acts("python");
}

#[test]
fn go_skeletons_build_pass_their_tests_and_act() {
    every_world_builds_tests_and_acts("go");
}

#[test]
fn a_name_that_cannot_be_a_policys_is_refused_and_nothing_is_written() {
    let root = tempfile::tempdir().unwrap();
    let output = crate::vigil()
        .current_dir(root.path())
        .args([
            "policy",
            "new",
            "My_Policy",
            "--world",
            "sorter",
            "--lang",
            "rust",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        errors.contains("\"My_Policy\" cannot name a policy"),
        "{errors}"
    );
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}
