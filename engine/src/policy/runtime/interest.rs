//! What a policy reads of the pods (what it declares once per config), and
//! pods narrowed to it for one call.
//!
//! Pods are narrowed in place and put back exactly as they were afterwards,
//! so a call costs no copy of the pods: a policy interested in nothing (the
//! built-in strategies) gets every pod without a single label or annotation,
//! and the host allocates nothing to give it that.

use crate::base::text;
use crate::model::bindings::{Interest, KeyValue, Pod, StrategyInterest};
use crate::policy::Fault;

/// What a policy declared it reads under one config.
#[derive(Debug)]
pub struct Declared {
    /// The labels and annotations it reads of each pod.
    pub keys: Interest,
    /// Whether a strategy's `evaluate` reads the pods (a sorter always gets
    /// its candidates').
    pub pods_in_evaluate: bool,
}

impl From<Interest> for Declared {
    fn from(keys: Interest) -> Self {
        Self {
            keys,
            pods_in_evaluate: true,
        }
    }
}

impl From<StrategyInterest> for Declared {
    fn from(declared: StrategyInterest) -> Self {
        Self {
            keys: declared.keys,
            pods_in_evaluate: declared.pods_in_evaluate,
        }
    }
}

/// Most keys an interest may list, labels and annotations each.
pub(crate) const MAX_KEYS: usize = 64;
/// Longest key an interest may list (a label key's 253-byte prefix, `/`,
/// and a 63-byte name).
const MAX_KEY: usize = 317;

/// Checks a policy's interest: bounded, and no empty key.
pub(crate) fn check(interest: &Interest) -> Result<(), Fault> {
    for (what, keys) in [
        ("labels", &interest.labels),
        ("annotations", &interest.annotations),
    ] {
        if keys.len() > MAX_KEYS {
            return Err(Fault::InvalidAnswer(format!(
                "interest lists {} {what}; at most {MAX_KEYS} keys may be listed",
                keys.len()
            )));
        }
        if let Some(key) = keys.iter().find(|k| k.is_empty() || k.len() > MAX_KEY) {
            return Err(Fault::InvalidAnswer(format!(
                "interest {what} key {:?} is not a key (1-{MAX_KEY} bytes)",
                text::bounded(key, 64)
            )));
        }
    }
    Ok(())
}

/// Whether `key` is one of `keys` (a key ending in `*` matches every key
/// starting with what precedes it).
fn wanted(keys: &[String], key: &str) -> bool {
    keys.iter().any(|k| match k.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => k == key,
    })
}

/// The labels and annotations taken from pods while they are narrowed.
#[must_use = "the pods' labels and annotations are lost unless restored"]
pub(crate) struct SetAside(Vec<(Vec<KeyValue>, Vec<KeyValue>)>);

/// Leaves each pod only the labels and annotations `interest` lists.
pub(crate) fn narrow<'a>(pods: impl Iterator<Item = &'a mut Pod>, interest: &Interest) -> SetAside {
    let keep = |all: &[KeyValue], keys: &[String]| -> Vec<KeyValue> {
        all.iter()
            .filter(|kv| wanted(keys, &kv.key))
            .cloned()
            .collect()
    };
    SetAside(
        pods.map(|pod| {
            let labels = std::mem::take(&mut pod.labels);
            let annotations = std::mem::take(&mut pod.annotations);
            pod.labels = keep(&labels, &interest.labels);
            pod.annotations = keep(&annotations, &interest.annotations);
            (labels, annotations)
        })
        .collect(),
    )
}

/// Gives the pods [`narrow`] narrowed their labels and annotations back, as
/// they were.
pub(crate) fn restore<'a>(pods: impl Iterator<Item = &'a mut Pod>, aside: SetAside) {
    for (pod, (labels, annotations)) in pods.zip(aside.0) {
        pod.labels = labels;
        pod.annotations = annotations;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(keys: &[&str]) -> Vec<KeyValue> {
        keys.iter()
            .map(|k| KeyValue {
                key: (*k).into(),
                value: format!("value of {k}"),
            })
            .collect()
    }

    fn interest(labels: &[&str], annotations: &[&str]) -> Interest {
        Interest {
            labels: labels.iter().map(|k| (*k).into()).collect(),
            annotations: annotations.iter().map(|k| (*k).into()).collect(),
        }
    }

    fn pod(name: &str) -> Pod {
        Pod {
            labels: pairs(&["app", "team", "vigil.dev/skip", "vigil.dev/tier"]),
            annotations: pairs(&["note", "vigil.dev/skip"]),
            ..crate::model::fixture::pod(name).usage_mib(10).build()
        }
    }

    fn keys(pairs: &[KeyValue]) -> Vec<&str> {
        pairs.iter().map(|kv| kv.key.as_str()).collect()
    }

    #[test]
    fn pods_carry_only_the_keys_asked_for_and_get_everything_back() {
        let mut pods = [pod("a"), pod("b")];
        let before = format!("{pods:?}");
        let aside = narrow(
            pods.iter_mut(),
            &interest(&["team", "vigil.dev/*", "absent"], &["vigil.dev/skip"]),
        );
        for pod in &pods {
            assert_eq!(
                keys(&pod.labels),
                ["team", "vigil.dev/skip", "vigil.dev/tier"]
            );
            assert_eq!(keys(&pod.annotations), ["vigil.dev/skip"]);
            assert_eq!(pod.labels[0].value, "value of team");
        }
        restore(pods.iter_mut(), aside);
        assert_eq!(format!("{pods:?}"), before, "restored as they were");
    }

    #[test]
    fn no_interest_means_no_labels_and_a_star_means_all() {
        let mut pods = [pod("a")];
        let aside = narrow(pods.iter_mut(), &interest(&[], &[]));
        assert!(pods[0].labels.is_empty() && pods[0].annotations.is_empty());
        restore(pods.iter_mut(), aside);
        let aside = narrow(pods.iter_mut(), &interest(&["*"], &[]));
        assert_eq!(keys(&pods[0].labels), keys(&pod("a").labels));
        assert!(pods[0].annotations.is_empty());
        restore(pods.iter_mut(), aside);
        assert_eq!(format!("{:?}", pods[0]), format!("{:?}", pod("a")));
    }

    #[test]
    fn an_interest_too_large_or_with_an_empty_key_is_invalid() {
        assert!(check(&interest(&["app", "vigil.dev/*"], &["*"])).is_ok());
        let many: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let fault = check(&interest(&many, &[])).unwrap_err();
        assert!(fault.to_string().contains("at most 64 keys"), "{fault}");
        let fault = check(&interest(&[], &[""])).unwrap_err();
        assert!(fault.to_string().contains("annotations key"), "{fault}");
        let long = "k".repeat(MAX_KEY + 1);
        assert!(check(&interest(&[&long], &[])).is_err());
    }
}
