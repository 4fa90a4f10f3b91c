//! One way to build a pod record for samples and tests: a pod named `NAME`
//! in namespace `default` with UID `uid-NAME`, best-effort, its usage read
//! just now (zero, one process; the facts a policy must ask for absent),
//! every other field empty, zero or false, and methods for what a sample
//! needs to say.
//!
//! ```
//! use vigil::model::{QosClass, fixture};
//! let pod = fixture::pod("web").qos(QosClass::Burstable).usage_mib(300).request_mib(100).build();
//! assert_eq!((pod.uid.as_str(), pod.usage.memory_working_set_bytes), ("uid-web", Some(300 << 20)));
//! ```

use super::bindings::{Candidate, Pod, QosClass, Resources, Urgency, Usage};

/// A pod being built; see the module docs.
#[derive(Debug, Clone)]
pub struct PodFixture(Pod);

/// A pod named `name`; see the module docs.
pub fn pod(name: &str) -> PodFixture {
    let none = Resources {
        memory_bytes: 0,
        cpu_millis: 0,
    };
    PodFixture(Pod {
        uid: format!("uid-{name}"),
        namespace: "default".into(),
        name: name.into(),
        qos: QosClass::BestEffort,
        priority: 0,
        labels: vec![],
        annotations: vec![],
        requests: none,
        limits: none,
        usage: Usage {
            memory_working_set_bytes: Some(0),
            memory_rss_bytes: Some(0),
            cpu_millis: Some(0),
            ephemeral_storage_bytes: Some(0),
            pids: Some(1),
            age_ms: Some(0),
            ..Usage::unread()
        },
        writable_layers: None,
        containers_without_memory_request: 0,
        extended_requests: vec![],
        start_time_ms: 0,
        owner_kind: None,
        is_static: false,
        is_mirror: false,
        is_critical: false,
        pdb_disruptions_allowed: None,
    })
}

impl PodFixture {
    /// Its QoS class.
    pub fn qos(mut self, qos: QosClass) -> Self {
        self.0.qos = qos;
        self
    }

    /// Its priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.0.priority = priority;
        self
    }

    /// Memory in use (working set and RSS), in MiB.
    pub fn usage_mib(mut self, mib: u64) -> Self {
        self.0.usage.memory_working_set_bytes = Some(mib << 20);
        self.0.usage.memory_rss_bytes = Some(mib << 20);
        self
    }

    /// Memory requested, in MiB.
    pub fn request_mib(mut self, mib: u64) -> Self {
        self.0.requests.memory_bytes = mib << 20;
        self
    }

    /// A UID other than `uid-NAME`.
    pub fn uid(mut self, uid: &str) -> Self {
        self.0.uid = uid.into();
        self
    }

    /// The pod.
    pub fn build(self) -> Pod {
        self.0
    }

    /// The pod as a hard candidate of the sorter's first strategy.
    pub fn candidate(self) -> Candidate {
        Candidate {
            pod: self.0,
            strategy: 0,
            urgency: Urgency::Hard,
        }
    }
}
