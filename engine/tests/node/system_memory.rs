//! katalyst's system memory strategy (`system-memory-pressure`, built in and
//! off) observing the real node: turned on in dry run, with its free-memory
//! minimum set over the node's `MemFree` of the moment so that the node
//! reads as pressed, it decides from the node's real `/proc/meminfo`,
//! `watermark_scale_factor` and `/proc/zoneinfo` and the pods' real
//! `memory.numa_stat`, and its decision is only recorded: its line is the
//! one the test computes from the same files, its target the NUMA node
//! whose Normal zone has the fewest free pages, its victim the pod at
//! katalyst's `reclaimed_cores` level (free memory under the line evicts
//! those first), and no pod is evicted.

use super::pressure::{Workloads, configure, configure_with, hog_process};
use super::until;
use std::path::Path;
use std::time::Duration;
use vigil::signals::{MemInfo, SignalFiles};
use vigil_testbed::upstream::Upstream;

/// A bound for a broken test.
const LIMIT: Duration = Duration::from_secs(120);
/// How far over `MemFree` of the moment the minimum is set.
const OVER_MIB: u64 = 1024;
/// What the `reclaimed_cores` pod holds, in MiB (over the 0.1 % of the
/// NUMA node's memory a candidate must hold).
const RECLAIMED_MIB: &str = "64";

/// The NUMA node with the fewest free pages in its Normal zone, from the
/// node's `/proc/zoneinfo` as the agent's own reader reads it.
fn target_numa() -> u32 {
    let reading = SignalFiles::default().read_node(&["numa.*".to_owned()]);
    (reading.signals.iter())
        .filter_map(|s| {
            let node = s
                .name
                .strip_prefix("numa.")?
                .strip_suffix(".zone.normal.free")?;
            Some((s.value, node.parse::<u32>().ok()?))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("a NUMA node with a Normal zone")
        .1
}

/// `memory.free at X, threshold Y, met hard` in a victim's `why`: X and Y.
fn observed_and_line(why: &str) -> (f64, f64) {
    let rest = why
        .split_once("memory.free at ")
        .unwrap_or_else(|| panic!("no memory.free in {why:?}"))
        .1;
    let (observed, rest) = rest.split_once(", threshold ").expect("a threshold");
    let line = rest.split_once(',').expect("its level").0;
    (
        observed.parse().expect("a number"),
        line.parse().expect("a number"),
    )
}

/// The strategy's dry-run choice matches the node's files; nothing goes.
/// A pod at `reclaimed_cores` is its victim: free memory under the line
/// evicts those first (katalyst's order).
pub fn observes_the_node(cluster: &Upstream, workloads: &Workloads) {
    cluster.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: reclaimed\n  namespace: pressure\n  annotations: {{katalyst.kubewharf.io/qos_level: reclaimed_cores}}\n\
         spec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: hog\n    image: {}/hog:1\n    args: [\"{RECLAIMED_MIB}\"]\n",
        cluster.registry()
    ));
    until("the reclaimed pod holds its memory", LIMIT, || {
        hog_process(RECLAIMED_MIB)
    });
    let meminfo = MemInfo::read(Path::new("/proc/meminfo")).expect("/proc/meminfo");
    let minimum = meminfo.free + OVER_MIB * (1 << 20);
    configure_with(
        cluster,
        None,
        None,
        &format!(
            "      system-memory-pressure: {{enabled: true, dryRun: true, config: {{freeMemoryThresholdMinimum: {minimum}}}}}\n"
        ),
    );
    let record = until("system-memory-pressure's dry-run choice", LIMIT, || {
        let status = cluster.get(None, "vigilnodestatus/vigil-node")?;
        let evictions = status["status"]["lastEvictions"].as_array()?;
        evictions
            .iter()
            .find(|e| e["strategy"] == "system-memory-pressure")
            .cloned()
    });
    // Dry run: the API server judges the call and evicts nobody (a pod
    // behind its budget is refused, as it would be for real).
    assert_eq!(record["result"], "dry-run", "{record:#}");
    assert_eq!(record["pod"], "pressure/reclaimed", "{record:#}");
    let why = record["why"].as_str().expect("why");
    let (observed, line) = observed_and_line(why);
    let scale: f64 = std::fs::read_to_string("/proc/sys/vm/watermark_scale_factor")
        .expect("watermark_scale_factor")
        .trim()
        .parse()
        .expect("a number");
    let expected = (minimum as f64).max(meminfo.total as f64 * scale / 10000.0);
    assert_eq!(
        line, expected,
        "max(minimum, MemTotal × {scale} / 10000): {why}"
    );
    assert!(
        observed < line && observed > 0.0,
        "MemFree read as {observed}: {why}"
    );
    let numa = target_numa();
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("NUMA node {numa} the most")),
        "the target is NUMA node {numa} by /proc/zoneinfo: {record:#}"
    );
    workloads.survived(cluster);
    assert!(
        hog_process(RECLAIMED_MIB).is_some(),
        "the victim still runs"
    );
    cluster.kubectl_ok(&["-n", "pressure", "delete", "pod/reclaimed", "--wait"]);
    configure(cluster, None, None);
    eprintln!("system-memory-pressure observed: {why}; {reason}");
}
