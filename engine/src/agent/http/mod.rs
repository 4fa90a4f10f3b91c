//! The agent's HTTP endpoints: `/metrics` (Prometheus text format),
//! `/healthz` (the process serves: while it waits for its first pod list
//! it is alive, however slow the API server; once the pods are known, the
//! eviction loop must cycle within three periods) and `/readyz` (the pod
//! store holds its first list and the loop has run, with the policies it
//! loaded). Liveness never depends on the API server: during a brownout a
//! restart would only add one more LIST to it.
//!
//! They listen where `--metrics-addr` says; `[::]` (the DaemonSet's) is
//! dual-stack, IPv6 and IPv4 alike ([`listen`]); the agent logs the
//! address it bound (a port `0` asks the kernel for a free one). Each
//! connection is held within [`connections::Limits`]. Under
//! `--metrics-auth=kubernetes` the port speaks TLS (`tls`) and `/metrics`
//! answers only a bearer token the API server says may read it (`auth`).

mod auth;
mod connections;
mod tls;

pub(super) use auth::Reviewer;
pub(super) use tls::self_signed;

use crate::eviction::runner::Heartbeat;
use crate::metrics::Metrics;
use crate::policy::Registry;
use auth::Verdict;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry as PromRegistry;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What the health endpoints look at.
#[derive(Clone)]
pub(super) struct Health {
    period: Duration,
    heartbeat: Heartbeat,
    /// When the eviction loop found the pods listed: its first cycle is due
    /// within three periods of it. The loop says so ([`Health::listed`]);
    /// the endpoints never poll the pod store's readiness themselves, as
    /// kube-runtime 5.0 wakes only the last task that polled it and a probe
    /// would take the loop's wake-up (the loop then never starts).
    listed: Arc<OnceLock<Instant>>,
}

impl Health {
    /// Health of a loop with `period`, beating `heartbeat`.
    pub(super) fn new(period: Duration, heartbeat: Heartbeat) -> Self {
        Self {
            period,
            heartbeat,
            listed: Arc::default(),
        }
    }

    /// The pods are listed: the loop starts.
    pub(super) fn listed(&self) {
        self.listed.get_or_init(Instant::now);
    }

    fn live(&self) -> bool {
        let due = self.period * 3;
        match (self.heartbeat.since_last(), self.listed.get()) {
            (Some(since), _) => since <= due,
            // Still waiting for the API server: alive.
            (None, None) => true,
            (None, Some(at)) => at.elapsed() <= due,
        }
    }

    fn ready(&self) -> bool {
        self.listed.get().is_some() && self.heartbeat.since_last().is_some()
    }
}

struct Shared {
    metrics: Arc<Metrics>,
    exported: PromRegistry,
    policies: Arc<Registry>,
    health: Health,
    reviewer: Option<Box<Reviewer>>,
}

/// Who may read `/metrics`: anyone who reaches the port, or (over TLS) a
/// bearer token the API server says may.
pub(super) enum Access {
    /// Plain HTTP, no token asked.
    Open,
    /// TLS with this acceptor, and tokens reviewed by this reviewer.
    Reviewed(TlsAcceptor, Box<Reviewer>),
}

/// Serves the endpoints on `listener`, as `access` says, until `stop`
/// resolves.
pub(super) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    policies: Arc<Registry>,
    health: Health,
    access: Access,
    stop: impl Future<Output = ()>,
) {
    let (tls, reviewer) = match access {
        Access::Open => (None, None),
        Access::Reviewed(tls, reviewer) => (Some(tls), Some(reviewer)),
    };
    let shared = Arc::new(Shared {
        exported: metrics.registry(),
        metrics,
        policies,
        health,
        reviewer,
    });
    let app = Router::new()
        .route("/metrics", get(export))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&shared), guard))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(shared);
    connections::serve(listener, app, connections::Limits::AGENT, tls, stop).await;
}

/// Lets a request for `/metrics` through if its token may read it (or no
/// token is asked for).
async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let Some(reviewer) = &shared.reviewer else {
        return next.run(request).await;
    };
    let authorization = request.headers().get(header::AUTHORIZATION);
    let (verdict, asked) = reviewer
        .check(
            authorization.map(|v| v.as_bytes()),
            tokio::time::Instant::now(),
        )
        .await;
    if let Some(result) = asked {
        shared.metrics.metrics_token_reviewed(result);
    }
    match verdict {
        Verdict::Allowed => next.run(request).await,
        Verdict::Unauthenticated(why) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{why}\n"),
        )
            .into_response(),
        Verdict::Forbidden(why) => (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
        Verdict::Unavailable(why) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
        }
    }
}

async fn export(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    // Policy calls, faults and states are read when asked for, not kept up to date.
    shared.metrics.policies(&shared.policies);
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &shared.exported) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

fn verdict(ok: bool, what: &str) -> (StatusCode, String) {
    if ok {
        (StatusCode::OK, "ok\n".into())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{what}\n"))
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    verdict(
        shared.health.live(),
        "the eviction loop has not cycled within three periods of the pods being listed",
    )
}

async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    verdict(
        shared.health.ready(),
        "waiting for the pod list and the first cycle",
    )
}

/// Listens on `addr`. The IPv6 unspecified address (`[::]`) listens on IPv6
/// and IPv4 alike, whatever the node's `net.ipv6.bindv6only`; on a node whose
/// kernel has IPv6 disabled it falls back to `0.0.0.0` on the same port.
///
/// # Errors
/// The address cannot be listened on.
pub(super) async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    if addr.ip() != IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        return TcpListener::bind(addr).await;
    }
    match dual_stack(addr) {
        Err(error) if error.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            tracing::info!(
                port = addr.port(),
                "IPv6 is disabled on this node; listening on IPv4 only"
            );
            TcpListener::bind((Ipv4Addr::UNSPECIFIED, addr.port())).await
        }
        listener => listener,
    }
}

/// A listener on `[::]` that takes IPv4 connections too.
fn dual_stack(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_unspecified_ipv6_address_takes_ipv4_and_ipv6_connections() {
        let listener = listen("[::]:0".parse().unwrap()).await.unwrap();
        let local = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                listener.accept().await.unwrap();
            }
        });
        let port = local.port();
        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .expect("IPv4 connects");
        if local.is_ipv6() {
            tokio::net::TcpStream::connect((Ipv6Addr::LOCALHOST, port))
                .await
                .expect("IPv6 connects");
        } else {
            // IPv6 is disabled here: the fallback listens on IPv4 only.
            tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .unwrap();
        }
        accept.await.unwrap();
    }

    #[tokio::test]
    async fn other_addresses_listen_as_given() {
        let listener = listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        assert!(listener.local_addr().unwrap().ip().is_loopback());
    }
}
