//! The metrics port's TLS under `--metrics-auth=kubernetes`: a certificate
//! the agent makes for itself at start (self-signed, as controller-runtime's
//! secure metrics make one when given none), so that a scraper's bearer
//! token never crosses the network in clear. Scrapers do not verify it
//! (`insecureSkipVerify`, as the PodMonitor of
//! `deploy/components/metrics-auth` says): what it buys is secrecy of the
//! token on the wire, not the agent's identity, which the network policy
//! and the pod IP give.

use std::sync::Arc;
use thiserror::Error;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why the port's certificate could not be made.
#[derive(Debug, Error)]
pub(crate) enum TlsError {
    /// The certificate could not be generated.
    #[error("cannot make the metrics port's certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// TLS would not take it.
    #[error("cannot serve TLS with the metrics port's certificate: {0}")]
    Config(#[from] tokio_rustls::rustls::Error),
}

/// An acceptor with a fresh self-signed certificate naming `vigil` and
/// `node` (when `node` is a DNS name), valid from now.
///
/// # Errors
/// The certificate cannot be made or served.
pub(crate) fn self_signed(node: &str) -> Result<TlsAcceptor, TlsError> {
    let certified = rcgen::generate_simple_self_signed(vec!["vigil".to_owned(), node.to_owned()])
        .or_else(|_| rcgen::generate_simple_self_signed(vec!["vigil".to_owned()]))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
