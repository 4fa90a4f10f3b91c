//! `memory-pressure`: vigil's built-in eviction strategy for node memory,
//! with the kubelet's `memory.available` semantics.
//!
//! - A hard threshold (default `100Mi`) is met as soon as the signal falls
//!   below it; a soft threshold, if set, is met with its grace period.
//! - Minimum reclaim: once met, a threshold stays met until the signal is back
//!   above threshold plus `minimumReclaim`.
//! - Top victims follow the kubelet's memory ranking: pods above their request
//!   first, then lower priority, then the larger usage above request.
//!
//! Config (JSON), every field optional:
//! `{"signal": "memory.available", "hard": "100Mi", "soft": "300Mi",
//!   "softGracePeriodSeconds": 30, "minimumReclaim": "0"}`; amounts are
//! quantities or percentages of the signal's capacity.

/// Bindings generated from the `eviction-strategy` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "eviction-strategy" });
}

pub use bindings::exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, MetLevel, Signal, Snapshot, Threshold,
};
pub use bindings::vigil::policy::types::{KeyValue, Pod, QosClass, Resources, Usage};
use policy_kit::{Amount, MemoryFacts, memory_rank};
use serde_json::{Map, Value};

/// The only scope this strategy answers for.
pub const SCOPE: &str = "memory";

/// The strategy's parsed configuration.
#[derive(Debug, Clone, PartialEq)]
struct Config {
    signal: String,
    hard: Amount,
    soft: Option<Amount>,
    soft_grace_period_seconds: u64,
    minimum_reclaim: Amount,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            signal: "memory.available".into(),
            hard: Amount::Absolute(100 << 20),
            soft: None,
            soft_grace_period_seconds: 0,
            minimum_reclaim: Amount::Absolute(0),
        }
    }
}

impl Config {
    fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(if text.trim().is_empty() { "{}" } else { text })
            .map_err(|e| format!("config is not JSON: {e}"))?;
        let object = value.as_object().ok_or("config must be a JSON object")?;
        let mut config = Self::default();
        for (field, value) in object {
            match field.as_str() {
                "signal" => config.signal = string(object, field)?.to_owned(),
                "hard" => config.hard = amount(object, field)?,
                "soft" => config.soft = Some(amount(object, field)?),
                "minimumReclaim" => config.minimum_reclaim = amount(object, field)?,
                "softGracePeriodSeconds" => {
                    config.soft_grace_period_seconds = value
                        .as_u64()
                        .ok_or(format!("$.{field}: must be a non-negative integer"))?
                }
                other => return Err(format!("$.{other}: unknown field")),
            }
        }
        Ok(config)
    }
}

fn string<'a>(object: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    object[field]
        .as_str()
        .ok_or(format!("$.{field}: must be a string"))
}

fn amount(object: &Map<String, Value>, field: &str) -> Result<Amount, String> {
    Amount::parse(string(object, field)?).map_err(|e| format!("$.{field}: {e}"))
}

/// The signal the strategy watches, or why it cannot judge.
fn observe<'a>(snapshot: &'a Snapshot, config: &Config) -> Result<&'a Signal, String> {
    snapshot
        .signals
        .iter()
        .find(|s| s.name == config.signal)
        .ok_or_else(|| format!("signal {} is missing from the snapshot", config.signal))
}

fn resolve(amount: Amount, signal: &Signal, what: &str) -> Result<f64, String> {
    amount
        .resolve(signal.capacity)
        .ok_or_else(|| format!("{what} is a percentage but {} has no capacity", signal.name))
}

/// Judges one snapshot.
///
/// # Errors
/// The config is invalid or the signal is missing; nothing should be evicted.
pub fn evaluate(snapshot: &Snapshot) -> Result<Decision, String> {
    let config = Config::parse(&snapshot.config)?;
    let signal = observe(snapshot, &config)?;
    let reclaim = resolve(config.minimum_reclaim, signal, "minimumReclaim")?;
    // Once met, a threshold holds until the signal recovers past threshold + reclaim.
    let with_reclaim = |t: f64, held: bool| if held { t + reclaim } else { t };
    let hard = resolve(config.hard, signal, "hard")?;
    let soft = config
        .soft
        .map(|s| resolve(s, signal, "soft"))
        .transpose()?;

    let (met, threshold, grace) =
        if signal.value < with_reclaim(hard, snapshot.last_met == MetLevel::Hard) {
            (MetLevel::Hard, hard, 0)
        } else if let Some(soft) =
            soft.filter(|&s| signal.value < with_reclaim(s, snapshot.last_met != MetLevel::NotMet))
        {
            (MetLevel::Soft, soft, config.soft_grace_period_seconds)
        } else {
            (MetLevel::NotMet, soft.unwrap_or(hard), 0)
        };
    let condition = (met != MetLevel::NotMet).then(|| Condition {
        name: "MemoryPressure".into(),
        effects: vec!["NoSchedule".into()],
    });
    Ok(Decision {
        threshold: Threshold {
            met,
            scope: SCOPE.into(),
            signal: signal.name.clone(),
            observed: signal.value,
            threshold,
            grace_period_seconds: grace,
            condition,
        },
        soft_candidates: vec![],
        force_evictions: vec![],
    })
}

/// The `n` pods the kubelet would evict first for memory.
///
/// # Errors
/// The scope is not `memory`, or the config or signal is unusable.
pub fn top_victims(snapshot: &Snapshot, scope: &str, n: u32) -> Result<Vec<Eviction>, String> {
    if scope != SCOPE {
        return Err(format!(
            "unknown scope {scope:?}; this strategy answers for {SCOPE:?}"
        ));
    }
    let config = Config::parse(&snapshot.config)?;
    let signal = observe(snapshot, &config)?;
    let facts = |p: &Pod| MemoryFacts {
        usage: p.usage.memory_working_set_bytes,
        request: p.requests.memory_bytes,
        priority: p.priority,
    };
    let mut ranked: Vec<&Pod> = snapshot.pods.iter().collect();
    ranked.sort_by(|a, b| memory_rank(&facts(a), &facts(b)).then_with(|| a.uid.cmp(&b.uid)));
    Ok(ranked
        .into_iter()
        .take(n as usize)
        .map(|pod| Eviction {
            uid: pod.uid.clone(),
            reason: format!(
                "{} is {} MiB; pod uses {} MiB of memory against a request of {} MiB",
                signal.name,
                (signal.value / f64::from(1 << 20)).round(),
                pod.usage.memory_working_set_bytes >> 20,
                pod.requests.memory_bytes >> 20
            ),
            grace_period_seconds: None,
        })
        .collect())
}

#[cfg(target_arch = "wasm32")]
mod component {
    use super::{Decision, Eviction, Snapshot};

    struct MemoryPressure;

    impl crate::bindings::exports::vigil::policy::strategy::Guest for MemoryPressure {
        fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
            super::evaluate(&snapshot)
        }

        fn top_victims(snapshot: Snapshot, scope: String, n: u32) -> Result<Vec<Eviction>, String> {
            super::top_victims(&snapshot, &scope, n)
        }
    }

    crate::bindings::export!(MemoryPressure with_types_in crate::bindings);
}

#[cfg(test)]
mod tests;
