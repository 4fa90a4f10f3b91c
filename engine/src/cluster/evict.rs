//! The Eviction API killer: posts a policy/v1 `Eviction` for each victim, so
//! the API server applies PodDisruptionBudgets and the kubelet terminates the
//! pod with its grace period.
//!
//! The body is built from k8s-openapi's `Eviction` and posted as is:
//! `deleteOptions` carries the grace period the manager settled on (never
//! 0, which the API server takes for a force delete), a UID
//! precondition (a new pod of the same name is never hit) and, in dry-run,
//! `dryRun: [All]` — also in the URL (`?dryRun=All`), so admission webhooks
//! see a dry run too; the API server still judges the PDBs. kube's
//! `Api::evict` is not used: kube 5.0 writes its delete options in snake
//! case, which the API server drops. Requests go out raw through a client
//! without kube's retry layer, because the answer's status, Status causes
//! and `Retry-After` header decide what happens next:
//!
//! | answer | means | [`KillError`] |
//! |---|---|---|
//! | 200, 201 | accepted | — |
//! | 429 with a `DisruptionBudget` cause | a PDB allows no disruption now | `Refused` |
//! | any other 429 | throttling (API Priority and Fairness) | `Throttled` |
//! | 500 "more than one PodDisruptionBudget", 403, 400, 422 | not this pod | `NotEvictable` |
//! | 404, 409 (UID precondition) | the pod is gone | `Gone` |
//! | anything else, no answer | not asked | `Unavailable` |
//!
//! A victim marked `override_pdb` is deleted instead (DELETE with the same
//! precondition and grace), as the kubelet would under hard pressure; a
//! dry-run victim never is: dry run sends no DELETE.

use crate::config::MIN_GRACE_PERIOD_SECONDS;
use crate::eviction::{KillError, Killer, Victim};
use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::Client;
use std::time::Duration;

/// The wait after a throttling 429 that names none.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest wait a throttling answer can impose: protection resumes
/// after this whatever `Retry-After` said.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Largest answer body read.
const MAX_ANSWER_BYTES: usize = 64 << 10;
/// The Status cause the API server gives a PodDisruptionBudget refusal.
const BUDGET_CAUSE: &str = "DisruptionBudget";

/// Evicts through the API server.
#[derive(Clone)]
pub struct EvictionApi {
    client: Client,
}

impl std::fmt::Debug for EvictionApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionApi").finish_non_exhaustive()
    }
}

impl EvictionApi {
    /// A killer posting with `client`, which must not retry on its own.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl Killer for EvictionApi {
    fn evict(&self, victim: &Victim) -> BoxFuture<'static, Result<(), KillError>> {
        let client = self.client.clone();
        let request = if victim.override_pdb && !victim.dry_run {
            deletion(victim)
        } else {
            eviction(victim)
        };
        async move {
            let request = request?;
            let answer = client
                .send(request.map(kube::client::Body::from))
                .await
                .map_err(|e| KillError::Unavailable(crate::base::report::Chain(&e).to_string()))?;
            let (parts, body) = answer.into_parts();
            let body = http_body_util::Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            judge(parts.status, &parts.headers, &body)
        }
        .boxed()
    }
}

fn delete_options(victim: &Victim) -> DeleteOptions {
    DeleteOptions {
        // Whoever made the victim, 0 never goes out: a force delete.
        grace_period_seconds: victim
            .grace_period_seconds
            .map(|s| i64::try_from(s.max(MIN_GRACE_PERIOD_SECONDS)).unwrap_or(i64::MAX)),
        preconditions: Some(Preconditions {
            uid: Some(victim.pod.uid.clone()),
            resource_version: None,
        }),
        dry_run: victim.dry_run.then(|| vec!["All".to_owned()]),
        ..DeleteOptions::default()
    }
}

fn pod_path(victim: &Victim) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}",
        victim.pod.namespace, victim.pod.name
    )
}

fn request(
    method: Method,
    uri: String,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, KillError> {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| KillError::Unavailable(format!("cannot build the request: {e}")))
}

fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, KillError> {
    serde_json::to_vec(value)
        .map_err(|e| KillError::Unavailable(format!("cannot write the request: {e}")))
}

/// `POST …/pods/NAME/eviction`, with `?dryRun=All` for a dry run.
fn eviction(victim: &Victim) -> Result<http::Request<Vec<u8>>, KillError> {
    let body = Eviction {
        metadata: ObjectMeta {
            name: Some(victim.pod.name.clone()),
            namespace: Some(victim.pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(delete_options(victim)),
    };
    let dry_run = if victim.dry_run { "?dryRun=All" } else { "" };
    let uri = format!("{}/eviction{dry_run}", pod_path(victim));
    request(Method::POST, uri, json(&body)?)
}

/// `DELETE …/pods/NAME` with the eviction's delete options.
fn deletion(victim: &Victim) -> Result<http::Request<Vec<u8>>, KillError> {
    request(
        Method::DELETE,
        pod_path(victim),
        json(&delete_options(victim))?,
    )
}

/// What the API server's answer means for the eviction (see the module docs).
fn judge(code: StatusCode, headers: &http::HeaderMap, body: &[u8]) -> Result<(), KillError> {
    if code.is_success() {
        return Ok(());
    }
    let status: Option<kube::core::Status> = serde_json::from_slice(body).ok();
    let message = status
        .as_ref()
        .map(|s| s.message.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(256).collect());
    let details = status.as_ref().and_then(|s| s.details.as_ref());
    let budget = details.is_some_and(|d| d.causes.iter().any(|c| c.reason == BUDGET_CAUSE));
    let asked_to_wait = details.map_or(0, |d| d.retry_after_seconds);
    Err(match code.as_u16() {
        429 if budget && asked_to_wait == 0 => KillError::Refused(message),
        429 => KillError::Throttled {
            retry_after: jittered(retry_after(headers, asked_to_wait)),
            message,
        },
        500 if message.contains("more than one PodDisruptionBudget") => {
            KillError::NotEvictable(format!("500: {message}"))
        }
        400 | 403 | 422 => KillError::NotEvictable(format!("{}: {message}", code.as_u16())),
        404 | 409 => KillError::Gone(message),
        other => KillError::Unavailable(format!("{other}: {message}")),
    })
}

/// The wait a throttling answer asks for: its `Retry-After` header (seconds),
/// else its Status's `retryAfterSeconds`, else a second; at most
/// [`MAX_RETRY_AFTER`].
fn retry_after(headers: &http::HeaderMap, from_status: u32) -> Duration {
    let header = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let seconds = header.or((from_status > 0).then_some(u64::from(from_status)));
    seconds
        .map_or(DEFAULT_RETRY_AFTER, Duration::from_secs)
        .min(MAX_RETRY_AFTER)
}

/// `wait` plus up to half of it again, so agents throttled together do not
/// come back together.
fn jittered(wait: Duration) -> Duration {
    (wait + wait.mul_f64(fastrand::f64() / 2.0)).min(MAX_RETRY_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(code: u16, status: serde_json::Value, retry: Option<&str>) -> Result<(), KillError> {
        let mut headers = http::HeaderMap::new();
        if let Some(retry) = retry {
            headers.insert(http::header::RETRY_AFTER, retry.parse().unwrap());
        }
        let body = serde_json::to_vec(&status).unwrap();
        judge(StatusCode::from_u16(code).unwrap(), &headers, &body)
    }

    fn status(code: u16, message: &str, details: serde_json::Value) -> serde_json::Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
               "message": message, "details": details})
    }

    #[test]
    fn only_a_429_with_a_disruption_budget_cause_is_a_pdb_refusal() {
        let pdb = status(
            429,
            "would violate",
            json!({"causes": [{"reason": "DisruptionBudget", "message": "needs 2"}]}),
        );
        assert_eq!(
            answer(429, pdb, None),
            Err(KillError::Refused("would violate".into()))
        );
        let throttled = answer(429, status(429, "too many requests", json!({})), Some("3"));
        let Err(KillError::Throttled { retry_after, .. }) = throttled else {
            panic!("{throttled:?}")
        };
        assert!((Duration::from_secs(3)..=Duration::from_millis(4500)).contains(&retry_after));
        let asks = status(
            429,
            "slow down",
            json!({"retryAfterSeconds": 2, "causes": [{"reason": "DisruptionBudget"}]}),
        );
        assert!(matches!(
            answer(429, asks, None),
            Err(KillError::Throttled { .. })
        ));
        let plain = answer(429, json!("not a status"), None);
        assert!(
            matches!(plain, Err(KillError::Throttled { retry_after, .. }) if retry_after >= DEFAULT_RETRY_AFTER)
        );
    }

    #[test]
    fn no_request_carries_a_grace_period_of_zero() {
        let mut victim = Victim {
            pod: crate::model::fixture::pod("v").build(),
            strategy: "memory-pressure".into(),
            reason: String::new(),
            urgency: crate::eviction::Urgency::Hard,
            scope: Some("memory".into()),
            grace_period_seconds: Some(0),
            dry_run: false,
            override_pdb: false,
            why: crate::eviction::Why::default(),
        };
        for override_pdb in [false, true] {
            victim.override_pdb = override_pdb;
            let request = if override_pdb {
                deletion(&victim)
            } else {
                eviction(&victim)
            }
            .unwrap();
            let body: serde_json::Value = serde_json::from_slice(request.body()).unwrap();
            let options = if override_pdb {
                &body
            } else {
                &body["deleteOptions"]
            };
            assert_eq!(options["gracePeriodSeconds"], 1, "{body}");
        }
        victim.grace_period_seconds = None;
        let body: serde_json::Value =
            serde_json::from_slice(eviction(&victim).unwrap().body()).unwrap();
        assert!(
            body["deleteOptions"].get("gracePeriodSeconds").is_none(),
            "unknown: the pod's own"
        );
    }

    #[test]
    fn a_throttling_wait_is_bounded_whatever_the_server_asks() {
        let long = answer(429, status(429, "wait", json!({})), Some("86400"));
        assert!(
            matches!(long, Err(KillError::Throttled { retry_after, .. }) if retry_after == MAX_RETRY_AFTER)
        );
    }

    #[test]
    fn refusals_of_the_pod_itself_pass_it_over_and_server_errors_do_not() {
        let several = status(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            json!({}),
        );
        assert!(matches!(
            answer(500, several, None),
            Err(KillError::NotEvictable(_))
        ));
        for code in [400, 403, 422] {
            let refused = answer(code, status(code, "no", json!({})), None);
            assert!(
                matches!(refused, Err(KillError::NotEvictable(ref m)) if m.starts_with(&code.to_string())),
                "{refused:?}"
            );
        }
        let down = answer(
            500,
            status(500, "etcdserver: request timed out", json!({})),
            None,
        );
        assert!(matches!(down, Err(KillError::Unavailable(_))), "{down:?}");
        assert!(matches!(
            answer(503, json!({}), None),
            Err(KillError::Unavailable(_))
        ));
        assert!(matches!(
            answer(409, status(409, "uid", json!({})), None),
            Err(KillError::Gone(_))
        ));
        assert_eq!(answer(201, json!({}), None), Ok(()));
    }
}
