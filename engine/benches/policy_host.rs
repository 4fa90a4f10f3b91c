//! Benchmark of the policy host (not a test: it prints figures, asserts nothing).
//!
//! Run with `cargo bench -p vigil --bench policy_host`. Prints, from one run:
//! - the default sorter as a component vs the same crate compiled natively,
//!   at 10, 100, 1000 and 10 000 candidates, and their ratio;
//! - the fixed cost of one call (fresh store + instantiate + an empty sort);
//! - reload latency: from renaming a new version into the policies directory
//!   to that version answering, through the real watcher and reload loop.

mod common;

use common::{candidates, empty_call, median, micros, strategies};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil::base::clock::SystemClock;
use vigil::base::digest::Digest;
use vigil::policy::Reloader;
use vigil::policy::builtin;
use vigil::policy::{Host, Limits, LimitsTable, Origin, Registry};

fn sorter_ratios(host: &Host) {
    let policy = host
        .load(
            "default-sorter",
            Arc::from(builtin("default-sorter").unwrap()),
            Origin::Builtin,
            Limits::default(),
        )
        .expect("default sorter loads");
    println!("default sorter: component vs native (median per sort)");
    println!(
        "{:>10} {:>12} {:>14} {:>12} {:>14} {:>8} {:>13}",
        "candidates", "native", "native+clone", "component", "of it, copy", "ratio", "ratio/clone"
    );
    let strategies = strategies();
    for n in [10, 100, 1000, 10_000] {
        let (mut hosted, native) = (
            candidates!(vigil::model::bindings, n),
            candidates!(default_sorter, n),
        );
        let native_time = median(|| {
            std::hint::black_box(default_sorter::sort(&native, "{}").expect("sorts"));
        });
        let native_clone = median(|| {
            let owned = std::hint::black_box(native.clone());
            std::hint::black_box(default_sorter::sort(&owned, "{}").expect("sorts"));
        });
        let component_time = median(|| {
            std::hint::black_box(
                policy
                    .as_sorter()
                    .expect("a sorter")
                    .sort(&strategies, &mut hosted, "{}")
                    .expect("no fault")
                    .expect("sorts"),
            );
        });
        // The same call with a config the sorter refuses at once: the
        // candidates still cross the boundary, but nothing is sorted.
        let crossing = median(|| {
            std::hint::black_box(
                policy
                    .as_sorter()
                    .expect("a sorter")
                    .sort(&strategies, &mut hosted, "[]")
                    .expect("no fault")
                    .expect_err("refuses"),
            );
        });
        let ratio = |base: Duration| component_time.as_secs_f64() / base.as_secs_f64();
        println!(
            "{n:>10} {:>12} {:>14} {:>12} {:>14} {:>7.2}x {:>12.2}x",
            micros(native_time),
            micros(native_clone),
            micros(component_time),
            micros(crossing),
            ratio(native_time),
            ratio(native_clone)
        );
    }
    let empty = empty_call(&policy);
    println!(
        "fixed cost of one call (fresh store, instantiate, empty sort): {}",
        micros(empty)
    );
}

/// A distinct but equivalent version of `bytes`: a custom section appended.
fn variant(bytes: &[u8], i: u32) -> Vec<u8> {
    let payload = format!("{i:08}");
    let name = b"vigil-bench";
    let mut out = bytes.to_vec();
    let body_len = 1 + name.len() + payload.len();
    out.extend([0u8, body_len as u8, name.len() as u8]);
    out.extend_from_slice(name);
    out.extend_from_slice(payload.as_bytes());
    out
}

async fn reload_latency(dir: &Path) {
    let host = Arc::new(Host::new(None).expect("host"));
    let registry = Arc::new(
        Registry::new(host, Arc::new(SystemClock), LimitsTable::default(), None).expect("registry"),
    );
    let reloader = Reloader::new(Arc::clone(&registry), dir.to_owned());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(reloader.run(async { stopped.await.unwrap_or(()) }, None));
    let mut changes = registry.subscribe();
    let mut samples = Vec::new();
    for i in 0..15 {
        let bytes = variant(builtin("default-sorter").unwrap(), i);
        let want = Digest::of(&bytes);
        let tmp = dir.join(".default-sorter.wasm.new");
        std::fs::write(&tmp, &bytes).expect("write");
        let started = Instant::now();
        std::fs::rename(&tmp, dir.join("default-sorter.wasm")).expect("rename");
        while registry.get("default-sorter").map(|p| p.digest()) != Some(want) {
            changes.changed().await.expect("registry alive");
        }
        let policy = registry.get("default-sorter").expect("serves");
        policy
            .as_sorter()
            .expect("a sorter")
            .sort(
                &strategies(),
                &mut candidates!(vigil::model::bindings, 10),
                "{}",
            )
            .expect("no fault")
            .expect("sorts");
        samples.push(started.elapsed());
    }
    stop.send(()).expect("reloader running");
    task.await.expect("joins").expect("reloader ran");
    samples.sort();
    println!(
        "reload, rename to new version answering (Rust policy, compiled without cache): median {:.1} ms, max {:.1} ms over {} swaps",
        samples[samples.len() / 2].as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3,
        samples.len()
    );
}

fn main() {
    let host = Host::new(None).expect("host");
    sorter_ratios(&host);
    let dir = tempfile::tempdir().expect("temp dir");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(reload_latency(dir.path()));
}
