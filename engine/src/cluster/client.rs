//! Connecting to the API server: a kubeconfig file if one is named, else the
//! in-cluster service account, else `$KUBECONFIG` (or `~/.kube/config`).
//!
//! Two clients share the configuration: one for watches and status writes,
//! and one for evictions *without* kube's retry layer (it would retry a
//! PodDisruptionBudget's 429 for minutes instead of trying the next
//! candidate). Both count their requests by verb and status code.

use crate::metrics::{ApiLabels, Metrics};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use thiserror::Error;

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
}

/// The agent's API clients.
#[derive(Clone)]
pub struct Clients {
    /// For watches, status and events (kube's default stack).
    pub api: Client,
    /// For evictions: no retry layer.
    pub evictions: Client,
}

/// Connects as described in the module docs, counting requests in `metrics`.
///
/// # Errors
/// See [`ClientError`].
pub async fn connect(
    kubeconfig: Option<&Path>,
    metrics: &Arc<Metrics>,
) -> Result<Clients, ClientError> {
    let config = configure(kubeconfig).await?;
    let build = |config: Config| -> Result<Client, ClientError> {
        let builder = ClientBuilder::try_from(config).map_err(ClientError::Build)?;
        Ok(builder.with_layer(&CountLayer(Arc::clone(metrics))).build())
    };
    let mut no_retry = config.clone();
    no_retry.default_retry = false;
    Ok(Clients {
        api: build(config)?,
        evictions: build(no_retry)?,
    })
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

/// A tower layer that counts requests by verb and status code.
#[derive(Clone)]
struct CountLayer(Arc<Metrics>);

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Count {
            inner,
            metrics: Arc::clone(&self.0),
        }
    }
}

/// The service [`CountLayer`] wraps around kube's stack.
#[derive(Clone)]
struct Count<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> tower_service::Service<http::Request<B>> for Count<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Boxed<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = request.method().as_str().to_owned();
        let metrics = Arc::clone(&self.metrics);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
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
