//! System memory pressure (katalyst's `memory/system_pressure.go`): the
//! node's free memory (`MemFree`) against max(a configured minimum,
//! `MemTotal` × `vm.watermarkScaleFactor` / 10000), which `MemAvailable`
//! hides while page cache looks reclaimable; and, where the kernel keeps
//! it (cgroup v2), the workload cgroup's memory PSI: while its `some`
//! avg10 is at `someThreshold` or more and at least three of its
//! `dedicated_cores`/`shared_cores` pods stall, their average `some` avg10
//! at `fullThreshold` or more for `durationSeconds` presses the node, and
//! for three times as long presses it for every pod.
//!
//! One threshold, scope `memory`, hard, reporting `MemoryPressure` with a
//! `NoSchedule` taint. Free memory under the line presses the node for
//! `reclaimed_cores` pods; so does the PSI rule, and past its triple
//! duration for every pod. Victims come from the NUMA node with the fewest
//! free pages in its Normal zone (the pods holding at least
//! `victimMinimumUtilization` of it), or from every pod where the zones are
//! not known, ranked by `rankingMetrics`. After a victim, the threshold
//! only reports (the condition holds, nobody is evicted) for
//! `coolDownSeconds`, counted from the cycle that chose it.
//!
//! Where katalyst's code differs from its intent, vigil keeps the intent
//! (docs/policies.md lists each): its PSI timer neither advances nor resets
//! while fewer than three pods stall or while their average is under
//! `fullThreshold`, so a later stall inherits an old start; vigil resets it.
//! Its cool-down restarts at every ranking call, even one that found no
//! pod; vigil's runs from the last victim (`last-met`'s `victim`). Its
//! kswapd steal-rate rule is not called since 2024 (dead code); vigil does
//! not have it.

use crate::knobs::{self, CoolDown, Seen, signal};
use crate::ranking::{self, Metric};
use crate::{
    Condition, Decision, Eviction, Interest, MetLevel, Pod, PodFact, Signal, StrategyInterest,
    Threshold,
};
use policy_kit::katalyst::{self, QosLevel};
use serde_json::{Value, json};

/// The strategy's name as vigil ships it.
pub const NAME: &str = "system-memory-pressure";

/// Its one threshold's scope.
pub const SCOPE: &str = "memory";

/// katalyst's `minMemPressure`: a pod stalls if its `some` avg10 is over this.
const MIN_POD_PRESSURE: u64 = 1;
/// katalyst's `minPods`: the PSI rule needs this many stalling pods.
const MIN_PODS: u64 = 3;

/// The workload PSI rule's knobs (katalyst's agent flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsiRule {
    /// `--eviction-system-pressure-some-threshold`: the workload cgroup's
    /// `some` avg10 (percent) that starts looking at pods.
    pub some_threshold: u64,
    /// `--eviction-system-pressure-full-threshold`: the pods' average
    /// `some` avg10 (percent) that counts as pressure.
    pub full_threshold: u64,
    /// `--eviction-system-pressure-duration`: seconds it must hold.
    pub duration_seconds: u64,
}

/// The config, katalyst's knobs under vigil's names.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `SystemFreeMemoryThresholdMinimum`, in bytes.
    pub free_memory_threshold_minimum: u64,
    /// `--eviction-system-pressure-cool-down-period`, in seconds.
    pub cool_down_seconds: u64,
    /// The workload PSI rule; none: off (pods are then not read in
    /// `evaluate`).
    pub workload_psi: Option<PsiRule>,
    /// `NumaVictimMinimumUtilizationThreshold`.
    pub victim_minimum_utilization: f64,
    /// `SystemEvictionRankingMetrics`.
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
            free_memory_threshold_minimum: 0,
            cool_down_seconds: 35,
            workload_psi: Some(PsiRule {
                some_threshold: 15,
                full_threshold: 4,
                duration_seconds: 15,
            }),
            victim_minimum_utilization: 0.001,
            ranking_metrics: vec![Metric::QosLevel, Metric::Priority, Metric::MemoryUsage],
            grace_period_seconds: None,
            reclaimed_grace_period_seconds: Some(1),
        }
    }
}

const FIELDS: &str = "freeMemoryThresholdMinimum, coolDownSeconds, workloadPsi, \
                      victimMinimumUtilization, rankingMetrics, gracePeriodSeconds, \
                      reclaimedGracePeriodSeconds";

fn seconds(field: &Value, name: &str) -> Result<u64, String> {
    field
        .as_u64()
        .ok_or(format!("{name} must be a whole number of seconds"))
}

fn psi_rule(field: &Value) -> Result<Option<PsiRule>, String> {
    if field.is_null() {
        return Ok(None);
    }
    let fields = (field.as_object()).ok_or(
        "workloadPsi must be an object (someThreshold, fullThreshold, durationSeconds) or null",
    )?;
    let mut rule = Config::default().workload_psi.expect("on by default");
    for (key, value) in fields {
        let number = || {
            value
                .as_u64()
                .ok_or(format!("workloadPsi.{key} must be a whole number"))
        };
        match key.as_str() {
            "someThreshold" => rule.some_threshold = number()?,
            "fullThreshold" => rule.full_threshold = number()?,
            "durationSeconds" => rule.duration_seconds = number()?,
            other => {
                return Err(format!(
                    "unknown field workloadPsi.{other}: someThreshold, fullThreshold, durationSeconds"
                ));
            }
        }
    }
    Ok(Some(rule))
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
        for (key, field) in &fields {
            match key.as_str() {
                "freeMemoryThresholdMinimum" => {
                    config.free_memory_threshold_minimum = match field {
                        Value::String(text) => policy_kit::parse_quantity(text)
                            .map_err(|e| format!("freeMemoryThresholdMinimum: {e}"))?,
                        other => other
                            .as_u64()
                            .ok_or("freeMemoryThresholdMinimum must be bytes or a quantity")?,
                    };
                }
                "coolDownSeconds" => config.cool_down_seconds = seconds(field, key)?,
                "workloadPsi" => config.workload_psi = psi_rule(field)?,
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
                other => return Err(format!("unknown field {other:?}: {FIELDS}")),
            }
        }
        Ok(config)
    }
}

/// What the strategy reads: free memory, the scale factor, the NUMA
/// zones and the workload PSI; each pod's QoS level, and for ranking its
/// memory per NUMA node and its usage. With the PSI rule it also reads the
/// pods' memory pressure in `evaluate`.
pub fn interest(config: &str) -> StrategyInterest {
    let psi = Config::parse(config).is_ok_and(|c| c.workload_psi.is_some());
    let mut facts = vec![PodFact::NumaMemory, PodFact::MemoryUsage];
    if psi {
        facts.push(PodFact::MemoryPressure);
    }
    StrategyInterest {
        keys: Interest {
            labels: vec![],
            annotations: vec![katalyst::QOS_LEVEL.into()],
            facts,
        },
        pods_in_evaluate: psi,
        signals: vec![
            "memory.free".into(),
            "vm.watermarkScaleFactor".into(),
            "numa.*".into(),
            "psi.workload.memory.*".into(),
        ],
    }
}

/// What may be evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `reclaimed_cores` pods only.
    Reclaimed,
    /// Every pod.
    Evict,
}

/// What the strategy keeps between cycles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The last cycle, and the last victim.
    pub cool_down: CoolDown,
    /// Since when the pods' PSI has held at `fullThreshold`.
    pub psi_since_ms: Option<i64>,
    /// What this cycle's pressure calls for (read by `top-victims`).
    pub action: Option<Action>,
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
        let action = match value["action"].as_str() {
            None => None,
            Some("reclaimed") => Some(Action::Reclaimed),
            Some("evict") => Some(Action::Evict),
            Some(other) => return Err(format!("kept action {other:?} is unknown")),
        };
        Ok(Self {
            cool_down: CoolDown::of(&value),
            psi_since_ms: value["psiSinceMs"].as_i64(),
            action,
        })
    }

    /// The state as bytes to keep.
    pub fn encode(&self) -> Vec<u8> {
        let action = self.action.map(|a| match a {
            Action::Reclaimed => "reclaimed",
            Action::Evict => "evict",
        });
        let mut value = json!({"psiSinceMs": self.psi_since_ms, "action": action});
        self.cool_down.write(&mut value);
        value.to_string().into_bytes()
    }
}

/// The workload PSI rule at `now`: the action it calls for, its timer
/// updated in `state`.
fn psi_action(rule: &PsiRule, seen: &Seen<'_>, state: &mut State) -> Option<Action> {
    let Some(workload) = signal(seen.signals, "psi.workload.memory.some.avg10") else {
        state.psi_since_ms = None;
        return None;
    };
    // katalyst reads PSI as whole percents.
    if (workload.value as u64) < rule.some_threshold {
        state.psi_since_ms = None;
        return None;
    }
    let (mut total, mut count, mut stalling) = (0, 0, 0);
    for pod in seen.pods {
        let level = ranking::qos_level(pod);
        if !matches!(
            level,
            Some(QosLevel::DedicatedCores | QosLevel::SharedCores)
        ) {
            continue;
        }
        let Some(pressure) = &pod.usage.memory_pressure else {
            continue;
        };
        let some = pressure.some_avg10 as u64;
        stalling += u64::from(some > MIN_POD_PRESSURE);
        total += some;
        count += 1;
    }
    if stalling < MIN_PODS || total / count.max(1) < rule.full_threshold {
        state.psi_since_ms = None;
        return None;
    }
    let since = *state.psi_since_ms.get_or_insert(seen.now_ms);
    let held = u64::try_from(seen.now_ms - since).unwrap_or(0) / 1000;
    if held >= rule.duration_seconds * 3 {
        Some(Action::Evict)
    } else if held >= rule.duration_seconds {
        Some(Action::Reclaimed)
    } else {
        None
    }
}

/// One cycle: the threshold, and the state to keep.
///
/// # Errors
/// The config or the kept state is invalid: nothing is judged.
pub fn evaluate(seen: &Seen<'_>, config: &str, kept: &[u8]) -> Result<Decision, String> {
    let config = Config::parse(config)?;
    let mut state = State::decode(kept)?;
    state
        .cool_down
        .advance(seen.last_met, Some(SCOPE), seen.now_ms);
    let mut action = None;
    let mut compared = None;
    if let (Some(free), Some(scale)) = (
        signal(seen.signals, "memory.free"),
        signal(seen.signals, "vm.watermarkScaleFactor"),
    ) && let Some(total) = free.capacity
    {
        let line = (config.free_memory_threshold_minimum as f64).max(total * scale.value / 10000.0);
        compared = Some(("memory.free", free.value, line));
        if free.value < line {
            action = Some(Action::Reclaimed);
        }
    }
    if let Some(rule) = &config.workload_psi
        && let Some(by_psi) = psi_action(rule, seen, &mut state)
    {
        action = Some(match (action, by_psi) {
            (_, Action::Evict) => Action::Evict,
            (other, Action::Reclaimed) => other.unwrap_or(Action::Reclaimed),
        });
        if compared.is_none_or(|(_, free, line)| free >= line) {
            let workload = signal(seen.signals, "psi.workload.memory.some.avg10");
            let observed = workload.map_or(0.0, |s| s.value);
            compared = Some((
                "psi.workload.memory.some.avg10",
                observed,
                rule.some_threshold as f64,
            ));
        }
    }
    state.action = action;
    let cooling = (state.cool_down).cooling(seen.now_ms, config.cool_down_seconds);
    let thresholds = match (action, compared) {
        (Some(_), Some((signal, observed, threshold))) => vec![Threshold {
            met: if cooling {
                MetLevel::Report
            } else {
                MetLevel::Hard
            },
            scope: SCOPE.into(),
            signal: signal.into(),
            observed,
            threshold,
            grace_period_seconds: 0,
            condition: Some(Condition {
                name: "MemoryPressure".into(),
                effects: vec!["NoSchedule".into()],
            }),
        }],
        _ => vec![],
    };
    Ok(Decision {
        thresholds,
        soft_candidates: vec![],
        force_evictions: vec![],
        state: Some(state.encode()),
    })
}

/// The NUMA node with the fewest free pages in its Normal zone, if the
/// zones are known.
fn target_numa(signals: &[Signal]) -> Option<u32> {
    (signals.iter())
        .filter_map(|s| {
            let node = s
                .name
                .strip_prefix("numa.")?
                .strip_suffix(".zone.normal.free")?;
            Some((node.parse::<u32>().ok()?, s.value))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(node, _)| node)
}

/// The pods to evict, most evictable first.
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
    if scope != SCOPE {
        return Err(format!(
            "{NAME} has no scope {scope:?}: its scope is {SCOPE}"
        ));
    }
    let config = Config::parse(config)?;
    let Some(action) = State::decode(kept)?.action else {
        return Ok(vec![]);
    };
    let numa = target_numa(signals);
    let total = numa
        .and_then(|node| signal(signals, &format!("numa.{node}.memory.free")))
        .and_then(|s| s.capacity);
    let candidates: Vec<&Pod> = (pods.iter())
        .filter(|pod| match (numa, total) {
            (Some(node), Some(total)) if total > 0.0 => (pod.usage.numa_memory.iter()).any(|m| {
                m.node == node && m.bytes as f64 / total >= config.victim_minimum_utilization
            }),
            // katalyst finds no candidate where a node's memory is unknown.
            (Some(_), _) => false,
            (None, _) => true,
        })
        .filter(|pod| match action {
            Action::Reclaimed => ranking::qos_level(pod) == Some(QosLevel::ReclaimedCores),
            Action::Evict => true,
        })
        .collect();
    let grace = match action {
        Action::Evict => config.grace_period_seconds,
        Action::Reclaimed => config.reclaimed_grace_period_seconds,
    };
    let reason = match numa {
        Some(node) => format!("the node is short of free memory (NUMA node {node} the most)"),
        None => "the node is short of free memory".to_owned(),
    };
    Ok(ranking::rank(candidates, &config.ranking_metrics, numa)
        .into_iter()
        .map(|pod| Eviction {
            uid: pod.uid.clone(),
            reason: reason.clone(),
            grace_period_seconds: grace,
        })
        .collect())
}

#[cfg(test)]
mod tests;
