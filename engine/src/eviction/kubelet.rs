//! Where vigil's thresholds sit against the kubelet's on the same node.
//!
//! vigil acts first and the kubelet is the backstop: a threshold a strategy
//! reports on a signal the kubelet also watches must be strictly ahead of
//! the kubelet's first line on it (more left available when vigil acts),
//! else the kubelet's local kill comes first, without PodDisruptionBudgets
//! or policies. On disk, a threshold should also leave the kubelet's image
//! garbage collection its chance: vigil evicting while less than
//! `imageGCHighThresholdPercent` of the disk is used deletes pods where
//! deleting unused images would have done.
//!
//! Thresholds are judged as strategies report them each cycle (any
//! strategy, built in or not, on the signal it names), so what is judged is
//! what runs.

use crate::config::kubelet::KubeletConfig;
use crate::model::{Signal, Threshold};
use crate::signals::catalogue::signal_value;
use std::fmt;

/// A threshold out of its place beside the kubelet.
#[derive(Debug, Clone, PartialEq)]
pub struct Misplaced {
    /// The strategy that reported it.
    pub strategy: String,
    /// The signal it watches.
    pub signal: String,
    /// vigil's threshold.
    pub threshold: f64,
    /// The kubelet's line it is held against.
    pub line: f64,
    /// Which line, and on which side of it the threshold is.
    pub place: Place,
}

/// Which way a threshold is out of place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// At or behind the kubelet's first eviction line: the kubelet acts first.
    BehindKubelet,
    /// Ahead of the kubelet's image garbage collection: vigil evicts before
    /// unused images are deleted.
    BeforeImageGc,
}

impl Place {
    /// The word a condition or an Event gives it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::BehindKubelet => "BehindKubelet",
            Self::BeforeImageGc => "BeforeImageGC",
        }
    }
}

impl fmt::Display for Misplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (vigil, line) = (
            signal_value(&self.signal, self.threshold),
            signal_value(&self.signal, self.line),
        );
        match self.place {
            Place::BehindKubelet => write!(
                f,
                "{}: {} < {vigil} is not ahead of the kubelet's {line}: the kubelet evicts first",
                self.strategy, self.signal
            ),
            Place::BeforeImageGc => write!(
                f,
                "{}: {} < {vigil} comes before the kubelet's image GC at {line}: pods go before unused images",
                self.strategy, self.signal
            ),
        }
    }
}

/// The reported `thresholds` that are out of place beside `kubelet`, with
/// the node's `signals` (for their capacities).
pub(crate) fn misplaced(
    kubelet: &KubeletConfig,
    thresholds: &[(String, Threshold)],
    signals: &[Signal],
) -> Vec<Misplaced> {
    let mut found = Vec::new();
    for (strategy, threshold) in thresholds {
        let capacity = signals
            .iter()
            .find(|s| s.name == threshold.signal)
            .and_then(|s| s.capacity);
        let mut out_of_place = |line: f64, place| {
            found.push(Misplaced {
                strategy: strategy.clone(),
                signal: threshold.signal.clone(),
                threshold: threshold.threshold,
                line,
                place,
            });
        };
        if let Some(line) = kubelet.first_line(&threshold.signal, capacity)
            && threshold.threshold <= line
        {
            out_of_place(line, Place::BehindKubelet);
        }
        let disk_space = matches!(
            threshold.signal.as_str(),
            "nodefs.available" | "imagefs.available"
        );
        if let Some(capacity) = capacity.filter(|_| disk_space) {
            let line = kubelet.image_gc_line(capacity);
            if threshold.threshold > line {
                out_of_place(line, Place::BeforeImageGc);
            }
        }
    }
    found
}

/// What the kubelet does on the node's `signals` as they are: where a
/// signal is below its first eviction line, it evicts; where a filesystem's
/// free space is below its image GC line, it deletes unused images. In
/// words, for a timeline that shows the kubelet as a fixed second line.
pub(crate) fn kubelet_acts(kubelet: &KubeletConfig, signals: &[Signal]) -> Vec<String> {
    let mut acts = Vec::new();
    for signal in signals {
        let shown = |line| signal_value(&signal.name, line);
        if let Some(line) = kubelet.first_line(&signal.name, signal.capacity)
            && signal.value < line
        {
            acts.push(format!(
                "evicts: {} {} < {}",
                signal.name,
                shown(signal.value),
                shown(line)
            ));
        }
        let disk_space = matches!(
            signal.name.as_str(),
            "nodefs.available" | "imagefs.available"
        );
        if let Some(capacity) = signal.capacity.filter(|_| disk_space) {
            let line = kubelet.image_gc_line(capacity);
            if signal.value < line {
                acts.push(format!(
                    "deletes unused images: {} {} < {}",
                    signal.name,
                    shown(signal.value),
                    shown(line)
                ));
            }
        }
    }
    acts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MetLevel;

    const MIB: f64 = 1048576.0;

    fn reported(strategy: &str, signal: &str, value: f64) -> (String, Threshold) {
        let mut threshold = crate::model::memory_threshold(MetLevel::NotMet);
        threshold.signal = signal.into();
        threshold.threshold = value;
        (strategy.into(), threshold)
    }

    fn signal(name: &str, capacity: f64) -> Signal {
        Signal {
            name: name.into(),
            value: capacity / 2.0,
            capacity: Some(capacity),
        }
    }

    #[test]
    fn the_kubelet_evicts_below_its_line_and_collects_images_below_its_gc_line() {
        let kubelet = KubeletConfig::default();
        let at = |name: &str, value: f64, capacity: f64| Signal {
            name: name.into(),
            value,
            capacity: Some(capacity),
        };
        let calm = [
            at("memory.available", 200.0 * MIB, 8192.0 * MIB),
            at("nodefs.available", 500.0, 1000.0),
        ];
        assert!(kubelet_acts(&kubelet, &calm).is_empty());
        let pressed = [
            at("memory.available", 50.0 * MIB, 8192.0 * MIB),
            at("nodefs.available", 120.0, 1000.0),
        ];
        assert_eq!(
            kubelet_acts(&kubelet, &pressed),
            [
                "evicts: memory.available 50.0 MiB < 100.0 MiB",
                "deletes unused images: nodefs.available 120 B < 150 B",
            ]
        );
    }

    #[test]
    fn thresholds_at_or_behind_the_kubelet_or_before_its_image_gc_are_found() {
        let kubelet = KubeletConfig::default();
        let signals = [
            signal("memory.available", 8192.0 * MIB),
            signal("nodefs.available", 1000.0),
        ];
        let thresholds = [
            reported("memory-pressure", "memory.available", 300.0 * MIB),
            reported("at-the-kubelet", "memory.available", 100.0 * MIB),
            reported("disk-pressure", "nodefs.available", 120.0),
            reported("early-disk", "nodefs.available", 200.0),
            reported("late-disk", "nodefs.available", 80.0),
            reported("psi-pressure", "psi.memory.some.avg10", 40.0),
        ];
        let found = misplaced(&kubelet, &thresholds, &signals);
        let brief: Vec<(&str, Place, f64)> = found
            .iter()
            .map(|m| (m.strategy.as_str(), m.place, m.line))
            .collect();
        assert_eq!(
            brief,
            [
                ("at-the-kubelet", Place::BehindKubelet, 100.0 * MIB),
                ("early-disk", Place::BeforeImageGc, 150.0),
                ("late-disk", Place::BehindKubelet, 100.0),
            ]
        );
        assert_eq!(
            found[0].to_string(),
            "at-the-kubelet: memory.available < 100.0 MiB is not ahead of the kubelet's 100.0 MiB: the kubelet evicts first"
        );
        assert_eq!(
            found[1].to_string(),
            "early-disk: nodefs.available < 200 B comes before the kubelet's image GC at 150 B: pods go before unused images"
        );
    }
}
