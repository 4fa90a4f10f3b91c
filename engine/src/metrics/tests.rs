//! The metrics' names as exported, and what each report does to them.

use super::*;
use crate::policy::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The names of the samples the agent exports (`vigil_evictions_total`,
/// `vigil_cycle_seconds_bucket`, …).
fn exported() -> BTreeSet<String> {
    // A family without a sample is not exported: give each one.
    let m = Arc::new(Metrics::default());
    let text = |t: &str| t.to_owned();
    let name = NameLabel { name: text("p") };
    let eviction = EvictionLabels {
        strategy: text("s"),
        urgency: text("hard"),
        result: text("accepted"),
    };
    m.evictions.get_or_create(&eviction).inc();
    let threshold = ThresholdLabels {
        strategy: text("s"),
        level: text("hard"),
    };
    m.thresholds_met.get_or_create(&threshold).set(1);
    m.conditions.get_or_create(&name).set(1);
    let version = PolicyLabels {
        name: text("p"),
        version: text("0123456789ab"),
    };
    for family in [
        &m.policy_calls,
        &m.policy_faults,
        &m.policy_log_lines_dropped,
    ] {
        family.get_or_create(&version).inc();
    }
    m.shadow_compared("p", "0123456789ab", "agree");
    let state = PolicyStateLabels {
        policy: text("p"),
        version: text("0123456789ab"),
        state: text("trial"),
    };
    m.policy_state.get_or_create(&state).set(1);
    m.watch_restarted("pods");
    let api = ApiLabels {
        verb: text("GET"),
        code: text("200"),
    };
    m.api_requests.get_or_create(&api).inc();
    m.config_updated(ConfigChange::Applied);
    let load = CheckpointLabels {
        status: text("fresh"),
    };
    m.config_checkpoint_loads.get_or_create(&load).inc();
    m.config_reason("Active");
    m.policy_pulled(PullResult::Pulled, 1);
    m.policy_precompiled(PrecompiledResult::Imported);
    m.events_dropped.get_or_create(&name).inc();

    let mut text = String::new();
    let registry = m.registry();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|t| t.split_once(' '))
        else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// Every `vigil_…` metric name in `expr`.
fn named(expr: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("vigil_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        found.push(&tail[..end]);
        rest = &tail[end..];
    }
    found
}

/// Parses `expr` as PromQL (Grafana's variables replaced by values) and
/// checks that it names only exported metrics.
fn check(expr: &str, exported: &BTreeSet<String>, whence: &str) {
    let plain = expr
        .replace("$__rate_interval", "5m")
        .replace("$instance", ".*");
    if let Err(error) = promql_parser::parser::parse(&plain) {
        panic!("{whence}: {expr}: {error}");
    }
    let names = named(expr);
    assert!(!names.is_empty(), "{whence}: {expr} names no vigil metric");
    for name in names {
        assert!(
            exported.contains(name),
            "{whence}: {name} is not exported; the agent exports {exported:?}"
        );
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Rules {
    groups: Vec<Group>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    name: String,
    rules: Vec<Rule>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// Calls, faults and dropped lines are counters, by version: a new version
/// of a policy counts under its own label, and one that serves again
/// counts on from where it stopped.
#[test]
fn policy_calls_count_by_version_across_a_new_version_and_a_rollback() {
    use crate::base::clock::{Clock, ManualClock};
    use crate::policy::{Host, LimitsTable, Origin};
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(std::time::UNIX_EPOCH));
    let host = Arc::new(Host::with_clock(None, Arc::clone(&clock)).unwrap());
    let registry = Registry::new(Arc::clone(&host), clock, LimitsTable::default(), None);
    let registry = registry.unwrap();
    let m = Metrics::default();
    let label = |policy: &Policy| PolicyLabels {
        name: "default-merger".into(),
        version: policy.digest().to_string(),
    };
    let calls = |policy: &Policy| m.policy_calls.get_or_create(&label(policy)).get();
    let call = |policy: &Policy| crate::policy::runtime::canary::run(policy, "{}").unwrap();

    let first = registry.get("default-merger").unwrap();
    call(&first);
    call(&first);
    m.policies(&registry);
    assert_eq!(calls(&first), 2);
    call(&first);
    m.policies(&registry);
    m.policies(&registry);
    assert_eq!(calls(&first), 3, "a scrape counts only what is new");

    let merger = crate::base::policy_name::DEFAULT_MERGER;
    let bytes = crate::policy::lifecycle::builtin::builtin(merger).unwrap();
    // Another version: the same component with a custom section `v2`.
    let changed = [bytes, &[0, 3, 2, b'v', b'2']].concat();
    let limits = registry.limits().for_policy(merger);
    let second = host.load(merger, changed, Origin::Builtin, limits);
    let second = Arc::new(second.unwrap());
    registry.install(Arc::clone(&second));
    call(&second);
    m.policies(&registry);
    assert_eq!(second.calls(), 1);
    assert_eq!(
        calls(&second),
        1,
        "the new version counts under its own label"
    );
    assert_eq!(calls(&first), 3, "the old version's count stays");
    assert_eq!(m.policy_faults.get_or_create(&label(&second)).get(), 0);

    // The first version serves again (a rollback keeps its object): only
    // its call since is new, not the three counted before.
    registry.install(Arc::clone(&first));
    call(&first);
    m.policies(&registry);
    assert_eq!(first.calls(), 4);
    assert_eq!(
        calls(&first),
        4,
        "a version that serves again is not counted twice"
    );
    assert_eq!(calls(&second), 1);
}

const OBSERVABILITY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/observability");

#[test]
fn the_alert_rules_parse_name_only_exported_metrics_and_have_runbooks() {
    let exported = exported();
    let anchors = guide_anchors();
    let text = std::fs::read_to_string(format!("{OBSERVABILITY}/alerts.yaml")).unwrap();
    let rules: Rules = serde_norway::from_str(&text).unwrap();
    let rules: Vec<(&str, &Rule)> = rules
        .groups
        .iter()
        .flat_map(|g| g.rules.iter().map(|r| (g.name.as_str(), r)))
        .collect();
    assert!(rules.len() >= 5);
    for (group, rule) in rules {
        check(&rule.expr, &exported, &format!("{group}/{}", rule.alert));
        if let Some(wait) = &rule.for_ {
            let parsed: jiff::SignedDuration = wait.parse().unwrap();
            assert!(parsed.is_positive(), "{}: for {wait}", rule.alert);
        }
        assert!(rule.labels.contains_key("severity"), "{}", rule.alert);
        assert!(rule.annotations.contains_key("summary"), "{}", rule.alert);
        let runbook = rule.annotations.get("runbook_url").map(String::as_str);
        let anchor = runbook.and_then(|url| url.strip_prefix(RUNBOOKS));
        assert!(
            anchor.is_some_and(|a| anchors.contains(a)),
            "{}: runbook_url {runbook:?} is no section of docs/operating.md",
            rule.alert
        );
    }
}

/// Where the alerts' runbooks are: sections of the operating guide.
const RUNBOOKS: &str = "https://github.com/vigil-dev/vigil/blob/main/docs/operating.md#";

/// The anchors of docs/operating.md's headings, as GitHub makes them:
/// lower case, spaces as dashes, other punctuation dropped.
fn guide_anchors() -> BTreeSet<String> {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md"))
            .unwrap();
    (guide.lines())
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            (l.trim_start_matches('#').trim().chars())
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => {
                        Some(c.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_dashboard_queries_parse_and_name_only_exported_metrics() {
    let exported = exported();
    let text = std::fs::read_to_string(format!("{OBSERVABILITY}/dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 6);
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for target in targets {
            check(target["expr"].as_str().unwrap(), &exported, title);
        }
    }
}

#[test]
fn outcomes_are_labelled_as_the_docs_name_them() {
    use crate::distribution::failure::PullReason;
    let m = Arc::new(Metrics::default());
    m.policy_pulled(PullResult::Held, 0);
    m.policy_pulled(PullResult::Failed(PullReason::NotFound), 0);
    m.policy_precompiled(PrecompiledResult::None);
    m.policy_precompiled(PrecompiledResult::Refused(PullReason::NotPrecompiled));
    m.config_updated(ConfigChange::RolledBack);
    m.config_updated(ConfigChange::of(crate::config::assignment::Update::Deferred).unwrap());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &m.registry()).unwrap();
    for sample in [
        "vigil_policy_pulls_total{result=\"held\"} 1",
        "vigil_policy_pulls_total{result=\"not-found\"} 1",
        "vigil_policy_precompiled_total{result=\"none\"} 1",
        "vigil_policy_precompiled_total{result=\"not-precompiled\"} 1",
        "vigil_config_updates_total{result=\"rolled-back\"} 1",
        "vigil_config_updates_total{result=\"deferred\"} 1",
    ] {
        assert!(text.contains(sample), "{sample} missing from:\n{text}");
    }
    assert_eq!(
        ConfigChange::of(crate::config::assignment::Update::Unchanged),
        None
    );
}
