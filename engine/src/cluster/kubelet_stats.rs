//! Each pod's writable layers, from the kubelet's statistics summary
//! (`GET /stats/summary` on its own port): only the container runtime
//! knows how much a container wrote outside its volumes and logs, and the
//! kubelet asks it (as katalyst's agent does, and the kubelet's own
//! ephemeral-storage eviction). The summary is fetched only while a policy
//! declares the `writable-layers` fact, at most every [`PERIOD`] (containerd
//! itself measures the layers every 10 s), by a task beside the eviction
//! loop; the loop takes the latest fetch, each pod's reading with its age.
//!
//! The kubelet authorizes the request as `get nodes/stats` for the agent's
//! service account, and vigil verifies the kubelet's serving certificate
//! (the cluster's CA, or `--kubelet-ca`): a kubelet whose certificate it
//! cannot verify gives no writable layers, and says why in the log.

use crate::base::clock::Clock;
use crate::model::WritableLayers;
use kube::{Client, Config};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use thiserror::Error;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The shortest time between two fetches of the summary.
pub const PERIOD: Duration = Duration::from_secs(10);

/// The longest a fetch may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the summary was not read.
#[derive(Debug, Error)]
pub enum KubeletStatsError {
    /// `--kubelet-ca` holds no PEM certificate.
    #[error("--kubelet-ca holds no PEM certificate")]
    NoCertificate,
    /// The client could not be made (a bad URL or certificate).
    #[error("cannot build a client for the kubelet")]
    Client(#[source] kube::Error),
    /// The request failed or the kubelet refused it.
    #[error("GET /stats/summary")]
    Request(#[source] kube::Error),
    /// The answer is not a summary.
    #[error("the kubelet's summary is malformed")]
    Malformed(#[source] serde_json::Error),
}

/// A pod's writable layers as the kubelet last reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodLayers {
    /// Bytes its containers wrote to their writable layers.
    pub bytes: u64,
    /// Inodes they used there.
    pub inodes: u64,
    /// When the oldest of its containers' layers was measured.
    pub at: SystemTime,
}

/// What the eviction loop and the fetching task share: whether some policy
/// asks for writable layers, and the latest summary's layers by pod uid.
#[derive(Debug)]
pub struct LayerCache {
    wanted: watch::Sender<bool>,
    latest: Mutex<HashMap<String, PodLayers>>,
}

impl Default for LayerCache {
    fn default() -> Self {
        Self {
            wanted: watch::Sender::new(false),
            latest: Mutex::default(),
        }
    }
}

impl LayerCache {
    /// Starts (or stops) fetching: some policy asks for writable layers.
    pub fn want(&self, wanted: bool) {
        self.wanted
            .send_if_modified(|now| std::mem::replace(now, wanted) != wanted);
    }

    /// Pod `uid`'s writable layers as of `now`, if the kubelet reported them.
    pub fn of(&self, uid: &str, now: SystemTime) -> Option<WritableLayers> {
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        let layers = latest.get(uid)?;
        let age = now.duration_since(layers.at).unwrap_or_default();
        Some(WritableLayers {
            bytes: layers.bytes,
            inodes: layers.inodes,
            age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
        })
    }

    fn store(&self, layers: HashMap<String, PodLayers>) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = layers;
    }
}

/// Where the kubelet is and how to trust it.
#[derive(Debug, Clone)]
pub struct KubeletEndpoint {
    /// Its URL, e.g. `https://10.0.0.5:10250`.
    pub url: http::Uri,
    /// PEM certificates its serving certificate is verified against (none:
    /// those the API server's is).
    pub ca: Option<Vec<u8>>,
}

/// A client for the kubelet at `endpoint`, authenticated as the API
/// client of `base` is.
///
/// # Errors
/// The CA holds no certificate, or the client cannot be made.
pub fn client(base: &Config, endpoint: &KubeletEndpoint) -> Result<Client, KubeletStatsError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut config = base.clone();
    config.cluster_url = endpoint.url.clone();
    config.read_timeout = Some(TIMEOUT);
    config.default_retry = false;
    if let Some(pem) = &endpoint.ca {
        let certificates: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem)
            .filter_map(Result::ok)
            .map(|der| der.to_vec())
            .collect();
        if certificates.is_empty() {
            return Err(KubeletStatsError::NoCertificate);
        }
        config.root_cert = Some(certificates);
    }
    Client::try_from(config).map_err(KubeletStatsError::Client)
}

/// Fetches the summary into `cache` while it is wanted, every [`PERIOD`],
/// until `stop`. A failed fetch keeps the previous layers (they age) and is
/// logged, once per kind of failure in a row.
pub async fn follow(
    client: Client,
    cache: Arc<LayerCache>,
    clock: Arc<dyn Clock>,
    stop: CancellationToken,
) {
    let mut wanted = cache.wanted.subscribe();
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            asked = wanted.wait_for(|on| *on) => if asked.is_err() { return },
        }
        match fetch(&client, clock.now()).await {
            Ok(layers) => {
                if last_error.take().is_some() {
                    tracing::info!("the kubelet's summary is read again");
                }
                cache.store(layers);
            }
            Err(error) => {
                let text = crate::base::report::Chain(&error).to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(error = %text, "no writable layers from the kubelet");
                }
                last_error = Some(text);
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(PERIOD) => {}
        }
    }
}

/// One fetch: every pod's writable layers, read at `now` (a container
/// without a time gets it).
async fn fetch(
    client: &Client,
    now: SystemTime,
) -> Result<HashMap<String, PodLayers>, KubeletStatsError> {
    let request = http::Request::get("/stats/summary")
        .body(Vec::new())
        .expect("a static request");
    let text = client
        .request_text(request)
        .await
        .map_err(KubeletStatsError::Request)?;
    parse(&text, now)
}

/// The summary's pods, as far as their writable layers go.
#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    pods: Vec<PodStats>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStats {
    pod_ref: PodRef,
    #[serde(default)]
    containers: Vec<ContainerStats>,
}

#[derive(Deserialize)]
struct PodRef {
    uid: String,
}

#[derive(Deserialize)]
struct ContainerStats {
    rootfs: Option<FsStats>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FsStats {
    time: Option<jiff::Timestamp>,
    used_bytes: Option<u64>,
    inodes_used: Option<u64>,
}

/// Each pod's writable layers in the summary `text`: its containers'
/// `rootfs` (the writable layer alone; logs and volumes are reported
/// apart) summed. A pod none of whose containers reports a measured layer
/// is left out (absent, not 0).
///
/// # Errors
/// The text is not a summary.
pub fn parse(text: &str, now: SystemTime) -> Result<HashMap<String, PodLayers>, KubeletStatsError> {
    let summary: Summary = serde_json::from_str(text).map_err(KubeletStatsError::Malformed)?;
    let mut pods = HashMap::new();
    for pod in summary.pods {
        let mut layers: Option<PodLayers> = None;
        for rootfs in pod.containers.iter().filter_map(|c| c.rootfs.as_ref()) {
            // A layer the runtime has not measured yet comes as 0 bytes at
            // the epoch (containerd, just after a container starts).
            let unmeasured = rootfs.time.is_some_and(|t| t.as_second() <= 0);
            let Some(bytes) = rootfs.used_bytes.filter(|_| !unmeasured) else {
                continue;
            };
            let at = rootfs.time.map_or(now, |t| {
                SystemTime::UNIX_EPOCH
                    + Duration::from_millis(u64::try_from(t.as_millisecond()).unwrap_or(0))
            });
            let sum = layers.get_or_insert(PodLayers {
                bytes: 0,
                inodes: 0,
                at,
            });
            sum.bytes = sum.bytes.saturating_add(bytes);
            sum.inodes = sum.inodes.saturating_add(rootfs.inodes_used.unwrap_or(0));
            sum.at = sum.at.min(at);
        }
        if let Some(layers) = layers {
            pods.insert(pod.pod_ref.uid, layers);
        }
    }
    Ok(pods)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A summary in the kubelet's format (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`):
    /// a pod of two containers and one whose layer has no size yet, a pod
    /// without container stats, and a pod whose runtime has not measured
    /// its layer (0 bytes at the epoch, as the real node's kubelet showed
    /// for a container just started).
    pub(crate) const SUMMARY: &str = r#"{
      "node": {"nodeName": "node-1", "startTime": "2026-11-28T09:00:00Z",
               "fs": {"time": "2026-11-28T10:00:00Z", "usedBytes": 9000000000}},
      "pods": [
        {"podRef": {"name": "web", "namespace": "shop", "uid": "uid-web"},
         "startTime": "2026-11-28T09:30:00Z",
         "containers": [
           {"name": "app", "startTime": "2026-11-28T09:30:01Z",
            "rootfs": {"time": "2026-11-28T10:00:00Z", "availableBytes": 50000000000,
                       "capacityBytes": 100000000000, "usedBytes": 4096000, "inodesFree": 6000000,
                       "inodes": 6500000, "inodesUsed": 120},
            "logs": {"time": "2026-11-28T10:00:05Z", "usedBytes": 777000, "inodesUsed": 3}},
           {"name": "sidecar", "startTime": "2026-11-28T09:30:01Z",
            "rootfs": {"time": "2026-11-28T09:59:55Z", "usedBytes": 8192, "inodesUsed": 2}},
           {"name": "starting", "startTime": "2026-11-28T09:59:59Z",
            "rootfs": {"time": "2026-11-28T09:59:59Z", "availableBytes": 50000000000}}
         ],
         "ephemeral-storage": {"time": "2026-11-28T10:00:05Z", "usedBytes": 99999999},
         "volume": [{"time": "2026-11-28T10:00:00Z", "name": "cache", "usedBytes": 5555555}]},
        {"podRef": {"name": "new", "namespace": "shop", "uid": "uid-new"},
         "startTime": "2026-11-28T10:00:04Z", "containers": []},
        {"podRef": {"name": "just-started", "namespace": "shop", "uid": "uid-just-started"},
         "startTime": "2026-11-28T10:00:09Z",
         "containers": [{"name": "app", "startTime": "2026-11-28T10:00:09Z",
                         "rootfs": {"time": "1970-01-01T00:00:00Z", "usedBytes": 0, "inodesUsed": 0}}]}
      ]
    }"#;

    fn at(text: &str) -> SystemTime {
        let millis = text.parse::<jiff::Timestamp>().unwrap().as_millisecond();
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis as u64)
    }

    #[test]
    fn a_pods_writable_layers_are_its_containers_rootfs_without_logs_or_volumes() {
        let now = at("2026-11-28T10:00:10Z");
        let pods = parse(SUMMARY, now).unwrap();
        assert_eq!(
            pods.get("uid-web"),
            Some(&PodLayers {
                bytes: 4_096_000 + 8192,
                inodes: 122,
                at: at("2026-11-28T09:59:55Z"),
            }),
            "the oldest measure dates the sum"
        );
        assert!(!pods.contains_key("uid-new"), "absent, not 0");
        assert!(!pods.contains_key("uid-just-started"), "unmeasured: absent");
        let cache = LayerCache::default();
        cache.store(pods);
        let layers = cache.of("uid-web", now).unwrap();
        assert_eq!((layers.bytes, layers.age_ms), (4_104_192, 15_000));
        assert!(cache.of("uid-new", now).is_none());
    }

    #[test]
    fn a_malformed_summary_is_an_error() {
        let error = parse(r#"{"pods": [{"containers": []}]}"#, SystemTime::UNIX_EPOCH);
        let text = crate::base::report::Chain(&error.unwrap_err()).to_string();
        assert!(
            text.contains("malformed") && text.contains("podRef"),
            "{text}"
        );
    }

    #[test]
    fn a_kubelet_ca_without_a_certificate_is_refused_at_start() {
        let url: http::Uri = "https://10.0.0.5:10250".parse().unwrap();
        let base = Config::new(url.clone());
        let endpoint = KubeletEndpoint {
            url,
            ca: Some(b"not a certificate".to_vec()),
        };
        let refused = client(&base, &endpoint).err();
        assert!(
            matches!(refused, Some(KubeletStatsError::NoCertificate)),
            "{refused:?}"
        );
    }

    #[test]
    fn wanting_flips_only_on_a_change() {
        let cache = LayerCache::default();
        let mut wanted = cache.wanted.subscribe();
        cache.want(false);
        assert!(!wanted.has_changed().unwrap());
        cache.want(true);
        assert!(wanted.has_changed().unwrap() && *wanted.borrow_and_update());
    }
}
