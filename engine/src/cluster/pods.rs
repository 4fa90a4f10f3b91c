//! A Kubernetes Pod as the policies see it: the contract's `pod` record, with
//! its QoS class computed as the kubelet does, its priority and owner, whether
//! it is static, mirror or critical, and its requests and limits summed over
//! its containers. Usage and the PodDisruptionBudget come from elsewhere
//! ([`super::source`]); this module only reads the object.

use crate::model::{Amount, KeyValue, OwnerKind, Pod, QosClass, Resources, Usage};
use crate::signals::catalogue::Resource;
use k8s_openapi::api::core::v1::{Container, Pod as KubePod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Priority at and above which a pod is system-critical (the kubelet's
/// `SystemCriticalPriority`).
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// The priority classes the kubelet treats as critical.
const CRITICAL_CLASSES: [&str; 2] = ["system-node-critical", "system-cluster-critical"];
/// Annotation telling where a pod's definition came from (`api` for the API server).
const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// Annotation the kubelet puts on the mirror pod of a static pod.
const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
/// Annotations longer than this are not passed to policies (they carry
/// manifests, not eviction hints).
const MAX_ANNOTATION_BYTES: usize = 256;

/// Where a pod is in its life, for the eviction loop.
#[derive(Debug, Clone)]
pub(crate) enum PodPhase {
    /// Running: a candidate (boxed: the contract's pod is large).
    Live(Box<Pod>),
    /// Pending (not yet running): holds nothing to reclaim, never a candidate.
    Pending,
    /// Being deleted (it has a `deletionTimestamp`): reclaim in progress until `until`.
    Terminating {
        /// Its UID.
        uid: String,
        /// `namespace/name`.
        name: String,
        /// When its grace period ends.
        until: SystemTime,
    },
    /// Evicted by the kubelet, or being evicted by it: never a candidate,
    /// and reclaim in progress for its resource until it is released.
    EvictedByKubelet {
        /// Its UID.
        uid: String,
        /// `namespace/name`.
        name: String,
        /// Its QoS class (where its cgroup is).
        qos: QosClass,
        /// What the kubelet reclaims, from its message; `None`: not said.
        resource: Option<Resource>,
    },
    /// Succeeded or failed: holds no resources worth evicting for.
    Finished,
}

/// The condition the kubelet sets on a pod it is terminating, and its reason.
const DISRUPTION_TARGET: &str = "DisruptionTarget";
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// What the kubelet's eviction message starts with, before the resource.
const LOW_ON_RESOURCE: &str = "The node was low on resource: ";

/// Whether the kubelet evicted or is evicting the pod, as its eviction
/// manager writes it: the `DisruptionTarget` condition with reason
/// `TerminationByKubelet` while its containers stop (the phase stays
/// `Running` until they have), then phase `Failed` with reason `Evicted`.
/// The message names the resource ("The node was low on resource: memory.
/// Threshold quantity: …"); a graceful node shutdown sets the same condition
/// with another message, and is not an eviction.
fn kubelet_eviction(status: &k8s_openapi::api::core::v1::PodStatus) -> Option<Option<Resource>> {
    let resource = |message: Option<&str>| {
        let rest = message?.strip_prefix(LOW_ON_RESOURCE)?;
        Resource::from_kubelet(rest.split(['.', ',', ' ']).next()?)
    };
    let evicted =
        status.phase.as_deref() == Some("Failed") && status.reason.as_deref() == Some("Evicted");
    if evicted {
        return Some(resource(status.message.as_deref()));
    }
    let condition = status.conditions.iter().flatten().find(|c| {
        c.type_ == DISRUPTION_TARGET
            && c.status == "True"
            && c.reason.as_deref() == Some(TERMINATION_BY_KUBELET)
    })?;
    let message = condition.message.as_deref();
    message
        .is_some_and(|m| m.starts_with(LOW_ON_RESOURCE))
        .then(|| resource(message))
}

/// Reads `pod` into the contract's record (usage zero, no PDB budget).
pub(crate) fn read(pod: &KubePod) -> PodPhase {
    let meta = &pod.metadata;
    let uid = meta.uid.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    if let Some(deleted) = &meta.deletion_timestamp {
        return PodPhase::Terminating {
            uid,
            name: format!("{namespace}/{name}"),
            until: to_system_time(deleted.0),
        };
    }
    let status = pod.status.as_ref();
    let spec = pod.spec.clone().unwrap_or_default();
    let init = spec.init_containers.as_deref().unwrap_or(&[]);
    if let Some(resource) = status.and_then(kubelet_eviction) {
        return PodPhase::EvictedByKubelet {
            uid,
            name: format!("{namespace}/{name}"),
            qos: qos(&spec.containers, init),
            resource,
        };
    }
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded" | "Failed") => return PodPhase::Finished,
        Some("Pending") => return PodPhase::Pending,
        _ => {}
    }
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let priority = spec.priority.unwrap_or(0);
    let critical_class = spec
        .priority_class_name
        .as_deref()
        .is_some_and(|c| CRITICAL_CLASSES.contains(&c));
    let owner_kind = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| owner_kind(&o.kind));
    let start_time_ms = status
        .and_then(|s| s.start_time.as_ref())
        .or(meta.creation_timestamp.as_ref())
        .map_or(0, |t| t.0.as_millisecond());
    PodPhase::Live(Box::new(Pod {
        uid,
        namespace,
        name,
        qos: qos(&spec.containers, init),
        priority,
        labels: pairs(&labels, |_| true),
        annotations: pairs(&annotations, |v| v.len() <= MAX_ANNOTATION_BYTES),
        requests: total(&spec.containers, |c| {
            c.resources.as_ref()?.requests.as_ref()
        }),
        limits: total(&spec.containers, |c| c.resources.as_ref()?.limits.as_ref()),
        usage: Usage::unread(),
        writable_layers: None,
        containers_without_memory_request: without_memory_request(&spec.containers),
        extended_requests: extended_requests(&spec.containers),
        start_time_ms,
        owner_kind,
        is_static: annotations
            .get(CONFIG_SOURCE)
            .is_some_and(|source| source != "api"),
        is_mirror: annotations.contains_key(CONFIG_MIRROR),
        is_critical: priority >= SYSTEM_CRITICAL_PRIORITY || critical_class,
        pdb_disruptions_allowed: None,
    }))
}

/// The contract's name for an owner of kind `kind`.
fn owner_kind(kind: &str) -> OwnerKind {
    match kind {
        "ReplicaSet" => OwnerKind::ReplicaSet,
        "DaemonSet" => OwnerKind::DaemonSet,
        "StatefulSet" => OwnerKind::StatefulSet,
        "Job" => OwnerKind::Job,
        "Node" => OwnerKind::Node,
        other => OwnerKind::Other(other.to_owned()),
    }
}

fn to_system_time(at: jiff::Timestamp) -> SystemTime {
    let millis = at.as_millisecond();
    match u64::try_from(millis) {
        Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_millis(after),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

fn pairs(map: &BTreeMap<String, String>, keep: impl Fn(&str) -> bool) -> Vec<KeyValue> {
    map.iter()
        .filter(|(_, value)| keep(value))
        .map(|(key, value)| KeyValue {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// Memory in bytes and cpu in millicores; an unparsable quantity counts as none.
fn amounts(resources: &BTreeMap<String, Quantity>) -> (Option<u64>, Option<u64>) {
    let parse = |name: &str| crate::base::quantity::value(resources.get(name)?);
    let memory = parse("memory").map(|bytes| bytes.max(0.0).round() as u64);
    let cpu = parse("cpu").map(|cores| (cores.max(0.0) * 1000.0).round() as u64);
    (memory.filter(|m| *m > 0), cpu.filter(|c| *c > 0))
}

/// How many of `containers` set no memory request (a limit alone counts as
/// the request, as the API server defaults it).
fn without_memory_request(containers: &[Container]) -> u32 {
    let sets = |c: &Container| {
        let resources = c.resources.as_ref();
        let has = |map: Option<&BTreeMap<String, Quantity>>| {
            map.is_some_and(|m| m.contains_key("memory"))
        };
        has(resources.and_then(|r| r.requests.as_ref()))
            || has(resources.and_then(|r| r.limits.as_ref()))
    };
    let count = containers.iter().filter(|c| !sets(c)).count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Whether the resource `name` is one the contract carries by itself
/// (cpu, memory) or never as a request (ephemeral storage, hugepages).
fn is_core_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// The requests of extended resources over `containers`, summed by name
/// (each in the resource's own unit, a fraction rounded up); an unparsable
/// quantity counts as none.
fn extended_requests(containers: &[Container]) -> Vec<Amount> {
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    let requests = containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref());
    for (name, quantity) in requests.flatten() {
        if is_core_resource(name) {
            continue;
        }
        let Some(value) = crate::base::quantity::value(quantity) else {
            continue;
        };
        let sum = sums.entry(name).or_default();
        *sum = sum.saturating_add(value.max(0.0).ceil() as u64);
    }
    sums.into_iter()
        .map(|(name, value)| Amount {
            name: name.to_owned(),
            value,
        })
        .collect()
}

/// The sum over `containers` of what `field` gives.
fn total<'a>(
    containers: &'a [Container],
    field: impl Fn(&'a Container) -> Option<&'a BTreeMap<String, Quantity>>,
) -> Resources {
    let mut sum = Resources {
        memory_bytes: 0,
        cpu_millis: 0,
    };
    for resources in containers.iter().filter_map(field) {
        let (memory, cpu) = amounts(resources);
        sum.memory_bytes = sum.memory_bytes.saturating_add(memory.unwrap_or(0));
        sum.cpu_millis = sum.cpu_millis.saturating_add(cpu.unwrap_or(0));
    }
    sum
}

/// The kubelet's QoS class: best-effort without any cpu or memory request or
/// limit; guaranteed when every container (init containers included) limits
/// both and the summed requests equal the summed limits; burstable otherwise.
fn qos(containers: &[Container], init: &[Container]) -> QosClass {
    let (mut requests, mut limits) = ([None::<u64>; 2], [None::<u64>; 2]);
    let mut guaranteed = true;
    let add = |sum: &mut Option<u64>, amount: Option<u64>| {
        if let Some(amount) = amount {
            *sum = Some(sum.unwrap_or(0).saturating_add(amount));
        }
    };
    for container in init.iter().chain(containers) {
        let resources = container.resources.clone().unwrap_or_default();
        let (memory, cpu) = amounts(&resources.requests.unwrap_or_default());
        add(&mut requests[0], memory);
        add(&mut requests[1], cpu);
        let (memory, cpu) = amounts(&resources.limits.unwrap_or_default());
        add(&mut limits[0], memory);
        add(&mut limits[1], cpu);
        guaranteed &= memory.is_some() && cpu.is_some();
    }
    if requests.iter().chain(&limits).all(Option::is_none) {
        return QosClass::BestEffort;
    }
    // A request left out defaults to the limit (the API server fills it in).
    let matches = (0..2).all(|i| requests[i].is_none_or(|r| Some(r) == limits[i]));
    if guaranteed && matches {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }
    }

    #[test]
    fn qos_is_computed_as_the_kubelet_does() {
        let full = [("cpu", "500m"), ("memory", "256Mi")];
        assert_eq!(qos(&[container(&[], &[])], &[]), QosClass::BestEffort);
        assert_eq!(qos(&[container(&full, &full)], &[]), QosClass::Guaranteed);
        // Requests left out default to the limits.
        assert_eq!(qos(&[container(&[], &full)], &[]), QosClass::Guaranteed);
        assert_eq!(
            qos(&[container(&[("cpu", "250m")], &full)], &[]),
            QosClass::Burstable
        );
        assert_eq!(
            qos(&[container(&[("memory", "1Gi")], &[])], &[]),
            QosClass::Burstable
        );
        // One container without limits spoils the guarantee of the others.
        assert_eq!(
            qos(&[container(&full, &full), container(&[], &[])], &[]),
            QosClass::Burstable
        );
        // Init containers count.
        assert_eq!(
            qos(
                &[container(&full, &full)],
                &[container(&[("cpu", "1")], &[])]
            ),
            QosClass::Burstable
        );
        // A zero request is no request.
        assert_eq!(
            qos(&[container(&[("cpu", "0")], &[])], &[]),
            QosClass::BestEffort
        );
    }

    fn kube_pod(yaml: &str) -> KubePod {
        serde_norway::from_str(yaml).expect("test pod parses")
    }

    #[test]
    fn a_pod_becomes_the_contract_record() {
        let pod = kube_pod(
            r#"
metadata:
  name: web-1
  namespace: shop
  uid: u-1
  labels: {app: web}
  annotations:
    kubernetes.io/config.source: file
    kubernetes.io/config.mirror: abc
    kubectl.kubernetes.io/last-applied-configuration: "LONG"
  ownerReferences:
    - {apiVersion: v1, kind: Node, name: n, uid: x}
    - {apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: y, controller: true}
spec:
  priority: 2000000000
  containers:
    - name: a
      resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 128Mi}}
    - name: b
      resources: {requests: {cpu: "1", memory: 1Gi}}
status:
  startTime: "2024-01-02T03:04:05Z"
"#
            .replace("LONG", &"x".repeat(300))
            .as_str(),
        );
        let PodPhase::Live(record) = read(&pod) else {
            panic!("a running pod is live")
        };
        assert_eq!(
            (
                record.uid.as_str(),
                record.namespace.as_str(),
                record.name.as_str()
            ),
            ("u-1", "shop", "web-1")
        );
        assert_eq!(record.qos, QosClass::Burstable);
        assert_eq!(record.requests.cpu_millis, 1100);
        assert_eq!(record.requests.memory_bytes, (64 + 1024) << 20);
        assert_eq!(record.limits.memory_bytes, 128 << 20);
        assert!(matches!(record.owner_kind, Some(OwnerKind::ReplicaSet)));
        assert!(record.is_static && record.is_mirror && record.is_critical);
        assert_eq!(record.start_time_ms, 1_704_164_645_000);
        let keys: Vec<&str> = record.annotations.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(
            keys,
            ["kubernetes.io/config.mirror", "kubernetes.io/config.source"]
        );
    }

    #[test]
    fn owner_kinds_outside_the_contract_keep_their_name() {
        assert!(matches!(owner_kind("DaemonSet"), OwnerKind::DaemonSet));
        assert!(matches!(owner_kind("StatefulSet"), OwnerKind::StatefulSet));
        assert!(matches!(owner_kind("Job"), OwnerKind::Job));
        assert!(matches!(owner_kind("Node"), OwnerKind::Node));
        assert!(matches!(owner_kind("Rollout"), OwnerKind::Other(kind) if kind == "Rollout"));
    }

    #[test]
    fn terminating_pending_and_finished_pods_are_no_candidates() {
        let terminating = kube_pod(
            "metadata: {name: a, namespace: n, uid: u, deletionTimestamp: '2024-01-02T03:04:05Z'}",
        );
        match read(&terminating) {
            PodPhase::Terminating { uid, name, until } => {
                assert_eq!((uid.as_str(), name.as_str()), ("u", "n/a"));
                assert_eq!(
                    until,
                    SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_164_645)
                );
            }
            other => panic!("{other:?}"),
        }
        let done = kube_pod("metadata: {name: a, uid: u}\nstatus: {phase: Succeeded}");
        assert!(matches!(read(&done), PodPhase::Finished));
        let pending = kube_pod("metadata: {name: a, uid: u}\nstatus: {phase: Pending}");
        assert!(matches!(read(&pending), PodPhase::Pending));
        let critical_class = kube_pod(
            "metadata: {name: a, uid: u}\nspec: {containers: [], priorityClassName: system-node-critical}",
        );
        let PodPhase::Live(record) = read(&critical_class) else {
            panic!()
        };
        assert!(record.is_critical && !record.is_static && !record.is_mirror);
    }

    #[test]
    fn a_pod_the_kubelet_evicts_or_evicted_is_reclaim_for_the_resource_it_names() {
        // As the kubelet writes it while the containers stop, then after.
        let evicting = kube_pod(
            r#"
metadata: {name: hog, namespace: n, uid: u}
spec: {containers: [{name: c}]}
status:
  phase: Running
  conditions:
    - {type: DisruptionTarget, status: "True", reason: TerminationByKubelet,
       message: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 81204Ki. Container c was using 2Gi, request is 0, has larger consumption of memory. "}
"#,
        );
        match read(&evicting) {
            PodPhase::EvictedByKubelet {
                uid,
                name,
                qos,
                resource,
            } => {
                assert_eq!((uid.as_str(), name.as_str()), ("u", "n/hog"));
                assert_eq!(
                    (qos, resource),
                    (QosClass::BestEffort, Some(Resource::Memory))
                );
            }
            other => panic!("{other:?}"),
        }
        let evicted = kube_pod(
            "metadata: {name: a, uid: u}\nstatus: {phase: Failed, reason: Evicted, message: 'The node was low on resource: ephemeral-storage. Threshold quantity: 10%, available: 1Gi. '}",
        );
        assert!(matches!(
            read(&evicted),
            PodPhase::EvictedByKubelet {
                resource: Some(Resource::Disk),
                ..
            }
        ));
        // A node shutdown sets the same condition; it evicts for nothing.
        let shutdown = kube_pod(
            "metadata: {name: a, uid: u}\nspec: {containers: []}\nstatus: {phase: Running, conditions: [{type: DisruptionTarget, status: 'True', reason: TerminationByKubelet, message: 'Pod was terminated in response to imminent node shutdown.'}]}",
        );
        assert!(matches!(read(&shutdown), PodPhase::Live(_)));
        let failed =
            kube_pod("metadata: {name: a, uid: u}\nstatus: {phase: Failed, reason: Error}");
        assert!(matches!(read(&failed), PodPhase::Finished));
    }
}
