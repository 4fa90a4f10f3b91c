//! The Eviction API killer: posts a policy/v1 `Eviction` for each victim, so
//! the API server applies PodDisruptionBudgets and the kubelet terminates the
//! pod with its grace period.
//!
//! The body is built from k8s-openapi's `Eviction` and posted as is:
//! `deleteOptions` carries the grace period (the strategy's, else the pod's
//! own), a UID precondition (a new pod of the same name is never hit) and, in
//! dry-run, `dryRun: [All]` (the API server still judges the PDBs). kube's
//! `Api::evict` is not used: kube 5.0 writes its delete options in snake case,
//! which the API server drops. The client given here must not retry: a 429
//! from a PDB is an answer to act on now, not to wait out.
//!
//! Answers: 200/201 accepted; 429 refused (a PDB); 404 or 409 (UID
//! precondition) the pod is gone; anything else, not asked.
//! A victim marked `override_pdb` is deleted instead (DELETE with the same
//! precondition), as the kubelet would under hard pressure.

use crate::eviction::{KillError, Killer, Victim};
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::DeleteParams;
use kube::{Api, Client};

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
        let victim = victim.clone();
        async move {
            let answer = if victim.override_pdb {
                delete(client, &victim).await
            } else {
                post(client, &victim).await
            };
            answer.map_err(judge)
        }
        .boxed()
    }
}

fn delete_options(victim: &Victim) -> DeleteOptions {
    DeleteOptions {
        grace_period_seconds: victim
            .grace_period_seconds
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
        preconditions: Some(Preconditions {
            uid: Some(victim.pod.uid.clone()),
            resource_version: None,
        }),
        dry_run: victim.dry_run.then(|| vec!["All".to_owned()]),
        ..DeleteOptions::default()
    }
}

async fn post(client: Client, victim: &Victim) -> Result<(), kube::Error> {
    let (namespace, name) = (&victim.pod.namespace, &victim.pod.name);
    let eviction = Eviction {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(delete_options(victim)),
    };
    let body = serde_json::to_vec(&eviction).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .map_err(kube::Error::HttpError)?;
    client.request_text(request).await.map(drop)
}

async fn delete(client: Client, victim: &Victim) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client, &victim.pod.namespace);
    let options = delete_options(victim);
    let params = DeleteParams {
        dry_run: victim.dry_run,
        grace_period_seconds: options
            .grace_period_seconds
            .map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(victim.pod.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(&victim.pod.name, &params).await.map(drop)
}

/// What an API error means for the eviction.
fn judge(error: kube::Error) -> KillError {
    match error {
        kube::Error::Api(status) => match status.code {
            429 => KillError::Refused(status.message),
            404 | 409 => KillError::Gone(status.message),
            code => KillError::Unavailable(format!("{code}: {}", status.message)),
        },
        other => KillError::Unavailable(crate::report::Chain(&other).to_string()),
    }
}
