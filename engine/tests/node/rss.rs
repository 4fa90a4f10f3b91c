//! katalyst's RSS overuse strategy (`rss-overuse`, built in and off) turned
//! on by a `VigilConfig` on the real node: a Burstable pod requesting
//! 100Mi whose resident memory grows past 1.05 × its request, on a node
//! with memory to spare (no threshold anywhere near), is evicted by it
//! through the Eviction API, reading the pod cgroup's real `memory.stat`;
//! a pod within its ratio stays.

use super::pressure::{Workloads, configure, configure_with, event_reasons, hog_process};
use super::until_explained;
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

/// A bound for a broken test.
const LIMIT: Duration = Duration::from_secs(120);

/// The leaking pod's growth: `hog` arguments (MiB in all, MiB a second).
const LEAK: [&str; 2] = ["300", "20"];
/// What the pod within its ratio holds, in MiB (under 105 of its 100Mi × 1.05).
const WITHIN_MIB: &str = "60";

/// A Burstable pod `name` requesting 100Mi, running `hog ARGS`.
fn pod(registry: &str, name: &str, args: &[&str]) -> String {
    let args = args
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: pressure}}\n\
         spec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: hog\n    image: {registry}/hog:1\n    args: [{args}]\n    resources:\n      requests: {{cpu: 10m, memory: 100Mi}}\n"
    )
}

/// The leaker goes, by `rss-overuse`; the pod within its ratio and the
/// suite's workloads stay.
pub fn evicts_the_leaker(cluster: &Upstream, workloads: &Workloads) {
    configure_with(
        cluster,
        None,
        None,
        "      rss-overuse: {enabled: true, dryRun: false}\n",
    );
    let registry = cluster.registry().to_owned();
    cluster.apply(&pod(&registry, "rss-within", &[WITHIN_MIB]));
    let explain = || {
        let status = cluster.get(None, "vigilnodestatus/vigil-node");
        format!(
            "the leaker's events: {:?}\nthe node's status: {:#}",
            event_reasons(cluster, "rss-leaker"),
            status.unwrap_or_default()["status"]
        )
    };
    until_explained(
        "the pod within its ratio holds its memory",
        LIMIT,
        || hog_process(WITHIN_MIB),
        explain,
    );
    cluster.apply(&pod(&registry, "rss-leaker", &LEAK));
    let eviction = until_explained(
        "rss-overuse evicts the leaker",
        LIMIT,
        || {
            let status = cluster.get(None, "vigilnodestatus/vigil-node")?;
            let evictions = status["status"]["lastEvictions"].as_array()?;
            evictions
                .iter()
                .find(|e| e["pod"] == "pressure/rss-leaker" && e["result"] == "accepted")
                .cloned()
        },
        explain,
    );
    let why = eviction["why"].as_str().unwrap_or_default();
    assert!(why.contains("rss-overuse@"), "{eviction:#}");
    let reasons = event_reasons(cluster, "rss-leaker");
    assert!(reasons.iter().any(|r| r == "Evicting"), "{reasons:?}");
    let within = cluster
        .get(Some("pressure"), "pod/rss-within")
        .expect("the pod within its ratio");
    assert_eq!(within["status"]["phase"], "Running", "{within:#}");
    assert!(hog_process(WITHIN_MIB).is_some(), "its process runs");
    workloads.survived(cluster);
    cluster.kubectl_ok(&[
        "-n",
        "pressure",
        "delete",
        "pod/rss-within",
        "pod/rss-leaker",
        "--wait",
        "--ignore-not-found",
    ]);
    configure(cluster, None, None);
    eprintln!("rss-overuse evicted the leaker: {why}");
}
