//! A client to one OCI registry: TLS by default (the system's roots and,
//! for a private registry, a CA given in PEM), plain HTTP only to a
//! registry the caller marked insecure (never a silent downgrade), and the
//! credentials to present.

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

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
        let protocol = if self.insecure {
            ClientProtocol::HttpsExcept(vec![reference.resolve_registry().to_owned()])
        } else {
            ClientProtocol::Https
        };
        let client = Client::new(ClientConfig {
            protocol,
            extra_root_certificates: self
                .ca
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            ..ClientConfig::default()
        });
        let auth = match &self.basic {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        };
        (client, auth)
    }
}
