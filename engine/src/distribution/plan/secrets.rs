//! When a pull Secret read is used again and when it is read anew: a
//! cache of each Secret's `.dockerconfigjson` on explicit time, so a fleet
//! retrying an unreachable registry does not read Secrets at every retry,
//! yet a rotated password is picked up.

use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// How long a pull Secret read is used before it is read again.
pub(crate) const SECRET_TTL: Duration = Duration::from_secs(600);

/// The pull Secrets read, by name: each one's `.dockerconfigjson` and when
/// it was read.
#[derive(Debug, Default)]
pub(crate) struct SecretCache {
    read: HashMap<String, (Instant, Vec<u8>)>,
}

impl SecretCache {
    /// The config of the Secret `name` if it was read less than
    /// [`SECRET_TTL`] before `now`.
    pub(crate) fn fresh(&self, name: &str, now: Instant) -> Option<&[u8]> {
        let (read, config) = self.read.get(name)?;
        (now.saturating_duration_since(*read) < SECRET_TTL).then_some(config.as_slice())
    }

    /// The Secret `name` was read at `now` and holds `config`.
    pub(crate) fn read(&mut self, name: &str, config: Vec<u8>, now: Instant) {
        self.read.insert(name.to_owned(), (now, config));
    }

    /// The Secret `name` is read again at its next use (a pull failed in
    /// a way a changed password explains).
    pub(crate) fn forget(&mut self, name: &str) {
        self.read.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_used_until_its_time_is_up_or_it_is_forgotten() {
        let t0 = Instant::now();
        let mut cache = SecretCache::default();
        assert_eq!(cache.fresh("pull", t0), None);
        cache.read("pull", b"{}".to_vec(), t0);
        assert_eq!(cache.fresh("pull", t0), Some(&b"{}"[..]));
        let almost = t0 + SECRET_TTL - Duration::from_millis(1);
        assert_eq!(cache.fresh("pull", almost), Some(&b"{}"[..]));
        assert_eq!(cache.fresh("pull", t0 + SECRET_TTL), None);
        assert_eq!(cache.fresh("other", t0), None);
        cache.forget("pull");
        assert_eq!(cache.fresh("pull", t0), None);
    }
}
