//! The API server's own account of a phase, from its `/metrics` (the
//! Prometheus text format): requests by verb and resource, etcd requests by
//! operation, watches open, its CPU time and resident memory. Counters are
//! per process: a phase across a restart is read from an empty sample.

use std::collections::BTreeMap;
use std::time::Duration;

/// One reading of the server's metrics.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// `apiserver_request_total` by `VERB resource[/subresource]`.
    requests: BTreeMap<String, f64>,
    /// `etcd_requests_total` by operation.
    etcd: BTreeMap<String, f64>,
    /// `apiserver_longrunning_requests` of verb `WATCH`.
    watches: f64,
    /// `process_cpu_seconds_total`.
    cpu_seconds: f64,
    /// `process_resident_memory_bytes`.
    resident_bytes: f64,
}

/// What the server did over a phase, by its own metrics (every client's
/// requests, the controller manager's and the test's included).
#[derive(Debug, Clone, Default)]
pub struct ServerUse {
    /// Requests by `VERB resource[/subresource]`.
    pub requests: BTreeMap<String, f64>,
    /// etcd requests by operation (`get`, `list`, `create`, `update`, …).
    pub etcd: BTreeMap<String, f64>,
    /// Watches open at the end.
    pub watches: f64,
    /// CPU time used.
    pub cpu: Duration,
    /// Resident memory at the end, in MiB.
    pub resident_mib: f64,
}

impl Sample {
    /// Reads the series it needs out of a `/metrics` answer.
    pub fn parse(text: &str) -> Self {
        let mut sample = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            let label = |key: &str| label(labels, key);
            match name {
                "apiserver_request_total" => {
                    let mut kind = format!("{} {}", label("verb"), label("resource"));
                    if !label("subresource").is_empty() {
                        kind = format!("{kind}/{}", label("subresource"));
                    }
                    *sample.requests.entry(kind).or_default() += value;
                }
                "etcd_requests_total" => {
                    *sample.etcd.entry(label("operation")).or_default() += value;
                }
                "apiserver_longrunning_requests" if label("verb") == "WATCH" => {
                    sample.watches += value;
                }
                "process_cpu_seconds_total" => sample.cpu_seconds = value,
                "process_resident_memory_bytes" => sample.resident_bytes = value,
                _ => {}
            }
        }
        sample
    }

    /// What happened from `self` to `after`, a reading of the same process.
    pub fn until(&self, after: &Self) -> ServerUse {
        let delta = |before: f64, after: f64| (after - before).max(0.0);
        let deltas = |before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>| {
            after
                .iter()
                .map(|(k, v)| (k.clone(), delta(before.get(k).copied().unwrap_or(0.0), *v)))
                .filter(|(_, v)| *v > 0.0)
                .collect()
        };
        ServerUse {
            requests: deltas(&self.requests, &after.requests),
            etcd: deltas(&self.etcd, &after.etcd),
            watches: after.watches,
            cpu: Duration::from_secs_f64(delta(self.cpu_seconds, after.cpu_seconds)),
            resident_mib: after.resident_bytes / (1024.0 * 1024.0),
        }
    }
}

impl ServerUse {
    /// The requests that are not watches.
    pub fn non_watch(&self) -> f64 {
        self.requests
            .iter()
            .filter(|(k, _)| !k.starts_with("WATCH "))
            .map(|(_, v)| v)
            .sum()
    }

    /// The etcd requests.
    pub fn etcd_total(&self) -> f64 {
        self.etcd.values().sum()
    }
}

/// The value of label `key` in `labels` (`a="x",b="y"}`), or "".
fn label(labels: &str, key: &str) -> String {
    let pattern = format!("{key}=\"");
    let at = labels
        .match_indices(&pattern)
        .map(|(at, _)| at)
        .find(|&at| at == 0 || labels.as_bytes()[at - 1] == b',');
    at.and_then(|at| {
        let rest = &labels[at + pattern.len()..];
        rest.find('"').map(|end| rest[..end].to_owned())
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="eviction",verb="POST",version="v1"} 1
etcd_requests_total{group="",operation="get",type="pods"} 10
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 4
process_cpu_seconds_total 10.5
process_resident_memory_bytes 1.048576e+08
"#;

    #[test]
    fn a_phase_is_the_difference_between_two_readings() {
        let before = Sample::parse(BEFORE);
        let after = Sample::parse(&BEFORE.replace("} 3\n", "} 7\n").replace("10.5", "13"));
        let used = before.until(&after);
        assert_eq!(used.requests.get("LIST pods"), Some(&4.0));
        assert_eq!(used.requests.get("POST pods/eviction"), None, "unchanged");
        assert_eq!(used.etcd.get("get"), None, "unchanged");
        assert_eq!(used.cpu, Duration::from_secs_f64(2.5));
        let fresh = Sample::default().until(&after);
        assert_eq!(fresh.requests.get("POST pods/eviction"), Some(&1.0));
        assert_eq!(fresh.etcd_total(), 10.0);
        assert_eq!(used.watches, 4.0);
        assert!((used.resident_mib - 100.0).abs() < 1e-9);
        assert_eq!(label("xverb=\"a\",verb=\"b\"}", "verb"), "b");
    }
}
