//! `vigil simulate`, run as the real binary on a bundled scenario.

use std::path::PathBuf;
use std::process::Command;

fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/scenarios/soft-threshold-grace.yaml")
}

#[test]
fn text_output_shows_the_timeline_and_summary_and_the_plot_is_svg() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
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
    assert!(
        svg.starts_with("<svg") && svg.contains("memory.available"),
        "{}",
        &svg[..200.min(svg.len())]
    );
}

#[test]
fn json_output_is_the_whole_simulation() {
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["simulate", "--output", "json"])
        .arg(scenario())
        .output()
        .unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["evictions"][0]["pod"], "default/report-job");
    assert_eq!(json["evictions"][0]["at"], 50.0);
    assert_eq!(json["steps"].as_array().unwrap().len(), 25);
}

#[test]
fn an_invalid_scenario_fails_with_the_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.yaml");
    std::fs::write(
        &path,
        "name: x\nduration: soon\nnode: {memory: 1Gi}\npods: []\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .arg("simulate")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("duration") && stderr.contains("line 2"),
        "{stderr}"
    );
}
