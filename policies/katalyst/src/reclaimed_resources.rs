//! Reclaimed resources (katalyst's `resource/reclaimed_resources.go`): the
//! pods at katalyst's `reclaimed_cores` QoS level run on what the node's
//! guaranteed pods leave idle, and request it as extended resources
//! (`resource.katalyst.kubewharf.io/reclaimed_millicpu`, `…/reclaimed_memory`).
//! When what they request, summed, exceeds a rate × what the node offers,
//! the node has promised more than it has: a hard threshold per resource,
//! and the pods requesting most of it go first.
//!
//! What the node offers is a signal by the resource's name without its
//! domain (`reclaimed_millicpu`), read where `offered` says: `cnr`, katalyst's
//! CustomNodeResource of the node, as katalyst reads it
//! (`cnr.allocatable.<name>`), or `node`, the Node's `status.allocatable`,
//! where an operator without katalyst (or a device plugin) advertises it
//! (`node.allocatable.<name>`). The threshold's scope is that name too.

use crate::knobs::{fields, grace, signal};
use crate::{Decision, Eviction, Interest, MetLevel, Pod, Signal, StrategyInterest, Threshold};
use policy_kit::katalyst::{self, QosLevel};
use std::collections::BTreeMap;

/// The strategy's name as vigil ships it.
pub const NAME: &str = "reclaimed-resources";

/// katalyst's reclaimed extended resources.
pub const RECLAIMED_MILLICPU: &str = "resource.katalyst.kubewharf.io/reclaimed_millicpu";
/// katalyst's reclaimed memory, in bytes.
pub const RECLAIMED_MEMORY: &str = "resource.katalyst.kubewharf.io/reclaimed_memory";

/// katalyst's `DeletionGracePeriod` default, in seconds.
const DEFAULT_GRACE: u64 = 60;

/// Where the node's offer is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// katalyst's CustomNodeResource of the node (`cnr.allocatable.*`).
    Cnr,
    /// The Node's `status.allocatable` (`node.allocatable.*`).
    Node,
}

impl Offered {
    /// The prefix of the signals that carry the offer.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Cnr => "cnr.allocatable.",
            Self::Node => "node.allocatable.",
        }
    }
}

/// The config: `{"offered": "node", "thresholds": {"<resource>": 5.0},
/// "gracePeriodSeconds": 60, "toleranceSeconds": 0, "skipZeroQuantity":
/// ["<resource>"]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where the node's offer is read (`node` unless set).
    pub offered: Offered,
    /// Requests over offered × this rate meet the threshold, per resource
    /// (katalyst's `eviction-reclaimed-resources-threshold`; a resource
    /// without one is not judged).
    pub thresholds: BTreeMap<String, f64>,
    /// The victim's grace period (katalyst's `…-grace-period`); `None`:
    /// the pod's own.
    pub grace_period_seconds: Option<u64>,
    /// How long the threshold holds before a victim goes (katalyst's
    /// `…-threshold-met-tolerance-duration`).
    pub tolerance_seconds: u64,
    /// Resources not judged while the node offers none of them (katalyst's
    /// `SkipZeroQuantityResourceNames`).
    pub skip_zero_quantity: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            offered: Offered::Node,
            thresholds: BTreeMap::from([
                (RECLAIMED_MILLICPU.to_owned(), 5.0),
                (RECLAIMED_MEMORY.to_owned(), 5.0),
            ]),
            grace_period_seconds: Some(DEFAULT_GRACE),
            tolerance_seconds: 0,
            skip_zero_quantity: Vec::new(),
        }
    }
}

impl Config {
    /// Parses the strategy's config (empty: katalyst's defaults).
    ///
    /// # Errors
    /// It is not a JSON object of the fields above.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config = Self::default();
        let Some(fields) = fields(text)? else {
            return Ok(config);
        };
        for (key, field) in &fields {
            match key.as_str() {
                "offered" => {
                    config.offered = match field.as_str() {
                        Some("cnr") => Offered::Cnr,
                        Some("node") => Offered::Node,
                        _ => return Err("offered must be \"cnr\" or \"node\"".into()),
                    };
                }
                "thresholds" => {
                    let rates = field
                        .as_object()
                        .ok_or("thresholds must map resources to rates")?;
                    config.thresholds.clear();
                    for (resource, rate) in rates {
                        let rate = (rate.as_f64())
                            .filter(|r| r.is_finite() && *r > 0.0)
                            .ok_or(format!("thresholds.{resource} must be a positive number"))?;
                        config.thresholds.insert(resource.clone(), rate);
                    }
                }
                "gracePeriodSeconds" => {
                    config.grace_period_seconds = grace(field, "gracePeriodSeconds")?;
                }
                "toleranceSeconds" => {
                    config.tolerance_seconds = field
                        .as_u64()
                        .ok_or("toleranceSeconds must be a whole number of seconds")?;
                }
                "skipZeroQuantity" => {
                    let names = field
                        .as_array()
                        .ok_or("skipZeroQuantity must list resource names")?;
                    config.skip_zero_quantity = (names.iter())
                        .map(|n| n.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or("skipZeroQuantity must list resource names")?;
                }
                other => {
                    return Err(format!(
                        "unknown field {other:?}: offered, thresholds, gracePeriodSeconds, toleranceSeconds, skipZeroQuantity"
                    ));
                }
            }
        }
        Ok(config)
    }
}

/// What the strategy reads: katalyst's QoS level, the pods in `evaluate`
/// (their extended requests come with every pod) and what the node offers,
/// where `offered` says (so only that source is watched).
pub fn interest(config: &str) -> StrategyInterest {
    let offered = Config::parse(config).map_or(Offered::Node, |c| c.offered);
    StrategyInterest {
        keys: Interest {
            labels: vec![],
            annotations: vec![katalyst::QOS_LEVEL.into()],
            facts: vec![],
        },
        pods_in_evaluate: true,
        signals: vec![format!("{}*", offered.prefix())],
    }
}

/// Whether `pod` runs at katalyst's `reclaimed_cores` level.
fn reclaimed(pod: &Pod) -> bool {
    crate::ranking::qos_level(pod) == Some(QosLevel::ReclaimedCores)
}

/// The scope of `resource`: its name without its domain
/// (`reclaimed_millicpu`), as a scope is a name without `/`.
pub fn scope(resource: &str) -> &str {
    resource.rsplit('/').next().unwrap_or(resource)
}

/// What `pod` requests of the resource of `scope`.
fn request(pod: &Pod, scope_of: &str) -> u64 {
    (pod.extended_requests.iter())
        .find(|amount| scope(&amount.name) == scope_of)
        .map_or(0, |amount| amount.value)
}

/// A hard threshold for each resource whose reclaimed pods' requests exceed
/// its rate × what the node offers; a resource the node does not offer,
/// or offers none of while listed in `skipZeroQuantity`, is not judged.
///
/// # Errors
/// The config is invalid: nothing is judged.
pub fn evaluate(signals: &[Signal], pods: &[Pod], config: &str) -> Result<Decision, String> {
    let config = Config::parse(config)?;
    let pods: Vec<&Pod> = pods.iter().filter(|pod| reclaimed(pod)).collect();
    let mut used: BTreeMap<&str, u64> = BTreeMap::new();
    for amount in pods.iter().flat_map(|pod| &pod.extended_requests) {
        *used.entry(amount.name.as_str()).or_default() += amount.value;
    }
    let thresholds = (used.into_iter())
        .filter_map(|(resource, used)| {
            let name = format!("{}{}", config.offered.prefix(), scope(resource));
            let offered = signal(signals, &name)?.value;
            if offered <= 0.0 && config.skip_zero_quantity.iter().any(|r| r == resource) {
                return None;
            }
            let bound = config.thresholds.get(resource)? * offered;
            ((used as f64) > bound).then(|| Threshold {
                met: MetLevel::Hard,
                scope: scope(resource).to_owned(),
                signal: name,
                observed: used as f64,
                threshold: bound,
                grace_period_seconds: config.tolerance_seconds,
                condition: None,
            })
        })
        .collect();
    Ok(Decision {
        thresholds,
        soft_candidates: vec![],
        force_evictions: vec![],
        state: None,
    })
}

/// The reclaimed pods, those requesting most of the resource of `scope` first.
///
/// # Errors
/// The config is invalid.
pub fn top_victims(pods: &[Pod], config: &str, scope: &str) -> Result<Vec<Eviction>, String> {
    let config = Config::parse(config)?;
    let mut pods: Vec<&Pod> = pods.iter().filter(|pod| reclaimed(pod)).collect();
    // Stable: pods requesting as much keep the snapshot's order.
    pods.sort_by_key(|pod| std::cmp::Reverse(request(pod, scope)));
    Ok(pods
        .into_iter()
        .map(|pod| Eviction {
            uid: pod.uid.clone(),
            reason: format!(
                "the reclaimed pods request more {scope} than the node offers × its rate; this one requests {}",
                request(pod, scope)
            ),
            grace_period_seconds: config.grace_period_seconds,
        })
        .collect())
}

#[cfg(test)]
mod tests;
