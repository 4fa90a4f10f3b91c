//! Connecting to the API server: a kubeconfig file if one is named, else the
//! in-cluster service account, else `$KUBECONFIG` (or `~/.kube/config`).
//!
//! Two clients share the configuration: one for watches and status writes,
//! and one for the node's pods — their watch and evictions — *without* a
//! retry layer (it would retry a PodDisruptionBudget's 429 for minutes
//! instead of trying the next candidate; the watch backs off on its own).
//! Both count their requests by verb and status code, give every request
//! that is not a watch at most [`ClientOptions::timeout`], and are rate
//! limited client-side (a token bucket of [`ClientOptions::qps`] and
//! [`ClientOptions::burst`] each, so evictions never queue behind
//! bookkeeping). The first client retries 429, 503 and 504 with kube's
//! policy (honouring `Retry-After`), and counts each retry.
//!
//! The pods' client acts as the node itself where [`PodAccess::Node`] says
//! so: each request carries `Impersonate-User: system:node:NAME`, which the
//! API server's constrained impersonation allows only for the node the
//! agent's pod-bound token names; the Node authorizer and NodeRestriction
//! then hold it to this node's pods.

use super::kubelet_stats::{self, KubeletEndpoint};
use crate::base::rate::TokenBucket;
use crate::metrics::{ApiLabels, Metrics};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use tower::BoxError;

/// How the clients treat the API server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientOptions {
    /// Requests per second each client sends at most, on average (5, as
    /// client-go's default).
    pub qps: f64,
    /// Requests each client may send at once after a quiet time (10).
    pub burst: u32,
    /// The longest any request but a watch may take (30 s).
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            qps: 5.0,
            burst: 10,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Who reads and evicts this node's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodAccess {
    /// The node itself, by constrained impersonation (Kubernetes 1.36 on):
    /// only this node's pods, as the kubelet.
    #[default]
    Node,
    /// The agent's own service account, which then needs the right to
    /// every pod of the cluster (clusters before 1.36).
    ServiceAccount,
}

impl PodAccess {
    /// The user the pods' requests act as for node `node`: none, the
    /// agent's own.
    pub fn user(self, node: &str) -> Option<String> {
        match self {
            Self::Node => Some(format!("system:node:{node}")),
            Self::ServiceAccount => None,
        }
    }
}

/// A request that is not a watch took longer than its timeout.
#[derive(Debug, Error)]
#[error("no answer within {0:?}")]
pub(crate) struct TimedOut(pub Duration);

/// Why no client could be made.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The named kubeconfig cannot be read.
    #[error("cannot read the kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither in-cluster configuration nor a kubeconfig was found.
    #[error(
        "no API server configuration: not in a cluster (no service account), and no kubeconfig ($KUBECONFIG or ~/.kube/config); pass --kubeconfig"
    )]
    NotFound(#[source] kube::config::KubeconfigError),
    /// The configuration does not make a client (e.g. a bad certificate).
    #[error("cannot build an API client")]
    Build(#[source] kube::Error),
    /// The kubelet's endpoint does not make a client.
    #[error("cannot reach the kubelet's statistics")]
    Kubelet(#[source] super::kubelet_stats::KubeletStatsError),
}

/// The agent's API clients.
#[derive(Clone)]
pub(crate) struct Clients {
    /// For watches, status and events (kube's default stack).
    pub api: Client,
    /// For the node's pods, their watch and evictions, as [`PodAccess`]
    /// says: no retry layer.
    pub pods: Client,
    /// For the kubelet's statistics summary, if its endpoint is known.
    pub kubelet: Option<Client>,
}

/// Connects as described in the module docs, counting requests in `metrics`,
/// and to the kubelet at `kubelet` with the same credentials; the pods'
/// requests act as `pods_as` if given.
///
/// # Errors
/// See [`ClientError`].
pub(crate) async fn connect(
    kubeconfig: Option<&Path>,
    kubelet: Option<&KubeletEndpoint>,
    metrics: &Arc<Metrics>,
    options: ClientOptions,
    pods_as: Option<&str>,
) -> Result<Clients, ClientError> {
    let config = configure(kubeconfig).await?;
    let kubelet = kubelet
        .map(|endpoint| kubelet_stats::client(&config, endpoint))
        .transpose()
        .map_err(ClientError::Kubelet)?;
    let mut pods = config.clone();
    pods.auth_info.impersonate = pods_as.map(str::to_owned);
    Ok(Clients {
        api: build(config, metrics, options, true)?,
        pods: build(pods, metrics, options, false)?,
        kubelet,
    })
}

/// A client for `config` with the layers of the module docs; `retry` adds
/// the counted retry layer.
///
/// # Errors
/// The configuration does not make a client.
pub fn build(
    mut config: Config,
    metrics: &Arc<Metrics>,
    options: ClientOptions,
    retry: bool,
) -> Result<Client, ClientError> {
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).map_err(ClientError::Build)?;
    let guard = GuardLayer {
        metrics: Arc::clone(metrics),
        options,
    };
    if !retry {
        return Ok(builder.with_layer(&guard).build());
    }
    let counted = CountedRetry {
        inner: RetryPolicy::server_retry(),
        metrics: Arc::clone(metrics),
    };
    Ok(builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(counted))
        .with_layer(&guard)
        .build())
}

/// kube's retry policy, counting each retry in `vigil_api_retries_total`.
#[derive(Clone)]
struct CountedRetry {
    inner: RetryPolicy,
    metrics: Arc<Metrics>,
}

impl<R> tower::retry::Policy<http::Request<Body>, http::Response<R>, BoxError> for CountedRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut http::Request<Body>,
        result: &mut Result<http::Response<R>, BoxError>,
    ) -> Option<Self::Future> {
        let code = match result {
            Ok(response) => response.status().as_u16().to_string(),
            Err(_) => "error".to_owned(),
        };
        let wait = self.inner.retry(request, result)?;
        let verb = request.method().as_str().to_owned();
        self.metrics
            .api_retries
            .get_or_create(&ApiLabels { verb, code })
            .inc();
        Some(wait)
    }

    fn clone_request(&mut self, request: &http::Request<Body>) -> Option<http::Request<Body>> {
        <RetryPolicy as tower::retry::Policy<_, http::Response<R>, BoxError>>::clone_request(
            &mut self.inner,
            request,
        )
    }
}

async fn configure(kubeconfig: Option<&Path>) -> Result<Config, ClientError> {
    let options = KubeConfigOptions::default();
    if let Some(path) = kubeconfig {
        let file = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
            path: path.to_owned(),
            source,
        })?;
        return Config::from_custom_kubeconfig(file, &options)
            .await
            .map_err(|source| ClientError::Kubeconfig {
                path: path.to_owned(),
                source,
            });
    }
    if let Ok(config) = Config::incluster() {
        return Ok(config);
    }
    Config::from_kubeconfig(&options)
        .await
        .map_err(ClientError::NotFound)
}

/// A tower layer that rate-limits, times out and counts requests.
#[derive(Clone)]
struct GuardLayer {
    metrics: Arc<Metrics>,
    options: ClientOptions,
}

impl<S> tower_layer::Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guard {
            inner,
            metrics: Arc::clone(&self.metrics),
            timeout: self.options.timeout,
            bucket: TokenBucket::new(self.options.qps, self.options.burst, Instant::now()),
            waiting: None,
            token: false,
        }
    }
}

/// The service [`GuardLayer`] wraps around kube's stack.
struct Guard<S> {
    inner: S,
    metrics: Arc<Metrics>,
    timeout: Duration,
    bucket: TokenBucket,
    /// The wait for the next token, while there is none.
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A token is held for the next call.
    token: bool,
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> tower_service::Service<http::Request<B>> for Guard<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Boxed<S::Response, BoxError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.token {
            if let Some(waiting) = &mut self.waiting {
                std::task::ready!(waiting.as_mut().poll(cx));
                self.waiting = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.token = true,
                Err(wait) => self.waiting = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The token is spent on the request its readiness was for.
        self.token = false;
        let verb = request.method().as_str().to_owned();
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let metrics = Arc::clone(&self.metrics);
        let timeout = self.timeout;
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = if watch {
                response.await.map_err(Into::into)
            } else {
                match tokio::time::timeout(timeout, response).await {
                    Ok(response) => response.map_err(Into::into),
                    Err(_) => Err(BoxError::from(TimedOut(timeout))),
                }
            };
            let code = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_owned(),
            };
            metrics
                .api_requests
                .get_or_create(&ApiLabels { verb, code })
                .inc();
            response
        })
    }
}
