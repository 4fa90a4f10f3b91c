//! `vigil simulate`, run as the real binary on a bundled scenario.

use std::path::PathBuf;

fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios/soft-threshold-grace.yaml")
}

#[test]
fn text_output_shows_the_timeline_and_summary_and_the_plot_is_svg() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let output = crate::vigil()
        .arg("simulate")
        .arg(scenario())
        .arg("--plot")
        .arg(&chart)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("-> evict default/report-job (soft, by memory-pressure)"),
        "{text}"
    );
    assert!(text.contains("summary: 1 eviction(s) in 2m00s"), "{text}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..200.min(svg.len())]);
    // The chart tells the story: the eviction labelled with its pod and
    // strategy, the pods' bands, the soft threshold met, the condition span.
    for text in [
        "default/report-job by memory-pressure (soft)",
        "default/api",
        "default/worker",
        "soft threshold",
        "MemoryPressure",
        "evicted pod gone",
    ] {
        assert!(svg.contains(text), "{text} missing from the chart");
    }
    assert!(
        !svg.contains("what else the policies decided"),
        "no refusal, fault or config change: no lanes"
    );
}

#[test]
fn the_chart_marks_the_sorters_refusals_on_a_lane() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let output = crate::vigil()
        .arg("simulate")
        .arg(scenario().with_file_name("critical-pod.yaml"))
        .arg("--plot")
        .arg(&chart)
        .output()
        .unwrap();
    assert!(output.status.success());
    let svg = std::fs::read_to_string(&chart).unwrap();
    for text in [
        "sorter refused",
        "default-sorter refused kube-system/node-dns-cache: system-critical pod",
        "default/analytics by memory-pressure (hard)",
        "hard threshold",
    ] {
        assert!(svg.contains(text), "{text} missing from the chart");
    }
}

#[test]
fn json_output_is_the_whole_simulation() {
    let output = crate::vigil()
        .args(["simulate", "--output", "json"])
        .arg(scenario())
        .output()
        .unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["evictions"][0]["pod"], "default/report-job");
    assert_eq!(json["evictions"][0]["at"], 50.0);
    assert_eq!(json["steps"].as_array().unwrap().len(), 25);
    // What each pod used, and the capacity it was taken from.
    assert_eq!(json["capacities"]["memory.available"], 8589934592.0);
    let usage = &json["steps"][0]["usage"];
    let memory = |pod: &str| usage[pod]["memory_bytes"].as_f64().unwrap();
    let pods = memory("default/api") + memory("default/worker");
    let available = json["steps"][0]["signals"]["memory.available"]
        .as_f64()
        .unwrap();
    assert!(pods > 0.0 && available + pods < 8589934592.0);
}

/// Runs `vigil simulate` on a scenario file holding `text`, which must
/// fail; its standard error.
fn failed_simulation(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, text).unwrap();
    let output = crate::vigil().arg("simulate").arg(&path).output().unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_invalid_scenario_fails_with_the_line_and_field() {
    let stderr = failed_simulation("name: x\nduration: soon\nnode: {memory: 1Gi}\npods: []\n");
    assert!(
        stderr.contains("duration") && stderr.contains("line 2"),
        "{stderr}"
    );
}

#[test]
fn a_scenario_config_from_a_config_map_is_refused_naming_it() {
    let stderr = failed_simulation(
        "name: x\nduration: 10s\nnode: {memory: 1Gi}\npods: []\nconfig:\n  policies:\n    memory-pressure:\n      configFrom: [{namespace: ops, name: thresholds, key: memory.yaml}]\n",
    );
    assert!(
        stderr.contains("configFrom ConfigMap/ops/thresholds[memory.yaml]")
            && stderr.contains("resolved by `vigil agent`"),
        "{stderr}"
    );
}

#[test]
fn a_policies_directory_replaces_built_ins_and_the_run_names_the_file_that_served() {
    let (policies, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let c_sorter = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies/c-sorter/c-sorter.wasm");
    let sorter = policies.path().join("default-sorter.wasm");
    std::fs::copy(&c_sorter, &sorter).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run examples/policies/build.sh",
            c_sorter.display()
        )
    });
    let simulate = || {
        crate::vigil()
            .arg("simulate")
            .arg(scenario())
            .arg("--policies-dir")
            .arg(policies.path())
            .arg("--cache-dir")
            .arg(cache.path())
            .output()
            .unwrap()
    };
    let output = simulate();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let served = format!(" (candidate-sorter) from {}\n", sorter.display());
    assert!(
        text.contains("policy default-sorter@") && text.contains(&served),
        "{text}"
    );
    assert!(text.contains("summary: 1 eviction(s)"), "{text}");
    let digest = vigil::base::digest::Digest::of(&std::fs::read(&sorter).unwrap()).hex();
    let kept = std::fs::read_dir(cache.path()).unwrap().any(|entry| {
        entry
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(&digest)
    });
    assert!(kept, "the compiled sorter is kept in the cache");

    // A file that does not load is a warning and the simulation goes on, as
    // the agent would: the built-in it was to replace serves.
    std::fs::write(&sorter, b"not a component").unwrap();
    let output = simulate();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("warning: policy default-sorter in the policies directory did not load; the built-in serves instead: "),
        "{text}"
    );
    assert!(!text.contains(&served), "the built-in served: {text}");
    assert!(text.contains("summary: 1 eviction(s)"), "{text}");
    // Said once, in the output: not logged to stderr as well.
    let printed = text.into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert_eq!(printed.matches("did not load").count(), 1, "{printed}");
}

#[test]
fn config_for_a_policy_that_is_not_loaded_is_a_warning_naming_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.yaml");
    std::fs::write(
        &path,
        "name: x\nduration: 10s\nnode: {memory: 1Gi}\npods: []\nconfig:\n  policies:\n    memory-presure: {dryRun: true}\n",
    )
    .unwrap();
    let run = |format: &str| {
        let output = crate::vigil()
            .args(["simulate", "--output", format])
            .arg(&path)
            .output()
            .unwrap();
        assert!(output.status.success(), "a warning, not an error");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let warning = r#"config field policies.memory-presure names policy "memory-presure", which is not loaded; did you mean "memory-pressure"?"#;
    let text = run("text");
    assert!(text.contains(&format!("warning: {warning}\n")), "{text}");
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    assert_eq!(json["warnings"], serde_json::json!([warning]));
}

#[test]
fn the_sorters_refusals_are_in_the_timeline_and_the_json() {
    let scenario = scenario().with_file_name("critical-pod.yaml");
    let run = |format: &str| {
        let output = crate::vigil()
            .args(["simulate", "--output", format])
            .arg(&scenario)
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let text = run("text");
    assert!(
        text.contains("         .. sorter default-sorter refused kube-system/node-dns-cache (proposed by memory-pressure): system-critical pod\n"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let step = json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| !s["decisions"].as_array().unwrap().is_empty())
        .expect("a step with a decision");
    let refused: Vec<(&str, &str)> = step["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["pod"].as_str().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        refused,
        [
            ("kube-system/etcd-node-1", "static pod"),
            ("kube-system/kube-proxy-mirror", "mirror pod"),
            ("kube-system/node-dns-cache", "system-critical pod"),
        ]
    );
    assert_eq!(step["decisions"][0]["pod"], "default/analytics");
    assert_eq!(step["refusals"][0]["sorter"], "default-sorter");
    assert_eq!(step["refusals"][0]["strategy"], "memory-pressure");
}

#[test]
fn config_changes_take_effect_at_their_time_and_a_bad_one_leaves_the_config_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.yaml");
    std::fs::write(
        &path,
        "name: x\nduration: 1m\nnode: {memory: 4Gi}\n\
         config: {dryRun: true, policies: {memory-pressure: {config: {hard: 1Gi}}}}\n\
         configChanges:\n\
         \x20 - {at: 20s, config: {bogus: 1}}\n\
         \x20 - {at: 40s, config: {policies: {memory-pressure: {config: {hard: 1Gi}}}}}\n\
         pods:\n  - name: hog\n    memory: [{at: 0s, value: 3500Mi}]\n",
    )
    .unwrap();
    let output = crate::vigil()
        .args(["simulate", "--output", "json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let steps = json["steps"].as_array().unwrap();
    let at = |t: f64| steps.iter().find(|s| s["t"] == t).unwrap();
    // Dry run from the start: the hog is chosen, not evicted.
    assert_eq!(at(0.0)["decisions"][0]["dry_run"], true);
    assert!(at(0.0)["started"].as_array().unwrap().is_empty());
    // The bad change is refused; dry run stays on.
    let refused = at(20.0)["config"][0].as_str().unwrap();
    assert!(
        refused.starts_with("configChanges[0] refused, the config before it stays: "),
        "{refused}"
    );
    assert!(json["warnings"][0].as_str().unwrap() == refused);
    assert!(
        steps
            .iter()
            .filter(|s| s["t"].as_f64().unwrap() < 40.0)
            .all(|s| s["started"].as_array().unwrap().is_empty())
    );
    // The good change turns dry run off: the hog is evicted in that cycle.
    assert_eq!(at(40.0)["config"][0], "configChanges[1] applied");
    assert_eq!(at(40.0)["started"][0], "default/hog");
    assert_eq!(json["evictions"][0]["at"], 40.0);
}

/// `vigil simulate … | head`: a reader that goes away ends the command as it
/// ends `cat`, by SIGPIPE, with no panic on stderr. The JSON with snapshots
/// is far larger than a pipe's buffer, so the write that finds the pipe
/// closed always comes.
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = crate::vigil()
        .args(["simulate", "--output", "json", "--snapshots"])
        .arg(scenario())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"{");
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{stderr}");
}
