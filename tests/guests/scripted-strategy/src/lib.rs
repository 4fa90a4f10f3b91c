//! Test guest: an eviction strategy that answers what its config says, so the
//! eviction manager can be driven through every path.
//!
//! Config (JSON), every field optional:
//! `{"met": "hard"|"soft"|"report"|"not-met", "grace": 0, "scope": "script",
//!   "condition": "Name", "scopes": [{"scope": "s", "met": "hard", "grace": 0,
//!   "condition": "Name"}, ...], "count": false, "victimGrace": 7,
//!   "force": ["uid", ...], "soft": ["uid", ...], "victims": ["uid", ...],
//!   "trapOnPod": "name", "probeClock": false,
//!   "interest": {"labels": ["key", ...], "annotations": ["key", ...],
//!                "podsInEvaluate": true, "signals": ["name", ...],
//!                "facts": ["numa-memory", ...]},
//!   "showKeys": false, "showSignals": false, "oldestFirst": false,
//!   "needSignals": ["name", ...], "needFacts": ["numa-memory", ...]}`.
//! With `needSignals` or `needFacts`, `evaluate` and `top-victims` decline
//! (naming what is missing) unless every listed signal is in the snapshot
//! and every pod carries every listed fact.
//! `scopes` answers one threshold per entry (instead of `met`, `scope`,
//! `grace`), and an entry's own `victims` ranks for its scope (those
//! alone, gone ones left out); `condition` names the node condition a met threshold reports
//! (`NoSchedule`). With `count`, it keeps a counter in its state, one more
//! per `evaluate`, and reports it as every threshold's observed value (so
//! a test sees the state kept, and when it resets). `victimGrace` is the
//! grace period its victims ask for.
//! Like any stateless strategy it only names pods the snapshot offers.
//! `victims` orders `top-victims` (default: the snapshot's order, or the
//! oldest pod first with `oldestFirst`). It traps
//! whenever the snapshot holds a pod named `trapOnPod`. With `probeClock`,
//! `evaluate` sleeps an hour through WASI and then declines with what its
//! clocks showed: `wall=<ms since the epoch> slept=<monotonic ns>`.
//! `interest` is what it declares it reads (no label or annotation, and the
//! pods in `evaluate`, by default; an `interest` that is not an object traps,
//! in `declare-interest`). With `showKeys`,
//! `evaluate` declines with the label and annotation keys each pod came with:
//! `name: labels=a,b annotations=c; ...`; with `showSignals`, with the
//! signals it was given (`name,name,...`) and the pod facts present on
//! each pod (`; pod: memory-usage,numa-memory,...`).

/// Bindings generated from the `eviction-strategy` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "eviction-strategy" });
}

use bindings::exports::vigil::policy::strategy::{
    Condition, Decision, Eviction, Guest, MetLevel, Snapshot, StrategyInterest, Threshold,
};
use bindings::vigil::policy::types::{Interest, KeyValue, Pod, PodFact};
use serde_json::Value;

fn config(snapshot: &Snapshot) -> Result<Value, String> {
    serde_json::from_str(&snapshot.config).map_err(|e| format!("config: {e}"))
}

/// The UIDs listed in `field` that the snapshot offers, in listed order.
fn uids(snapshot: &Snapshot, config: &Value, field: &str) -> Vec<String> {
    let offered = |uid: &&str| snapshot.pods.iter().any(|p| p.uid == *uid);
    let listed = config[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    listed.filter(offered).map(str::to_owned).collect()
}

fn evictions(uids: Vec<String>, grace: Option<u64>) -> Vec<Eviction> {
    uids.into_iter()
        .map(|uid| Eviction {
            reason: format!("scripted eviction of {uid}"),
            uid,
            grace_period_seconds: grace,
        })
        .collect()
}

fn met(name: Option<&str>) -> MetLevel {
    match name.unwrap_or("not-met") {
        "hard" => MetLevel::Hard,
        "soft" => MetLevel::Soft,
        "report" => MetLevel::Report,
        _ => MetLevel::NotMet,
    }
}

/// One threshold as `script` (the config, or one of its `scopes`) says.
fn threshold(script: &Value, observed: f64) -> Threshold {
    let met = met(script["met"].as_str());
    Threshold {
        met,
        scope: script["scope"].as_str().unwrap_or("script").to_owned(),
        signal: "script".into(),
        observed,
        threshold: 0.0,
        grace_period_seconds: script["grace"].as_u64().unwrap_or(0),
        condition: (script["condition"].as_str())
            .filter(|_| met != MetLevel::NotMet)
            .map(|name| Condition {
                name: name.to_owned(),
                effects: vec!["NoSchedule".into()],
            }),
    }
}

/// The pod facts `names` lists (`memory-usage`, `numa-memory`, …).
fn facts(names: &[String]) -> Vec<PodFact> {
    names
        .iter()
        .map(|name| match name.as_str() {
            "memory-usage" => PodFact::MemoryUsage,
            "numa-memory" => PodFact::NumaMemory,
            "cpu-throttling" => PodFact::CpuThrottling,
            "memory-pressure" => PodFact::MemoryPressure,
            "writable-layers" => PodFact::WritableLayers,
            other => panic!("scripted-strategy: no pod fact {other}"),
        })
        .collect()
}

/// The pod facts present on `pod`.
fn present(pod: &Pod) -> String {
    let usage = &pod.usage;
    let facts = [
        ("memory-usage", usage.memory_usage_bytes.is_some()),
        ("numa-memory", !usage.numa_memory.is_empty()),
        ("cpu-throttling", usage.cpu_throttling.is_some()),
        ("memory-pressure", usage.memory_pressure.is_some()),
        ("writable-layers", pod.writable_layers.is_some()),
    ];
    let names: Vec<&str> = facts
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect();
    format!("{}: {}", pod.name, names.join(","))
}

/// What of `needSignals` and `needFacts` the snapshot lacks, as a refusal.
fn missing(snapshot: &Snapshot, config: &Value) -> Result<(), String> {
    let signals: Vec<String> = strings(&config["needSignals"])
        .into_iter()
        .filter(|name| !snapshot.signals.iter().any(|s| &s.name == name))
        .collect();
    let facts = strings(&config["needFacts"]);
    let pods: Vec<String> = (snapshot.pods.iter())
        .filter(|pod| {
            let present = present(pod);
            facts
                .iter()
                .any(|fact| !present.split([' ', ',']).any(|p| p == fact))
        })
        .map(|pod| pod.name.clone())
        .collect();
    if signals.is_empty() && pods.is_empty() {
        return Ok(());
    }
    Err(format!(
        "missing signals [{}], pods without the facts [{}]",
        signals.join(","),
        pods.join(",")
    ))
}

/// The signals and pod facts given, as `showSignals` reports them.
fn shown_signals(snapshot: &Snapshot) -> String {
    let signals: Vec<&str> = snapshot.signals.iter().map(|s| s.name.as_str()).collect();
    let pods: Vec<String> = snapshot.pods.iter().map(present).collect();
    format!("{}; {}", signals.join(","), pods.join("; "))
}

fn trap_if_triggered(snapshot: &Snapshot, config: &Value) {
    let trigger = config["trapOnPod"].as_str();
    if snapshot
        .pods
        .iter()
        .any(|p| Some(p.name.as_str()) == trigger)
    {
        panic!("scripted-strategy met its trigger");
    }
}

/// Sleeps an hour, then says what the clocks showed.
fn probe_clock() -> String {
    let start = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_secs(3600));
    let slept = start.elapsed().as_nanos();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("wall={wall} slept={slept}")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Each pod's label and annotation keys, as `showKeys` reports them.
fn shown_keys(snapshot: &Snapshot) -> String {
    let keys = |pairs: &[KeyValue]| {
        pairs
            .iter()
            .map(|kv| kv.key.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    snapshot
        .pods
        .iter()
        .map(|p| {
            format!(
                "{}: labels={} annotations={}",
                p.name,
                keys(&p.labels),
                keys(&p.annotations)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The strategy; exported only when built as a component.
pub struct Scripted;

impl Guest for Scripted {
    fn declare_interest(config: String) -> StrategyInterest {
        let config: Value = serde_json::from_str(&config).unwrap_or_default();
        let wanted = &config["interest"];
        if !(wanted.is_null() || wanted.is_object()) {
            panic!("scripted-strategy: interest must be an object");
        }
        StrategyInterest {
            keys: Interest {
                labels: strings(&wanted["labels"]),
                annotations: strings(&wanted["annotations"]),
                facts: facts(&strings(&wanted["facts"])),
            },
            pods_in_evaluate: wanted["podsInEvaluate"].as_bool().unwrap_or(true),
            signals: strings(&wanted["signals"]),
        }
    }

    fn evaluate(snapshot: Snapshot) -> Result<Decision, String> {
        let config = config(&snapshot)?;
        trap_if_triggered(&snapshot, &config);
        if config["showKeys"].as_bool() == Some(true) {
            return Err(shown_keys(&snapshot));
        }
        if config["showSignals"].as_bool() == Some(true) {
            return Err(shown_signals(&snapshot));
        }
        if config["probeClock"].as_bool() == Some(true) {
            return Err(probe_clock());
        }
        missing(&snapshot, &config)?;
        let (observed, state) = if config["count"].as_bool() == Some(true) {
            let count = match <[u8; 8]>::try_from(snapshot.state.as_slice()) {
                Ok(bytes) => u64::from_le_bytes(bytes) + 1,
                Err(_) => 1,
            };
            (count as f64, Some(count.to_le_bytes().to_vec()))
        } else {
            (0.0, None)
        };
        let thresholds = match config["scopes"].as_array() {
            Some(scopes) => scopes.iter().map(|s| threshold(s, observed)).collect(),
            None => vec![threshold(&config, observed)],
        };
        Ok(Decision {
            thresholds,
            soft_candidates: evictions(uids(&snapshot, &config, "soft"), None),
            force_evictions: evictions(uids(&snapshot, &config, "force"), None),
            state,
        })
    }

    fn top_victims(snapshot: Snapshot, scope: String, n: u32) -> Result<Vec<Eviction>, String> {
        let config = config(&snapshot)?;
        trap_if_triggered(&snapshot, &config);
        missing(&snapshot, &config)?;
        let own = (config["scopes"].as_array().into_iter().flatten())
            .find(|s| s["scope"].as_str() == Some(scope.as_str()) && s["victims"].is_array());
        let mut order = uids(&snapshot, own.unwrap_or(&config), "victims");
        if order.is_empty() && own.is_none() {
            let mut pods: Vec<_> = snapshot.pods.iter().collect();
            if config["oldestFirst"].as_bool() == Some(true) {
                pods.sort_by_key(|p| p.start_time_ms);
            }
            order = pods.into_iter().map(|p| p.uid.clone()).collect();
        }
        order.truncate(n as usize);
        Ok(evictions(order, config["victimGrace"].as_u64()))
    }
}

#[cfg(target_arch = "wasm32")]
bindings::export!(Scripted with_types_in bindings);
