//! Authenticated metrics (`deploy/components/metrics-auth`) on the real API
//! server: an agent with `--metrics-auth=kubernetes` and the component's
//! rights serves its port over TLS, keeps its health endpoints open to the
//! kubelet's probes, and answers `/metrics` only to a token the API server
//! says may `get` it — the token the component's Secret holds for the
//! PodMonitor, not another ServiceAccount's, not a forged one. One review
//! per token serves its scrapes for two minutes. (`deploy/check.sh` checks
//! the component's render: the rights, the probes' scheme, the PodMonitor.)

use super::agent::{agent_identity, register_node};
use super::{installed, root};
use std::path::Path;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;
use vigil_testbed::wait::Polling;
use vigil_testbed::{AgentProcess, NodeFiles};

/// The agent's config: quick periods, the test machine's disk left alone.
const CONFIG: &str = "evictionPeriodSeconds: 1\npolicies:\n  disk-pressure: {enabled: false}\n";

/// A bound for a broken test, never a wait.
const LIMIT: Duration = Duration::from_secs(90);

/// The rights the component adds to the agent's ClusterRole, given here in
/// a role of their own (the shared cluster's `vigil` role stays as
/// `deploy/` ships it for the other suites).
fn grant_reviews(cluster: &Upstream) {
    cluster.kubectl_ok(&[
        "create",
        "clusterrole",
        "vigil-metrics-auth-test",
        "--verb=create",
        "--resource=tokenreviews.authentication.k8s.io,subjectaccessreviews.authorization.k8s.io",
    ]);
    cluster.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "vigil-metrics-auth-test",
        "--clusterrole=vigil-metrics-auth-test",
        "--serviceaccount=vigil-system:vigil",
    ]);
}

/// The token the token controller wrote into the component's Secret.
fn reader_token(cluster: &Upstream) -> String {
    let polling = Polling::new(Duration::from_millis(200), LIMIT);
    polling.until(
        "the token controller fills vigil-metrics-reader's Secret",
        || {
            let encoded = cluster.kubectl_ok(&[
                "get",
                "secret",
                "vigil-metrics-reader",
                "-n",
                "vigil-system",
                "-o",
                "jsonpath={.data.token}",
            ]);
            use base64::Engine as _;
            let token = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()?;
            (!token.is_empty()).then(|| String::from_utf8(token).expect("a token"))
        },
        String::new,
    )
}

/// The status and body of `GET https://addr/path`, with `token` if given.
async fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String, String) {
    let client = reqwest::Client::builder()
        // The agent's certificate is its own, made at start (as the
        // PodMonitor's insecureSkipVerify says).
        .danger_accept_invalid_certs(true)
        .build()
        .expect("a client");
    let mut request = client.get(format!("https://{addr}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("an answer over TLS");
    let status = response.status().as_u16();
    let challenge = (response.headers().get("www-authenticate"))
        .map(|v| v.to_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    (status, challenge, response.text().await.unwrap_or_default())
}

#[test]
fn with_metrics_auth_only_a_token_allowed_to_get_metrics_reads_them_over_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = installed();
    let rbac = root().join("deploy/components/metrics-auth/rbac.yaml");
    cluster.kubectl_ok(&["apply", "-f", rbac.to_str().expect("UTF-8")]);
    grant_reviews(cluster);
    cluster.kubectl_ok(&["create", "namespace", "metrics-strangers"]);
    cluster.kubectl_ok(&[
        "create",
        "serviceaccount",
        "stranger",
        "-n",
        "metrics-strangers",
    ]);
    let stranger = cluster.kubectl_ok(&["create", "token", "stranger", "-n", "metrics-strangers"]);
    let reader = reader_token(cluster);

    register_node(cluster, "m1");
    let files = NodeFiles::default();
    let kubeconfig = agent_identity(cluster, "m1");
    let binary = Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start_with(
        binary,
        "m1",
        &files,
        &kubeconfig,
        CONFIG,
        &["--metrics-auth", "kubernetes"],
    );
    let polling = Polling::new(Duration::from_millis(200), LIMIT);
    let addr = polling.until(
        "the agent listens",
        || agent.addr().map(str::to_owned),
        || agent.logs(),
    );
    let before = agent.usage().resident_kib;

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        // The kubelet's probes carry no token: open, over TLS.
        let (status, _, body) = get(&addr, "/healthz", None).await;
        assert_eq!((status, body.as_str()), (200, "ok\n"));

        let (status, challenge, body) = get(&addr, "/metrics", None).await;
        assert_eq!((status, challenge.as_str()), (401, "Bearer"), "{body}");
        assert!(body.contains("a bearer token is required"), "{body}");

        let (status, _, body) = get(&addr, "/metrics", Some("forged.token.value")).await;
        assert_eq!(status, 401, "{body}");

        let (status, _, body) = get(&addr, "/metrics", Some(stranger.trim())).await;
        assert_eq!(status, 403, "{body}");
        assert!(
            body.contains("system:serviceaccount:metrics-strangers:stranger may not get /metrics"),
            "{body}"
        );

        let (status, _, body) = get(&addr, "/metrics", Some(&reader)).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("vigil_build_info"), "{body}");
        // Again: the review is kept, the API server not asked twice.
        let (status, _, body) = get(&addr, "/metrics", Some(&reader)).await;
        assert_eq!(status, 200, "{body}");
        for (result, reviews) in [("allowed", 1), ("forbidden", 1), ("unauthenticated", 1)] {
            let line =
                format!("vigil_metrics_token_reviews_total{{result=\"{result}\"}} {reviews}\n");
            assert!(body.contains(&line), "{line} in:\n{body}");
        }
    });
    // The port speaks only TLS: a plain HTTP request gets no metrics.
    assert!(!agent.get("/metrics").contains("vigil_build_info"));
    // What TLS and the reviews cost the agent's memory (its container has 128 MiB).
    let after = agent.usage().resident_kib;
    assert!(after < 128 << 10, "{after} KiB");
    eprintln!(
        "resident: {before} KiB listening, {after} KiB after 7 requests over TLS and 3 reviews"
    );
}
