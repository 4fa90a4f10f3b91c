//! The node bench: vigil as shipped against the kubelet alone, on the real
//! node of the node suite (`main.rs`), in as many pressure episodes per side
//! as `VIGIL_NODE_RUNS` says (20 unless set). Each episode is timed from the
//! node's reading crossing the threshold to the hog's process gone; the
//! report gives each side's median, 90th percentile and maximum, on stderr
//! and in `target/vigil-node/bench.txt`. Needs root, and the machine to
//! itself (its episodes read the machine's memory): run with
//! `cargo bench -p vigil --bench node`. The suite keeps one episode as a
//! check; the measure is here, out of CI.

// The suite's steps, of which the bench runs the install and the episodes.
#![allow(dead_code)]

mod alone;
mod common;
mod hot_swap;
mod image;
mod install;
mod kubelet;
mod pressure;
mod removal;

use common::{root, until, until_explained};
use std::time::Duration;
use vigil_testbed::upstream::Upstream;

/// Episodes per side, unless `VIGIL_NODE_RUNS` says.
const RUNS: usize = 20;
/// vigil's evaluation period: its default, which the episodes' config
/// keeps.
const VIGIL_PERIOD: Duration = Duration::from_secs(5);

/// Where in a period of `period` episode `run` of `runs` starts its hog: the
/// runs spread evenly over the period. Whoever evicts looks at fixed times
/// (the kubelet every 10 s from its start, vigil every evaluation period
/// from its last config change, both just made), so a hog started at once
/// would cross at about the same point of that period every run; spread,
/// the runs sample the whole period, as pressure that comes at any time
/// would. A placement in time, not a wait for something.
fn phase(period: Duration, run: usize, runs: usize) -> Duration {
    period * run as u32 / runs as u32
}

/// The median, 90th percentile and maximum of `times`, as a line.
fn summary(times: &[Duration]) -> String {
    let mut sorted = times.to_vec();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:?}, p90 {:?}, max {:?} ({} runs)",
        at(0.5),
        at(0.9),
        at(1.0),
        sorted.len()
    )
}

fn main() {
    let runs = std::env::var("VIGIL_NODE_RUNS").map_or(RUNS, |runs| {
        runs.parse()
            .ok()
            .filter(|&runs: &usize| runs > 0)
            .unwrap_or_else(|| panic!("VIGIL_NODE_RUNS={runs:?}: episodes a side, at least 1"))
    });
    let _machine = image::machine_to_itself();
    let layout = image::layout();
    let binary = image::binary(&layout);
    let keys = hot_swap::keys();
    let mut cluster = Upstream::start_node();
    let images = image::push(&cluster, &layout);
    install::install(&cluster, &images.first, &keys);
    install::agent_runs_as_shipped(&cluster);
    install::enforce(&cluster, &binary);
    let mut workloads = pressure::Workloads::start(&cluster);
    pressure::kubelet_below(&mut cluster);
    let vigil: Vec<Duration> = (0..runs)
        .map(|run| {
            let start = phase(VIGIL_PERIOD, run, runs);
            let name = format!("hog-vigil-{run}");
            pressure::vigil_episode(&cluster, &workloads, &name, start, None).0
        })
        .collect();
    removal::cleanup_leaves_nothing(&cluster, &images.first);
    let kubelet: Vec<Duration> = (0..runs)
        .map(|run| {
            let start = phase(alone::HOUSEKEEPING, run, runs);
            alone::kubelet_alone_episode(&mut cluster, &mut workloads, run, start)
        })
        .collect();
    let report = format!(
        "hog ({} MiB at {} MiB/s) over the threshold to its container stopped:\n  vigil: {}\n  the kubelet alone: {}\n",
        pressure::HOG_MIB,
        pressure::HOG_STEP_MIB,
        summary(&vigil),
        summary(&kubelet),
    );
    eprint!("{report}");
    std::fs::write(root().join("target/vigil-node/bench.txt"), report).expect("the report");
}
