//! A second version of a policy in shadow during a simulation (`vigil
//! simulate --shadow NAME=FILE`): asked what the serving version is asked
//! each cycle, on the same inputs, never acted on; where it would have
//! decided otherwise is in the timeline, and the tally in the summary. What
//! an author sees before any node runs the new version. A merger in shadow
//! merges the layers the serving one merges (the scenario's config, each
//! change) and the two configs are compared.

use super::record::{ShadowRecord, Step};
use crate::base::report::Chain;
use crate::config::{ConfigError, VigilConfig};
use crate::eviction::Policies;
use crate::eviction::shadow::{CallKind, Comparison, ShadowSet, Shadowed, Verdict, merge_verdict};
use crate::policy::{LoadError, Merger, Origin, Policy, Registry, World};
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// A version to run in shadow of the serving policy of its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowFile {
    /// The policy it shadows.
    pub policy: String,
    /// Its component.
    pub path: PathBuf,
}

impl std::str::FromStr for ShadowFile {
    type Err = String;

    /// `NAME=FILE`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (policy, path) = text
            .split_once('=')
            .filter(|(name, path)| !name.is_empty() && !path.is_empty())
            .ok_or_else(|| format!("{text:?} is not NAME=FILE"))?;
        Ok(Self {
            policy: policy.to_owned(),
            path: PathBuf::from(path),
        })
    }
}

/// Why a version cannot run in shadow.
#[derive(Debug, Error)]
pub enum ShadowError {
    /// Its file cannot be read.
    #[error("cannot read {}, to shadow {policy}", path.display())]
    Read {
        /// The policy.
        policy: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It does not load.
    #[error("{} does not load, to shadow {policy}", path.display())]
    Load {
        /// The policy.
        policy: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: LoadError,
    },
    /// No policy of its name serves: there is nothing to compare with.
    #[error("no policy {policy} serves, so {} has nothing to shadow", path.display())]
    NotServing {
        /// The policy.
        policy: String,
        /// The file.
        path: PathBuf,
    },
    /// A second file for a policy that already has one in shadow.
    #[error("{} and {} both shadow {policy}: one version in shadow per policy", first.display(), path.display())]
    Twice {
        /// The policy.
        policy: String,
        /// The file given first.
        first: PathBuf,
        /// The file given again.
        path: PathBuf,
    },
    /// It is of another world than the policy it shadows.
    #[error("{} is of world {shadow}, {policy} of {serving}: {why}", path.display(), shadow = shadow.name(), serving = serving.name())]
    World {
        /// The policy.
        policy: String,
        /// The file.
        path: PathBuf,
        /// The shadow's world.
        shadow: World,
        /// The serving version's world.
        serving: World,
        /// What is wrong with that.
        why: &'static str,
    },
}

/// The versions in shadow of one simulation, and their tallies.
pub(super) struct Shadows {
    shadowed: Arc<Shadowed>,
    /// The merger in shadow, if any.
    merger: Option<Arc<Policy>>,
    records: Vec<ShadowRecord>,
    /// Notes of the config's merges, for the next step.
    notes: Vec<String>,
}

impl Shadows {
    /// Loads `files`, each with the limits `registry` gives its policy.
    ///
    /// # Errors
    /// A file cannot be read or loaded, or is no version of what serves.
    pub(super) fn load(
        registry: &Arc<Registry>,
        files: &[ShadowFile],
    ) -> Result<Self, ShadowError> {
        let mut policies = Vec::new();
        let mut records = Vec::new();
        let mut merger = None;
        for ShadowFile { policy, path } in files {
            if let Some(first) = records.iter().find(|r: &&ShadowRecord| &r.policy == policy) {
                return Err(ShadowError::Twice {
                    policy: policy.clone(),
                    first: first.file.clone(),
                    path: path.clone(),
                });
            }
            let serving = registry
                .get(policy)
                .ok_or_else(|| ShadowError::NotServing {
                    policy: policy.clone(),
                    path: path.clone(),
                })?;
            let bytes = std::fs::read(path).map_err(|source| ShadowError::Read {
                policy: policy.clone(),
                path: path.clone(),
                source,
            })?;
            let limits = registry.limits().for_policy(policy);
            let origin = Origin::File(path.clone());
            let shadow = (registry.host())
                .load(policy, bytes, origin, limits)
                .map_err(|source| ShadowError::Load {
                    policy: policy.clone(),
                    path: path.clone(),
                    source,
                })?;
            if shadow.world() != serving.world() {
                return Err(ShadowError::World {
                    policy: policy.clone(),
                    path: path.clone(),
                    shadow: shadow.world(),
                    serving: serving.world(),
                    why: "a shadow is a version of the policy it shadows",
                });
            }
            records.push(ShadowRecord::new(policy, path, shadow.digest().hex()));
            if shadow.world() == World::ConfigMerger {
                merger = Some(Arc::new(shadow));
            } else {
                policies.push(Arc::new(shadow));
            }
        }
        let set = ShadowSet::new(policies);
        let names = set.names();
        let serving: Arc<dyn Policies> = Arc::<Registry>::clone(registry);
        Ok(Self {
            shadowed: Arc::new(Shadowed::new(serving, Arc::new(set), names)),
            merger,
            records,
            notes: Vec::new(),
        })
    }

    /// Judges one merge of the config: `serving` is what the serving merger
    /// made of the layers, `merge` makes them again with another merger.
    pub(super) fn judge_merge(
        &mut self,
        serving: &Result<VigilConfig, ConfigError>,
        merge: impl FnOnce(&Merger<'_>) -> Result<VigilConfig, ConfigError>,
    ) {
        let Some(policy) = self.merger.clone() else {
            return;
        };
        let Some(merger) = policy.as_merger() else {
            return;
        };
        let refused = serving.as_ref().err().map(|why| Chain(why).to_string());
        let serving = serving
            .as_ref()
            .map_err(|_| refused.as_deref().unwrap_or_default());
        let verdict = merge_verdict(serving, merge(&merger));
        self.tally(Comparison {
            policy: policy.name().to_owned(),
            call: CallKind::Merge,
            verdict,
        });
    }

    /// What the eviction manager asks: the serving policies, watched.
    pub(super) fn policies(&self) -> Arc<dyn Policies> {
        self.shadowed.clone()
    }

    /// Judges the cycle just run: its divergences and faults (and those of
    /// the config's merges since the last step) go to `step`, every
    /// comparison to the tally.
    pub(super) fn judge(&mut self, step: &mut Step) {
        for comparison in self.shadowed.judge() {
            self.tally(comparison);
        }
        step.shadow.append(&mut self.notes);
    }

    fn tally(&mut self, comparison: Comparison) {
        let Comparison {
            policy,
            call,
            verdict,
        } = comparison;
        let Some(record) = self.records.iter_mut().find(|r| r.policy == policy) else {
            return;
        };
        record.comparisons += 1;
        let digest = &record.digest[..12];
        match verdict {
            Verdict::Agree => record.agreements += 1,
            Verdict::Differ(words) => {
                record.divergences += 1;
                (self.notes).push(format!(
                    "shadow {policy}@{digest} differs ({call}): {words}"
                ));
            }
            Verdict::Fault(message) => {
                record.faults += 1;
                (self.notes).push(format!(
                    "shadow {policy}@{digest} faulted ({call}): {message}"
                ));
            }
        }
    }
    /// The tallies.
    pub(super) fn into_records(self) -> Vec<ShadowRecord> {
        self.records
    }
}
