//! Property tests of the parsers a user can reach: scenarios, config layers
//! (through the real built-in merger), quantities and component loading.
//! Each starts from seeds — the corpus in `tests/corpus/<parser>/`, inputs
//! that once broke something, and the bundled examples — and from mutations
//! of them drawn from a fixed-seed generator (so a failure replays), and
//! asserts that the parser answers, a value or an error, without panicking,
//! and that what it accepts is within range.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vigil::authoring::check_bytes;
use vigil::config::VigilConfig;
use vigil::model::Layer;
use vigil::policy::{Host, Origin};
use vigil::simulate::{RunOptions, Scenario};
use vigil_tests::*;

/// Fragments that have broken parsers elsewhere: extremes, non-numbers,
/// unbalanced nesting, control characters.
const TOKENS: &[&str] = &[
    "-1",
    "0",
    "1e308",
    "-1e308",
    "18446744073709551615",
    "99999999999999999999999999h",
    ".nan",
    ".inf",
    "NaN",
    "[[[[[[[[[[",
    "{{{{{{{{",
    "]}",
    "\"",
    "\\",
    "\n",
    "\u{0}",
    ": ",
    "- ",
    "Ei",
    "m",
    "&a *a",
    "!!binary",
];

/// `seed` with up to four random edits: a token inserted, a byte changed, a
/// range deleted or duplicated.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(bytes.len() as u64 + 1) as usize;
        match rng.below(4) {
            0 => {
                let token = rng.pick(TOKENS).as_bytes();
                bytes.splice(at..at, token.iter().copied());
            }
            1 if at < bytes.len() => bytes[at] = rng.below(256) as u8,
            2 => {
                let end = (at + rng.below(16) as usize).min(bytes.len());
                bytes.drain(at..end);
            }
            _ => {
                let end = (at + rng.below(32) as usize).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
        }
    }
    bytes
}

fn corpus(parser: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(parser);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// Runs `check` on `input`, naming the input if it panics.
fn answers<T>(what: &str, input: &[u8], check: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
        Ok(value) => value,
        Err(_) => panic!(
            "{what} panicked on input {:?}",
            String::from_utf8_lossy(&input[..input.len().min(2000)])
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_parse_or_fail_cleanly_and_accepted_ones_simulate() {
    let seeds: Vec<Vec<u8>> = corpus("scenario")
        .into_iter()
        .chain(bundled_scenarios())
        .map(|path| std::fs::read(path).unwrap())
        .collect();
    let mut rng = Rng::new(0x5ce7a);
    let mut accepted = Vec::new();
    for seed in &seeds {
        for round in 0..60 {
            let input = if round == 0 {
                seed.clone()
            } else {
                mutate(&mut rng, seed)
            };
            let text = String::from_utf8_lossy(&input).into_owned();
            let parsed = answers("Scenario::parse", &input, || {
                Scenario::parse(&text, Path::new("fuzz.yaml"))
            });
            if let Ok(scenario) = parsed {
                assert!(scenario.duration <= vigil::simulate::MAX_DURATION);
                accepted.push(scenario);
            }
        }
    }
    assert!(
        accepted.len() > seeds.len(),
        "mutations reach the simulator"
    );
    // Simulating every accepted mutant would take minutes: a fixed sample of them.
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scenarios");
    let options = RunOptions::default();
    for scenario in accepted.iter().step_by(accepted.len() / 12 + 1) {
        let short = Scenario {
            duration: scenario.duration.min(std::time::Duration::from_secs(120)),
            ..scenario.clone()
        };
        // A policy or config problem is an error; only a panic fails.
        let _ = vigil::simulate::run(&short, &base, &options).await;
    }
}

#[test]
fn config_layers_merge_or_fail_cleanly_and_accepted_ones_are_in_range() {
    let (registry, _clock) = registry(None);
    let mut seeds: Vec<Vec<u8>> = corpus("config")
        .into_iter()
        .map(|path| std::fs::read(path).unwrap())
        .collect();
    seeds.push(serde_json::to_vec(&VigilConfig::default()).unwrap());
    let mut rng = Rng::new(0xc0f16);
    let mut merged = 0;
    for seed in &seeds {
        for round in 0..80 {
            let input = if round == 0 {
                seed.clone()
            } else {
                mutate(&mut rng, seed)
            };
            let layer = Layer {
                source: "fuzz".into(),
                json: String::from_utf8_lossy(&input).into_owned(),
            };
            let result = answers("VigilConfig::merge", &input, || {
                VigilConfig::merge(&registry, vec![layer])
            });
            if let Ok(config) = result {
                merged += 1;
                assert!(config.problems().is_empty());
                registry.set_limits(config.limits());
                let settings = vigil::eviction::EvictionSettings::from(&config);
                assert!(!settings.period.is_zero() && settings.burst > 0);
            }
        }
    }
    assert!(merged > seeds.len(), "mutations reach the merger's answer");
}

#[test]
fn quantities_parse_or_fail_cleanly_and_accepted_ones_are_finite() {
    let text = std::fs::read_to_string(&corpus("quantity")[0]).unwrap();
    let seeds: Vec<&str> = text.lines().collect();
    let mut rng = Rng::new(0x9a47);
    for seed in &seeds {
        for round in 0..200 {
            let input = if round == 0 {
                seed.as_bytes().to_vec()
            } else {
                mutate(&mut rng, seed.as_bytes())
            };
            let text = String::from_utf8_lossy(&input);
            if let Some(value) = answers("quantity::parse", &input, || {
                vigil::base::quantity::parse(&text)
            }) {
                assert!(value.is_finite() && value >= 0.0, "{text:?} → {value}");
            }
        }
    }
}

#[test]
fn damaged_components_are_refused_cleanly() {
    let host = Host::new(None).unwrap();
    let mut rng = Rng::new(0xc0de);
    let seeds: [&[u8]; 2] = [REVERSE_SORTER, &hollow_sorter_wat(None, "0.2.0")];
    for seed in seeds {
        for _ in 0..25 {
            let input = mutate(&mut rng, seed);
            let bytes: Arc<[u8]> = Arc::from(input.as_slice());
            answers("loading a component", &input, || {
                check_bytes(&host, "fuzz".into(), "fuzz", bytes, Origin::Builtin, "{}")
            })
            .ok();
        }
    }
}
