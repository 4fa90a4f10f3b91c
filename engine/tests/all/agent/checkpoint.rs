//! The config checkpoint: it runs while fresh when the API server is down at
//! start-up, and a kill while saving never leaves a damaged one.

use super::*;

/// A checkpoint of one layer, fetched `age` ago, as the agent would save it.
fn save_checkpoint(fixture: &NodeFiles, age: jiff::SignedDuration) {
    use vigil::config::checkpoint::{Assigned, Checkpoint, CheckpointFile, LayerSet};
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
            &server,
            &agent,
            &format!(r#"vigil_config_checkpoint_loads_total{{status="{load}"}} 1"#),
        )
        .await;
        until_metric(
            &server,
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
            use vigil::config::checkpoint::CheckpointFile;
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
    let file = vigil::config::checkpoint::CheckpointFile::new(&fixture.path("state"));
    for round in 0..8u64 {
        let mut agent = start(&server, &fixture, &[]);
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
