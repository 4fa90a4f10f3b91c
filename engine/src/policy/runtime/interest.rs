//! What a policy reads of the pods and the node (what it declares once per
//! config), and pods and signals narrowed to it for one call.
//!
//! Pods are narrowed in place and put back exactly as they were afterwards,
//! so a call costs no copy of the pods: a policy interested in nothing (the
//! built-in strategies) gets every pod without a single label, annotation or
//! pod fact beyond the always-there ones, and the host allocates nothing to
//! give it that. Signals beyond the kubelet's reach only the strategies that
//! declared them.

use crate::base::text;
use crate::model::bindings::{
    CpuThrottling, Interest, KeyValue, NumaMemory, Pod, PodFact, Pressure, Signal,
    StrategyInterest, WritableLayers,
};
use crate::policy::Fault;
use crate::signals::catalogue;

/// What a policy declared it reads under one config.
#[derive(Debug)]
pub struct Declared {
    /// The labels and annotations it reads of each pod.
    pub keys: Interest,
    /// Whether a strategy's `evaluate` reads the pods (a sorter always gets
    /// its candidates').
    pub pods_in_evaluate: bool,
    /// The signals a strategy reads beyond the kubelet's, by name or prefix
    /// (a sorter reads none).
    pub signals: Vec<String>,
}

impl From<Interest> for Declared {
    fn from(keys: Interest) -> Self {
        Self {
            keys,
            pods_in_evaluate: true,
            signals: Vec::new(),
        }
    }
}

impl From<StrategyInterest> for Declared {
    fn from(declared: StrategyInterest) -> Self {
        Self {
            keys: declared.keys,
            pods_in_evaluate: declared.pods_in_evaluate,
            signals: declared.signals,
        }
    }
}

impl Declared {
    /// Whether the policy reads the signal `name`: the kubelet's reach
    /// every strategy, others only those that declared them.
    pub fn reads_signal(&self, name: &str) -> bool {
        catalogue::every_strategy_reads(name) || wanted(&self.signals, name)
    }
}

/// Most keys an interest may list, labels and annotations each.
pub(crate) const MAX_KEYS: usize = 64;
/// Longest key an interest may list (a label key's 253-byte prefix, `/`,
/// and a 63-byte name).
const MAX_KEY: usize = 317;

/// Checks a policy's interest: bounded, and no empty key.
pub(crate) fn check(declared: &Declared) -> Result<(), Fault> {
    let interest = &declared.keys;
    for (what, keys) in [
        ("labels", &interest.labels),
        ("annotations", &interest.annotations),
        ("signals", &declared.signals),
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
pub(crate) fn wanted(keys: &[String], key: &str) -> bool {
    keys.iter().any(|k| match k.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => k == key,
    })
}

/// What a pod lends a policy that does not read it.
#[derive(Default)]
struct Withheld {
    labels: Vec<KeyValue>,
    annotations: Vec<KeyValue>,
    memory_usage: Option<u64>,
    numa_memory: Vec<NumaMemory>,
    cpu_throttling: Option<CpuThrottling>,
    memory_pressure: Option<Pressure>,
    writable_layers: Option<WritableLayers>,
}

/// The labels, annotations and facts taken from pods while they are narrowed.
#[must_use = "the pods' labels, annotations and facts are lost unless restored"]
pub(crate) struct SetAside(Vec<Withheld>);

/// Leaves each pod only the labels, annotations and facts `interest` lists.
pub(crate) fn narrow<'a>(pods: impl Iterator<Item = &'a mut Pod>, interest: &Interest) -> SetAside {
    let keep = |all: &[KeyValue], keys: &[String]| -> Vec<KeyValue> {
        all.iter()
            .filter(|kv| wanted(keys, &kv.key))
            .cloned()
            .collect()
    };
    let unasked = |fact: PodFact| !interest.facts.contains(&fact);
    SetAside(
        pods.map(|pod| {
            let mut aside = Withheld {
                labels: std::mem::take(&mut pod.labels),
                annotations: std::mem::take(&mut pod.annotations),
                ..Withheld::default()
            };
            pod.labels = keep(&aside.labels, &interest.labels);
            pod.annotations = keep(&aside.annotations, &interest.annotations);
            let usage = &mut pod.usage;
            if unasked(PodFact::MemoryUsage) {
                aside.memory_usage = usage.memory_usage_bytes.take();
            }
            if unasked(PodFact::NumaMemory) {
                aside.numa_memory = std::mem::take(&mut usage.numa_memory);
            }
            if unasked(PodFact::CpuThrottling) {
                aside.cpu_throttling = usage.cpu_throttling.take();
            }
            if unasked(PodFact::MemoryPressure) {
                aside.memory_pressure = usage.memory_pressure.take();
            }
            if unasked(PodFact::WritableLayers) {
                aside.writable_layers = pod.writable_layers.take();
            }
            aside
        })
        .collect(),
    )
}

/// Gives the pods [`narrow`] narrowed what it took, as they were.
pub(crate) fn restore<'a>(pods: impl Iterator<Item = &'a mut Pod>, aside: SetAside) {
    for (pod, aside) in pods.zip(aside.0) {
        pod.labels = aside.labels;
        pod.annotations = aside.annotations;
        let usage = &mut pod.usage;
        // What was taken is back; what was read by the policy stayed.
        usage.memory_usage_bytes = usage.memory_usage_bytes.or(aside.memory_usage);
        if usage.numa_memory.is_empty() {
            usage.numa_memory = aside.numa_memory;
        }
        usage.cpu_throttling = usage.cpu_throttling.or(aside.cpu_throttling);
        usage.memory_pressure = usage.memory_pressure.or(aside.memory_pressure);
        pod.writable_layers = pod.writable_layers.or(aside.writable_layers);
    }
}

/// Leaves `signals` only those `declared` reads, and returns all of them
/// to put back after the call; `None` when it reads every one (nothing was
/// moved).
pub(crate) fn narrow_signals(
    signals: &mut Vec<Signal>,
    declared: &Declared,
) -> Option<Vec<Signal>> {
    if signals.iter().all(|s| declared.reads_signal(&s.name)) {
        return None;
    }
    let all = std::mem::take(signals);
    *signals = all
        .iter()
        .filter(|s| declared.reads_signal(&s.name))
        .cloned()
        .collect();
    Some(all)
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
            facts: Vec::new(),
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
        let check = |interest: Interest| check(&Declared::from(interest));
        assert!(check(interest(&["app", "vigil.dev/*"], &["*"])).is_ok());
        let many: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let fault = check(interest(&many, &[])).unwrap_err();
        assert!(fault.to_string().contains("at most 64 keys"), "{fault}");
        let fault = check(interest(&[], &[""])).unwrap_err();
        assert!(fault.to_string().contains("annotations key"), "{fault}");
        let long = "k".repeat(MAX_KEY + 1);
        assert!(check(interest(&[&long], &[])).is_err());
        let mut declared = Declared::from(interest(&[], &[]));
        declared.signals = vec![String::new()];
        let fault = super::check(&declared).unwrap_err();
        assert!(fault.to_string().contains("signals key"), "{fault}");
    }
}
