//! NUMA memory pressure (katalyst's `memory/numa_pressure.go`): each NUMA
//! node's free memory against its Normal zone's watermarks, with a counter
//! per node that climbs while free memory stays under `low` and decays
//! when it recovers, so a node pressed for long is relieved and one that
//! dips is left to kswapd. A node is its own threshold (scope `numa.N`),
//! hard, with no condition (katalyst taints nothing for it); each pressured
//! node gets its own victim, ranked by its memory on that node.
//!
//! Per node, in bytes (katalyst counts pages; the same rules): `low` is
//! the zone's low watermark plus a 256 MiB guard and `min` its min
//! watermark plus a 1 GiB gap; when the zone's inactive file pages fall
//! under max(4 GiB, low), `low` becomes max(4 GiB, low + 1 GiB), so page
//! cache is not reclaimed to thrashing. Without the zone's signals, `low`
//! is the node's memory × `vm.watermarkScaleFactor` / 10000 and `min` 0
//! (katalyst's fallback). Then:
//! - free under `min`: the node is pressed at once (reclaimed pods first),
//!   its counter raised to `belowWatermarkTimesThreshold −
//!   fastEvictionWaitCycle` if under, and by one a cycle from there (so
//!   every pod may go after the wait; katalyst's counter stops short);
//! - free under `low`: the counter climbs by one, by two past two cycles
//!   while free is also under (min + low) / 2 or under low − 1 GiB; over
//!   `belowWatermarkTimesReclaimedThreshold` the node is pressed for
//!   `reclaimed_cores` pods;
//! - otherwise the counter falls by one, and no higher than the reclaimed
//!   threshold.
//!
//! A counter at `belowWatermarkTimesThreshold` or more presses the node for
//! every pod. Victims are the pods holding at least
//! `victimMinimumUtilization` of the node's memory (only `reclaimed_cores`
//! pods while the node is pressed for them), ranked by `rankingMetrics`.

use crate::knobs;
use crate::ranking::{self, Metric};
use crate::{Decision, Eviction, Interest, MetLevel, Pod, Signal, StrategyInterest, Threshold};
use policy_kit::katalyst::{self, QosLevel};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The strategy's name as vigil ships it.
pub const NAME: &str = "numa-pressure";

const GIB: f64 = (1u64 << 30) as f64;
/// katalyst's `memLowReservedSize`: page cache kept beside `low`.
const LOW_RESERVE: f64 = 4.0 * GIB;
/// katalyst's `memGapSize`: how deep under the watermarks it probes.
const GAP: f64 = GIB;
/// katalyst's `memGuardSize`: kept over `low` against kswapd ping-pong.
const GUARD: f64 = 256.0 * (1u64 << 20) as f64;
/// katalyst's `minDuration`: cycles under `low` before the counter runs.
const MIN_DURATION: u32 = 2;

/// The config, katalyst's knobs under vigil's names.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `NumaFreeBelowWatermarkTimesThreshold`: cycles under `low` before
    /// every pod may be evicted.
    pub times_threshold: u32,
    /// `NumaFreeBelowWatermarkTimesReclaimedThreshold`: cycles under `low`
    /// before `reclaimed_cores` pods may be.
    pub times_reclaimed_threshold: u32,
    /// `NumaFreeConstraintFastEvictionWaitCycle`: under `min`, how many
    /// cycles before every pod may be.
    pub fast_eviction_wait_cycle: u32,
    /// `NumaVictimMinimumUtilizationThreshold`: the share of the node's
    /// memory a pod must hold there to be a victim.
    pub victim_minimum_utilization: f64,
    /// `NumaEvictionRankingMetrics`.
    pub ranking_metrics: Vec<Metric>,
    /// `GracePeriod` (none: the pod's own) for victims of every class.
    pub grace_period_seconds: Option<u64>,
    /// `ReclaimedGracePeriod` for victims while only `reclaimed_cores` pods may go.
    pub reclaimed_grace_period_seconds: Option<u64>,
}

impl Default for Config {
    /// katalyst's defaults.
    fn default() -> Self {
        Self {
            times_threshold: 12,
            times_reclaimed_threshold: 6,
            fast_eviction_wait_cycle: 1,
            victim_minimum_utilization: 0.001,
            ranking_metrics: vec![Metric::QosLevel, Metric::Priority, Metric::NumaMemory],
            grace_period_seconds: None,
            reclaimed_grace_period_seconds: Some(1),
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
        let Some(fields) = knobs::fields(text)? else {
            return Ok(config);
        };
        let count = |field: &Value, name: &str| {
            field
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(format!("{name} must be a whole number"))
        };
        for (key, field) in &fields {
            match key.as_str() {
                "belowWatermarkTimesThreshold" => config.times_threshold = count(field, key)?,
                "belowWatermarkTimesReclaimedThreshold" => {
                    config.times_reclaimed_threshold = count(field, key)?;
                }
                "fastEvictionWaitCycle" => config.fast_eviction_wait_cycle = count(field, key)?,
                "victimMinimumUtilization" => {
                    config.victim_minimum_utilization = field
                        .as_f64()
                        .filter(|r| (0.0..=1.0).contains(r))
                        .ok_or("victimMinimumUtilization must be between 0 and 1")?;
                }
                "rankingMetrics" => config.ranking_metrics = Metric::parse_list(field, key)?,
                "gracePeriodSeconds" => config.grace_period_seconds = knobs::grace(field, key)?,
                "reclaimedGracePeriodSeconds" => {
                    config.reclaimed_grace_period_seconds = knobs::grace(field, key)?;
                }
                other => {
                    return Err(format!(
                        "unknown field {other:?}: belowWatermarkTimesThreshold, \
                         belowWatermarkTimesReclaimedThreshold, fastEvictionWaitCycle, \
                         victimMinimumUtilization, rankingMetrics, gracePeriodSeconds, \
                         reclaimedGracePeriodSeconds"
                    ));
                }
            }
        }
        Ok(config)
    }
}

/// What the strategy reads: the NUMA signals and the scale factor; each
/// pod's QoS level and memory per NUMA node, for ranking only.
pub fn interest(_config: &str) -> StrategyInterest {
    StrategyInterest {
        keys: Interest {
            labels: vec![],
            annotations: vec![katalyst::QOS_LEVEL.into()],
            facts: vec![crate::PodFact::NumaMemory],
        },
        pods_in_evaluate: false,
        signals: vec!["numa.*".into(), "vm.watermarkScaleFactor".into()],
    }
}

/// What may be evicted for a NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Noop,
    /// `reclaimed_cores` pods only.
    Reclaimed,
    /// Every pod.
    Evict,
}

/// What the strategy keeps between cycles: each node's counter, and the
/// action each pressed node calls for (read back by `top-victims`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// Cycles under `low`, by NUMA node, as katalyst counts them.
    pub counters: BTreeMap<u32, u32>,
    /// The nodes pressed this cycle and for what.
    pub actions: BTreeMap<u32, Action>,
}

impl State {
    /// Reads what `encode` kept (empty: a fresh start).
    ///
    /// # Errors
    /// The bytes are not a state this strategy kept.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let Some(value) = knobs::kept(bytes)? else {
            return Ok(Self::default());
        };
        let mut state = Self::default();
        let field = |name: &str| {
            value[name]
                .as_object()
                .ok_or(format!("kept state lacks {name}"))
        };
        let node = |key: &str| {
            key.parse::<u32>()
                .map_err(|_| "a kept node is not a number")
        };
        for (key, count) in field("counters")? {
            let count = (count.as_u64().and_then(|c| u32::try_from(c).ok()))
                .ok_or("a kept counter is not a number")?;
            state.counters.insert(node(key)?, count);
        }
        for (key, action) in field("actions")? {
            let action = match action.as_str() {
                Some("reclaimed") => Action::Reclaimed,
                Some("evict") => Action::Evict,
                _ => return Err(format!("kept action {action} is unknown")),
            };
            state.actions.insert(node(key)?, action);
        }
        Ok(state)
    }

    /// The state as bytes to keep.
    pub fn encode(&self) -> Vec<u8> {
        let actions: BTreeMap<String, &str> = (self.actions.iter())
            .map(|(node, action)| {
                let name = match action {
                    Action::Reclaimed => "reclaimed",
                    Action::Evict => "evict",
                    Action::Noop => "noop",
                };
                (node.to_string(), name)
            })
            .collect();
        json!({"counters": self.counters, "actions": actions})
            .to_string()
            .into_bytes()
    }
}

/// Signal `name`'s value and capacity.
fn signal(signals: &[Signal], name: &str) -> Option<(f64, Option<f64>)> {
    knobs::signal(signals, name).map(|s| (s.value, s.capacity))
}

/// The NUMA nodes the signals tell of.
fn nodes(signals: &[Signal]) -> Vec<u32> {
    let mut nodes: Vec<u32> = (signals.iter())
        .filter_map(|s| {
            s.name
                .strip_prefix("numa.")?
                .split_once('.')?
                .0
                .parse()
                .ok()
        })
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// One node's reading: free memory against its watermarks, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Watermarks {
    free: f64,
    min: f64,
    low: f64,
    /// The signal `free` was read from.
    signal: &'static str,
}

/// Node `node`'s watermarks from its Normal zone, or katalyst's fallback;
/// `None` when neither can be read.
fn watermarks(signals: &[Signal], node: u32) -> Option<Watermarks> {
    let zone = |level: &str| signal(signals, &format!("numa.{node}.zone.normal.{level}"));
    if let (Some((free, _)), Some((min, _)), Some((low, _)), Some((inactive, _))) =
        (zone("free"), zone("min"), zone("low"), zone("inactiveFile"))
        && low > 0.0
    {
        let (mut low, min) = (low + GUARD, min + GAP);
        if inactive < LOW_RESERVE.max(low) {
            low = LOW_RESERVE.max(low + GAP);
        }
        return Some(Watermarks {
            free,
            min,
            low,
            signal: "zone.normal.free",
        });
    }
    let (free, total) = signal(signals, &format!("numa.{node}.memory.free"))?;
    let (scale, _) = signal(signals, "vm.watermarkScaleFactor")?;
    Some(Watermarks {
        free,
        min: 0.0,
        low: total? * scale / 10000.0,
        signal: "memory.free",
    })
}

/// One cycle of katalyst's detection: the new state, whether any node is
/// pressed, and each node's threshold.
fn detect(config: &Config, signals: &[Signal], kept: &State) -> (State, bool, Vec<Threshold>) {
    let mut state = State {
        counters: kept.counters.clone(),
        actions: BTreeMap::new(),
    };
    let (reclaimed_at, evict_at) = (config.times_reclaimed_threshold, config.times_threshold);
    let mut pressed = false;
    let mut thresholds = Vec::new();
    for node in nodes(signals) {
        let Some(marks) = watermarks(signals, node) else {
            continue;
        };
        let counter = state.counters.entry(node).or_insert(0);
        let mut action = Action::Noop;
        if marks.free < marks.min {
            pressed = true;
            action = Action::Reclaimed;
            // katalyst raises a lower counter to the threshold minus the
            // wait and stops there, so with any wait it never reaches the
            // threshold while free stays under `min`; here each cycle under
            // `min` counts, and the wait is a number of cycles.
            let waited = evict_at.saturating_sub(config.fast_eviction_wait_cycle);
            *counter = match *counter < waited {
                true => waited,
                false => *counter + 1,
            };
        } else if marks.free < marks.low {
            *counter += 1;
            let deeper = marks.free < (marks.min + marks.low) / 2.0
                || (marks.low > GAP && marks.free < marks.low - GAP);
            if *counter > MIN_DURATION && deeper {
                *counter += 1;
            }
            if *counter > reclaimed_at {
                pressed = true;
                action = Action::Reclaimed;
            }
        } else if *counter > 0 {
            *counter = (*counter - 1).min(reclaimed_at);
        }
        if *counter >= evict_at {
            action = Action::Evict;
        }
        if action != Action::Noop {
            state.actions.insert(node, action);
            thresholds.push(Threshold {
                met: MetLevel::Hard,
                scope: format!("numa.{node}"),
                signal: format!("numa.{node}.{}", marks.signal),
                observed: marks.free,
                threshold: match marks.free < marks.min {
                    true => marks.min,
                    false => marks.low,
                },
                grace_period_seconds: 0,
                condition: None,
            });
        }
    }
    (state, pressed, thresholds)
}

/// One cycle: a hard threshold per pressed NUMA node.
///
/// # Errors
/// The config or the kept state is invalid: nothing is judged.
pub fn evaluate(signals: &[Signal], config: &str, kept: &[u8]) -> Result<Decision, String> {
    let config = Config::parse(config)?;
    let (state, pressed, thresholds) = detect(&config, signals, &State::decode(kept)?);
    Ok(Decision {
        // katalyst ranks for the nodes with an action only once one of
        // them sets the pressure (a node's counter may call for eviction
        // as it decays, alone it presses nothing).
        thresholds: if pressed { thresholds } else { vec![] },
        soft_candidates: vec![],
        force_evictions: vec![],
        state: Some(state.encode()),
    })
}

/// The pods to evict for `scope` (`numa.N`), most evictable first.
///
/// # Errors
/// The config, the kept state or the scope is invalid.
pub fn top_victims(
    signals: &[Signal],
    pods: &[Pod],
    config: &str,
    kept: &[u8],
    scope: &str,
) -> Result<Vec<Eviction>, String> {
    let config = Config::parse(config)?;
    let node: u32 = (scope.strip_prefix("numa."))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{NAME} has no scope {scope:?}: its scopes are numa.N"))?;
    let action = (State::decode(kept)?.actions.get(&node).copied()).unwrap_or(Action::Noop);
    let Some((_, Some(total))) = signal(signals, &format!("numa.{node}.memory.free")) else {
        return Ok(vec![]);
    };
    let held = |pod: &Pod| {
        (pod.usage.numa_memory.iter())
            .find(|m| m.node == node)
            .map(|m| m.bytes as f64)
    };
    let candidates: Vec<&Pod> = (pods.iter())
        .filter(|pod| {
            total > 0.0 && held(pod).is_some_and(|b| b / total >= config.victim_minimum_utilization)
        })
        .filter(|pod| match action {
            Action::Noop => false,
            Action::Reclaimed => ranking::qos_level(pod) == Some(QosLevel::ReclaimedCores),
            Action::Evict => true,
        })
        .collect();
    let grace = match action {
        Action::Evict => config.grace_period_seconds,
        _ => config.reclaimed_grace_period_seconds,
    };
    let ranked = ranking::rank(candidates, &config.ranking_metrics, Some(node));
    Ok(ranked
        .into_iter()
        .map(|pod| Eviction {
            uid: pod.uid.clone(),
            reason: format!(
                "NUMA node {node} is short of free memory; the pod holds {} MiB there",
                held(pod).unwrap_or(0.0) as u64 >> 20
            ),
            grace_period_seconds: grace,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    //! katalyst's `TestNumaMemoryPressurePlugin_ThresholdMet` round by round
    //! (its file-less zoneinfo: the fallback watermark, four NUMA nodes of
    //! 50 GiB with free memory known on two, a scale factor of 600) and
    //! `TestNumaMemoryPressurePlugin_GetTopEvictionPods` case by case, with
    //! katalyst's test configuration (its `makeConf`).
    use super::*;
    use crate::{KeyValue, NumaMemory, QosClass, Resources, Usage};
    use policy_kit::pod;

    const GI: f64 = GIB;

    /// katalyst's test knobs (`makeConf`).
    const TEST_CONFIG: &str = r#"{"belowWatermarkTimesThreshold": 3,
        "belowWatermarkTimesReclaimedThreshold": 1, "fastEvictionWaitCycle": 0,
        "victimMinimumUtilization": 0.001}"#;

    fn signals(free: &[(u32, f64)]) -> Vec<Signal> {
        let mut signals = vec![Signal {
            name: "vm.watermarkScaleFactor".into(),
            value: 600.0,
            capacity: None,
        }];
        for (node, free) in free {
            signals.push(Signal {
                name: format!("numa.{node}.memory.free"),
                value: *free,
                capacity: Some(50.0 * GI),
            });
        }
        signals
    }

    /// numa0's free GiB, numa1's, whether katalyst's threshold is met, and
    /// the nodes' actions.
    type Round = (f64, f64, bool, &'static [(u32, Action)]);

    #[test]
    fn threshold_met_round_by_round() {
        use Action::{Evict, Reclaimed};
        let rounds: [Round; 7] = [
            (20.0, 25.0, false, &[]),
            (1.0, 2.0, false, &[]),
            (1.0, 2.0, true, &[(0, Reclaimed), (1, Reclaimed)]),
            (1.0, 10.0, true, &[(0, Evict)]),
            (1.0, 2.0, true, &[(0, Evict), (1, Reclaimed)]),
            (1.0, 2.0, true, &[(0, Evict), (1, Evict)]),
            (10.0, 2.0, true, &[(1, Evict)]),
        ];
        let mut kept = Vec::new();
        for (round, (numa0, numa1, met, actions)) in rounds.into_iter().enumerate() {
            let signals = signals(&[(0, numa0 * GI), (1, numa1 * GI)]);
            let decision = evaluate(&signals, TEST_CONFIG, &kept).unwrap();
            kept = decision.state.clone().unwrap();
            let state = State::decode(&kept).unwrap();
            let expected: BTreeMap<u32, Action> = actions.iter().copied().collect();
            assert_eq!(state.actions, expected, "round {round}");
            assert_eq!(!decision.thresholds.is_empty(), met, "round {round}");
            let scopes: Vec<String> = decision
                .thresholds
                .iter()
                .map(|t| t.scope.clone())
                .collect();
            let expected: Vec<String> = actions.iter().map(|(n, _)| format!("numa.{n}")).collect();
            assert_eq!(
                scopes, expected,
                "round {round}: one threshold per pressed node"
            );
            assert!(
                decision
                    .thresholds
                    .iter()
                    .all(|t| t.met == MetLevel::Hard && t.condition.is_none()),
                "hard, no condition, as katalyst"
            );
        }
    }

    fn katalysts_pod(n: u32, numa: &[(u32, f64)]) -> Pod {
        let mut pod = pod!(&format!("pod-{n}"), QosClass::BestEffort, priority: 100_000, usage_mib: 0, request_mib: 0);
        pod.uid = format!("00000{n}");
        pod.annotations = vec![KeyValue {
            key: katalyst::QOS_LEVEL.into(),
            value: "reclaimed_cores".into(),
        }];
        pod.usage.numa_memory = (numa.iter())
            .map(|(node, bytes)| NumaMemory {
                node: *node,
                bytes: *bytes as u64,
            })
            .collect();
        pod
    }

    #[test]
    fn get_top_eviction_pods_case_by_case() {
        use Action::{Evict, Noop, Reclaimed};
        let pods = [
            katalysts_pod(1, &[(0, GI), (1, 9.0 * GI), (2, 1024.0), (3, 1024.0)]),
            katalysts_pod(2, &[(0, 4.0 * GI), (1, GI), (2, 1024.0), (3, 1024.0)]),
        ];
        let signals = signals(&[(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0)]);
        let cases: [([Action; 4], &[&str]); 6] = [
            ([Noop, Noop, Noop, Noop], &[]),
            ([Evict, Noop, Noop, Noop], &["pod-2"]),
            ([Noop, Reclaimed, Noop, Noop], &["pod-1"]),
            ([Reclaimed, Reclaimed, Noop, Noop], &["pod-1", "pod-2"]),
            ([Evict, Evict, Noop, Noop], &["pod-1", "pod-2"]),
            ([Noop, Noop, Evict, Evict], &[]),
        ];
        for (actions, expected) in cases {
            let state = State {
                counters: BTreeMap::new(),
                actions: (0..4).zip(actions).filter(|(_, a)| *a != Noop).collect(),
            };
            // katalyst asks for one pod per node (`TopN: 1`) and evicts
            // their union; vigil evicts each node's first.
            let mut evicted: Vec<String> = Vec::new();
            for node in state.actions.keys() {
                let victims = top_victims(
                    &signals,
                    &pods,
                    TEST_CONFIG,
                    &state.encode(),
                    &format!("numa.{node}"),
                )
                .unwrap();
                if let Some(first) = victims.first() {
                    let name = pods
                        .iter()
                        .find(|p| p.uid == first.uid)
                        .unwrap()
                        .name
                        .clone();
                    if !evicted.contains(&name) {
                        evicted.push(name);
                    }
                }
            }
            evicted.sort();
            assert_eq!(evicted, expected, "{actions:?}");
        }
    }

    #[test]
    fn the_zone_watermarks_with_katalysts_guard_gap_and_page_cache_reserve() {
        let zone = |free: f64, min: f64, low: f64, inactive: f64| {
            let mut signals = signals(&[]);
            for (level, value) in [
                ("free", free),
                ("min", min),
                ("low", low),
                ("inactiveFile", inactive),
            ] {
                signals.push(Signal {
                    name: format!("numa.0.zone.normal.{level}"),
                    value,
                    capacity: Some(50.0 * GI),
                });
            }
            watermarks(&signals, 0).unwrap()
        };
        let mib = (1u64 << 20) as f64;
        // Plenty of page cache: low + 256 MiB, min + 1 GiB.
        let marks = zone(3.0 * GI, 100.0 * mib, 125.0 * mib, 10.0 * GI);
        assert_eq!((marks.min, marks.low), (100.0 * mib + GI, 381.0 * mib));
        // Page cache under 4 GiB: low is at least 4 GiB.
        let marks = zone(3.0 * GI, 100.0 * mib, 125.0 * mib, GI);
        assert_eq!(marks.low, 4.0 * GI);
        assert_eq!(marks.signal, "zone.normal.free");
    }

    /// katalyst's counter stops at the threshold minus the wait while free
    /// memory stays under `min`, so every pod never may go: vigil counts on.
    #[test]
    fn under_min_every_pod_may_go_once_the_fast_eviction_wait_is_over() {
        let zone = |free: f64| {
            let mut signals = signals(&[]);
            for (level, value) in [
                ("free", free),
                ("min", 0.1 * GI),
                ("low", 0.2 * GI),
                ("inactiveFile", 8.0 * GI),
            ] {
                signals.push(Signal {
                    name: format!("numa.0.zone.normal.{level}"),
                    value,
                    capacity: Some(50.0 * GI),
                });
            }
            signals
        };
        let config = r#"{"fastEvictionWaitCycle": 2}"#;
        let mut kept = Vec::new();
        let mut actions = Vec::new();
        for _ in 0..4 {
            let decision = evaluate(&zone(0.5 * GI), config, &kept).unwrap();
            kept = decision.state.unwrap();
            actions.push(State::decode(&kept).unwrap().actions[&0]);
        }
        use Action::{Evict, Reclaimed};
        assert_eq!(actions, [Reclaimed, Reclaimed, Evict, Evict]);
    }

    #[test]
    fn a_kept_state_not_its_own_is_refused_and_nothing_is_judged() {
        for kept in [
            &b"{"[..],
            br#"{"counters": {"0": "x"}, "actions": {}}"#,
            br#"{"counters": {}, "actions": {"0": "maybe"}}"#,
        ] {
            let error = evaluate(&signals(&[]), "", kept).unwrap_err();
            assert!(error.contains("kept"), "{error}");
        }
    }

    #[test]
    fn a_node_without_signals_is_not_judged_and_a_bad_scope_is_refused() {
        let decision = evaluate(&signals(&[]), "", &[]).unwrap();
        assert!(decision.thresholds.is_empty());
        let error = top_victims(&signals(&[]), &[], "", &[], "memory").unwrap_err();
        assert!(error.contains("numa.N"), "{error}");
    }

    #[test]
    fn a_bad_config_is_refused_naming_the_field() {
        for (config, expected) in [
            (
                r#"{"belowWatermarkTimesThreshold": -1}"#,
                "belowWatermarkTimesThreshold",
            ),
            (
                r#"{"victimMinimumUtilization": 2}"#,
                "victimMinimumUtilization",
            ),
            (r#"{"rankingMetrics": ["cpu"]}"#, "unknown ranking metric"),
            (r#"{"gracePeriodSeconds": 0}"#, "gracePeriodSeconds"),
            (r#"{"times": 1}"#, "unknown field \"times\""),
        ] {
            let error = evaluate(&[], config, &[]).unwrap_err();
            assert!(error.contains(expected), "{config}: {error}");
        }
    }

    #[test]
    fn the_guide_states_the_defaults() {
        let guide = include_str!("../../../docs/policies.md");
        let defaults = Config::default();
        for row in [
            format!(
                "| `NumaFreeBelowWatermarkTimesThreshold` | `config.belowWatermarkTimesThreshold` | {} |",
                defaults.times_threshold
            ),
            format!(
                "| `NumaFreeBelowWatermarkTimesReclaimedThreshold` | `config.belowWatermarkTimesReclaimedThreshold` | {} |",
                defaults.times_reclaimed_threshold
            ),
            format!(
                "| `NumaFreeConstraintFastEvictionWaitCycle` | `config.fastEvictionWaitCycle` | {} |",
                defaults.fast_eviction_wait_cycle
            ),
            format!(
                "| `NumaVictimMinimumUtilizationThreshold` | `config.victimMinimumUtilization` | {} |",
                defaults.victim_minimum_utilization
            ),
        ] {
            assert!(guide.contains(&row), "docs/policies.md: {row}");
        }
        assert_eq!(Config::parse("").unwrap(), defaults);
    }
}
