//! RSS overuse (katalyst's `memory/rss_overuse.go`): a pod whose resident
//! memory exceeds its memory request × a ratio is a candidate for eviction,
//! on a calm node too; it leaves room for page cache that services lean
//! on. No threshold is ever met (no condition, no taint): the overusing pods
//! are soft candidates, and vigil evicts the one its sorter puts first, one
//! a cycle.
//!
//! Judged only: pods at katalyst's `shared_cores` or `reclaimed_cores` QoS
//! level (`katalyst.kubewharf.io/qos_level`, none meaning shared), whose
//! every container requests memory, whose labels match `podFilter`, and
//! whose RSS was read. A pod's `memory_enhancement` annotation may set its
//! own `rss_overuse_threshold`; one that is not a positive number keeps the
//! pod out (katalyst: "for safety").

use crate::{Decision, Eviction, Interest, Pod, StrategyInterest};
use policy_kit::katalyst::{self, QosLevel};
use std::collections::BTreeMap;

/// The strategy's name as vigil ships it.
pub const NAME: &str = "rss-overuse";

/// katalyst's `RSSOveruseRateThreshold` default.
const DEFAULT_RATE: f64 = 1.05;

/// The config: `{"rateThreshold": 1.05, "podFilter": {"label": "value"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// RSS over request × this is overuse (katalyst's
    /// `eviction-rss-overuse-rate-threshold`).
    pub rate_threshold: f64,
    /// Only pods carrying every one of these labels are judged (katalyst's
    /// `eviction-rss-overuse-filter`; empty: every pod).
    pub pod_filter: BTreeMap<String, String>,
}

impl Config {
    /// Parses the strategy's config (empty: katalyst's defaults).
    ///
    /// # Errors
    /// It is not a JSON object of the fields above.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config = Self {
            rate_threshold: DEFAULT_RATE,
            pod_filter: BTreeMap::new(),
        };
        let Some(fields) = crate::knobs::fields(text)? else {
            return Ok(config);
        };
        for (key, field) in &fields {
            match key.as_str() {
                "rateThreshold" => {
                    config.rate_threshold = field
                        .as_f64()
                        .filter(|r| r.is_finite() && *r > 0.0)
                        .ok_or("rateThreshold must be a positive number")?;
                }
                "podFilter" => {
                    let labels = field
                        .as_object()
                        .ok_or("podFilter must map labels to values")?;
                    for (label, value) in labels {
                        let value = value.as_str().ok_or("podFilter values must be strings")?;
                        config.pod_filter.insert(label.clone(), value.to_owned());
                    }
                }
                other => {
                    return Err(format!("unknown field {other:?}: rateThreshold, podFilter"));
                }
            }
        }
        Ok(config)
    }
}

/// What the strategy reads of pods: the filter's labels and katalyst's
/// QoS level and memory enhancement annotations; pods in `evaluate`.
pub fn interest(config: &str) -> StrategyInterest {
    let labels = Config::parse(config)
        .map(|c| c.pod_filter.into_keys().collect())
        .unwrap_or_default();
    StrategyInterest {
        keys: Interest {
            labels,
            annotations: vec![
                katalyst::QOS_LEVEL.into(),
                katalyst::MEMORY_ENHANCEMENT.into(),
            ],
            facts: vec![],
        },
        pods_in_evaluate: true,
        signals: vec![],
    }
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    (pod.annotations.iter())
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

/// The ratio `pod` is held to, or `None` when it is not judged at all
/// (its QoS level, its own threshold invalid, its labels).
fn ratio(config: &Config, pod: &Pod) -> Option<f64> {
    let level = QosLevel::of(annotation(pod, katalyst::QOS_LEVEL))?;
    if !matches!(level, QosLevel::SharedCores | QosLevel::ReclaimedCores) {
        return None;
    }
    let matches = |(label, value): (&String, &String)| {
        (pod.labels.iter()).any(|kv| &kv.key == label && &kv.value == value)
    };
    if !config.pod_filter.iter().all(matches) {
        return None;
    }
    let own = match annotation(pod, katalyst::MEMORY_ENHANCEMENT) {
        None => None,
        Some(text) => match katalyst::memory_enhancement(text) {
            Ok(enhancement) => match katalyst::rss_overuse_threshold(&enhancement) {
                None => None,
                Some(Ok(own)) => Some(own),
                // Set but not a positive number: left alone, for safety.
                Some(Err(_)) => return None,
            },
            // katalyst reads an unparsable enhancement as none.
            Err(_) => None,
        },
    };
    Some(own.unwrap_or(config.rate_threshold))
}

/// The pods of `pods` over their ratio, each a soft candidate with its reason.
///
/// # Errors
/// The config is invalid: nothing is judged.
pub fn evaluate(pods: &[Pod], config: &str) -> Result<Decision, String> {
    let config = Config::parse(config)?;
    let candidates = (pods.iter())
        .filter(|pod| pod.containers_without_memory_request == 0 && pod.requests.memory_bytes > 0)
        .filter_map(|pod| {
            let ratio = ratio(&config, pod)?;
            let rss = pod.usage.memory_rss_bytes?;
            let request = pod.requests.memory_bytes;
            (rss as f64 > ratio * request as f64).then(|| Eviction {
                uid: pod.uid.clone(),
                reason: format!(
                    "RSS {} MiB is over {ratio} × its memory request of {} MiB",
                    rss >> 20,
                    request >> 20
                ),
                grace_period_seconds: None,
            })
        })
        .collect();
    Ok(Decision {
        thresholds: vec![],
        soft_candidates: candidates,
        force_evictions: vec![],
        state: None,
    })
}

#[cfg(test)]
mod tests {
    //! katalyst's `TestRssOveruseEvictionPlugin_GetEvictPods`, case by
    //! case: its nine pods (RSS per container summed, as the pod cgroup
    //! reads it), its thresholds and filters, the pods it evicts. Its first
    //! case ("disable rss overuse eviction") is the policy's `enabled: false`
    //! in vigil, a switch of the host's: no call is made at all.
    use super::*;
    // The names `pod!` builds its record with.
    use crate::{KeyValue, QosClass, Resources, Usage};
    use policy_kit::pod;

    const GI: u64 = 1 << 30;

    /// katalyst's pod `n`: its containers' memory requests in GiB (0: none),
    /// its RSS per container, its annotations and labels.
    fn pod(
        n: u32,
        requests: &[u64],
        rss: &[u64],
        annotations: &[(&str, &str)],
        labels: &[(&str, &str)],
    ) -> Pod {
        let mut pod = pod!(&format!("pod-{n}"), QosClass::Burstable, priority: 0, usage_mib: 0, request_mib: 0);
        pod.uid = format!("00{n}");
        pod.requests.memory_bytes = requests.iter().sum::<u64>() * GI;
        pod.containers_without_memory_request = requests.iter().filter(|r| **r == 0).count() as u32;
        pod.usage.memory_rss_bytes = Some(rss.iter().sum::<u64>() * GI);
        let pairs = |list: &[(&str, &str)]| {
            (list.iter())
                .map(|(k, v)| KeyValue {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect()
        };
        pod.annotations = pairs(annotations);
        pod.labels = pairs(labels);
        pod
    }

    const OWN: (&str, &str) = (
        katalyst::MEMORY_ENHANCEMENT,
        r#"{"rss_overuse_threshold":"0.8"}"#,
    );
    const CAN_EVICT: (&str, &str) = ("canEvict", "true");

    fn katalysts_pods() -> Vec<Pod> {
        vec![
            pod(1, &[10], &[9], &[], &[]),
            pod(2, &[0], &[9], &[], &[]),
            pod(3, &[10], &[9], &[OWN], &[]),
            pod(4, &[0], &[9], &[OWN], &[]),
            pod(5, &[10, 10], &[8, 8], &[], &[CAN_EVICT]),
            pod(6, &[10, 0], &[9, 1], &[], &[]),
            pod(7, &[10, 4], &[5, 2], &[OWN], &[]),
            pod(8, &[10, 4], &[9, 3], &[OWN], &[CAN_EVICT]),
            pod(
                9,
                &[10],
                &[9],
                &[OWN, (katalyst::QOS_LEVEL, "dedicated_cores")],
                &[],
            ),
        ]
    }

    fn evicted(config: &str) -> Vec<String> {
        let pods = katalysts_pods();
        let decision = evaluate(&pods, config).unwrap();
        assert!(decision.thresholds.is_empty(), "no condition, as katalyst");
        let mut names: Vec<String> = (decision.soft_candidates.iter())
            .map(|e| pods.iter().find(|p| p.uid == e.uid).unwrap().name.clone())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn get_evict_pods_enable_rss_overuse_eviction_threshold_is_1() {
        assert_eq!(evicted(r#"{"rateThreshold": 1.05}"#), ["pod-3", "pod-8"]);
        assert_eq!(evicted(""), ["pod-3", "pod-8"], "1.05 is the default");
    }

    #[test]
    fn get_evict_pods_enable_rss_overuse_eviction_threshold_is_0_1() {
        assert_eq!(
            evicted(r#"{"rateThreshold": 0.1}"#),
            ["pod-1", "pod-3", "pod-5", "pod-8"]
        );
    }

    #[test]
    fn get_evict_pods_enable_rss_overuse_eviction_threshold_is_0_1_with_a_pod_filter() {
        let config = r#"{"rateThreshold": 0.1, "podFilter": {"canEvict": "true"}}"#;
        assert_eq!(evicted(config), ["pod-5", "pod-8"]);
        let interest = interest(config);
        assert_eq!(interest.keys.labels, ["canEvict"]);
        assert!(interest.pods_in_evaluate);
    }

    #[test]
    fn a_pod_without_a_reading_or_with_an_invalid_threshold_of_its_own_is_left_alone() {
        let mut unread = pod(1, &[10], &[9], &[], &[]);
        unread.usage.memory_rss_bytes = None;
        let invalid = pod(
            3,
            &[10],
            &[9],
            &[(
                katalyst::MEMORY_ENHANCEMENT,
                r#"{"rss_overuse_threshold":"-1"}"#,
            )],
            &[],
        );
        let system = pod(
            9,
            &[10],
            &[9],
            &[(katalyst::QOS_LEVEL, "system_cores")],
            &[],
        );
        let unknown = pod(7, &[10], &[9], &[(katalyst::QOS_LEVEL, "gold")], &[]);
        let reclaimed = pod(
            8,
            &[10],
            &[9],
            &[(katalyst::QOS_LEVEL, "reclaimed_cores")],
            &[],
        );
        let pods = [unread, invalid, system, unknown, reclaimed];
        let decision = evaluate(&pods, r#"{"rateThreshold": 0.5}"#).unwrap();
        let uids: Vec<&str> = decision
            .soft_candidates
            .iter()
            .map(|e| e.uid.as_str())
            .collect();
        assert_eq!(
            uids,
            ["008"],
            "reclaimed_cores is judged as shared_cores is"
        );
        assert_eq!(
            decision.soft_candidates[0].reason,
            "RSS 9216 MiB is over 0.5 × its memory request of 10240 MiB"
        );
    }

    #[test]
    fn a_bad_config_is_refused_naming_the_field() {
        for (config, expected) in [
            (r#"{"rateThreshold": 0}"#, "rateThreshold"),
            (r#"{"podFilter": {"a": 1}}"#, "podFilter"),
            (r#"{"rate": 1}"#, "unknown field \"rate\""),
            ("[]", "not a JSON object"),
        ] {
            let error = evaluate(&[], config).unwrap_err();
            assert!(error.contains(expected), "{config}: {error}");
        }
    }

    #[test]
    fn the_guide_states_the_defaults() {
        let guide = include_str!("../../../docs/policies.md");
        let defaults = Config::parse("").unwrap();
        let row = format!(
            "| `RSSOveruseRateThreshold` (`--eviction-rss-overuse-rate-threshold`) | `config.rateThreshold` | {} |",
            defaults.rate_threshold
        );
        assert!(guide.contains(&row), "docs/policies.md: {row}");
        assert!(defaults.pod_filter.is_empty());
    }
}
