//! Registry credentials from a `kubernetes.io/dockerconfigjson` Secret: its
//! `.dockerconfigjson` holds `auths`, by registry, each a `username` and
//! `password` or an `auth` of `base64(username:password)`. Keys are matched
//! by host and port, whatever scheme or path they were written with
//! (`https://registry.example/v1/` is `registry.example`).

use base64::Engine as _;
use serde::Deserialize;
use std::collections::BTreeMap;
use thiserror::Error;

/// The key of a dockerconfigjson Secret's data.
pub(crate) const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// Why a Secret gives no credentials.
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum CredentialsError {
    /// `.dockerconfigjson` does not parse.
    #[error("its {DOCKER_CONFIG_KEY} is not a docker config: {0}")]
    Parse(String),
    /// No entry names the registry.
    #[error("it has no credentials for {0}")]
    NoEntry(String),
    /// The entry has neither a username and password nor a valid `auth`.
    #[error("its entry for {0} has no username and password")]
    Incomplete(String),
}

#[derive(Debug, Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
}

/// The host (and port) a docker config key names.
fn host(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

/// The user and password `config` (a `.dockerconfigjson`) holds for
/// `registry` (`host[:port]`).
///
/// # Errors
/// It does not parse, has no entry for the registry, or the entry is
/// incomplete.
pub(crate) fn basic(config: &[u8], registry: &str) -> Result<(String, String), CredentialsError> {
    let config: DockerConfig =
        serde_json::from_slice(config).map_err(|e| CredentialsError::Parse(e.to_string()))?;
    let entry = config
        .auths
        .iter()
        .find(|(key, _)| host(key) == registry)
        .map(|(_, entry)| entry)
        .ok_or_else(|| CredentialsError::NoEntry(registry.to_owned()))?;
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok((user.clone(), password.clone()));
    }
    entry
        .auth
        .as_deref()
        .and_then(|auth| base64::engine::general_purpose::STANDARD.decode(auth).ok())
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|pair| {
            let (user, password) = pair.split_once(':')?;
            Some((user.to_owned(), password.to_owned()))
        })
        .ok_or_else(|| CredentialsError::Incomplete(registry.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_host_in_either_form() {
        let config = br#"{"auths": {
            "https://registry.example/v1/": {"username": "ci", "password": "s3cret"},
            "127.0.0.1:5000": {"auth": "cHVsbGVyOnB3OmQ="}
        }}"#;
        assert_eq!(
            basic(config, "registry.example"),
            Ok(("ci".into(), "s3cret".into()))
        );
        // base64("puller:pw:d"): the password may hold a colon.
        assert_eq!(
            basic(config, "127.0.0.1:5000"),
            Ok(("puller".into(), "pw:d".into()))
        );
        assert_eq!(
            basic(config, "127.0.0.1"),
            Err(CredentialsError::NoEntry("127.0.0.1".into()))
        );
    }

    #[test]
    fn a_broken_config_or_entry_says_so() {
        assert!(matches!(basic(b"{", "r"), Err(CredentialsError::Parse(_))));
        let config = br#"{"auths": {"r": {"auth": "not base64!"}, "s": {"username": "u"}}}"#;
        assert_eq!(
            basic(config, "r"),
            Err(CredentialsError::Incomplete("r".into()))
        );
        assert_eq!(
            basic(config, "s"),
            Err(CredentialsError::Incomplete("s".into()))
        );
    }
}
