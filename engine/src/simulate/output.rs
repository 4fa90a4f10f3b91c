//! The human-readable timeline and summary of a simulation.

use super::record::{Met, Simulation, Step};

use std::collections::BTreeSet;
use std::fmt::Write;

pub(crate) use crate::signals::catalogue::{bytes, signal_value};

/// `45s`, `2m05s`.
pub(crate) fn time(seconds: f64) -> String {
    let s = seconds.round() as u64;
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// What makes a step worth a row of its own: its thresholds and conditions.
fn state(step: &Step) -> String {
    let met: Vec<String> = step
        .thresholds
        .iter()
        .filter(|t| t.met != Met::NotMet)
        .map(|t| {
            format!(
                "{}: {} ({} {} vs threshold {})",
                t.strategy,
                t.met,
                t.signal,
                signal_value(&t.signal, t.observed),
                signal_value(&t.signal, t.threshold)
            )
        })
        .collect();
    let mut line = if met.is_empty() {
        "no threshold met".to_owned()
    } else {
        met.join("; ")
    };
    if !step.conditions.is_empty() {
        write!(line, " | conditions: {}", step.conditions.join(", ")).expect("writing to a String");
    }
    for act in &step.kubelet {
        write!(line, "\n         kubelet {act}").expect("writing to a String");
    }
    line
}

/// What a step did not do, and why: skipped work, then the sorter's refusals.
fn notes(step: &Step) -> Vec<String> {
    let refusals = step.refusals.iter().map(|r| {
        format!(
            "sorter {} refused {} (proposed by {}): {}",
            r.sorter, r.pod, r.strategy, r.reason
        )
    });
    (step.skipped.iter().cloned())
        .chain(refusals)
        .chain(step.shadow.iter().cloned())
        .collect()
}

/// The timeline: a row for the first and last cycle and for every cycle in
/// which something changed or happened, then a summary.
pub fn render(simulation: &Simulation) -> String {
    let mut out = String::new();
    let w = &mut out;
    header(w, simulation);
    writeln!(w).unwrap();
    // memory.available, and every signal whose threshold is met at some point.
    let mut shown: BTreeSet<&str> = ["memory.available"].into();
    for step in &simulation.steps {
        shown.extend(
            step.thresholds
                .iter()
                .filter(|t| t.met != Met::NotMet)
                .map(|t| t.signal.as_str()),
        );
    }
    let mut previous: Option<(String, Vec<String>)> = None;
    let last = simulation.steps.len().saturating_sub(1);
    for (i, step) in simulation.steps.iter().enumerate() {
        let now = (state(step), notes(step));
        let eventful = !step.decisions.is_empty()
            || !step.started.is_empty()
            || !step.gone.is_empty()
            || !step.config.is_empty();
        if i == 0 || i == last || eventful || previous.as_ref() != Some(&now) {
            let signals: Vec<String> = step
                .signals
                .iter()
                .filter(|(name, _)| shown.contains(name.as_str()))
                .map(|(name, v)| format!("{name}={}", signal_value(name, *v)))
                .collect();
            writeln!(w, "{:>7}  {}", time(step.t), signals.join("  ")).unwrap();
            for note in &step.config {
                writeln!(w, "         config: {note}").unwrap();
            }
            writeln!(w, "         {}", now.0).unwrap();
            for d in &step.decisions {
                let verb = if d.dry_run {
                    "would evict (dry run)"
                } else {
                    "evict"
                };
                writeln!(
                    w,
                    "         -> {verb} {} ({}, by {}): {}",
                    d.pod, d.urgency, d.strategy, d.reason
                )
                .unwrap();
            }
            for pod in &step.gone {
                writeln!(w, "         <- {pod} is gone").unwrap();
            }
            if previous.as_ref().is_none_or(|p| p.1 != now.1) {
                for note in &now.1 {
                    writeln!(w, "         .. {note}").unwrap();
                }
            }
        }
        previous = Some(now);
    }
    summary(w, simulation);
    out
}

/// The scenario, the policies from files and in shadow, the warnings.
fn header(w: &mut String, simulation: &Simulation) {
    writeln!(w, "vigil simulate: {}", simulation.scenario).unwrap();
    if !simulation.description.is_empty() {
        writeln!(w, "{}", simulation.description).unwrap();
    }
    for policy in &simulation.policies {
        if let Some(file) = &policy.file {
            let digest = &policy.digest[..12];
            let (name, world) = (&policy.name, policy.world);
            writeln!(
                w,
                "policy {name}@{digest} ({world}) from {}",
                file.display()
            )
            .unwrap();
        }
    }
    for shadow in &simulation.shadows {
        writeln!(
            w,
            "shadow {}@{} from {}",
            shadow.policy,
            &shadow.digest[..12],
            shadow.file.display()
        )
        .unwrap();
    }
    for warning in &simulation.warnings {
        writeln!(w, "warning: {warning}").unwrap();
    }
}

fn summary(w: &mut String, simulation: &Simulation) {
    let duration = simulation.steps.last().map_or(0.0, |s| s.t);
    writeln!(
        w,
        "\nsummary: {} eviction(s) in {}",
        simulation.evictions.len(),
        time(duration)
    )
    .unwrap();
    for e in &simulation.evictions {
        writeln!(
            w,
            "  {:>6}  {} ({}) by {} [{}]; gone at {}, freed {} of memory\n          {}",
            time(e.at),
            e.pod,
            e.qos,
            e.strategy,
            e.urgency,
            time(e.gone_at),
            bytes(e.freed_memory_bytes as f64),
            e.reason
        )
        .unwrap();
    }
    for s in &simulation.shadows {
        writeln!(
            w,
            "\nshadow {}@{}: {} comparison(s), {} agreed, {} differed, {} faulted",
            s.policy,
            &s.digest[..12],
            s.comparisons,
            s.agreements,
            s.divergences,
            s.faults
        )
        .unwrap();
    }
    let misplaced: BTreeSet<&String> = simulation.steps.iter().flat_map(|s| &s.misplaced).collect();
    for text in misplaced {
        writeln!(w, "\nbeside the kubelet: {text}").unwrap();
    }
    let first =
        |acts: fn(&Step) -> bool| simulation.steps.iter().find(|s| acts(s)).map(|s| time(s.t));
    let kubelet = first(|s| s.kubelet.iter().any(|a| a.starts_with("evicts")));
    let vigil = first(|s| s.decisions.iter().any(|d| !d.dry_run));
    match (vigil, kubelet) {
        (_, None) => writeln!(w, "\nthe kubelet would not have evicted: its lines were never crossed"),
        (Some(vigil), Some(kubelet)) => writeln!(
            w,
            "\nvigil first evicted at {vigil}; the kubelet's line was first crossed at {kubelet} (plus up to one kubelet housekeeping interval)"
        ),
        (None, Some(kubelet)) => writeln!(
            w,
            "\nvigil evicted nothing; the kubelet's line was crossed at {kubelet}: the kubelet would have evicted"
        ),
    }
    .unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_naturally() {
        assert_eq!(bytes(1.5 * 1073741824.0), "1.5 GiB");
        assert_eq!(bytes(480.0 * 1048576.0), "480.0 MiB");
        assert_eq!(bytes(7.0), "7 B");
        assert_eq!(time(45.0), "45s");
        assert_eq!(time(125.0), "2m05s");
        assert_eq!(signal_value("psi.memory.some.avg10", 12.345), "12.3");
        assert_eq!(
            signal_value("allocatable.memory.available", 3.0 * 1048576.0),
            "3.0 MiB"
        );
        assert_eq!(signal_value("nodefs.inodesFree", 12.5), "12");
    }
}
