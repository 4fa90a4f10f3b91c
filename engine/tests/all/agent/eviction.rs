//! The eviction loop against the API server: pressure evicts through the
//! Eviction API, budgets pass the turn, watches and outages are survived,
//! throttling and refusals of the pod itself are honoured, dry run carries out
//! nothing, and slow Events hold nothing back.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pressure_evicts_the_top_pod_through_the_api_and_shows_it_on_the_node() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    let big = pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;

    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    let eviction = &server.evictions()[0];
    assert!(
        eviction.uri.ends_with("/namespaces/shop/pods/big/eviction"),
        "{}",
        agent.logs()
    );
    assert_eq!(eviction.status, 201);
    let body = eviction.body.as_ref().expect("a JSON body");
    assert_eq!(body["kind"], "Eviction");
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], big.as_str());
    assert!(body["deleteOptions"].get("dryRun").is_none());
    assert_eq!(
        body["deleteOptions"]["gracePeriodSeconds"], 1,
        "a hard eviction's least grace: never 0, a force delete"
    );
    // The pressure is relieved once the victim is terminating.
    fixture.memory_available(4096);

    server
        .until(LIMIT, "the condition and the taint", |s| {
            node_condition(s, "VigilMemoryPressure").as_deref() == Some("True")
                && taint_keys(s).contains(&"vigil.dev/MemoryPressure".to_owned())
        })
        .await;
    assert!(taint_keys(&server).contains(&"team/dedicated".to_owned()));
    server
        .until(LIMIT, "the kubelet removed the pod", |s| {
            s.get("pods", NS, "big").is_none()
        })
        .await;
    server
        .until(
            LIMIT,
            "the condition clears after the transition period",
            |s| {
                node_condition(s, "VigilMemoryPressure").as_deref() == Some("False")
                    && !taint_keys(s).iter().any(|k| k.starts_with("vigil.dev/"))
            },
        )
        .await;
    assert_eq!(
        taint_keys(&server),
        ["team/dedicated"],
        "other taints untouched"
    );
    assert_eq!(node_condition(&server, "Ready").as_deref(), Some("True"));
    server
        .until(LIMIT, "events on the pod and the node", |s| {
            !events(s, "Evicting").is_empty()
                && !events(s, "EvictionCompleted").is_empty()
                && !events(s, "VigilMemoryPressureStarted").is_empty()
                && !events(s, "VigilMemoryPressureEnded").is_empty()
        })
        .await;
    let evicting = &events(&server, "Evicting")[0];
    assert_eq!(evicting["regarding"]["name"], "big");
    assert_eq!(evicting["reportingController"], "vigil");
    assert_eq!(
        evicted_names(&server),
        [("big".to_owned(), 201)],
        "one eviction only"
    );
    // Why this pod: the strategy's and the sorter's versions (the
    // built-ins'), the threshold that held, the pod's rank.
    let builtin = |name: &str| {
        let bytes = vigil::policy::builtin(name).unwrap();
        vigil::base::digest::Digest::of(bytes).to_string()
    };
    let why = format!(
        "chosen by memory-pressure@{} (memory.available at 52428800, threshold 524288000, met hard), rank 1 of 3 by default-sorter@{}",
        builtin("memory-pressure"),
        builtin("default-sorter")
    );
    let note = evicting["note"].as_str().unwrap();
    assert!(note.ends_with(&why), "{note}");
    // The node's status is written on its own interval, after the Events.
    server
        .until(LIMIT, "the eviction on the node's status", |s| {
            node_report(s)["lastEvictions"][0].is_object()
        })
        .await;
    let last = &node_report(&server)["lastEvictions"][0];
    assert_eq!(
        (last["pod"].as_str(), last["why"].as_str()),
        (Some("shop/big"), Some(why.as_str()))
    );

    let metrics = agent.metrics();
    assert!(
        metrics.contains(r#"vigil_evictions_total{strategy="memory-pressure",urgency="hard",result="accepted"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("vigil_api_requests_total{verb=\"POST\",code=\"201\"}"));
    let build = format!(
        "vigil_build_info{{version=\"{}\",commit=\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(metrics.contains(&build), "{metrics}");
    let sorter = metrics
        .lines()
        .find(|l| l.starts_with("vigil_policy_calls_total{name=\"default-sorter\",version=\""));
    assert!(sorter.is_some(), "{metrics}");
    assert!(agent.get("/healthz").starts_with("HTTP/1.1 200"));
    assert!(agent.get("/readyz").starts_with("HTTP/1.1 200"));
    assert_the_cluster_role_allows_every_request(&server);
    // `vigil explain`, an admin's request (not the agent's), answers
    // from the same record.
    let kubeconfig = fixture.path("kubeconfig").display().to_string();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let args = ["explain", "shop/big", "--kubeconfig", &kubeconfig];
    let explained = vigil_testbed::cli::run(binary, &args);
    assert!(
        explained.starts_with("shop/big on node-1 at ")
            && explained.contains(": accepted (hard eviction by memory-pressure: "),
        "{explained}"
    );
    assert!(explained.ends_with(&format!("\n  {why}\n")), "{explained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_victim_is_reclaim_in_progress_until_its_cgroup_is_gone() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    let big = pod(&server, &fixture, "big", 900);
    // The kubelet got there first: it is evicting big for memory, as its
    // eviction manager writes it (before the agent lists the pods: were it
    // written after, a cycle between the write and the agent's watch event
    // would rightly evict big), and the node is still short of memory.
    server.kubelet_evicting(NS, "big", "memory");
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    fixture.memory_available(50);
    let waiting = r#"vigil_thresholds_waiting{strategy="memory-pressure",reclaim="kubelet"} 1"#;
    until_agent(&agent, waiting, |a| a.metrics().contains(waiting)).await;
    assert!(
        server.evictions().is_empty(),
        "no second victim: {}",
        agent.logs()
    );

    // Its containers stopped and its cgroup is gone, and the pressure is
    // still there: now it is vigil's turn, and big is no candidate.
    server.kubelet_evicted(NS, "big");
    fixture.remove_best_effort_pod(&big);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    assert_eq!(evicted_names(&server), [("small".to_owned(), 201)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_policy_name_is_a_warning_and_a_refused_candidate_is_counted() {
    let (server, fixture) = test_node().await;
    // The biggest pod is system-critical: the sorter refuses it.
    let mut critical = objects::best_effort_pod(NODE, NS, "critical", 3);
    critical["spec"]["priority"] = json!(2_000_001_000);
    fixture.best_effort_pod(critical["metadata"]["uid"].as_str().unwrap(), 900);
    server.put("pods", NS, critical);
    pod(&server, &fixture, "other", 300);
    let config = format!("{CONFIG}  memory-presure: {{enabled: false}}\n");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(binary, NODE, &fixture, &server, &config, &[]);
    until_metric(&agent, "vigil_config_unknown_policies 1").await;
    assert!(
        agent.logs().contains(
            r#"config field policies.memory-presure names policy "memory-presure", which is not loaded; did you mean "memory-pressure"?"#
        ),
        "{}",
        agent.logs()
    );
    watching(&server).await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    assert!(server.evictions()[0].uri.ends_with("/pods/other/eviction"));
    until_metric(
        &agent,
        r#"vigil_sorter_refusals_total{name="default-sorter"} "#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_protected_top_victim_passes_the_turn_to_the_next_pod_at_once() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 0));
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;

    let evicted = pressure_until_one_is_evicted(&server, &fixture).await;
    assert_eq!(
        evicted[..2],
        [("big".to_owned(), 429), ("medium".to_owned(), 201)],
        "{}",
        agent.logs()
    );
    server
        .until(LIMIT, "the refusal is an event", |s| {
            !events(s, "EvictionRefused").is_empty()
        })
        .await;
    assert!(
        server.get("pods", NS, "big").is_some(),
        "the protected pod stays"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.uri.starts_with("/apis/policy/v1/poddisruptionbudgets")),
        "no cluster-wide PDB watch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_dropped_watch_and_410_gone_the_agent_sees_new_pods_and_evicts_once() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    let lists_before = pod_lists(&server);

    // A pod arrives while the stream holds changes back; the history is
    // compacted and the stream dropped: resuming gets 410 Gone and must list again.
    server.pause_watches(true);
    pod(&server, &fixture, "huge", 2048);
    server.compact();
    server.drop_watches();
    server.pause_watches(false);
    server
        .until(LIMIT, "the pods are listed again", |s| {
            pod_lists(s) > lists_before
        })
        .await;
    assert!(
        server.gone_sent() > 0,
        "the resumed watch was told 410 Gone"
    );
    fixture.memory_available(50);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    fixture.memory_available(4096);
    server
        .until(LIMIT, "the pod is gone", |s| {
            s.get("pods", NS, "huge").is_none()
        })
        .await;
    assert_eq!(
        evicted_names(&server),
        [("huge".to_owned(), 201)],
        "{}",
        agent.logs()
    );
    let metrics = agent.metrics();
    assert!(
        metrics.contains("vigil_watch_restarts_total{name=\"pods\"}"),
        "{metrics}"
    );
}

/// Plain lists of this node's pods (not watches).
fn pod_lists(server: &ApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.uri.starts_with("/api/v1/pods?") && !r.uri.contains("watch=true"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_under_pressure_is_survived_and_evictions_resume() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;

    server.outage(true);
    fixture.memory_available(50);
    server
        .until(LIMIT, "eviction attempts fail during the outage", |s| {
            s.evictions().iter().filter(|r| r.status == 503).count() >= 2
        })
        .await;
    assert!(agent.alive(), "{}", agent.logs());
    server.outage(false);
    server
        .until(LIMIT, "the eviction goes through", |s| {
            s.evictions().iter().any(|r| r.status == 201)
        })
        .await;
    fixture.memory_available(4096);
    let accepted: Vec<_> = evicted_names(&server)
        .into_iter()
        .filter(|(_, status)| *status == 201)
        .collect();
    assert_eq!(accepted, [("big".to_owned(), 201)], "{}", agent.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_sends_a_dry_run_request_and_an_event_and_deletes_nothing() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &["--dry-run"]);
    watching(&server).await;

    fixture.memory_available(50);
    server
        .until(LIMIT, "a dry-run event", |s| {
            !events(s, "EvictionDryRun").is_empty()
        })
        .await;
    let eviction = &server.evictions()[0];
    let options = &eviction.body.as_ref().expect("a body")["deleteOptions"];
    assert_eq!(options["dryRun"], json!(["All"]), "{}", agent.logs());
    assert!(
        eviction.uri.ends_with("/eviction?dryRun=All"),
        "{}",
        eviction.uri
    );
    let pod = server.get("pods", NS, "big").expect("the pod stays");
    assert!(pod["metadata"]["deletionTimestamp"].is_null());
    // The condition is shown; no taint and no DELETE are sent.
    server
        .until(LIMIT, "the condition", |s| {
            node_condition(s, "VigilMemoryPressure").as_deref() == Some("True")
        })
        .await;
    assert_eq!(
        taint_keys(&server),
        ["team/dedicated"],
        "no taint of vigil's"
    );
    assert!(server.requests().iter().all(|r| r.method != "DELETE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_api_server_delays_the_eviction_and_moves_on_to_nobody() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    let config = format!("{CONFIG}pdbOverrideAfterSeconds: 30\n");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(binary, NODE, &fixture, &server, &config, &[]);
    watching(&server).await;
    server.throttle_next("/pods/big/eviction", 3, 1);
    let evicted = pressure_until_one_is_evicted(&server, &fixture).await;
    let big = |code| ("big".to_owned(), code);
    assert_eq!(
        evicted,
        [big(429), big(429), big(429), big(201)],
        "the same victim, after each wait: {}",
        agent.logs()
    );
    // Each retry came after its Retry-After: three waits of at least a second.
    assert!(server.requests().iter().all(|r| r.method != "DELETE"));
    assert!(events(&server, "EvictionRefused").is_empty());
    until_metric(
        &agent,
        r#"vigil_evictions_total{strategy="memory-pressure",urgency="hard",result="throttled"} 3"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_the_api_server_will_not_evict_pass_the_turn_to_the_next() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "small", 100);
    pod(&server, &fixture, "big", 900);
    pod(&server, &fixture, "medium", 300);
    pod(&server, &fixture, "tiny", 50);
    // Two budgets select big: the eviction subresource refuses it with a 500.
    server.put("poddisruptionbudgets", NS, objects::pdb(NS, "big", 1));
    let mut second = objects::pdb(NS, "big", 1);
    second["metadata"]["name"] = json!("big-too");
    server.put("poddisruptionbudgets", NS, second);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    server.fail_next("/pods/medium/eviction", 403);
    server.fail_next("/pods/small/eviction", 422);
    let evicted = pressure_until_one_is_evicted(&server, &fixture).await;
    assert_eq!(
        evicted[..4],
        [
            ("big".to_owned(), 500),
            ("medium".to_owned(), 403),
            ("small".to_owned(), 422),
            ("tiny".to_owned(), 201)
        ],
        "{}",
        agent.logs()
    );
    assert!(server.get("pods", NS, "big").is_some());
    until_metric(&agent,
        r#"vigil_evictions_total{strategy="memory-pressure",urgency="hard",result="not-evictable"} 3"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_events_api_delays_neither_an_eviction_nor_a_taint() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    server.hang("events.k8s.io");
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;
    fixture.memory_available(50);
    server
        .until(LIMIT, "the eviction and the taint", |s| {
            s.evictions().iter().any(|r| r.status == 201)
                && taint_keys(s).contains(&"vigil.dev/MemoryPressure".to_owned())
        })
        .await;
    assert!(
        server
            .arrived()
            .iter()
            .any(|uri| uri.contains("events.k8s.io")),
        "an Event was tried: {}",
        agent.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_an_eviction_call_lets_it_finish_and_exits_cleanly() {
    let (server, fixture) = test_node().await;
    pod(&server, &fixture, "big", 900);
    let agent = start(&server, &fixture, &[]);
    watching(&server).await;

    server.latency(Duration::from_millis(1500));
    fixture.memory_available(50);
    server
        .until(LIMIT, "the eviction call is under way", |s| {
            s.arrived().iter().any(|uri| uri.ends_with("/eviction"))
        })
        .await;
    assert!(server.evictions().is_empty(), "not answered yet");
    terminated_cleanly(agent).await;
    assert_eq!(
        evicted_names(&server),
        [("big".to_owned(), 201)],
        "the call in flight was answered before the exit"
    );
}

/// katalyst's reclaimed resources strategy reading the node's offer from
/// katalyst's CustomNodeResource (`offered: cnr`): the agent watches this
/// node's object alone, and once its reclaimed pods request more than 5 ×
/// the offer, evicts the one requesting most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaimed_pods_over_the_custom_node_resources_offer_lose_the_largest() {
    const MILLICPU: &str = "resource.katalyst.kubewharf.io/reclaimed_millicpu";
    let (server, fixture) = test_node().await;
    let cnr = |node: &str, offered: &str| {
        json!({
            "apiVersion": "node.katalyst.kubewharf.io/v1alpha1", "kind": "CustomNodeResource",
            "metadata": {"name": node},
            "status": {"resources": {"allocatable": {MILLICPU: offered}}},
        })
    };
    server.put("customnoderesources", "", cnr(NODE, "1000"));
    // Another node's offer, far larger, is not this node's.
    server.put("customnoderesources", "", cnr("node-2", "100k"));
    for (name, millicpu) in [("batch-a", "4000"), ("batch-b", "2000")] {
        let mut object = objects::best_effort_pod(NODE, NS, name, 3);
        object["metadata"]["annotations"] =
            json!({"katalyst.kubewharf.io/qos_level": "reclaimed_cores"});
        object["spec"]["containers"][0]["resources"] = json!({"requests": {MILLICPU: millicpu}});
        fixture.best_effort_pod(&format!("uid-{name}"), 100);
        server.put("pods", NS, object);
    }
    let config = format!(
        "{CONFIG}  reclaimed-resources:\n    enabled: true\n    dryRun: false\n    config: {{offered: cnr}}\n"
    );
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(binary, NODE, &fixture, &server, &config, &[]);
    server
        .until(LIMIT, "an eviction", |s| !s.evictions().is_empty())
        .await;
    assert_eq!(
        evicted_names(&server)[0],
        ("batch-a".to_owned(), 201),
        "{}",
        agent.logs()
    );
    let watched = server.requests().iter().any(|r| {
        r.uri
            .starts_with("/apis/node.katalyst.kubewharf.io/v1alpha1/customnoderesources?")
            && r.uri.contains("fieldSelector=metadata.name%3Dnode-1")
    });
    assert!(watched, "the node's own object, by name");
    assert_the_cluster_role_allows_every_request(&server);
}
