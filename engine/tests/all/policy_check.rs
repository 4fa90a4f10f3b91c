//! `vigil policy check` and `vigil policy test`, run as the real binary.

use std::ffi::OsStr;
use std::path::Path;

fn vigil(args: &[&str]) -> (bool, String) {
    let ran = vigil_testbed::cli::output(crate::vigil().args(args));
    (ran.ok, ran.text())
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
            text.contains(&format!("world:    vigil:policy/{world}@0.3.0")),
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
    // What a sorter built against a contract this agent does not know exports.
    let future = write(
        "future.wasm",
        &wat::parse_str(
            r#"(component (instance $i) (export "vigil:policy/sorter@0.4.0" (instance $i)))"#,
        )
        .unwrap(),
    );
    // A 0.1.0 sorter's export name, without the sorter behind it.
    let hollow = write(
        "hollow.wasm",
        &wat::parse_str(
            r#"(component (instance $i) (export "vigil:policy/sorter@0.1.0" (instance $i)))"#,
        )
        .unwrap(),
    );
    let (ok, text) = vigil(&["policy", "check", &garbage, &module, &future, &hollow]);
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
            "{future}: INVALID: built for vigil:policy@0.4.0, this agent serves 0.1.0, 0.2.0 and 0.3.0"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{hollow}: INVALID: its exports do not match the candidate-sorter world of vigil:policy@0.1.0"
        )),
        "{text}"
    );
    assert!(text.contains("4 problem(s) found by the check"), "{text}");
}

#[test]
fn nothing_to_check_is_an_error() {
    let (ok, text) = vigil(&["policy", "check"]);
    assert!(!ok && text.contains("nothing to check"), "{text}");
}

/// A file the agent would never serve, by its name alone, is refused by name
/// before it is read.
#[test]
fn a_file_whose_name_is_not_a_policy_name_is_refused_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x@y.wasm");
    std::fs::write(&file, b"\0asm").unwrap();
    let (ok, text) = vigil(&["policy", "check", file.to_str().unwrap()]);
    assert!(!ok, "{text}");
    assert!(
        text.contains(r#"INVALID: "x@y" is not a policy name: it holds @, ~ or /"#),
        "{text}"
    );
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
        let report = format!(
            "{path}: ok\n  world:    vigil:policy/{world}@0.3.0\n  contract: vigil:policy@0.3.0 (current)\n"
        );
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

/// `vigil ARGS` with `home` as `$HOME` and no cache variable set: what an
/// author gets by default. Its success and everything it printed.
fn vigil_at_home(home: &Path, args: &[&OsStr]) -> (bool, String) {
    let output = crate::vigil()
        .args(args)
        .env("HOME", home)
        .env_remove("VIGIL_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        .output()
        .expect("vigil runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// For each component `policy check` reported on, whether it came from the cache.
fn from_cache(report: &str) -> Vec<(String, bool)> {
    let mut checked: Vec<(String, bool)> = Vec::new();
    for line in report.lines() {
        if let Some(origin) = line.strip_suffix(": ok") {
            checked.push((origin.to_owned(), false));
        } else if line.contains("(from the cache)") {
            checked
                .last_mut()
                .expect("a component before its compile line")
                .1 = true;
        }
    }
    checked
}

#[test]
fn simulate_check_and_test_share_one_cache_by_default() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    // `policy test` compiles the built-in merger into the default cache, and
    // a check then finds it there, and only it.
    let input = home.join("merge.input.json");
    std::fs::write(
        &input,
        r#"{"layers": [{"source": "defaults", "json": {}}]}"#,
    )
    .unwrap();
    let test = ["policy", "test", "builtin:default-merger", "--input"].map(OsStr::new);
    let (ok, text) = vigil_at_home(home, &[&test[..], &[input.as_os_str()]].concat());
    assert!(ok, "{text}");
    let (ok, text) = vigil_at_home(home, &["policy", "check", "--builtin"].map(OsStr::new));
    assert!(ok, "{text}");
    for (origin, cached) in from_cache(&text) {
        assert_eq!(
            cached,
            origin == "builtin:default-merger",
            "{origin}: {text}"
        );
    }
    assert!(home.join(".cache/vigil/components").is_dir());

    // `simulate` compiles a file's component there, and `policy check` of
    // that file loads it from there; `--no-cache` compiles afresh.
    let policies = home.join("policies");
    std::fs::create_dir(&policies).unwrap();
    let sorter = policies.join("default-sorter.wasm");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/c-sorter/c-sorter.wasm"),
        &sorter,
    )
    .expect("run examples/policies/build.sh");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios/hard-memory-pressure.yaml");
    let (ok, text) = vigil_at_home(
        home,
        &[
            OsStr::new("simulate"),
            scenario.as_os_str(),
            OsStr::new("--policies-dir"),
            policies.as_os_str(),
        ],
    );
    assert!(ok, "{text}");
    let check = |extra: &[&OsStr]| {
        let mut args = vec![
            OsStr::new("policy"),
            OsStr::new("check"),
            sorter.as_os_str(),
        ];
        args.extend(extra);
        let (ok, text) = vigil_at_home(home, &args);
        assert!(ok, "{text}");
        from_cache(&text)
    };
    let origin = sorter.display().to_string();
    assert_eq!(check(&[]), [(origin.clone(), true)]);
    assert_eq!(check(&[OsStr::new("--no-cache")]), [(origin, false)]);
}

/// Runs `vigil policy test FILE --input INPUT` with `extra` arguments; its
/// success and standard output parsed as JSON.
fn policy_test(file: &str, input: &serde_json::Value, extra: &[&str]) -> (bool, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.json");
    std::fs::write(&path, input.to_string()).unwrap();
    let output = crate::vigil()
        .args(["policy", "test", file, "--input"])
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), json)
}

#[test]
fn a_step_cut_from_a_simulation_replays_against_the_policy_alone() {
    let scenario = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios/critical-pod.yaml");
    let output = crate::vigil()
        .args(["simulate", "--output", "json", "--snapshots"])
        .arg(&scenario)
        .output()
        .unwrap();
    assert!(output.status.success());
    let simulation: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let step = simulation["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| !s["decisions"].as_array().unwrap().is_empty())
        .expect("a step with a decision");
    let snapshot = &step["snapshot"];
    let config = ["--config", r#"{"hard": "500Mi"}"#];

    // evaluate: the threshold the simulation acted on.
    let (ok, answer) = policy_test(
        "builtin:memory-pressure",
        &serde_json::json!({ "snapshot": snapshot }),
        &config,
    );
    assert!(ok, "{answer}");
    let threshold = &answer["answer"]["thresholds"][0];
    assert_eq!(
        (&threshold["met"], &threshold["scope"]),
        (&"Hard".into(), &"memory".into())
    );

    // top-victims: the strategy's ranking, sorter refusals and all.
    let (ok, answer) = policy_test(
        "builtin:memory-pressure",
        &serde_json::json!({ "snapshot": snapshot, "top_victims": {"scope": "memory", "n": 5} }),
        &config,
    );
    assert!(ok, "{answer}");
    let ranked: Vec<&str> = answer["answer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["uid"].as_str().unwrap())
        .collect();
    assert_eq!(ranked.len(), 5);
    assert_eq!(
        ranked[0], "default-analytics",
        "the pod the simulation evicted"
    );

    // sort: the same pods as candidates; the sorter's refusals as in the step.
    let candidates: Vec<serde_json::Value> = snapshot["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pod| serde_json::json!({"pod": pod, "strategy": 0, "urgency": "Hard"}))
        .collect();
    let input = serde_json::json!({"strategies": ["memory-pressure"], "candidates": candidates});
    let (ok, answer) = policy_test("builtin:default-sorter", &input, &[]);
    assert!(ok, "{answer}");
    let refused: Vec<String> = answer["answer"]["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let pod = &candidates[r["index"].as_u64().unwrap() as usize]["pod"];
            format!(
                "{}/{}: {}",
                pod["namespace"].as_str().unwrap(),
                pod["name"].as_str().unwrap(),
                r["reason"].as_str().unwrap()
            )
        })
        .collect();
    let mut expected: Vec<String> = step["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}: {}",
                r["pod"].as_str().unwrap(),
                r["reason"].as_str().unwrap()
            )
        })
        .collect();
    let mut refused_sorted = refused.clone();
    refused_sorted.sort();
    expected.sort();
    assert_eq!(refused_sorted, expected);

    // A config the sorter refuses is a decline, with its reason.
    let (ok, answer) = policy_test(
        "builtin:default-sorter",
        &input,
        &["--config", r#"{"skipPods": 1}"#],
    );
    assert!(ok, "a decline is an answer: {answer}");
    assert!(
        answer["declined"].as_str().unwrap().contains("skipPods"),
        "{answer}"
    );
}

#[test]
fn a_merger_merges_layers_given_as_values_or_text() {
    let input = serde_json::json!({"layers": [
        {"source": "defaults", "json": {"evictionBurst": 1, "dryRun": false}},
        {"source": "team", "json": "{\"dryRun\": true}"},
    ]});
    let (ok, answer) = policy_test("builtin:default-merger", &input, &[]);
    assert!(ok, "{answer}");
    assert_eq!(
        answer["answer"],
        serde_json::json!({"evictionBurst": 1, "dryRun": true})
    );
}

#[test]
fn input_for_another_world_or_a_missing_field_is_an_error_naming_it() {
    let run = |file: &str, input: serde_json::Value| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input.yaml");
        std::fs::write(&path, input.to_string()).unwrap();
        vigil(&["policy", "test", file, "--input", path.to_str().unwrap()])
    };
    let (ok, text) = run("builtin:memory-pressure", serde_json::json!({"layers": []}));
    assert!(!ok);
    assert!(
        text.contains("`layers` is input for another world than eviction-strategy"),
        "{text}"
    );
    let (ok, text) = run(
        "builtin:default-sorter",
        serde_json::json!({"strategies": []}),
    );
    assert!(!ok);
    assert!(
        text.contains("a candidate-sorter needs `candidates` in its input"),
        "{text}"
    );
    let (ok, text) = run(
        "builtin:default-sorter",
        serde_json::json!({"candidats": []}),
    );
    assert!(!ok);
    assert!(text.contains("unknown field `candidats`"), "{text}");
    let (ok, text) = run("builtin:no-such", serde_json::json!({}));
    assert!(!ok);
    assert!(
        text.contains("no built-in policy is called no-such"),
        "{text}"
    );
}

#[test]
fn a_config_that_is_not_json_an_unreadable_input_and_a_file_that_does_not_load_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.json");
    std::fs::write(&input, r#"{"layers": []}"#).unwrap();
    let input = input.to_str().unwrap();
    let run = |file: &str, input: &str, config: &str| {
        vigil(&["policy", "test", file, "--input", input, "--config", config])
    };
    let (ok, text) = run("builtin:default-merger", input, "{hard: 1}");
    assert!(
        !ok && text.contains("--config is not JSON: {hard: 1}"),
        "{text}"
    );
    let missing = dir.path().join("missing.json");
    let (ok, text) = run("builtin:default-merger", missing.to_str().unwrap(), "{}");
    assert!(
        !ok && text.contains(&format!("cannot read {}", missing.display())),
        "{text}"
    );
    let broken = dir.path().join("broken.wasm");
    std::fs::write(&broken, b"\0asm\x0d\0\x01\0truncated").unwrap();
    let (ok, text) = run(broken.to_str().unwrap(), input, "{}");
    assert!(
        !ok && text.contains(&format!("{} does not load", broken.display())),
        "{text}"
    );
}

#[test]
fn a_case_names_only_what_it_is_about_and_record_writes_its_answer_for_review() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("ranking.input.json");
    // Pods in part: a name and the one fact the case is about.
    let case = r#"{"strategies": ["memory-pressure"], "candidates": [
        {"pod": {"name": "web"}},
        {"pod": {"name": "dns", "namespace": "kube-system", "is_critical": true}, "urgency": "Soft"}
    ]}"#;
    std::fs::write(&input, case).unwrap();
    let record = || {
        crate::vigil()
            .args([
                "policy",
                "test",
                "builtin:default-sorter",
                "--record",
                "--input",
            ])
            .arg(&input)
            .output()
            .unwrap()
    };
    let output = record();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let expected = dir.path().join("ranking.expected.json");
    assert!(
        stdout.contains(&format!("recorded {}", expected.display())),
        "{stdout}"
    );
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&expected).unwrap()).unwrap();
    assert_eq!(
        recorded,
        serde_json::json!({"answer": {"order": [0], "rejected": [
            {"index": 1, "reason": "system-critical pod"}
        ]}})
    );

    // A misspelt field is named, not ignored; nothing is recorded.
    std::fs::remove_file(&expected).unwrap();
    std::fs::write(&input, case.replace("is_critical", "critical")).unwrap();
    let output = record();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("pod.critical: unknown field"),
        "{stderr}"
    );
    assert!(!expected.exists());
}
