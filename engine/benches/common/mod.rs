//! Helpers shared by the policy benchmarks: generated candidates and a
//! median timer (the built-in components: `vigil::policy::builtin`).

use std::time::{Duration, Instant};

/// Name, QoS index, priority, usage and request (MiB) of candidate `i`.
pub fn facts(i: usize) -> (String, usize, i32, u64, u64) {
    let priority = (i % 7) as i32 * 100;
    let usage_mib = ((i * 7919) % 2048) as u64;
    let request_mib = ((i * 104_729) % 1024) as u64;
    (format!("pod-{i}"), i % 3, priority, usage_mib, request_mib)
}

/// `n` candidates built from [`facts`], of the `Candidate` type in module `$types`
/// (the host's bindings or the natively compiled sorter's).
macro_rules! candidates {
    ($($types:ident)::+, $n:expr) => {{
        use $($types)::+::{Candidate, Pod, QosClass, Resources, Urgency, Usage};
        (0..$n)
            .map(|i| {
                let (name, qos, priority, usage_mib, request_mib) = crate::common::facts(i);
                let qos = [QosClass::BestEffort, QosClass::Burstable, QosClass::Guaranteed][qos];
                let pod = policy_kit::pod!(&name, qos, priority: priority, usage_mib: usage_mib, request_mib: request_mib);
                Candidate {
                    pod: Pod { is_critical: i % 97 == 0, ..pod },
                    strategy: 0,
                    urgency: [Urgency::Hard, Urgency::Soft][i % 2],
                }
            })
            .collect::<Vec<Candidate>>()
    }};
}
pub(crate) use candidates;

/// The strategies the candidates of [`candidates`] name.
pub fn strategies() -> Vec<String> {
    vec!["bench".into()]
}

/// Median duration of `run` over enough repetitions to fill about 300 ms.
pub fn median(mut run: impl FnMut()) -> Duration {
    run();
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < 15
        || (started.elapsed() < Duration::from_millis(300) && samples.len() < 10_000)
    {
        let t = Instant::now();
        run();
        samples.push(t.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}

/// Median cost of one call to the sorter `policy` with no candidates: a
/// fresh store, an instance and an empty answer.
pub fn empty_call(policy: &vigil::policy::Policy) -> Duration {
    let sorter = policy.as_sorter().expect("a sorter");
    median(|| {
        std::hint::black_box(
            sorter
                .sort(&[], &mut [], "{}")
                .expect("no fault")
                .expect("sorts"),
        );
    })
}

/// `d` in microseconds, for tables.
pub fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}
