//! Benchmark of the default sorter written in each language (not a test: it
//! prints figures, asserts nothing).
//!
//! Run `examples/policies/build.sh`, then `cargo bench -p vigil --bench languages`.
//! Prints, from one run, for the Rust built-in and the C, JavaScript, Python and Go
//! example sorters: component size, compile time, precompiled load time (from
//! vigil's artifact cache), the cost of one call with no candidates (fresh
//! store, instantiate, call), and sort latency at 10, 100 and 1000 candidates;
//! then every figure as a ratio to the Rust component's.

mod common;

use common::{candidates, empty_call, median, micros, strategies};
use std::path::Path;
use std::time::Duration;
use vigil::policy::builtin;
use vigil::policy::{Host, Limits, Origin, Policy};

const SIZES: [usize; 3] = [10, 100, 1000];

/// One language's figures.
struct Figures {
    language: &'static str,
    size: usize,
    compile: Duration,
    load: Duration,
    empty_call: Duration,
    sorts: Vec<Duration>,
}

/// The sorter in `bytes`, with a deadline long enough that a 1000-candidate
/// sort in a slow language is measured, not interrupted, on a busy machine.
fn load(host: &Host, bytes: &[u8]) -> Policy {
    let limits = Limits {
        deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    host.load("default-sorter", bytes.to_vec(), Origin::Builtin, limits)
        .expect("the sorter loads")
}

/// The median of `runs` load times, each on a fresh host of `make`.
fn load_time(runs: usize, make: impl Fn() -> Host, bytes: &[u8]) -> Duration {
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| load(&make(), bytes).compile_time())
        .collect();
    samples.sort();
    samples[runs / 2]
}

fn measure(language: &'static str, bytes: &[u8]) -> Figures {
    let compile = load_time(3, || Host::new(None).expect("host"), bytes);
    let cache = tempfile::tempdir().expect("temp dir");
    let cached = || Host::new(Some(cache.path().to_owned())).expect("host");
    load(&cached(), bytes);
    let load_precompiled = load_time(5, cached, bytes);
    let policy = load(&cached(), bytes);
    let empty_call = empty_call(&policy);
    let sorts = SIZES
        .iter()
        .map(|&n| {
            let mut candidates = candidates!(vigil::model::bindings, n);
            let strategies = strategies();
            median(|| {
                std::hint::black_box(
                    policy
                        .as_sorter()
                        .expect("a sorter")
                        .sort(&strategies, &mut candidates, "{}")
                        .expect("no fault")
                        .expect("sorts"),
                );
            })
        })
        .collect();
    Figures {
        language,
        size: bytes.len(),
        compile,
        load: load_precompiled,
        empty_call,
        sorts,
    }
}

fn example(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/policies")
        .join(name)
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run examples/policies/build.sh first",
            path.display()
        )
    })
}

fn main() {
    let all = [
        measure("Rust", builtin("default-sorter").unwrap()),
        measure("C", &example("c-sorter")),
        measure("JavaScript", &example("js-sorter")),
        measure("Python", &example("python-sorter")),
        measure("Go", &example("go-sorter")),
    ];
    let header = format!(
        "{:<11} {:>11} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "language",
        "size",
        "compile",
        "load cached",
        "empty call",
        "sort 10",
        "sort 100",
        "sort 1000"
    );
    println!("default sorter by language (medians)\n{header}");
    for f in &all {
        let sorts: Vec<String> = f.sorts.iter().map(|&d| micros(d)).collect();
        println!(
            "{:<11} {:>8} KB {:>9.1} ms {:>12} {:>12} {:>12} {:>12} {:>12}",
            f.language,
            f.size / 1000,
            f.compile.as_secs_f64() * 1e3,
            micros(f.load),
            micros(f.empty_call),
            sorts[0],
            sorts[1],
            sorts[2]
        );
    }
    println!("\nas ratios to Rust\n{header}");
    let rust = &all[0];
    let ratio = |a: Duration, b: Duration| format!("{:.1}x", a.as_secs_f64() / b.as_secs_f64());
    for f in &all[1..] {
        let sorts: Vec<String> = f
            .sorts
            .iter()
            .zip(&rust.sorts)
            .map(|(&a, &b)| ratio(a, b))
            .collect();
        println!(
            "{:<11} {:>11} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            f.language,
            format!("{:.1}x", f.size as f64 / rust.size as f64),
            ratio(f.compile, rust.compile),
            ratio(f.load, rust.load),
            ratio(f.empty_call, rust.empty_call),
            sorts[0],
            sorts[1],
            sorts[2]
        );
    }
}
