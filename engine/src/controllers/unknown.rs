//! Warns, in the log and the `vigil_config_unknown_policies` gauge, of
//! config for policies that are not loaded: a misspelt name in a
//! `VigilConfig` would otherwise configure nothing, silently. Checked after every scan of the policies directory and every
//! change of the settings in force; each unknown name is reported once, and
//! again only if it comes back after being resolved.

use crate::config::names::{UnknownPolicy, unknown_policies};
use crate::eviction::EvictionSettings;
use crate::metrics::Metrics;
use crate::policy::Registry;
use crate::policy::lifecycle::reload::ScanReport;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// Runs until the reloader or the settings are gone. Nothing is reported
/// before the first scan: until then only the built-ins are loaded.
pub(crate) async fn warn(
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    mut scans: mpsc::UnboundedReceiver<ScanReport>,
    mut settings: watch::Receiver<EvictionSettings>,
) {
    if scans.recv().await.is_none() {
        return;
    }
    let mut reported = Reported::default();
    loop {
        let loaded: Vec<String> = registry.status().into_iter().map(|p| p.name).collect();
        for policy in reported.news(&settings.borrow_and_update(), &loaded) {
            tracing::warn!(policy = %policy.name, nearest = policy.nearest.as_deref(), "{policy}");
        }
        let unknown = i64::try_from(reported.0.len()).unwrap_or(i64::MAX);
        metrics.config_unknown_policies.set(unknown);
        tokio::select! {
            scan = scans.recv() => if scan.is_none() { return },
            changed = settings.changed() => if changed.is_err() { return },
        }
    }
}

/// The unknown policies reported so far and still unknown.
#[derive(Debug, Default)]
struct Reported(Vec<UnknownPolicy>);

impl Reported {
    /// The policies `settings` configure that are not `loaded` and were not
    /// reported last time; remembers what is unknown now.
    fn news(&mut self, settings: &EvictionSettings, loaded: &[String]) -> Vec<UnknownPolicy> {
        let unknown = unknown_policies(settings.policies.keys(), &settings.sorter, loaded);
        let news = unknown
            .iter()
            .filter(|u| !self.0.contains(u))
            .cloned()
            .collect();
        self.0 = unknown;
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::PolicySettings;

    fn configuring(names: &[&str]) -> EvictionSettings {
        EvictionSettings {
            policies: names
                .iter()
                .map(|n| ((*n).to_owned(), PolicySettings::default()))
                .collect(),
            ..EvictionSettings::default()
        }
    }

    #[test]
    fn an_unknown_name_is_reported_once_and_again_only_after_it_was_resolved() {
        let mut reported = Reported::default();
        let loaded = vec!["default-sorter".to_owned(), "memory-pressure".to_owned()];
        let typo = configuring(&["memory-presure"]);
        let news = reported.news(&typo, &loaded);
        assert_eq!(news.len(), 1);
        assert_eq!(news[0].nearest.as_deref(), Some("memory-pressure"));
        assert!(reported.news(&typo, &loaded).is_empty(), "reported once");
        // The file appears: resolved, nothing to say.
        let mut with_file = loaded.clone();
        with_file.push("memory-presure".into());
        assert!(reported.news(&typo, &with_file).is_empty());
        // It goes again: reported again.
        assert_eq!(reported.news(&typo, &loaded).len(), 1);
    }
}
