//! System CPU pressure (katalyst's `cpu/system_pressure.go`, katalyst-core
//! PR #1141): the node's 1-minute load and its CPU usage, each against
//! bounds that are ratios of its online CPUs, over a ring of the last
//! `metricRingSize` samples (one a cycle). When at least
//! `thresholdMetPercentage` of the ring's slots are over the lower bound,
//! the node is soft-pressed: `SystemCPU` is reported with a `NoSchedule`
//! taint and nobody is evicted (vigil's `report` level); over the upper
//! bound, hard-pressed: the busiest pod goes, then nobody for
//! `coolDownSeconds`. Of load and usage, the more severe pressure is the
//! threshold (hard before soft, then the larger share of the ring), its
//! scope the metric (`cpu.load1` or `cpu.usage`).
//!
//! A bound ratio of 0 turns that bound off, and both at 0 the metric (so
//! with katalyst's defaults the strategy judges nothing: set the ratios).
//! With `checkCpuManager` (set it where the kubelet's static CPU manager
//! policy is on), Guaranteed pods with whole CPUs are left out: their CPUs
//! from the capacity, their usage from the node's, and they are never
//! victims. In `PodAggregatedMetric` mode the node's usage is the sum of
//! its pods' (load has no per-pod form in vigil, so that mode judges usage
//! only). Victims are ranked by the pressed metric's per-pod form (vigil's
//! per-pod CPU usage stands for both), then `rankingMetrics`.

use crate::knobs::{self, CoolDown, Seen};
use crate::ranking::{self, Metric};
use crate::{
    Condition, Decision, Eviction, Interest, MetLevel, Pod, QosClass, Signal, StrategyInterest,
    Threshold,
};
use policy_kit::katalyst::{self, QosLevel};
use serde_json::{Value, json};
use std::collections::VecDeque;

/// The strategy's name as vigil ships it.
pub const NAME: &str = "system-cpu-pressure";

/// The node metrics it judges, by signal: (signal, ratio fields' prefix).
const METRICS: [&str; 2] = ["cpu.load1", "cpu.usage"];

/// Where the node's metrics come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `NodeMetric`: the node's own signals.
    Node,
    /// `PodAggregatedMetric`: the sum of the pods' usage.
    PodAggregated,
}

/// One metric's bounds, as ratios of the capacity (0: off).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bounds {
    /// Over this share of the CPUs is hard pressure.
    pub upper: f64,
    /// Over this share is soft pressure.
    pub lower: f64,
}

/// The config, katalyst's knobs under vigil's names.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `SystemLoad{Upper,Lower}BoundRatio`.
    pub load: Bounds,
    /// `SystemUsage{Upper,Lower}BoundRatio`.
    pub usage: Bounds,
    /// `ThresholdMetPercentage`: the share of the ring over a bound that
    /// meets it.
    pub threshold_met_percentage: f64,
    /// `MetricRingSize`: samples kept, one a cycle.
    pub metric_ring_size: usize,
    /// `EvictionCoolDownTime`, in seconds.
    pub cool_down_seconds: u64,
    /// `EvictionRankingMetrics` (after the pressed metric).
    pub ranking_metrics: Vec<Metric>,
    /// `GracePeriod` (none: the pod's own).
    pub grace_period_seconds: Option<u64>,
    /// `CheckCPUManager`.
    pub check_cpu_manager: bool,
    /// `SystemEvictionMetricMode`.
    pub mode: Mode,
}

impl Default for Config {
    /// katalyst's defaults.
    fn default() -> Self {
        Self {
            load: Bounds::default(),
            usage: Bounds::default(),
            threshold_met_percentage: 0.8,
            metric_ring_size: 10,
            cool_down_seconds: 300,
            ranking_metrics: vec![Metric::QosLevel, Metric::Priority],
            grace_period_seconds: None,
            check_cpu_manager: false,
            mode: Mode::Node,
        }
    }
}

const FIELDS: &str = "loadUpperBoundRatio, loadLowerBoundRatio, usageUpperBoundRatio, \
                      usageLowerBoundRatio, thresholdMetPercentage, metricRingSize, \
                      coolDownSeconds, rankingMetrics, gracePeriodSeconds, checkCpuManager, \
                      metricMode";

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
        let ratio = |field: &Value, name: &str| {
            (field.as_f64().filter(|r| *r >= 0.0 && r.is_finite()))
                .ok_or(format!("{name} must be a ratio of the CPUs, 0 or more"))
        };
        for (key, field) in &fields {
            match key.as_str() {
                "loadUpperBoundRatio" => config.load.upper = ratio(field, key)?,
                "loadLowerBoundRatio" => config.load.lower = ratio(field, key)?,
                "usageUpperBoundRatio" => config.usage.upper = ratio(field, key)?,
                "usageLowerBoundRatio" => config.usage.lower = ratio(field, key)?,
                "thresholdMetPercentage" => {
                    config.threshold_met_percentage = field
                        .as_f64()
                        .filter(|p| *p > 0.0 && *p <= 1.0)
                        .ok_or("thresholdMetPercentage must be over 0 and at most 1")?;
                }
                "metricRingSize" => {
                    config.metric_ring_size = (field.as_u64())
                        .filter(|n| (1..=60).contains(n))
                        .ok_or("metricRingSize must be 1 to 60 samples")?
                        as usize;
                }
                "coolDownSeconds" => {
                    config.cool_down_seconds = field
                        .as_u64()
                        .ok_or("coolDownSeconds must be whole seconds")?;
                }
                "rankingMetrics" => config.ranking_metrics = Metric::parse_list(field, key)?,
                "gracePeriodSeconds" => config.grace_period_seconds = knobs::grace(field, key)?,
                "checkCpuManager" => {
                    config.check_cpu_manager = field
                        .as_bool()
                        .ok_or("checkCpuManager must be true or false")?;
                }
                "metricMode" => {
                    config.mode = match field.as_str() {
                        Some("NodeMetric") => Mode::Node,
                        Some("PodAggregatedMetric") => Mode::PodAggregated,
                        _ => {
                            return Err(
                                "metricMode must be NodeMetric or PodAggregatedMetric".into()
                            );
                        }
                    };
                }
                other => return Err(format!("unknown field {other:?}: {FIELDS}")),
            }
        }
        Ok(config)
    }

    /// The metrics judged, with their bounds: those with a bound set.
    fn judged(&self) -> Vec<(&'static str, Bounds)> {
        let on = |b: &Bounds| b.upper > 0.0 || b.lower > 0.0;
        let load = (on(&self.load) && self.mode == Mode::Node).then_some((METRICS[0], self.load));
        let usage = on(&self.usage).then_some((METRICS[1], self.usage));
        load.into_iter().chain(usage).collect()
    }

    /// Whether `evaluate` reads the pods.
    fn pods_in_evaluate(&self) -> bool {
        self.check_cpu_manager || self.mode == Mode::PodAggregated
    }
}

/// What the strategy reads: the node's load and CPU usage, the pods'
/// QoS level (katalyst's), and the pods themselves in `evaluate` where the
/// CPU manager or the pod-aggregated mode needs them.
pub fn interest(config: &str) -> StrategyInterest {
    let config = Config::parse(config).unwrap_or_default();
    StrategyInterest {
        keys: Interest {
            labels: vec![],
            annotations: vec![katalyst::QOS_LEVEL.into()],
            facts: vec![],
        },
        pods_in_evaluate: config.pods_in_evaluate(),
        signals: vec!["cpu.*".into()],
    }
}

/// One sample of a metric: its value and the bounds at the time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The metric, in cores (or runnable tasks for load).
    pub value: f64,
    /// The capacity × the upper ratio.
    pub upper: f64,
    /// The capacity × the lower ratio.
    pub lower: f64,
}

/// What the strategy keeps between cycles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    /// The rings, by metric (`cpu.load1`, `cpu.usage`), newest last.
    pub rings: Vec<(String, VecDeque<Sample>)>,
    /// The last cycle, and the last victim.
    pub cool_down: CoolDown,
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
        let bad = || "kept state is not this strategy's".to_owned();
        let mut rings = Vec::new();
        for (name, samples) in value["rings"].as_object().ok_or_else(bad)? {
            let mut ring = VecDeque::new();
            for sample in samples.as_array().ok_or_else(bad)? {
                let number = |i: usize| sample[i].as_f64().ok_or_else(bad);
                ring.push_back(Sample {
                    value: number(0)?,
                    upper: number(1)?,
                    lower: number(2)?,
                });
            }
            rings.push((name.clone(), ring));
        }
        Ok(Self {
            rings,
            cool_down: CoolDown::of(&value),
        })
    }

    /// The state as bytes to keep.
    pub fn encode(&self) -> Vec<u8> {
        let rings: serde_json::Map<String, Value> = (self.rings.iter())
            .map(|(name, ring)| {
                let samples = ring.iter().map(|s| json!([s.value, s.upper, s.lower]));
                (name.clone(), Value::Array(samples.collect()))
            })
            .collect();
        let mut value = json!({ "rings": rings });
        self.cool_down.write(&mut value);
        value.to_string().into_bytes()
    }

    fn ring(&mut self, name: &str) -> &mut VecDeque<Sample> {
        if let Some(at) = self.rings.iter().position(|(n, _)| n == name) {
            return &mut self.rings[at].1;
        }
        self.rings.push((name.to_owned(), VecDeque::new()));
        &mut self.rings.last_mut().expect("just pushed").1
    }
}

/// CPUs a Guaranteed pod holds whole (katalyst's `PodGuaranteedCPUs`): its
/// CPU request in cores where it is a whole number, else none.
fn guaranteed_cpus(pod: &Pod) -> u64 {
    let millis = pod.requests.cpu_millis;
    match pod.qos == QosClass::Guaranteed && millis.is_multiple_of(1000) {
        true => millis / 1000,
        false => 0,
    }
}

fn cores(pod: &Pod) -> f64 {
    pod.usage.cpu_millis.unwrap_or(0) as f64 / 1000.0
}

/// This cycle's sample of `metric`, as katalyst collects it: `None` when
/// the node's signal is not known.
pub fn sample(config: &Config, metric: &str, signals: &[Signal], pods: &[Pod]) -> Option<Sample> {
    let bounds = match metric {
        "cpu.load1" => config.load,
        _ => config.usage,
    };
    let signal = signals.iter().find(|s| s.name == metric);
    let mut capacity = signal.and_then(|s| s.capacity).or_else(|| {
        signals
            .iter()
            .find_map(|s| s.name.starts_with("cpu.").then_some(s.capacity?))
    })?;
    let mut value = match config.mode {
        Mode::Node => signal?.value,
        Mode::PodAggregated => pods
            .iter()
            .filter(|p| guaranteed_cpus(p) == 0 || !config.check_cpu_manager)
            .map(cores)
            .sum(),
    };
    if config.check_cpu_manager {
        let held: u64 = pods.iter().map(guaranteed_cpus).sum();
        if config.mode == Mode::Node && metric == "cpu.usage" {
            let used: f64 = pods
                .iter()
                .filter(|p| guaranteed_cpus(p) > 0)
                .map(cores)
                .sum();
            value = (value - used).max(0.0);
        }
        // katalyst: more whole CPUs held than the node has leaves none.
        capacity = (capacity - held as f64).max(0.0);
    }
    Some(Sample {
        value,
        upper: capacity * bounds.upper,
        lower: capacity * bounds.lower,
    })
}

/// How a ring meets its bounds: the level and the share of the ring over
/// the bound met.
fn judge(config: &Config, bounds: &Bounds, ring: &VecDeque<Sample>) -> Option<(MetLevel, f64)> {
    let size = config.metric_ring_size as f64;
    let over = |bound: fn(&Sample) -> f64, on: bool| {
        let count = ring.iter().filter(|s| on && s.value > bound(s)).count();
        count as f64 / size
    };
    let soft = over(|s| s.lower, bounds.lower > 0.0);
    let hard = over(|s| s.upper, bounds.upper > 0.0);
    if hard >= config.threshold_met_percentage {
        Some((MetLevel::Hard, hard))
    } else if soft >= config.threshold_met_percentage {
        Some((MetLevel::Report, soft))
    } else {
        None
    }
}

/// One cycle: a sample into each ring, and the most severe pressure.
///
/// # Errors
/// The config or the kept state is invalid: nothing is judged.
pub fn evaluate(seen: &Seen<'_>, config: &str, kept: &[u8]) -> Result<Decision, String> {
    let config = Config::parse(config)?;
    let mut state = State::decode(kept)?;
    state.cool_down.advance(seen.last_met, None, seen.now_ms);
    let judged = config.judged();
    state
        .rings
        .retain(|(name, _)| judged.iter().any(|(m, _)| m == name));
    // The most severe: its level, its share of the ring, its metric, and
    // its latest sample against the bound met.
    let mut worst: Option<(MetLevel, f64, &str, (f64, f64))> = None;
    for (metric, bounds) in &judged {
        let ring = state.ring(metric);
        if let Some(sample) = sample(&config, metric, seen.signals, seen.pods) {
            ring.push_back(sample);
        }
        while ring.len() > config.metric_ring_size {
            ring.pop_front();
        }
        let Some((level, share)) = judge(&config, bounds, ring) else {
            continue;
        };
        let latest = ring.back().map_or((0.0, 0.0), |s| match level {
            MetLevel::Hard => (s.value, s.upper),
            _ => (s.value, s.lower),
        });
        let severer = |(l, s, _, _): &(MetLevel, f64, &str, (f64, f64))| {
            (level == MetLevel::Hard && *l == MetLevel::Report) || (level == *l && share > *s)
        };
        if worst.as_ref().is_none_or(severer) {
            worst = Some((level, share, metric, latest));
        }
    }
    let cooling = (state.cool_down).cooling(seen.now_ms, config.cool_down_seconds);
    let thresholds = worst
        .map(|(level, _, metric, (observed, bound))| {
            let level = if cooling { MetLevel::Report } else { level };
            vec![Threshold {
                met: level,
                scope: metric.into(),
                signal: metric.into(),
                observed,
                threshold: bound,
                grace_period_seconds: 0,
                condition: Some(Condition {
                    name: "SystemCPU".into(),
                    effects: vec!["NoSchedule".into()],
                }),
            }]
        })
        .unwrap_or_default();
    Ok(Decision {
        thresholds,
        soft_candidates: vec![],
        force_evictions: vec![],
        state: Some(state.encode()),
    })
}

/// The pods to evict for `scope` (the pressed metric), busiest first.
///
/// # Errors
/// The config or the scope is invalid.
pub fn top_victims(pods: &[Pod], config: &str, scope: &str) -> Result<Vec<Eviction>, String> {
    if !METRICS.contains(&scope) {
        return Err(format!(
            "{NAME} has no scope {scope:?}: its scopes are {METRICS:?}"
        ));
    }
    let config = Config::parse(config)?;
    let candidates: Vec<&Pod> = (pods.iter())
        .filter(|pod| !config.check_cpu_manager || guaranteed_cpus(pod) == 0)
        .collect();
    // The pressed metric first: its per-pod form is the pod's CPU usage
    // (katalyst's history sum; a pod never measured counts 0).
    let mut ranked = candidates;
    ranked.sort_by(|a, b| {
        (cores(b).total_cmp(&cores(a)))
            .then_with(|| ranking::compare(a, b, &config.ranking_metrics, None))
    });
    let level = |pod: &Pod| ranking::qos_level(pod) == Some(QosLevel::ReclaimedCores);
    Ok(ranked
        .into_iter()
        .map(|pod| Eviction {
            uid: pod.uid.clone(),
            reason: format!(
                "{scope} is over its bound on too much of the last samples; the pod uses {:.2} cores{}",
                cores(pod),
                if level(pod) { " (reclaimed_cores)" } else { "" }
            ),
            grace_period_seconds: config.grace_period_seconds,
        })
        .collect())
}

#[cfg(test)]
mod tests;
