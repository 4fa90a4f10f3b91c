//! `vigil policy new`, run as the real binary: every world in every language
//! gives a skeleton that builds with its own script, passes its own test
//! (`policy check`, then `policy test` against its expected answers) and acts
//! in its own scenario. The toolchains are the ones the example policies'
//! build installed under `target/toolchains` (the README's test command
//! builds those first).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `command` in `dir` with the shared toolchains, cache and target
/// directory; its standard output, or a panic with everything it printed.
fn run(dir: &Path, command: &mut Command, shared: &Path) -> String {
    let output = command
        .current_dir(dir)
        .env("VIGIL", env!("CARGO_BIN_EXE_vigil"))
        .env("VIGIL_TOOLCHAINS", repo().join("target/toolchains"))
        .env("VIGIL_CACHE_DIR", shared.join("cache"))
        .env("CARGO_TARGET_DIR", shared.join("target"))
        .output()
        .expect("the command runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} in {}:\n{stdout}{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Writes, builds, tests and simulates the skeletons of every world in `lang`.
fn every_world_builds_tests_and_acts(lang: &str) {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    for world in ["strategy", "sorter", "merger"] {
        let name = format!("my-{lang}-{world}");
        let dir = root.path().join(&name);
        let vigil = || Command::new(env!("CARGO_BIN_EXE_vigil"));
        let wrote = run(
            root.path(),
            vigil().args(["policy", "new", &name, "--world", world, "--lang", lang]),
            &shared,
        );
        assert!(wrote.contains("next: cd "), "{wrote}");
        run(&dir, &mut Command::new("./build.sh"), &shared);
        let tested = run(&dir, &mut Command::new("./test.sh"), &shared);
        assert!(tested.contains(&format!("{name}.wasm: ok")), "{tested}");
        assert!(tested.contains("ok: test/"), "{tested}");
        let cache = shared.join("cache");
        let json = run(
            &dir,
            vigil()
                .args([
                    "simulate",
                    "scenario.yaml",
                    "--output",
                    "json",
                    "--cache-dir",
                ])
                .arg(&cache),
            &shared,
        );
        let simulation: serde_json::Value = serde_json::from_str(&json).unwrap();
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
                assert_eq!(evictions.len(), 1, "{json}");
                assert_eq!(evictions[0]["pod"], "default/batch");
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
    }
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
fn a_name_that_cannot_be_a_policys_is_refused_and_nothing_is_written() {
    let root = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
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
