//! `vigil policy check`, run as the real binary.

use std::process::Command;

fn vigil(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(args)
        .output()
        .expect("vigil runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
fn builtin_policies_pass_and_name_their_world() {
    let (ok, text) = vigil(&["policy", "check", "--builtin"]);
    assert!(ok, "{text}");
    for (name, world) in [
        ("memory-pressure", "eviction-strategy"),
        ("default-sorter", "candidate-sorter"),
        ("default-merger", "config-merger"),
    ] {
        assert!(text.contains(&format!("builtin:{name}: ok")), "{text}");
        assert!(
            text.contains(&format!("world:    vigil:policy/{world}@0.2.0")),
            "{text}"
        );
    }
    assert!(
        text.contains("digest:   sha256:") && text.contains("canary call passed"),
        "{text}"
    );
}

#[test]
fn invalid_files_fail_the_check_naming_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let garbage = write("garbage.wasm", b"this is not wasm");
    let module = write("module.wasm", &wat::parse_str("(module)").unwrap());
    // What a sorter built against the previous contract exports.
    let old = write(
        "old.wasm",
        &wat::parse_str(
            r#"(component (instance $i) (export "vigil:policy/sorter@0.1.0" (instance $i)))"#,
        )
        .unwrap(),
    );
    let (ok, text) = vigil(&["policy", "check", &garbage, &module, &old]);
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!("{garbage}: INVALID: not a WebAssembly file")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{module}: INVALID: a core WebAssembly module, not a component"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{old}: INVALID: built for vigil:policy@0.1.0, this agent speaks 0.2.0"
        )),
        "{text}"
    );
    assert!(text.contains("3 problem(s) found by the check"), "{text}");
}

#[test]
fn nothing_to_check_is_an_error() {
    let (ok, text) = vigil(&["policy", "check"]);
    assert!(!ok && text.contains("nothing to check"), "{text}");
}

#[test]
fn the_example_policies_in_c_javascript_and_python_pass_and_name_their_world() {
    let examples = [
        ("c-sorter", "candidate-sorter"),
        ("js-sorter", "candidate-sorter"),
        ("python-sorter", "candidate-sorter"),
        ("python-psi-strategy", "eviction-strategy"),
        ("js-merger", "config-merger"),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let paths: Vec<String> = examples
        .iter()
        .map(|(name, _)| {
            let path = root.join(name).join(format!("{name}.wasm"));
            assert!(
                path.is_file(),
                "{} is missing: build the example policies with examples/policies/build.sh",
                path.display()
            );
            path.display().to_string()
        })
        .collect();
    let mut args = vec!["policy", "check"];
    args.extend(paths.iter().map(String::as_str));
    let (ok, text) = vigil(&args);
    assert!(ok, "{text}");
    for (path, (_, world)) in paths.iter().zip(examples) {
        let report = format!("{path}: ok\n  world:    vigil:policy/{world}@0.2.0\n");
        assert!(text.contains(&report), "{report} in {text}");
    }
    assert_eq!(text.matches("canary call passed").count(), examples.len());
}

#[test]
fn a_config_gives_each_canary_its_policy_config_and_names_what_it_misspelt() {
    let config = r#"{"policies": {"memory-presure": {"dryRun": true}, "default-sorter": {"config": {"skipPods": []}}}}"#;
    let (ok, text) = vigil(&["policy", "check", "--builtin", "--config", config]);
    assert!(!ok, "{text}");
    assert!(
        text.contains(r#"config: INVALID: config field policies.memory-presure names policy "memory-presure", which is not loaded; did you mean "memory-pressure"?"#),
        "{text}"
    );
    assert!(
        text.contains("builtin:default-sorter: INVALID: declined the canary call with its config: $.skipPods: unknown field"),
        "{text}"
    );
    assert!(text.contains("builtin:memory-pressure: ok"), "{text}");
    assert!(text.contains("2 problem(s) found by the check"), "{text}");

    // The same, from a YAML file, with valid settings: every built-in passes.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "policies:\n  default-sorter:\n    config: {skipLabels: [app]}\n",
    )
    .unwrap();
    let (ok, text) = vigil(&[
        "policy",
        "check",
        "--builtin",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    assert!(!text.contains("declined"), "{text}");

    let (ok, text) = vigil(&[
        "policy",
        "check",
        "--builtin",
        "--config",
        r#"{"evictionBurst": 0}"#,
    ]);
    assert!(
        !ok && text.contains("does not match vigil's config schema"),
        "{text}"
    );
}

#[test]
fn with_a_cache_dir_a_second_check_loads_the_compiled_component() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    let (ok, first) = vigil(&["policy", "check", "--builtin", "--cache-dir", cache]);
    assert!(ok && !first.contains("(from the cache)"), "{first}");
    let (ok, second) = vigil(&["policy", "check", "--builtin", "--cache-dir", cache]);
    assert!(ok, "{second}");
    assert_eq!(
        second.matches("(from the cache)").count(),
        first.matches("canary call passed").count(),
        "{second}"
    );
}
