//! How the endpoints hold their connections, so that no client can take
//! the port or the agent's memory (the container has 128 MiB): one request
//! per connection (a scrape every 15 s gains nothing from keep-alive), its
//! headers read within a few seconds and in at most 16 KiB, every
//! connection closed after half a minute whatever it does, and a bounded
//! number open at once — a new connection beyond it closes the oldest, so a
//! flood of idle connections cannot keep the kubelet's probe out.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// What one client may hold.
#[derive(Debug, Clone, Copy)]
pub(in crate::agent) struct Limits {
    /// A request's headers must arrive within this, from the connection's
    /// start.
    pub header_read: Duration,
    /// A connection is closed after this, whatever it is doing.
    pub lifetime: Duration,
    /// Connections open at once; one more closes the oldest.
    pub open: usize,
}

impl Limits {
    /// The agent's: the kubelet's probes and a scraper need milliseconds of
    /// one connection each.
    pub(in crate::agent) const AGENT: Limits = Limits {
        header_read: Duration::from_secs(5),
        lifetime: Duration::from_secs(30),
        open: 64,
    };
}

/// The most a request's head (request line and headers) may take.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long to wait after a failed accept (out of descriptors, most likely)
/// before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The open connections, oldest first, by the token that closes each (a
/// connection cancels its own when it ends).
#[derive(Default)]
struct Open(VecDeque<CancellationToken>);

impl Open {
    /// Makes room for one more under `max`, closing the oldest if need be;
    /// the new connection's token.
    fn admit(&mut self, max: usize) -> CancellationToken {
        self.0.retain(|token| !token.is_cancelled());
        while self.0.len() >= max.max(1) {
            if let Some(oldest) = self.0.pop_front() {
                oldest.cancel();
            }
        }
        let token = CancellationToken::new();
        self.0.push_back(token.clone());
        token
    }
}

/// Serves `app` on `listener` within `limits`, over TLS with `tls`, until
/// `stop` resolves. A TLS handshake must end within the limits' header
/// read.
pub(in crate::agent) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD_BYTES);
    let mut open = Open::default();
    let mut stop = std::pin::pin!(stop);
    loop {
        let stream = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "the metrics endpoint could not accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let closing = open.admit(limits.open);
        let (http, app, tls) = (http.clone(), app.clone(), tls.clone());
        let connection = async move {
            let service = TowerToHyperService::new(app);
            match tls {
                None => {
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
                Some(tls) => {
                    let handshake = tokio::time::timeout(limits.header_read, tls.accept(stream));
                    if let Ok(Ok(stream)) = handshake.await {
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
            }
        };
        tokio::spawn(async move {
            // Dropping the connection closes it.
            tokio::select! {
                () = connection => {}
                () = closing.cancelled() => {}
                () = tokio::time::sleep(limits.lifetime) => {}
            }
            closing.cancel();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A bound for a broken test, never a wait.
    const LIMIT: Duration = Duration::from_secs(30);

    async fn serving(limits: Limits) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
        tokio::spawn(serve(listener, app, limits, None, std::future::pending()));
        addr
    }

    /// The answer to one GET of `path` on a new connection.
    async fn get_once(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// Whether the server closed `stream` (it reads the end, or a reset).
    async fn closed(stream: &mut TcpStream) -> bool {
        let mut byte = [0; 1];
        matches!(
            tokio::time::timeout(LIMIT, stream.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn a_flood_of_idle_connections_leaves_the_endpoint_answering() {
        // Nothing but the cap closes a connection within the test's bound.
        let limits = Limits {
            open: 16,
            header_read: LIMIT * 4,
            lifetime: LIMIT * 4,
        };
        let addr = serving(limits).await;
        let mut idle = Vec::new();
        for _ in 0..1000 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let answer = tokio::time::timeout(LIMIT, get_once(addr, "/healthz"))
            .await
            .expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
        // The oldest were closed to make room.
        for stream in &mut idle[..100] {
            assert!(closed(stream).await);
        }
    }

    #[tokio::test]
    async fn a_request_whose_headers_trickle_is_closed() {
        let limits = Limits {
            header_read: Duration::from_millis(200),
            lifetime: LIMIT * 4,
            ..Limits::AGENT
        };
        let addr = serving(limits).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: ag")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(LIMIT, slow.read_to_end(&mut answer))
            .await
            .expect("closed by the server")
            .ok();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );
        // A connection that never sends is closed too.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert!(closed(&mut silent).await);
    }

    #[tokio::test]
    async fn a_head_over_16_kib_is_refused() {
        let addr = serving(Limits::AGENT).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let header = format!("X-Filler: {}\r\n", "a".repeat(1024));
        let mut request = String::from("GET /healthz HTTP/1.1\r\nHost: agent\r\n");
        for _ in 0..32 {
            request.push_str(&header);
        }
        request.push_str("\r\n");
        // The server may close before it has read everything.
        let _ = stream.write_all(request.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
            "{answer}"
        );
        assert!(!answer.contains("ok\n"), "{answer}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 64, ..Default::default() })]

        /// Whatever a client sends, it is answered or closed, and the next
        /// client is served.
        #[test]
        fn any_bytes_are_answered_or_closed_and_the_port_serves_on(
            bytes in crate::base::mutated::mutated(
                b"GET /healthz HTTP/1.1\r\nHost: agent\r\nContent-Length: 0\r\n\r\n".to_vec()
            )
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (first, next) = runtime.block_on(async {
                let addr = serving(Limits {
                    header_read: Duration::from_millis(200),
                    ..Limits::AGENT
                })
                .await;
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let _ = stream.write_all(&bytes).await;
                let _ = stream.shutdown().await;
                let mut answer = Vec::new();
                let read = tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer)).await;
                assert!(read.is_ok(), "neither answered nor closed");
                (answer, get_once(addr, "/healthz").await)
            });
            proptest::prop_assert!(first.is_empty() || first.starts_with(b"HTTP/1.1 "));
            proptest::prop_assert!(next.starts_with("HTTP/1.1 200"), "{next}");
        }
    }

    #[tokio::test]
    async fn one_request_per_connection() {
        let addr = serving(Limits::AGENT).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let two =
            "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";
        stream.write_all(two.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(LIMIT, stream.read_to_string(&mut answer))
            .await
            .expect("closed after one")
            .unwrap();
        assert_eq!(answer.matches("HTTP/1.1 200").count(), 1, "{answer}");
        assert!(answer.contains("connection: close"), "{answer}");
    }
}
