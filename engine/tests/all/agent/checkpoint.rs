//! The config checkpoint: it runs while fresh when the API server is down at
//! start-up, and a kill while saving never leaves a damaged one.

use super::*;

/// A checkpoint of one layer, fetched `age` ago, as the agent would save it.
fn save_checkpoint(fixture: &NodeFiles, age: jiff::SignedDuration) {
    use vigil::config::{Assigned, Checkpoint, CheckpointFile, LayerSet};
    let set = LayerSet::new(vec![vigil::model::Layer {
        source: "VigilConfig/fleet@7".into(),
        json: r#"{"evictionBurst": 2}"#.into(),
    }]);
    let checkpoint = Checkpoint {
        assigned: Some(Assigned {
            set,
            fetched_at: jiff::Timestamp::now() - age,
        }),
        ..Checkpoint::default()
    };
    CheckpointFile::new(&fixture.path("state"))
        .save(&checkpoint)
        .expect("saved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_api_server_down_at_start_up_the_checkpoint_runs_while_it_is_fresh() {
    let hour = jiff::SignedDuration::from_hours(1);
    for (age, corrupt, load, reason) in [
        (hour, false, "fresh", "CheckpointInUse"),
        (hour * 30, false, "expired", "Defaults"),
        (hour, true, "corrupt", "Defaults"),
    ] {
        let (server, fixture) = test_node().await;
        save_checkpoint(&fixture, age);
        let checkpoint = fixture.path("state/config/checkpoint.json");
        if corrupt {
            let mut bytes = std::fs::read(&checkpoint).unwrap();
            let last = bytes.len() - 2;
            bytes[last] ^= 1;
            std::fs::write(&checkpoint, bytes).unwrap();
        }
        let before = std::fs::read(&checkpoint).unwrap();
        server.outage(true);
        let agent = start(&server, &fixture, &[]);
        until_metric(
            &agent,
            &format!(r#"vigil_config_checkpoint_loads_total{{status="{load}"}} 1"#),
        )
        .await;
        until_metric(
            &agent,
            &format!(r#"vigil_config_state{{reason="{reason}"}} 1"#),
        )
        .await;
        if corrupt {
            let aside = fixture.path("state/config/checkpoint.json.damaged");
            assert_eq!(
                std::fs::read(aside).unwrap(),
                before,
                "a damaged checkpoint is set aside for inspection"
            );
            assert!(agent.logs().contains("damaged"), "{}", agent.logs());
        } else {
            // Reusing the checkpoint does not make it younger.
            use vigil::config::CheckpointFile;
            let saved = CheckpointFile::new(&fixture.path("state"))
                .load()
                .unwrap()
                .unwrap();
            let fetched = saved.assigned.unwrap().fetched_at;
            assert!(
                jiff::Timestamp::now().duration_since(fetched) >= age,
                "{load}"
            );
        }
        // Once the API server answers, the cluster's (empty) assignment runs.
        server.outage(false);
        until_config(&server, "Defaults", "no VigilConfig applies").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_agent_while_it_saves_checkpoints_never_leaves_a_damaged_one() {
    let (server, fixture) = test_node().await;
    let file = vigil::config::CheckpointFile::new(&fixture.path("state"));
    for round in 0..8u64 {
        let agent = start(&server, &fixture, &[]);
        let config = json!({"evictionBurst": round + 1});
        server.put(
            "vigilconfigs",
            "",
            vigil_config("fleet", Value::Null, config),
        );
        // Kill it as it takes the change in: before, during or after its save.
        server
            .until(LIMIT, "the agent watches VigilConfigs", |s| {
                s.requests()
                    .iter()
                    .any(|r| r.uri.contains("vigilconfigs") && r.uri.contains("watch=true"))
            })
            .await;
        Command::new("kill")
            .args(["-KILL", &agent.pid().to_string()])
            .status()
            .expect("kill runs");
        while agent.alive() {
            std::thread::yield_now();
        }
        if let Err(error) = file.load() {
            panic!("round {round}: {error}");
        }
    }
    assert!(file.load().unwrap().is_some(), "checkpoints were written");
}

/// What a 0.1.0 agent left in its state directory (made by that release's
/// binary on this test node): a config checkpoint whose last-known-good is
/// `VigilConfig/fleet@2` (with `sorter: legacy-sorter`) and whose
/// `fleet@1` was rejected, and the last-known-good of the policy
/// `legacy-sorter`, a sorter built for `vigil:policy@0.1.0`. Files as root
/// made them, root's.
const STATE_0_1_0: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/state-0.1.0");

/// The agent binary run as UID/GID 65532, as the DaemonSet runs it.
fn as_agent_user(fixture: &NodeFiles) -> std::path::PathBuf {
    let binary = env!("CARGO_BIN_EXE_vigil");
    fixture.write(
        "vigil-as-65532",
        &format!("#!/bin/sh\nexec setpriv --reuid=65532 --regid=65532 --clear-groups -- {binary} \"$@\"\n"),
    );
    let wrapper = fixture.path("vigil-as-65532");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&wrapper, mode).unwrap();
    wrapper
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_releases_state_directory_is_read_by_the_agent_as_its_own_user() {
    use std::os::unix::fs::MetadataExt;
    use vigil::config::CheckpointFile;
    let (server, fixture) = test_node().await;
    let state = fixture.path("state");
    let copied = Command::new("cp")
        .args(["-R", STATE_0_1_0, &state.display().to_string()])
        .status()
        .unwrap();
    assert!(copied.success());
    let saved = CheckpointFile::new(&state)
        .load()
        .unwrap()
        .expect("a checkpoint");
    let good = saved.last_known_good.as_ref().expect("a last-known-good");
    assert_eq!(good.layers[0].source, "VigilConfig/fleet@2");
    assert_eq!(saved.rejected.len(), 1);
    // The operator's policies directory still ships the sorter.
    std::fs::create_dir_all(fixture.path("policies")).unwrap();
    let lkg: Vec<_> = std::fs::read_dir(state.join("lkg")).unwrap().collect();
    assert_eq!(lkg.len(), 1);
    let legacy = lkg[0].as_ref().unwrap().path();
    std::fs::copy(&legacy, fixture.path("policies/legacy-sorter.wasm")).unwrap();
    let legacy = vigil::base::digest::Digest::of(&std::fs::read(legacy).unwrap());

    // The init container's step, then the agent as its own user: the
    // node's files are world-readable, as the host's are.
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(fixture.root(), mode).unwrap();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let state_arg = state.display().to_string();
    let out = vigil_testbed::cli::run(
        binary,
        &[
            "own-state",
            "--state-dir",
            &state_arg,
            "--user",
            "65532:65532",
        ],
    );
    assert!(out.contains("owned by 65532:65532"), "{out}");
    let big = pod(&server, &fixture, "big", 900);
    server.outage(true);
    let wrapper = as_agent_user(&fixture);
    let agent = AgentProcess::start(
        &wrapper,
        NODE,
        &fixture,
        &server,
        CONFIG,
        &["--config-grace", "1000000h"],
    );
    // Without the API server: the checkpoint's config and the policy's
    // last-known-good, both as 0.1.0 left them.
    let state_line = format!(
        r#"vigil_policy_state{{policy="legacy-sorter",version="{legacy}",state="active"}} 1"#
    );
    for line in [
        r#"vigil_config_checkpoint_loads_total{status="fresh"} 1"#,
        r#"vigil_config_state{reason="CheckpointInUse"} 1"#,
        &state_line,
    ] {
        until_metric(&agent, line).await;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid())).unwrap();
    assert!(
        status.contains("\nUid:\t65532\t65532\t65532\t65532\n"),
        "{status}"
    );

    // With it: the cluster's (empty) assignment, checkpointed by the
    // agent's user, and an eviction read from the pods' cgroups.
    server.outage(false);
    until_config(&server, "Defaults", "no VigilConfig applies").await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    let body = server.evictions()[0].body.clone().unwrap();
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], big.as_str());
    let checkpoint = CheckpointFile::new(&state);
    let left = std::fs::read(format!("{STATE_0_1_0}/config/checkpoint.json")).unwrap();
    server
        .until(LIMIT, "a checkpoint of this agent's", |_| {
            std::fs::read(checkpoint.path()).is_ok_and(|now| now != left)
        })
        .await;
    checkpoint.load().unwrap().expect("it reads back");
    let owner = std::fs::metadata(checkpoint.path()).unwrap();
    assert_eq!(
        (owner.uid(), owner.gid()),
        (65532, 65532),
        "{}",
        agent.logs()
    );
    // The 0.1.0 engine's compiled copy is not this engine's: removed.
    let cache: Vec<_> = std::fs::read_dir(state.join("cache"))
        .unwrap()
        .flatten()
        .collect();
    assert!(
        !cache.iter().any(|e| e
            .file_name()
            .to_string_lossy()
            .contains("-9251c85941f77eeb.")),
        "{cache:?}"
    );
}
