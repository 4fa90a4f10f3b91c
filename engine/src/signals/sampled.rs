//! The pod facts that cost the kernel a file per pod each time (memory per
//! NUMA node, cpu throttling, memory pressure), read for a bounded share of
//! the pods in each cycle instead of for all of them.
//!
//! On cgroup v1 the kernel builds `memory.numa_stat` by walking the pod's
//! cgroups on every read (about 3 µs a pod here): read for 110 pods in
//! every cycle, it would cost more than the rest of a cycle together. So a
//! cycle reads them for at most [`PER_CYCLE`] pods, those read longest ago
//! first (a new pod before any), and the others keep their last reading
//! with its age (`usage.facts-age-ms`): on a node of up to `PER_CYCLE`
//! pods every reading is fresh, on a denser one none is older than a few
//! cycles. A pod whose cgroup could not be read still takes its turn, so a
//! pending pod never holds the others back.

use crate::model::{CpuThrottling, NumaMemory, Pressure, Usage};
use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

/// The most pods whose sampled facts one cycle reads.
pub const PER_CYCLE: usize = 24;

/// Each pod's last reading of the sampled facts, and when it was tried.
#[derive(Debug, Default)]
pub struct SampledFacts {
    pods: HashMap<String, Turn>,
}

#[derive(Debug)]
struct Turn {
    /// When its facts were last due (read or not).
    tried: SystemTime,
    /// The last reading, and its time.
    read: Option<(SystemTime, Reading)>,
}

#[derive(Debug)]
struct Reading {
    numa_memory: Vec<NumaMemory>,
    cpu_throttling: Option<CpuThrottling>,
    memory_pressure: Option<Pressure>,
}

impl Reading {
    /// Whether any of the facts was read (else they have no age).
    fn any(&self) -> bool {
        !self.numa_memory.is_empty()
            || self.cpu_throttling.is_some()
            || self.memory_pressure.is_some()
    }
}

impl SampledFacts {
    /// The pods among `uids` whose facts this cycle reads, at `now`: never
    /// tried first, then those tried longest ago, at most [`PER_CYCLE`].
    /// Pods not in `uids` are forgotten.
    pub fn due<'a>(
        &mut self,
        uids: impl Iterator<Item = &'a str>,
        now: SystemTime,
    ) -> HashSet<String> {
        let live: HashSet<&str> = uids.collect();
        self.pods.retain(|uid, _| live.contains(uid.as_str()));
        let mut order: Vec<(Option<SystemTime>, &str)> = (live.iter())
            .map(|uid| (self.pods.get(*uid).map(|turn| turn.tried), *uid))
            .collect();
        // `None` (never tried) sorts first; the uid breaks ties, so the
        // order does not depend on how the pods were listed.
        order.sort_unstable();
        let due: HashSet<String> = (order.into_iter().take(PER_CYCLE))
            .map(|(_, uid)| uid.to_owned())
            .collect();
        for uid in &due {
            (self.pods.entry(uid.clone()))
                .and_modify(|turn| turn.tried = now)
                .or_insert(Turn {
                    tried: now,
                    read: None,
                });
        }
        due
    }

    /// Keeps the sampled facts of `usage`, read for pod `uid` at `at`, and
    /// marks them fresh.
    pub fn keep(&mut self, uid: &str, at: SystemTime, usage: &mut Usage) {
        let reading = Reading {
            numa_memory: usage.numa_memory.clone(),
            cpu_throttling: usage.cpu_throttling,
            memory_pressure: usage.memory_pressure,
        };
        usage.facts_age_ms = reading.any().then_some(0);
        if let Some(turn) = self.pods.get_mut(uid) {
            turn.read = Some((at, reading));
        }
    }

    /// Gives `usage` pod `uid`'s last reading, with its age at `now`; none
    /// if it was never read.
    pub fn fill(&self, uid: &str, now: SystemTime, usage: &mut Usage) {
        let Some((at, reading)) = self.pods.get(uid).and_then(|turn| turn.read.as_ref()) else {
            return;
        };
        usage.numa_memory = reading.numa_memory.clone();
        usage.cpu_throttling = reading.cpu_throttling;
        usage.memory_pressure = reading.memory_pressure;
        let age = now.duration_since(*at).unwrap_or_default().as_millis();
        usage.facts_age_ms = (reading.any()).then(|| u64::try_from(age).unwrap_or(u64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn uids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("pod-{i:03}")).collect()
    }

    fn numa(bytes: u64) -> Usage {
        Usage {
            numa_memory: vec![NumaMemory { node: 0, bytes }],
            ..Usage::unread()
        }
    }

    #[test]
    fn a_node_of_few_pods_reads_every_pod_each_cycle() {
        let mut sampled = SampledFacts::default();
        let pods = uids(PER_CYCLE);
        for cycle in 0..3 {
            let due = sampled.due(pods.iter().map(String::as_str), at(cycle));
            assert_eq!(due.len(), PER_CYCLE);
        }
    }

    #[test]
    fn a_dense_node_reads_a_share_each_cycle_and_every_pod_within_a_few() {
        let mut sampled = SampledFacts::default();
        let pods = uids(110);
        let mut last_read: HashMap<String, u64> = HashMap::new();
        for cycle in 0..12 {
            let due = sampled.due(pods.iter().map(String::as_str), at(cycle));
            assert_eq!(due.len(), PER_CYCLE, "cycle {cycle}");
            for uid in due {
                if let Some(before) = last_read.insert(uid.clone(), cycle) {
                    // 110 pods, 24 a cycle: each again after 4 or 5 cycles.
                    assert!(
                        (4..=5).contains(&(cycle - before)),
                        "{uid}: {before} → {cycle}"
                    );
                }
            }
        }
        assert_eq!(last_read.len(), 110, "every pod read");
    }

    #[test]
    fn a_new_pod_is_read_before_any_other_and_a_gone_one_is_forgotten() {
        let mut sampled = SampledFacts::default();
        let mut pods = uids(100);
        for cycle in 0..4 {
            sampled.due(pods.iter().map(String::as_str), at(cycle));
        }
        pods.push("new".into());
        let due = sampled.due(pods.iter().map(String::as_str), at(4));
        assert!(due.contains("new"));
        pods.retain(|uid| uid != "pod-000");
        sampled.due(pods.iter().map(String::as_str), at(5));
        assert!(!sampled.pods.contains_key("pod-000"));
    }

    #[test]
    fn a_pod_not_due_keeps_its_last_reading_with_its_age() {
        let mut sampled = SampledFacts::default();
        let pods = uids(1);
        sampled.due(pods.iter().map(String::as_str), at(0));
        let mut read = numa(7 << 20);
        sampled.keep("pod-000", at(0), &mut read);
        assert_eq!(read.facts_age_ms, Some(0));

        let mut later = Usage::unread();
        sampled.fill("pod-000", at(0) + Duration::from_millis(2500), &mut later);
        let bytes = |usage: &Usage| {
            usage
                .numa_memory
                .iter()
                .map(|n| (n.node, n.bytes))
                .collect::<Vec<_>>()
        };
        assert_eq!(bytes(&later), vec![(0, 7 << 20)]);
        assert_eq!(later.facts_age_ms, Some(2500));
    }

    #[test]
    fn nothing_read_has_no_age() {
        let mut sampled = SampledFacts::default();
        sampled.due(["pending"].into_iter(), at(0));
        let mut usage = Usage::unread();
        sampled.keep("pending", at(0), &mut usage);
        assert_eq!(usage.facts_age_ms, None);
        let mut never = Usage::unread();
        sampled.fill("unknown", at(1), &mut never);
        assert_eq!(never.facts_age_ms, None);
        assert!(never.numa_memory.is_empty());
    }
}
