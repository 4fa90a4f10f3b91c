//! Helpers shared by vigil's default policies, in plain Rust with no bindings,
//! so each policy maps its own generated records onto them.
//!
//! - [`memory_rank`]: the kubelet's ranking of pods under memory pressure.
//! - [`Amount`]: thresholds written as Kubernetes quantities or percentages.
//! - [`Thresholds`]: hard and soft thresholds with grace and minimum reclaim.
//! - [`katalyst`]: katalyst's pod annotations (QoS level, memory
//!   enhancement, NUMA binding), as its plugins read them.
//! - [`pod!`]: a sample pod record, for tests and canaries on either side of
//!   the component boundary.

pub mod katalyst;
mod threshold;

use std::cmp::Ordering;
pub use threshold::{Direction, Judgement, Level, Thresholds};

/// The memory facts the kubelet ranks a pod by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFacts {
    /// Working-set bytes.
    pub usage: u64,
    /// Requested bytes.
    pub request: u64,
    /// Scheduling priority.
    pub priority: i32,
}

/// Orders two pods the way the kubelet ranks them for memory eviction: pods
/// using more than they request first, then lower priority first, then the
/// larger usage above request first. `Less` means `a` is evicted first.
pub fn memory_rank(a: &MemoryFacts, b: &MemoryFacts) -> Ordering {
    let exceeds = |m: &MemoryFacts| m.usage > m.request;
    let above_request = |m: &MemoryFacts| i128::from(m.usage) - i128::from(m.request);
    exceeds(b)
        .cmp(&exceeds(a))
        .then(a.priority.cmp(&b.priority))
        .then(above_request(b).cmp(&above_request(a)))
}

/// A threshold amount: absolute bytes (or a count), or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// An absolute amount.
    Absolute(u64),
    /// A percentage (0–100) of the signal's capacity.
    Percent(f64),
}

impl Amount {
    /// Parses `"100Mi"`, `"1G"`, `"512"` or `"5%"`.
    ///
    /// # Errors
    /// A message naming what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(pct) = text.strip_suffix('%') {
            let value: f64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("`{text}` is not a percentage"))?;
            if !(0.0..=100.0).contains(&value) {
                return Err(format!("`{text}` is not between 0% and 100%"));
            }
            return Ok(Self::Percent(value));
        }
        parse_quantity(text).map(Self::Absolute)
    }

    /// The absolute value against `capacity` (needed for percentages only).
    pub fn resolve(self, capacity: Option<f64>) -> Option<f64> {
        match self {
            Self::Absolute(v) => Some(v as f64),
            Self::Percent(p) => capacity.map(|c| c * p / 100.0),
        }
    }
}

/// Parses a non-negative Kubernetes quantity with an optional binary (`Ki`…`Ei`)
/// or decimal (`k`, `M`…`E`) suffix, e.g. `"100Mi"`.
///
/// # Errors
/// A message naming what is wrong with `text`.
pub fn parse_quantity(text: &str) -> Result<u64, String> {
    const SUFFIXES: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (digits, multiplier) = SUFFIXES
        .iter()
        .find_map(|(suffix, m)| text.strip_suffix(suffix).map(|d| (d, *m)))
        .unwrap_or((text, 1));
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a quantity such as 512, 100Mi or 1G"))?;
    value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Builds a `Pod` record of whichever generated `Pod`, `Resources` and
/// `Usage` types are in scope: every binding of `vigil:policy/types`, host or
/// guest, has the same shape. Memory figures are in MiB; the pod is in
/// namespace `default` with UID `uid-NAME`, its usage read just now (one
/// process, the facts a policy must ask for absent), and every field not
/// named is empty, zero or false.
#[macro_export]
macro_rules! pod {
    ($name:expr, $qos:expr, priority: $priority:expr, usage_mib: $usage:expr, request_mib: $request:expr) => {{
        let name: &str = $name;
        let (usage, request): (u64, u64) = ($usage, $request);
        Pod {
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            name: name.into(),
            qos: $qos,
            priority: $priority,
            labels: vec![],
            annotations: vec![],
            requests: Resources {
                memory_bytes: request << 20,
                cpu_millis: 0,
            },
            limits: Resources {
                memory_bytes: 0,
                cpu_millis: 0,
            },
            usage: Usage {
                memory_working_set_bytes: Some(usage << 20),
                memory_rss_bytes: Some(usage << 20),
                memory_usage_bytes: None,
                numa_memory: vec![],
                cpu_millis: Some(0),
                cpu_throttling: None,
                memory_pressure: None,
                ephemeral_storage_bytes: Some(0),
                pids: Some(1),
                age_ms: Some(0),
                facts_age_ms: None,
            },
            writable_layers: None,
            containers_without_memory_request: 0,
            extended_requests: vec![],
            start_time_ms: 0,
            owner_kind: None,
            is_static: false,
            is_mirror: false,
            is_critical: false,
            pdb_disruptions_allowed: None,
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(usage: u64, request: u64, priority: i32) -> MemoryFacts {
        MemoryFacts {
            usage,
            request,
            priority,
        }
    }

    #[test]
    fn pods_above_request_go_before_pods_within_it_whatever_their_priority() {
        let above = facts(200, 100, 1000);
        let within = facts(50, 100, 0);
        assert_eq!(memory_rank(&above, &within), Ordering::Less);
        assert_eq!(memory_rank(&within, &above), Ordering::Greater);
    }

    #[test]
    fn lower_priority_goes_first_then_larger_excess() {
        assert_eq!(
            memory_rank(&facts(200, 100, 0), &facts(900, 100, 10)),
            Ordering::Less
        );
        assert_eq!(
            memory_rank(&facts(900, 100, 5), &facts(200, 100, 5)),
            Ordering::Less
        );
        assert_eq!(
            memory_rank(&facts(200, 100, 5), &facts(200, 100, 5)),
            Ordering::Equal
        );
    }

    #[test]
    fn quantities_and_percentages_parse() {
        assert_eq!(parse_quantity("100Mi"), Ok(100 << 20));
        assert_eq!(parse_quantity("1G"), Ok(1_000_000_000));
        assert_eq!(parse_quantity("512"), Ok(512));
        assert_eq!(Amount::parse("5%"), Ok(Amount::Percent(5.0)));
        assert_eq!(
            Amount::parse("5%").unwrap().resolve(Some(200.0)),
            Some(10.0)
        );
        assert_eq!(Amount::parse("5%").unwrap().resolve(None), None);
        assert!(parse_quantity("12Xi").is_err());
        assert!(parse_quantity("-1").is_err());
        assert!(parse_quantity("99999999999Ei").is_err());
        assert!(Amount::parse("120%").is_err());
    }
}
