//! The config controller's merges: the cluster's layers over the agent's
//! own with the merger policy, each sent to the merger in shadow and
//! checked for unresolved `configFrom` references; and the agent's own
//! layers at start-up, tried again while the merger faults.

use crate::base::rate::Backoff;
use crate::base::report::Chain;
use crate::config::references::{self, Unresolved};
use crate::config::{ConfigError, VigilConfig};
use crate::controllers::shadow::Merged;
use crate::model::Layer;
use crate::policy::Registry;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// Merges of the agent's own layers tried at start-up before it gives up.
const START_MERGES: u32 = 6;

/// Merges `layers` over `base` with `registry`'s merger.
pub(super) fn merged(
    registry: &Registry,
    base: &[Layer],
    layers: &[Layer],
) -> Result<VigilConfig, ConfigError> {
    let all: Vec<Layer> = base.iter().chain(layers).cloned().collect();
    VigilConfig::merge(registry, all)
}

/// Merges as [`merged`] and refuses a config whose `configFrom` references
/// the layers do not resolve (`problems` says why, by layer source). Each
/// merge goes to `merges`, if any, for a merger in shadow.
pub(super) fn merger<'a>(
    registry: &'a Registry,
    base: &'a [Layer],
    problems: &'a BTreeMap<String, Unresolved>,
    merges: &'a Option<mpsc::Sender<Merged>>,
) -> impl Fn(&[Layer]) -> Result<VigilConfig, ConfigError> + 'a {
    move |layers| {
        let config = merged(registry, base, layers);
        if let Some(merges) = merges {
            let serving = config.as_ref().map_err(|why| Chain(why).to_string());
            let layers = base.iter().chain(layers).cloned().collect();
            // Full: the shadow controller is behind, this merge goes unjudged.
            let _ = merges.try_send(Merged {
                layers,
                serving: serving.cloned(),
            });
        }
        let config = config?;
        references::check(&config, layers, problems)?;
        Ok(config)
    }
}

/// The config `base` (the agent's own `--config` layers) makes over the
/// built-in defaults, merged by the merger policy. A fault is not the
/// layer's doing (a CPU starved at start-up can push the merger past its
/// deadline): it is tried again after 1, 2, 4, 8 and 16 s, so a slow start
/// does not become a crash loop. A layer that does not merge fails at once.
///
/// # Errors
/// The layer does not merge, or the merger faulted `START_MERGES` times.
pub async fn defaults(registry: &Registry, base: &[Layer]) -> Result<VigilConfig, ConfigError> {
    retried_at_start(|| merged(registry, base, &[])).await
}

/// Calls `merge` until it succeeds, fails for a reason of the layers, or
/// has faulted [`START_MERGES`] times, waiting twice as long after each fault.
async fn retried_at_start(
    merge: impl Fn() -> Result<VigilConfig, ConfigError>,
) -> Result<VigilConfig, ConfigError> {
    let backoff = Backoff::new(Duration::from_secs(1), Duration::MAX);
    let mut attempt = 1;
    loop {
        match merge() {
            Err(error) if error.is_transient() && attempt < START_MERGES => {
                let wait = backoff.wait(attempt);
                tracing::warn!(error = %Chain(&error), attempt, retry_in = ?wait, "the agent's own config did not merge; trying again");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use tokio::time::Instant;

    fn deadline() -> ConfigError {
        ConfigError::MergerFault(crate::policy::Fault::Deadline { deadline_ms: 100 })
    }

    #[tokio::test(start_paused = true)]
    async fn a_merger_fault_at_start_up_is_tried_again_with_backoff() {
        let start = Instant::now();
        let calls = Cell::new(0);
        let merged = retried_at_start(|| {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err(deadline())
            } else {
                Ok(VigilConfig {
                    eviction_burst: 7,
                    ..VigilConfig::default()
                })
            }
        })
        .await
        .expect("the third merge succeeds");
        assert_eq!((merged.eviction_burst, calls.get()), (7, 3));
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2), "1 s, then 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_merger_that_faults_every_time_fails_start_up_after_a_bounded_wait() {
        let start = Instant::now();
        let calls = Cell::new(0);
        let result = retried_at_start(|| {
            calls.set(calls.get() + 1);
            Err(deadline())
        })
        .await;
        assert!(
            matches!(result, Err(ConfigError::MergerFault(_))),
            "{result:?}"
        );
        assert_eq!(calls.get(), START_MERGES);
        assert_eq!(start.elapsed(), Duration::from_secs(1 + 2 + 4 + 8 + 16));
    }

    #[tokio::test(start_paused = true)]
    async fn a_layer_that_does_not_merge_fails_start_up_at_once() {
        let start = Instant::now();
        let calls = Cell::new(0);
        let result = retried_at_start(|| {
            calls.set(calls.get() + 1);
            Err(ConfigError::Rejected(crate::model::Rejections(Vec::new())))
        })
        .await;
        assert!(
            matches!(result, Err(ConfigError::Rejected(_))),
            "{result:?}"
        );
        assert_eq!((calls.get(), start.elapsed()), (1, Duration::ZERO));
    }
}
