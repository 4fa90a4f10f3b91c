//! What the chart shows, derived from a simulation as plain data: for each
//! panel the signal, the pods' usage stacked above it, the thresholds, the
//! spans where a condition held and the labelled evictions; below them the
//! policies' other decisions on lanes. Kept apart from the drawing so it can
//! be tested.

use super::super::record::{Met, PodUsage, Simulation, Step, ThresholdRecord};
use crate::signals::catalogue::{self, Unit};
use std::collections::{BTreeMap, BTreeSet};

/// At most this many pods get a band of their own; the rest share one.
const MAX_BANDS: usize = 10;

/// A line over time: `(seconds, value)` in the panel's unit.
pub(super) type Series = Vec<(f64, f64)>;

/// One panel: a signal and what explains it.
pub(super) struct Panel {
    /// The signal, e.g. `memory.available`.
    pub signal: String,
    /// Display unit: what one unit of the axis is, and its name.
    pub unit: (f64, &'static str),
    /// The signal.
    pub line: Series,
    /// What each pod (then the system) took away from the signal, stacked
    /// on it, bottom first: `(name, lower, upper)`.
    pub bands: Vec<(String, Series, Series)>,
    /// The thresholds the strategies reported on this signal.
    pub thresholds: Vec<ThresholdLine>,
    /// When a condition the thresholds report held.
    pub spans: Vec<Span>,
    /// Evictions and dry-run decisions of the strategies watching it.
    pub marks: Vec<Mark>,
}

/// Which of a strategy's thresholds a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Level {
    /// Reported while met hard.
    Hard,
    /// Reported while met soft, or while calm by a strategy that has a
    /// hard threshold elsewhere: the one it would meet first.
    Soft,
    /// Never met: which one the strategy compared with is unknown.
    Unmet,
}

/// One threshold of one strategy over time.
#[derive(Debug, PartialEq)]
pub(super) struct ThresholdLine {
    /// The strategy whose threshold it is.
    pub strategy: String,
    /// Which threshold.
    pub level: Level,
    /// Its value at each step, in the panel's unit.
    pub points: Series,
}

/// A time span in which a node condition held.
#[derive(Debug, PartialEq)]
pub(super) struct Span {
    /// The condition, e.g. `MemoryPressure`.
    pub condition: String,
    /// From, in seconds.
    pub from: f64,
    /// Until, in seconds.
    pub to: f64,
}

/// An eviction (or a dry-run decision) on the signal's line.
#[derive(Debug, PartialEq)]
pub(super) struct Mark {
    /// When, and the signal then.
    pub at: (f64, f64),
    /// `pod by strategy (urgency)`.
    pub label: String,
    /// When the pod was gone, and the signal then; none for a dry run or a
    /// pod still terminating at the end.
    pub gone: Option<(f64, f64)>,
    /// A decision in dry run: nothing was evicted.
    pub dry_run: bool,
}

/// The lanes below the panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Lane {
    /// A scenario config change applied or refused.
    Config,
    /// A candidate the sorter refused.
    Refused,
    /// A policy that faulted or declined.
    Unanswered,
}

impl Lane {
    /// Its row title.
    pub(super) fn title(self) -> &'static str {
        match self {
            Lane::Config => "config",
            Lane::Refused => "sorter refused",
            Lane::Unanswered => "faulted or declined",
        }
    }
}

/// One decision on a lane.
#[derive(Debug, PartialEq)]
pub(super) struct LaneMark {
    /// The lane it is drawn in.
    pub lane: Lane,
    /// When, in seconds.
    pub at: f64,
    /// What.
    pub label: String,
}

/// Signals measured in bytes are drawn in MiB, pressure in percent.
fn unit(signal: &str) -> (f64, &'static str) {
    match catalogue::unit(signal) {
        Unit::Bytes => (1048576.0, "MiB"),
        Unit::Percent => (1.0, "%"),
        Unit::Count | Unit::Unknown => (1.0, ""),
    }
}

/// The panels: `memory.available`, then every signal whose threshold is
/// met at some point.
pub(super) fn panels(simulation: &Simulation) -> Vec<Panel> {
    let mut signals: BTreeSet<&str> = ["memory.available"].into();
    // The signal each strategy watches, as it last reported.
    let mut watched: BTreeMap<&str, &str> = BTreeMap::new();
    for threshold in simulation.steps.iter().flat_map(|s| &s.thresholds) {
        watched.insert(&threshold.strategy, &threshold.signal);
        if threshold.met != Met::NotMet {
            signals.insert(&threshold.signal);
        }
    }
    signals
        .into_iter()
        .map(|signal| {
            let unit = unit(signal);
            let line: Series = simulation
                .steps
                .iter()
                .map(|s| (s.t, s.signals.get(signal).copied().unwrap_or(0.0) / unit.0))
                .collect();
            let watching = |strategy: &str| watched.get(strategy) == Some(&signal);
            Panel {
                bands: bands(simulation, signal, unit.0, &line),
                thresholds: threshold_lines(&simulation.steps, signal, unit.0),
                spans: spans(&simulation.steps, signal),
                marks: marks(simulation, &line, &watching),
                signal: signal.to_owned(),
                unit,
                line,
            }
        })
        .collect()
}

/// The value of `line` at `t`, between its points linearly.
fn value_at(line: &Series, t: f64) -> f64 {
    let after = line.iter().position(|(s, _)| *s >= t);
    match after {
        Some(0) => line[0].1,
        Some(i) => {
            let ((t0, v0), (t1, v1)) = (line[i - 1], line[i]);
            v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        }
        None => line.last().map_or(0.0, |(_, v)| *v),
    }
}

/// Every pod that was on the node, by `namespace/name`.
pub(super) fn pods(simulation: &Simulation) -> Vec<&String> {
    let pods: BTreeSet<&String> = simulation
        .steps
        .iter()
        .flat_map(|s| s.usage.keys())
        .collect();
    pods.into_iter().collect()
}

/// What the pods and the system took from `signal`, stacked on `line`.
fn bands(
    simulation: &Simulation,
    signal: &str,
    unit: f64,
    line: &Series,
) -> Vec<(String, Series, Series)> {
    let taken = |step: &Step, pod: &str| {
        step.usage
            .get(pod)
            .and_then(|u| u.taken_from(signal))
            .map_or(0.0, |v| v as f64 / unit)
    };
    let mut pods = pods(simulation);
    if PodUsage::default().taken_from(signal).is_none() {
        return Vec::new();
    }
    // The biggest users get their own band, the rest share one.
    let peak = |pod: &str| {
        simulation
            .steps
            .iter()
            .map(|s| taken(s, pod))
            .fold(0.0, f64::max)
    };
    pods.retain(|pod| peak(pod) > 0.0);
    pods.sort_by(|a, b| peak(b).total_cmp(&peak(a)).then(a.cmp(b)));
    let others: Vec<&String> = if pods.len() > MAX_BANDS {
        pods.split_off(MAX_BANDS - 1)
    } else {
        Vec::new()
    };
    pods.sort();
    let mut groups: Vec<(String, Vec<&String>)> =
        pods.into_iter().map(|p| (p.clone(), vec![p])).collect();
    if !others.is_empty() {
        groups.push((format!("{} other pods", others.len()), others));
    }
    let mut lower: Series = line.clone();
    let mut bands = Vec::new();
    for (name, members) in groups {
        let upper: Series = simulation
            .steps
            .iter()
            .zip(&lower)
            .map(|(step, (t, low))| {
                let used: f64 = members.iter().map(|p| taken(step, p)).sum();
                (*t, low + used)
            })
            .collect();
        bands.push((name, lower, upper.clone()));
        lower = upper;
    }
    if let Some(capacity) = simulation.capacities.get(signal) {
        let top: Series = lower
            .iter()
            .map(|(t, v)| (*t, v.max(capacity / unit)))
            .collect();
        bands.push(("system".into(), lower, top));
    }
    bands
}

/// The thresholds reported on `signal`, one line per strategy and level.
///
/// A strategy reports one threshold per cycle: the one met, or while calm
/// the one it would meet first. A calm value equal to a hard one is that
/// hard threshold; any other calm value of a strategy that has been met is
/// its soft threshold; a strategy never met has one line. Each line holds
/// its last value forward (and its first value back to the start), so both
/// thresholds show for the whole run once each has been seen.
pub(super) fn threshold_lines(steps: &[Step], signal: &str, unit: f64) -> Vec<ThresholdLine> {
    let mut by_strategy: BTreeMap<&str, Vec<(f64, &ThresholdRecord)>> = BTreeMap::new();
    for step in steps {
        for threshold in step.thresholds.iter().filter(|t| t.signal == signal) {
            by_strategy
                .entry(&threshold.strategy)
                .or_default()
                .push((step.t, threshold));
        }
    }
    let mut lines = Vec::new();
    for (strategy, reports) in by_strategy {
        let hard: Vec<f64> = reports
            .iter()
            .filter(|(_, r)| r.met == Met::Hard)
            .map(|(_, r)| r.threshold)
            .collect();
        let ever_met = reports.iter().any(|(_, r)| r.met != Met::NotMet);
        let level = |r: &ThresholdRecord| match r.met {
            Met::Hard => Level::Hard,
            Met::Soft => Level::Soft,
            _ if hard.contains(&r.threshold) => Level::Hard,
            _ if ever_met => Level::Soft,
            _ => Level::Unmet,
        };
        let mut levels: BTreeMap<Level, Vec<(f64, f64)>> = BTreeMap::new();
        for (t, report) in &reports {
            levels
                .entry(level(report))
                .or_default()
                .push((*t, report.threshold / unit));
        }
        for (level, seen) in levels {
            let mut current = seen[0].1;
            let mut next = seen.iter().peekable();
            let points = steps
                .iter()
                .map(|step| {
                    while let Some((_, v)) = next.next_if(|(t, _)| *t <= step.t) {
                        current = *v;
                    }
                    (step.t, current)
                })
                .collect();
            lines.push(ThresholdLine {
                strategy: strategy.to_owned(),
                level,
                points,
            });
        }
    }
    lines
}

/// When a condition reported by a threshold on `signal` held: from the
/// step it was first reported to the step it no longer was.
pub(super) fn spans(steps: &[Step], signal: &str) -> Vec<Span> {
    let conditions: BTreeSet<&str> = steps
        .iter()
        .flat_map(|s| &s.thresholds)
        .filter(|t| t.signal == signal)
        .filter_map(|t| t.condition.as_deref())
        .collect();
    let mut spans = Vec::new();
    for condition in conditions {
        let mut from = None;
        for step in steps {
            let held = step.conditions.iter().any(|c| c == condition);
            match (held, from) {
                (true, None) => from = Some(step.t),
                (false, Some(start)) => {
                    spans.push(Span {
                        condition: condition.to_owned(),
                        from: start,
                        to: step.t,
                    });
                    from = None;
                }
                _ => {}
            }
        }
        if let (Some(start), Some(last)) = (from, steps.last()) {
            spans.push(Span {
                condition: condition.to_owned(),
                from: start,
                to: last.t,
            });
        }
    }
    spans
}

/// The evictions by strategies `watching` the panel's signal, and their
/// dry-run decisions (each where it was first made, not every cycle after).
fn marks(simulation: &Simulation, line: &Series, watching: &dyn Fn(&str) -> bool) -> Vec<Mark> {
    let end = line.last().map_or(0.0, |(t, _)| *t);
    let mut marks: Vec<Mark> = simulation
        .evictions
        .iter()
        .filter(|e| watching(&e.strategy))
        .map(|e| Mark {
            at: (e.at, value_at(line, e.at)),
            label: format!("{} by {} ({})", e.pod, e.strategy, e.urgency),
            gone: (e.gone_at <= end).then(|| (e.gone_at, value_at(line, e.gone_at))),
            dry_run: false,
        })
        .collect();
    let mut before: Vec<(&str, &str)> = Vec::new();
    for step in &simulation.steps {
        let now: Vec<(&str, &str)> = step
            .decisions
            .iter()
            .filter(|d| d.dry_run)
            .map(|d| (d.pod.as_str(), d.strategy.as_str()))
            .collect();
        for &(pod, strategy) in now.iter().filter(|d| !before.contains(d)) {
            if watching(strategy) {
                marks.push(Mark {
                    at: (step.t, value_at(line, step.t)),
                    label: format!("{pod} by {strategy} (dry run)"),
                    gone: None,
                    dry_run: true,
                });
            }
        }
        before = now;
    }
    marks.sort_by(|a, b| a.at.0.total_cmp(&b.at.0));
    marks
}

/// The policies' decisions that are not evictions: config changes, the
/// sorter's refusals and the policies' faults and declines, each where it
/// first appeared (a refusal repeated every cycle is marked once).
pub(super) fn lane_marks(steps: &[Step]) -> Vec<LaneMark> {
    let mut marks = Vec::new();
    let mut before: BTreeSet<(Lane, String)> = BTreeSet::new();
    for step in steps {
        let refusals = step.refusals.iter().map(|r| {
            let label = format!("{} refused {}: {}", r.sorter, r.pod, r.reason);
            (Lane::Refused, label)
        });
        let unanswered = step
            .unanswered
            .iter()
            .map(|s| (Lane::Unanswered, s.clone()));
        let now: BTreeSet<(Lane, String)> = refusals.chain(unanswered).collect();
        for (lane, label) in now.difference(&before) {
            marks.push(LaneMark {
                lane: *lane,
                at: step.t,
                label: label.clone(),
            });
        }
        marks.extend(step.config.iter().map(|note| LaneMark {
            lane: Lane::Config,
            at: step.t,
            label: note.clone(),
        }));
        before = now;
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Refusal;

    fn step(t: f64, thresholds: &[(&str, f64)], conditions: &[&str]) -> Step {
        Step {
            t,
            signals: BTreeMap::new(),
            usage: BTreeMap::new(),
            thresholds: thresholds
                .iter()
                .map(|(met, threshold)| ThresholdRecord {
                    strategy: "memory-pressure".into(),
                    scope: "memory".into(),
                    met: match *met {
                        "hard" => Met::Hard,
                        "soft" => Met::Soft,
                        _ => Met::NotMet,
                    },
                    signal: "memory.available".into(),
                    observed: 0.0,
                    threshold: *threshold,
                    past_grace: false,
                    condition: Some("MemoryPressure".into()),
                })
                .collect(),
            conditions: conditions.iter().map(|c| (*c).to_owned()).collect(),
            kubelet: Vec::new(),
            misplaced: Vec::new(),
            decisions: Vec::new(),
            started: Vec::new(),
            gone: Vec::new(),
            skipped: Vec::new(),
            unanswered: Vec::new(),
            refusals: Vec::new(),
            config: Vec::new(),
            shadow: Vec::new(),
            snapshot: None,
        }
    }

    #[test]
    fn a_calm_threshold_that_is_not_the_hard_one_is_the_soft_one_and_both_span_the_run() {
        let steps = [
            step(0.0, &[("not-met", 300.0)], &[]),
            step(5.0, &[("hard", 100.0)], &[]),
            step(10.0, &[("not-met", 300.0)], &[]),
        ];
        let lines = threshold_lines(&steps, "memory.available", 1.0);
        let line = |level| {
            lines
                .iter()
                .find(|l| l.level == level)
                .map(|l| l.points.clone())
        };
        assert_eq!(
            line(Level::Hard),
            Some(vec![(0.0, 100.0), (5.0, 100.0), (10.0, 100.0)])
        );
        assert_eq!(
            line(Level::Soft),
            Some(vec![(0.0, 300.0), (5.0, 300.0), (10.0, 300.0)])
        );
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn a_calm_threshold_equal_to_the_hard_one_is_it_and_a_threshold_never_met_is_unmet() {
        let met = [
            step(0.0, &[("not-met", 100.0)], &[]),
            step(5.0, &[("hard", 100.0)], &[]),
        ];
        let levels: Vec<Level> = threshold_lines(&met, "memory.available", 1.0)
            .iter()
            .map(|l| l.level)
            .collect();
        assert_eq!(levels, [Level::Hard]);
        let calm = [step(0.0, &[("not-met", 100.0)], &[])];
        let levels: Vec<Level> = threshold_lines(&calm, "memory.available", 1.0)
            .iter()
            .map(|l| l.level)
            .collect();
        assert_eq!(levels, [Level::Unmet]);
        assert!(threshold_lines(&calm, "pid.available", 1.0).is_empty());
    }

    #[test]
    fn a_threshold_changed_mid_run_holds_its_new_value_from_then_on() {
        let steps = [
            step(0.0, &[("hard", 100.0)], &[]),
            step(5.0, &[("hard", 200.0)], &[]),
            step(10.0, &[("hard", 200.0)], &[]),
        ];
        let lines = threshold_lines(&steps, "memory.available", 2.0);
        assert_eq!(lines[0].points, [(0.0, 50.0), (5.0, 100.0), (10.0, 100.0)]);
    }

    #[test]
    fn a_condition_spans_from_its_first_cycle_to_the_first_without_it_or_the_end() {
        let steps = [
            step(0.0, &[("not-met", 1.0)], &[]),
            step(5.0, &[("hard", 1.0)], &["MemoryPressure"]),
            step(10.0, &[("not-met", 1.0)], &["MemoryPressure"]),
            step(15.0, &[("not-met", 1.0)], &[]),
            step(20.0, &[("hard", 1.0)], &["MemoryPressure"]),
        ];
        let span = |from, to| Span {
            condition: "MemoryPressure".into(),
            from,
            to,
        };
        assert_eq!(
            spans(&steps, "memory.available"),
            [span(5.0, 15.0), span(20.0, 20.0)]
        );
        assert!(spans(&steps, "nodefs.available").is_empty());
    }

    #[test]
    fn a_refusal_repeated_every_cycle_is_marked_once_and_again_when_it_returns() {
        let refusal = Refusal {
            pod: "kube-system/dns".into(),
            strategy: "memory-pressure".into(),
            sorter: "default-sorter".into(),
            reason: "system-critical pod".into(),
        };
        let mut steps: Vec<Step> = (0..4).map(|i| step(f64::from(i) * 5.0, &[], &[])).collect();
        for i in [0, 1, 3] {
            steps[i].refusals.push(refusal.clone());
        }
        steps[1].skipped = vec![
            "memory-pressure/memory: reclaim in progress, no new victim".into(),
            "strategy psi-pressure declined: no PSI".into(),
        ];
        steps[1].unanswered = vec!["strategy psi-pressure declined: no PSI".into()];
        steps[2].config.push("configChanges[0] applied".into());
        let marks: Vec<(Lane, f64)> = lane_marks(&steps).iter().map(|m| (m.lane, m.at)).collect();
        assert_eq!(
            marks,
            [
                (Lane::Refused, 0.0),
                (Lane::Unanswered, 5.0),
                (Lane::Config, 10.0),
                (Lane::Refused, 15.0)
            ]
        );
        assert_eq!(
            lane_marks(&steps)[0].label,
            "default-sorter refused kube-system/dns: system-critical pod"
        );
    }

    #[test]
    fn each_pod_takes_a_band_above_the_signal_and_the_system_fills_up_to_capacity() {
        let mut steps = vec![step(0.0, &[], &[]), step(5.0, &[], &[])];
        let usage = |memory_bytes| PodUsage {
            memory_bytes,
            ..PodUsage::default()
        };
        steps[0].usage.insert("default/a".into(), usage(30));
        steps[0].usage.insert("default/b".into(), usage(10));
        steps[1].usage.insert("default/b".into(), usage(20));
        steps[1].usage.insert("default/idle".into(), usage(0));
        let simulation = Simulation {
            scenario: "s".into(),
            description: String::new(),
            policies: Vec::new(),
            warnings: Vec::new(),
            period: 5.0,
            capacities: [("memory.available".to_owned(), 100.0)].into(),
            steps,
            evictions: Vec::new(),
            shadows: Vec::new(),
        };
        let line = vec![(0.0, 50.0), (5.0, 70.0)];
        let bands = bands(&simulation, "memory.available", 1.0, &line);
        let names: Vec<&str> = bands.iter().map(|(name, _, _)| name.as_str()).collect();
        assert_eq!(
            names,
            ["default/a", "default/b", "system"],
            "idle has no band"
        );
        assert_eq!(bands[0].2, [(0.0, 80.0), (5.0, 70.0)]);
        assert_eq!(bands[1].2, [(0.0, 90.0), (5.0, 90.0)]);
        assert_eq!(bands[2].2, [(0.0, 100.0), (5.0, 100.0)]);
        assert!(super::bands(&simulation, "psi.memory.some.avg10", 1.0, &line).is_empty());
    }

    #[test]
    fn values_between_steps_are_interpolated() {
        let line = vec![(0.0, 10.0), (10.0, 20.0)];
        assert_eq!(value_at(&line, 5.0), 15.0);
        assert_eq!(value_at(&line, 0.0), 10.0);
        assert_eq!(value_at(&line, 30.0), 20.0);
    }
}
