//! What several commands take alike: how to reach a registry, where to keep
//! compiled components, durations as Kubernetes users write them, the keys
//! read from files, the client of a one-shot command and its end on a signal.

use crate::cluster::client::{ClientOptions, Clients};
use crate::distribution::registry::Access;
use crate::distribution::signature::VerificationKey;
use anyhow::Context;
use std::path::{Path, PathBuf};

/// The label selector of vigil's agent pods (the DaemonSet's template).
pub(super) const AGENT_PODS: &str = "app.kubernetes.io/name=vigil";

/// How the author's commands reach a registry.
#[derive(Debug, clap::Args)]
pub(super) struct RegistryArgs {
    /// Plain HTTP to the registry (only when set: never a silent downgrade).
    #[arg(long)]
    insecure: bool,
    /// Sign in as this user, with the password in `$VIGIL_REGISTRY_PASSWORD`; anonymous
    /// without it.
    #[arg(long)]
    username: Option<String>,
    /// Certificates (PEM) trusted beside the system's roots: a private registry's CA.
    #[arg(long, value_name = "FILE")]
    registry_ca: Option<PathBuf>,
}

impl RegistryArgs {
    pub(super) fn access(self) -> anyhow::Result<Access> {
        Ok(Access {
            insecure: self.insecure,
            basic: registry_user(self.username)?,
            ca: (self.registry_ca.as_deref())
                .map(|path| read_ca("--registry-ca", path))
                .transpose()?,
        })
    }
}

/// The user `--username` names, with the password in
/// `$VIGIL_REGISTRY_PASSWORD`; `None`: anonymous.
fn registry_user(username: Option<String>) -> anyhow::Result<Option<(String, String)>> {
    let Some(user) = username else {
        return Ok(None);
    };
    let password = std::env::var("VIGIL_REGISTRY_PASSWORD")
        .context("--username needs the password in $VIGIL_REGISTRY_PASSWORD")?;
    Ok(Some((user, password)))
}

/// The PEM certificates of a CA flag (`--registry-ca`, `--kubelet-ca`).
pub(super) fn read_ca(flag: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {flag} {}", path.display()))
}

/// The cosign public key `flag` names.
pub(super) fn read_key(flag: &str, path: &Path) -> anyhow::Result<VerificationKey> {
    let pem = crate::base::fsutil::read_text(path, 64 * 1024)
        .with_context(|| format!("cannot read {flag} {}", path.display()))?;
    VerificationKey::from_pem(&pem).with_context(|| format!("{flag} {}", path.display()))
}

/// Where `simulate` and `policy check|test|push|precompile` keep compiled
/// components, so an unchanged JavaScript or Python component loads in
/// milliseconds instead of compiling for seconds. One directory for all of
/// them, and for the skeletons' `test.sh`.
#[derive(Debug, clap::Args)]
pub(super) struct CacheArgs {
    /// Keep compiled components here [default: $XDG_CACHE_HOME/vigil/components,
    /// else ~/.cache/vigil/components].
    #[arg(long, value_name = "DIR", env = "VIGIL_CACHE_DIR",
          value_parser = clap::builder::OsStringValueParser::new())]
    cache_dir: Option<std::ffi::OsString>,
    /// Compile every component afresh and keep nothing (whatever
    /// `--cache-dir` or `$VIGIL_CACHE_DIR` say).
    #[arg(long)]
    no_cache: bool,
}

impl CacheArgs {
    /// The cache directory to use, if any. An empty `--cache-dir` or
    /// `$VIGIL_CACHE_DIR` is no directory, not the current one: the default.
    pub(super) fn dir(self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        let given = self
            .cache_dir
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from);
        given.or_else(|| {
            let xdg = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .filter(|dir| dir.is_absolute());
            let home = || std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache"));
            Some(xdg.or_else(home)?.join("vigil/components"))
        })
    }
}

/// A duration as Kubernetes users write it (`90s`, `1h30m`, `24h`), printed
/// the same way, so a flag's default is the value the code holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GoDuration(pub std::time::Duration);

impl std::str::FromStr for GoDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let parsed: jiff::SignedDuration = text
            .parse()
            .map_err(|e| format!("not a duration like 90s or 24h: {e}"))?;
        std::time::Duration::try_from(parsed)
            .map(Self)
            .map_err(|_| "must not be negative".into())
    }
}

impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = self.0.as_secs();
        let (hours, minutes, rest) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
        let millis = self.0.subsec_millis();
        if hours > 0 {
            write!(f, "{hours}h")?;
        }
        if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        if rest > 0 || millis > 0 || seconds == 0 {
            if millis > 0 {
                write!(f, "{rest}.{millis:03}s")?;
            } else {
                write!(f, "{rest}s")?;
            }
        }
        Ok(())
    }
}

/// The API clients of a command that runs once (`cleanup cluster`,
/// `policy precompile --from-cluster`): `kubeconfig`, else the in-cluster
/// service account, else `$KUBECONFIG`, with the default limits.
pub(super) async fn one_shot_clients(kubeconfig: Option<&Path>) -> anyhow::Result<Clients> {
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::default());
    crate::cluster::client::connect(kubeconfig, None, &metrics, ClientOptions::default(), None)
        .await
        .context("cannot reach the cluster")
}

/// Installs the SIGTERM and SIGINT handlers now, so that a signal during
/// start-up is not lost (it ends the agent once started), and resolves on
/// either.
pub(super) fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_and_print_as_kubernetes_users_write_them() {
        let read = |text: &str| text.parse::<GoDuration>().map(|d| d.0);
        assert_eq!(read("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(read("1h30m"), Ok(Duration::from_secs(5_400)));
        assert!(read("-5s").unwrap_err().contains("negative"));
        assert!(read("soon").unwrap_err().contains("not a duration"));
        for text in ["24h", "1h30m", "30s", "5m", "0s", "1m0.500s", "2h0m5s"] {
            let printed = text.parse::<GoDuration>().unwrap().to_string();
            assert_eq!(read(&printed), read(text), "{text} printed as {printed}");
        }
        assert_eq!(GoDuration(Duration::from_secs(90)).to_string(), "1m30s");
        assert_eq!(GoDuration(Duration::from_secs(3600)).to_string(), "1h");
    }

    #[test]
    fn an_empty_cache_directory_is_the_default_not_the_current_directory() {
        let args = |dir: &str| CacheArgs {
            cache_dir: Some(dir.into()),
            no_cache: false,
        };
        let default = CacheArgs {
            cache_dir: None,
            no_cache: false,
        }
        .dir();
        assert_eq!(args("").dir(), default);
        assert_eq!(args("/c").dir(), Some(PathBuf::from("/c")));
        let off = CacheArgs {
            cache_dir: Some("/c".into()),
            no_cache: true,
        };
        assert_eq!(off.dir(), None);
    }
}
