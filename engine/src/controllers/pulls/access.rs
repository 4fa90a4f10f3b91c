//! How the pull controller reaches a registry: plain HTTP or TLS (with
//! the certificates trusted beside the system's roots), and the
//! credentials of the version's pull Secret, read while the plan's
//! [`SecretCache`] holds none fresh.

use super::PullOptions;
use crate::distribution::credentials::{self, DOCKER_CONFIG_KEY};
use crate::distribution::plan::WantedVersion;
use crate::distribution::plan::secrets::SecretCache;
use crate::distribution::pull::PullError;
use crate::distribution::registry::Access;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::time::Instant;

/// The pull Secrets of one node's pulls, read where `options` says.
#[derive(Debug, Default)]
pub(super) struct Registries {
    /// The Secrets read.
    cache: SecretCache,
}

impl Registries {
    /// How to reach `registry` for `source`.
    pub(super) async fn to(
        &mut self,
        options: &PullOptions,
        source: &WantedVersion,
        registry: &str,
    ) -> Result<Access, PullError> {
        let basic =
            match &source.pull_secret {
                None => None,
                Some(name) => {
                    let config = self.docker_config(options.secrets.as_ref(), name).await?;
                    Some(credentials::basic(&config, registry).map_err(|e| {
                        PullError::Credentials(format!("the pull Secret {name}: {e}"))
                    })?)
                }
            };
        Ok(Access {
            insecure: source.insecure,
            basic,
            ca: options.ca.clone(),
        })
    }

    /// The Secret `name` is read again at its next use.
    pub(super) fn forget(&mut self, name: &str) {
        self.cache.forget(name);
    }

    /// The `.dockerconfigjson` of the Secret `name`.
    async fn docker_config(
        &mut self,
        secrets: Option<&Api<Secret>>,
        name: &str,
    ) -> Result<Vec<u8>, PullError> {
        if let Some(config) = self.cache.fresh(name, Instant::now()) {
            return Ok(config.to_vec());
        }
        let Some(secrets) = secrets else {
            return Err(PullError::Credentials(format!(
                "the pull Secret {name} cannot be read: no namespace to read it in"
            )));
        };
        let secret = secrets.get(name).await.map_err(|e| {
            PullError::Credentials(format!("cannot read the pull Secret {name}: {e}"))
        })?;
        let config = secret
            .data
            .and_then(|mut data| data.remove(DOCKER_CONFIG_KEY))
            .ok_or_else(|| {
                PullError::Credentials(format!("the pull Secret {name} has no {DOCKER_CONFIG_KEY}"))
            })?
            .0;
        self.cache.read(name, config.clone(), Instant::now());
        Ok(config)
    }
}
