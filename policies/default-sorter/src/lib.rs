//! `default-sorter`: vigil's built-in candidate sorter.
//!
//! Refuses static, mirror and system-critical pods and pods carrying a skip
//! label or annotation named in its config, and keeps the rest in the order
//! the host gives them: the strategies' own ranking (for a threshold, the
//! kubelet's ranking of the built-in strategies). The logic is plain Rust
//! over the generated records ([`sort`]) so the host's benchmark can run the
//! very same code natively.
//!
//! Config (JSON): `{"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]}`;
//! an entry `key=value` refuses only the pods whose key has that value (e.g.
//! `katalyst.kubewharf.io/qos_level=system_cores`: a label or annotation key
//! never holds `=`). Its interest is exactly those keys: the host passes no
//! other label or annotation.

/// Bindings generated from the `candidate-sorter` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "candidate-sorter" });
}

pub use bindings::exports::vigil::policy::sorter::{Candidate, Rejection, Sorted, Urgency};
pub use bindings::vigil::policy::types::{Interest, KeyValue, Pod, QosClass, Resources, Usage};

/// A key that exempts a pod from eviction: whatever its value, or only one.
#[derive(Debug, PartialEq)]
struct Skip {
    key: String,
    value: Option<String>,
}

impl Skip {
    /// `key` or `key=value`.
    fn parse(entry: &str) -> Self {
        match entry.split_once('=') {
            Some((key, value)) => Self {
                key: key.to_owned(),
                value: Some(value.to_owned()),
            },
            None => Self {
                key: entry.to_owned(),
                value: None,
            },
        }
    }

    fn matches(&self, pair: &KeyValue) -> bool {
        pair.key == self.key && self.value.as_ref().is_none_or(|v| *v == pair.value)
    }
}

/// Keys that exempt a pod from eviction, read from the sorter's config.
#[derive(Debug, Default, PartialEq)]
struct SkipKeys {
    labels: Vec<Skip>,
    annotations: Vec<Skip>,
}

impl SkipKeys {
    fn from_config(config: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(if config.trim().is_empty() {
            "{}"
        } else {
            config
        })
        .map_err(|e| format!("config is not JSON: {e}"))?;
        let object = value.as_object().ok_or("config must be a JSON object")?;
        let mut keys = Self::default();
        for (field, list) in object {
            let target = match field.as_str() {
                "skipLabels" => &mut keys.labels,
                "skipAnnotations" => &mut keys.annotations,
                other => return Err(format!("$.{other}: unknown field")),
            };
            let items = list
                .as_array()
                .ok_or(format!("$.{field}: must be a list of strings"))?;
            for (i, item) in items.iter().enumerate() {
                let key = item
                    .as_str()
                    .ok_or(format!("$.{field}[{i}]: must be a string"))?;
                if key.is_empty() || key.starts_with('=') {
                    return Err(format!("$.{field}[{i}]: {key:?} names no key"));
                }
                target.push(Skip::parse(key));
            }
        }
        Ok(keys)
    }
}

/// Why `pod` must not be evicted, if it must not.
fn refusal(pod: &Pod, skip: &SkipKeys) -> Option<String> {
    let has = |pairs: &[KeyValue], skips: &[Skip]| {
        pairs
            .iter()
            .find(|kv| skips.iter().any(|s| s.matches(kv)))
            .map(
                |kv| match skips.iter().any(|s| s.value.is_some() && s.matches(kv)) {
                    true => format!("{}={}", kv.key, kv.value),
                    false => kv.key.clone(),
                },
            )
    };
    if pod.is_static {
        Some("static pod".into())
    } else if pod.is_mirror {
        Some("mirror pod".into())
    } else if pod.is_critical {
        Some("system-critical pod".into())
    } else if let Some(key) = has(&pod.labels, &skip.labels) {
        Some(format!("carries skip label {key}"))
    } else {
        has(&pod.annotations, &skip.annotations).map(|key| format!("carries skip annotation {key}"))
    }
}

/// The labels and annotations the sorter reads under `config`: its skip
/// keys (none if the config is invalid: `sort` reports that).
pub fn interest(config: &str) -> Interest {
    let keys = SkipKeys::from_config(config).unwrap_or_default();
    // Each key once, in the config's order.
    let names = |skips: Vec<Skip>| {
        let mut keys: Vec<String> = Vec::with_capacity(skips.len());
        for skip in skips {
            if !keys.contains(&skip.key) {
                keys.push(skip.key);
            }
        }
        keys
    };
    Interest {
        labels: names(keys.labels),
        annotations: names(keys.annotations),
        facts: Vec::new(),
    }
}

/// Refuses the candidates that must not go and keeps the others in their
/// given order.
///
/// # Errors
/// The config is not valid; nothing is sorted.
pub fn sort(candidates: &[Candidate], config: &str) -> Result<Sorted, String> {
    let skip = SkipKeys::from_config(config)?;
    let mut order = Vec::with_capacity(candidates.len());
    let mut rejected = Vec::new();
    for (index, candidate) in (0u32..).zip(candidates) {
        match refusal(&candidate.pod, &skip) {
            Some(reason) => rejected.push(Rejection { index, reason }),
            None => order.push(index),
        }
    }
    Ok(Sorted { order, rejected })
}

#[cfg(target_arch = "wasm32")]
mod component {
    struct DefaultSorter;

    impl crate::bindings::exports::vigil::policy::sorter::Guest for DefaultSorter {
        fn declare_interest(config: String) -> super::Interest {
            super::interest(&config)
        }

        fn sort(
            _strategies: Vec<String>,
            candidates: Vec<super::Candidate>,
            config: String,
        ) -> Result<super::Sorted, String> {
            super::sort(&candidates, &config)
        }
    }

    crate::bindings::export!(DefaultSorter with_types_in crate::bindings);
}

#[cfg(test)]
mod tests;
