//! A client to one OCI registry: TLS by default (the system's roots and,
//! for a private registry, a CA given in PEM), plain HTTP only to a
//! registry the caller marked insecure (never a silent downgrade), and the
//! credentials to present.
//!
//! What the agent reads from a registry is bounded before it is read
//! ([`Reader`]): a manifest by a GET of its own, refused on a declared
//! length over the cap and cut off at the cap's first byte past it (the
//! OCI client would read a manifest whole, however long); a blob by
//! stream, counted the same way. Every read also ends at a stall
//! ([`READ_TIMEOUT`]), so a registry that streams without end, or slowly,
//! costs the node at most a cap's worth of memory and a bounded wait.

use super::failure::PullError;
use futures::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use std::time::Duration;
use tokio::sync::OnceCell;

/// A registry that sends nothing for this long is given up.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A registry that does not accept a connection in this long is given up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an error answer's body kept for its message.
const ERROR_BODY_BYTES: usize = 1024;

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Plain HTTP to the reference's registry.
    pub insecure: bool,
    /// User and password, else anonymous.
    pub basic: Option<(String, String)>,
    /// Certificates (PEM) trusted beside the system's roots.
    pub ca: Option<Vec<u8>>,
}

impl Access {
    /// A client for the registry of `reference`, and the credentials to
    /// present to it.
    pub fn client(&self, reference: &Reference) -> (Client, RegistryAuth) {
        // The TLS of registry clients uses the process's crypto provider:
        // ring, as the Kubernetes client does. Installing it again is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new(ClientConfig {
            protocol: self.protocol(reference),
            extra_root_certificates: self
                .ca
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            read_timeout: Some(READ_TIMEOUT),
            connect_timeout: Some(CONNECT_TIMEOUT),
            ..ClientConfig::default()
        });
        let auth = match &self.basic {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        };
        (client, auth)
    }

    /// A reader of the registry of `reference` whose every read is
    /// bounded (see the module's docs).
    ///
    /// # Errors
    /// The CA given does not parse, or the HTTP client cannot be built.
    pub(crate) fn reader(&self, reference: &Reference) -> Result<Reader, PullError> {
        let (oci, auth) = self.client(reference);
        let unusable = |e: reqwest::Error| PullError::Unavailable(format!("no HTTP client: {e}"));
        let roots = (self.ca.iter())
            .map(|pem| reqwest::Certificate::from_pem(pem).map_err(unusable))
            .collect::<Result<Vec<_>, _>>()?;
        let http = reqwest::Client::builder()
            .tls_certs_merge(roots)
            .read_timeout(READ_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(unusable)?;
        let registry = reference.resolve_registry();
        let scheme = if self.insecure { "http" } else { "https" };
        Ok(Reader {
            oci,
            http,
            auth,
            token: OnceCell::new(),
            base: format!("{scheme}://{registry}/v2"),
        })
    }

    fn protocol(&self, reference: &Reference) -> ClientProtocol {
        if self.insecure {
            ClientProtocol::HttpsExcept(vec![reference.resolve_registry().to_owned()])
        } else {
            ClientProtocol::Https
        }
    }
}

/// Bounded reads from one registry (see the module's docs).
pub(crate) struct Reader {
    oci: Client,
    http: reqwest::Client,
    auth: RegistryAuth,
    /// The bearer token for the repository, once signed in (none: the
    /// registry asks for none, or takes the basic credentials).
    token: OnceCell<Option<String>>,
    /// `scheme://registry/v2`.
    base: String,
}

impl Reader {
    /// The OCI client (its token for the repository, once a manifest was
    /// read), for a layer the store counts as it writes.
    pub(crate) fn oci(&self) -> &Client {
        &self.oci
    }

    /// The manifest `reference` names, of one of the `accepted` media
    /// types, if at most `cap` bytes; `None` if the registry has none.
    ///
    /// # Errors
    /// Unauthorized, unavailable, or over `cap` bytes.
    pub(crate) async fn manifest(
        &self,
        reference: &Reference,
        accepted: &[&str],
        cap: u64,
    ) -> Result<Option<Vec<u8>>, PullError> {
        // One sign-in per reader: its manifests are all of one repository.
        let token = (self.token)
            .get_or_try_init(|| {
                self.oci
                    .auth(reference, &self.auth, RegistryOperation::Pull)
            })
            .await?
            .clone();
        let target = reference.digest().or(reference.tag()).unwrap_or("latest");
        let url = format!(
            "{}/{}/manifests/{target}",
            self.base,
            reference.repository()
        );
        let request = self
            .http
            .get(&url)
            .header(http::header::ACCEPT, accepted.join(", "));
        let request = match (token, &self.auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let mut response = request.send().await.map_err(unavailable)?;
        let status = response.status();
        if status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            // The body's first chunk only, as much of it as a message needs.
            let body = response.chunk().await.ok().flatten().unwrap_or_default();
            let text = format!(
                "{url} answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)])
            );
            return Err(match status.as_u16() {
                401 | 403 => PullError::Unauthorized(text),
                _ => PullError::Unavailable(text),
            });
        }
        let what = format!("the manifest {url}");
        if let Some(declared) = response.content_length().filter(|&n| n > cap) {
            return Err(PullError::Oversized {
                what: format!("{what} declares {declared} bytes"),
                cap,
            });
        }
        read_capped(response.bytes_stream(), &what, cap)
            .await
            .map(Some)
    }

    /// The blob `descriptor` names, if at most `cap` bytes (its declared
    /// size is checked first), digest-checked by the OCI client.
    ///
    /// # Errors
    /// Unauthorized, not found, unavailable, tampered, or over `cap` bytes.
    pub(crate) async fn blob(
        &self,
        reference: &Reference,
        descriptor: &OciDescriptor,
        cap: u64,
    ) -> Result<Vec<u8>, PullError> {
        let what = format!("the blob {}", descriptor.digest);
        if u64::try_from(descriptor.size).map_or(true, |size| size > cap) {
            return Err(PullError::Oversized {
                what: format!("{what} declares {} bytes", descriptor.size),
                cap,
            });
        }
        let stream = self.oci.pull_blob_stream(reference, descriptor).await?;
        read_capped(stream, &what, cap).await
    }
}

/// The chunks of `stream` (a manifest's body or a blob), `what` they are,
/// read until their end or refused at the first byte past `cap`.
async fn read_capped<B: AsRef<[u8]>, E: std::fmt::Display>(
    stream: impl futures::Stream<Item = Result<B, E>>,
    what: &str,
    cap: u64,
) -> Result<Vec<u8>, PullError> {
    let mut stream = std::pin::pin!(stream);
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| PullError::Unavailable(format!("{what}: {e}")))?;
        let chunk = chunk.as_ref();
        if (bytes.len() + chunk.len()) as u64 > cap {
            return Err(PullError::Oversized {
                what: format!("{what} sends more than {cap} bytes"),
                cap,
            });
        }
        bytes.extend_from_slice(chunk);
    }
    Ok(bytes)
}

fn unavailable(error: reqwest::Error) -> PullError {
    PullError::Unavailable(error.to_string())
}
