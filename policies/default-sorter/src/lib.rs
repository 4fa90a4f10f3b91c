//! `default-sorter`: vigil's built-in candidate sorter.
//!
//! Refuses static, mirror and system-critical pods and pods carrying a skip
//! label or annotation named in its config, and keeps the rest in the order
//! the host gives them: the strategies' own ranking (for a threshold, the
//! kubelet's ranking of the built-in strategies). The logic is plain Rust
//! over the generated records ([`sort`]) so the host's benchmark can run the
//! very same code natively.
//!
//! Config (JSON): `{"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]}`.
//! Its interest is exactly those keys: the host passes no other label or
//! annotation.

/// Bindings generated from the `candidate-sorter` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../wit", world: "candidate-sorter" });
}

pub use bindings::exports::vigil::policy::sorter::{Candidate, Rejection, Sorted, Urgency};
pub use bindings::vigil::policy::types::{Interest, KeyValue, Pod, QosClass, Resources, Usage};

/// Keys that exempt a pod from eviction, read from the sorter's config.
#[derive(Debug, Default, PartialEq)]
struct SkipKeys {
    labels: Vec<String>,
    annotations: Vec<String>,
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
                target.push(key.to_owned());
            }
        }
        Ok(keys)
    }
}

/// Why `pod` must not be evicted, if it must not.
fn refusal(pod: &Pod, skip: &SkipKeys) -> Option<String> {
    let has = |pairs: &[KeyValue], keys: &[String]| {
        pairs
            .iter()
            .find(|kv| keys.contains(&kv.key))
            .map(|kv| kv.key.clone())
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
    Interest {
        labels: keys.labels,
        annotations: keys.annotations,
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
