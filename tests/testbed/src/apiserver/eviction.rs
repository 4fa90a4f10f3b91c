//! The eviction subresource with the API server's rules, pod deletion, and
//! the kubelet's part.
//!
//! An eviction (`POST …/pods/NAME/eviction`, a policy/v1 `Eviction`):
//! - 404 if the pod does not exist; 409 if `deleteOptions.preconditions.uid`
//!   names another pod;
//! - a pod already terminating is accepted without looking at budgets;
//! - 500 if more than one PodDisruptionBudget selects the pod; 429 with a
//!   `DisruptionBudget` cause if the one that does allows no disruption;
//! - `dryRun: [All]` judges all of that and changes nothing;
//! - otherwise the budget's `disruptionsAllowed` goes down by one and the
//!   pod is deleted gracefully.
//!
//! A graceful deletion sets `deletionTimestamp` (now + the grace period: the
//! request's, else the pod's `terminationGracePeriodSeconds`, else 30 s);
//! then the kubelet removes the pod when the grace period is over. A grace
//! period of 0 is what the API server makes of it: the object is removed at
//! once, with no `deletionTimestamp` ever seen (a force delete: the kubelet
//! learns of it only afterwards, its containers may still run).

use super::Shared;
use super::routes::status;
use super::store::{Key, Selector};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn evict(
    shared: &Arc<Shared>,
    namespace: &str,
    name: &str,
    body: &Value,
) -> (u16, Value) {
    let options = &body["deleteOptions"];
    let key = Key::new("pods", namespace, name);
    let Some(pod) = shared.read(|s| s.objects.get(&key).cloned()) else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Some(conflict) = precondition(&pod, options) {
        return conflict;
    }
    let dry_run = is_dry_run(options);
    if pod["metadata"]["deletionTimestamp"].is_null() {
        let budgets: Vec<(Key, Value)> = shared.read(|s| {
            s.list("poddisruptionbudgets", Some(namespace))
                .filter(|(_, pdb)| selects(pdb, &pod))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        });
        if budgets.len() > 1 {
            return status(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            );
        }
        if let Some((pdb_key, pdb)) = budgets.into_iter().next() {
            let allowed = pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
            if allowed <= 0 {
                return refused(&pdb_key.name);
            }
            if !dry_run {
                let mut pdb = pdb;
                pdb["status"]["disruptionsAllowed"] = json!(allowed - 1);
                shared.write(|s| s.put(pdb_key, pdb));
            }
        }
    }
    if !dry_run {
        terminate(shared, key, pod, options);
    }
    status(201, "", "")
}

pub(crate) fn delete(
    shared: &Arc<Shared>,
    namespace: &str,
    name: &str,
    options: &Value,
) -> (u16, Value) {
    let key = Key::new("pods", namespace, name);
    let Some(pod) = shared.read(|s| s.objects.get(&key).cloned()) else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Some(conflict) = precondition(&pod, options) {
        return conflict;
    }
    if !is_dry_run(options) {
        terminate(shared, key, pod.clone(), options);
    }
    (200, pod)
}

fn precondition(pod: &Value, options: &Value) -> Option<(u16, Value)> {
    let wanted = options["preconditions"]["uid"].as_str()?;
    (pod["metadata"]["uid"].as_str() != Some(wanted)).then(|| {
        status(
            409,
            "Conflict",
            &format!(
                "Precondition failed: UID in precondition: {wanted}, UID in object meta: {}",
                pod["metadata"]["uid"]
            ),
        )
    })
}

fn is_dry_run(options: &Value) -> bool {
    options["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|v| v == "All"))
}

fn selects(pdb: &Value, pod: &Value) -> bool {
    let Some(selector) = pdb["spec"]["selector"].as_object() else {
        return false;
    };
    let terms: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    Selector::labels(&terms.join(",")).matches(pod)
}

fn refused(pdb: &str) -> (u16, Value) {
    let (code, mut body) = status(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    body["details"] = json!({"causes": [{
        "reason": "DisruptionBudget",
        "message": format!("The disruption budget {pdb} needs more healthy pods"),
    }]});
    (code, body)
}

/// Marks the pod terminating and, as its kubelet, removes it once its grace
/// period is over (if it is still the same pod).
fn terminate(shared: &Arc<Shared>, key: Key, mut pod: Value, options: &Value) {
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let grace = options["gracePeriodSeconds"]
        .as_u64()
        .or(pod["spec"]["terminationGracePeriodSeconds"].as_u64())
        .unwrap_or(30);
    if grace == 0 {
        shared.write(|s| s.delete(&key));
        return;
    }
    let until = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace as i64);
    pod["metadata"]["deletionTimestamp"] = json!(until.to_string());
    pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    let uid = pod["metadata"]["uid"].clone();
    shared.write(|s| s.put(key.clone(), pod));
    if shared.faults.lock().unwrap().kubelet_off {
        return;
    }
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(grace)).await;
        shared.write(|s| {
            if s.objects
                .get(&key)
                .is_some_and(|p| p["metadata"]["uid"] == uid)
            {
                s.delete(&key);
            }
        });
    });
}
