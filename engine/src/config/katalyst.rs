//! Migrating from katalyst: its eviction configuration — an
//! `AdminQoSConfiguration`'s `spec.config.evictionConfig`, an older
//! `EvictionConfiguration`'s `spec.config.evictionPluginsConfig`, and the
//! agent's eviction flags — as the `VigilConfig` that enables the same
//! strategies with the same thresholds (`vigil migrate katalyst`).
//!
//! What katalyst leaves unset takes katalyst's default (its NUMA, system
//! memory and reclaimed resources strategies are on unless turned off, the
//! last reading the offer where katalyst does, its CustomNodeResource), so
//! the result decides as the katalyst agent did. Flags come first and the objects over them, as
//! katalyst's dynamic configuration overrides its flags. Whatever has no
//! vigil counterpart is named in the notes, never dropped silently.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use thiserror::Error;

/// Why a katalyst configuration cannot be migrated.
#[derive(Debug, Error)]
pub enum MigrateError {
    /// A document is not YAML.
    #[error("{0}")]
    Yaml(#[from] serde_norway::Error),
    /// No document is an eviction configuration.
    #[error(
        "no AdminQoSConfiguration with spec.config.evictionConfig, nor EvictionConfiguration, in the file"
    )]
    Nothing,
    /// A value has the wrong type.
    #[error("{field}: {what}")]
    Field {
        /// Where, as katalyst names it.
        field: String,
        /// What is wrong.
        what: String,
    },
    /// A flag is not `--name=value`.
    #[error("flag {0:?} is not --name=value")]
    Flag(String),
}

/// The migrated config and what did not carry over.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    /// The `VigilConfig` object.
    pub object: Value,
    /// What has no vigil counterpart, or took katalyst's default.
    pub notes: Vec<String>,
}

/// katalyst's plugin names (its `dryRun` list names them) by vigil strategy.
const PLUGINS: [(&str, &str); 6] = [
    ("numa-pressure", "numa-memory-pressure-eviction-plugin"),
    (
        "system-memory-pressure",
        "system-memory-pressure-eviction-plugin",
    ),
    ("rss-overuse", "rss-overuse-eviction-plugin"),
    ("rootfs-pressure", "rootfs-pressure-eviction-plugin"),
    ("system-cpu-pressure", "system-cpu-pressure-eviction-plugin"),
    (
        "reclaimed-resources",
        "reclaimed-resource-pressure-eviction-plugin",
    ),
];

/// A strategy being built: whether katalyst enables it, and its config.
#[derive(Debug, Default)]
struct Strategy {
    enabled: Option<bool>,
    config: Map<String, Value>,
}

#[derive(Debug, Default)]
struct Builder {
    strategies: BTreeMap<&'static str, Strategy>,
    dry_run: Vec<String>,
    notes: Vec<String>,
}

impl Builder {
    fn strategy(&mut self, name: &'static str) -> &mut Strategy {
        self.strategies.entry(name).or_default()
    }

    fn set(&mut self, name: &'static str, key: &str, value: Value) {
        self.strategy(name).config.insert(key.to_owned(), value);
    }

    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }
}

fn field_error(field: &str, what: &str) -> MigrateError {
    MigrateError::Field {
        field: field.to_owned(),
        what: what.to_owned(),
    }
}

fn boolean(value: &Value, field: &str) -> Result<bool, MigrateError> {
    value
        .as_bool()
        .ok_or_else(|| field_error(field, "not true or false"))
}

/// A katalyst duration (`300s`, `5m`, `1h30m`) in whole seconds.
fn seconds(value: &Value, field: &str) -> Result<u64, MigrateError> {
    let text = value
        .as_str()
        .ok_or_else(|| field_error(field, "not a duration"))?;
    let mut total = 0.0;
    let mut number = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('h', _) => 3600.0,
            ('m', _) => 60.0,
            ('s', _) => 1.0,
            _ => return Err(field_error(field, "not a duration such as 300s or 5m")),
        };
        let n: f64 = number
            .parse()
            .map_err(|_| field_error(field, "not a duration such as 300s or 5m"))?;
        total += n * unit;
        number.clear();
    }
    if !number.is_empty() {
        return Err(field_error(field, "a duration needs its unit (300s)"));
    }
    Ok(total.round() as u64)
}

/// Copies `fields` (katalyst's name → vigil's) of `section` into strategy `name`.
fn copy(
    builder: &mut Builder,
    name: &'static str,
    section: &Map<String, Value>,
    fields: &[(&str, &str)],
) {
    for (katalyst, vigil) in fields {
        if let Some(value) = section.get(*katalyst).filter(|v| !v.is_null()) {
            builder.set(name, vigil, value.clone());
        }
    }
}

/// The memory section's switches: which of its strategies katalyst runs.
fn switches(
    builder: &mut Builder,
    section: &Map<String, Value>,
    at: &str,
) -> Result<(), MigrateError> {
    for (key, strategy) in [
        ("enableNumaLevelEviction", "numa-pressure"),
        ("enableNumaLevelDetection", "numa-pressure"),
        ("enableSystemLevelEviction", "system-memory-pressure"),
        ("enableSystemLevelDetection", "system-memory-pressure"),
        ("enableRSSOveruseEviction", "rss-overuse"),
        ("enableRssOveruseDetection", "rss-overuse"),
    ] {
        if let Some(value) = section.get(key) {
            builder.strategy(strategy).enabled = Some(boolean(value, &format!("{at}.{key}"))?);
        }
    }
    Ok(())
}

/// The memory section (AdminQoSConfiguration's `memoryPressureEvictionConfig`
/// or EvictionConfiguration's `memoryEvictionPluginConfig`).
fn memory(
    builder: &mut Builder,
    section: &Map<String, Value>,
    at: &str,
) -> Result<(), MigrateError> {
    switches(builder, section, at)?;
    copy(
        builder,
        "numa-pressure",
        section,
        &[
            (
                "numaFreeBelowWatermarkTimesThreshold",
                "belowWatermarkTimesThreshold",
            ),
            (
                "numaFreeBelowWatermarkTimesReclaimedThreshold",
                "belowWatermarkTimesReclaimedThreshold",
            ),
            (
                "numaFreeConstraintFastEvictionWaitCycle",
                "fastEvictionWaitCycle",
            ),
            (
                "numaVictimMinimumUtilizationThreshold",
                "victimMinimumUtilization",
            ),
            ("numaEvictionRankingMetrics", "rankingMetrics"),
            ("gracePeriod", "gracePeriodSeconds"),
        ],
    );
    copy(
        builder,
        "system-memory-pressure",
        section,
        &[
            (
                "systemFreeMemoryThresholdMinimum",
                "freeMemoryThresholdMinimum",
            ),
            (
                "numaVictimMinimumUtilizationThreshold",
                "victimMinimumUtilization",
            ),
            ("systemEvictionRankingMetrics", "rankingMetrics"),
            ("gracePeriod", "gracePeriodSeconds"),
        ],
    );
    copy(
        builder,
        "rss-overuse",
        section,
        &[
            ("rssOveruseRateThreshold", "rateThreshold"),
            ("rSSOveruseRateThreshold", "rateThreshold"),
        ],
    );
    for kswapd in [
        "systemKswapdRateThreshold",
        "systemKswapdRateExceedDurationThreshold",
        "systemKswapdRateExceedTimesThreshold",
    ] {
        if section.contains_key(kswapd) {
            builder.note(format!(
                "{at}.{kswapd}: katalyst no longer calls its kswapd rule; vigil has none"
            ));
        }
    }
    Ok(())
}

fn rootfs(
    builder: &mut Builder,
    section: &Map<String, Value>,
    at: &str,
) -> Result<(), MigrateError> {
    if let Some(value) = section.get("enableRootfsPressureEviction") {
        let enabled = boolean(value, &format!("{at}.enableRootfsPressureEviction"))?;
        builder.strategy("rootfs-pressure").enabled = Some(enabled);
    }
    copy(
        builder,
        "rootfs-pressure",
        section,
        &[
            ("minimumImageFsFreeThreshold", "minimumFree"),
            ("minimumImageFsInodesFreeThreshold", "minimumInodesFree"),
            ("podMinimumUsedThreshold", "podMinimumUsed"),
            ("podMinimumInodesUsedThreshold", "podMinimumInodesUsed"),
            (
                "reclaimedQoSPodUsedPriorityThreshold",
                "reclaimedPriorityUsed",
            ),
            (
                "reclaimedQoSPodInodesUsedPriorityThreshold",
                "reclaimedPriorityInodesUsed",
            ),
            ("minimumImageFsDiskCapacityThreshold", "minimumDiskCapacity"),
            ("gracePeriod", "gracePeriodSeconds"),
        ],
    );
    if let Some(on) = section.get("enableRootfsOveruseEviction")
        && boolean(on, &format!("{at}.enableRootfsOveruseEviction"))?
    {
        let mut overuse = Map::new();
        for (katalyst, vigil) in [
            ("rootfsOveruseEvictionSupportedQoSLevels", "qosLevels"),
            ("sharedQoSRootfsOveruseThreshold", "sharedThreshold"),
            ("reclaimedQoSRootfsOveruseThreshold", "reclaimedThreshold"),
        ] {
            if let Some(value) = section.get(katalyst).filter(|v| !v.is_null()) {
                overuse.insert(vigil.to_owned(), value.clone());
            }
        }
        builder.set("rootfs-pressure", "overuse", Value::Object(overuse));
        // The overuse rule runs within the rootfs strategy.
        builder.strategy("rootfs-pressure").enabled = Some(true);
    }
    Ok(())
}

/// The reclaimed resources section: its rates, grace and tolerance.
fn reclaimed(builder: &mut Builder, section: &Map<String, Value>, at: &str) {
    copy(
        builder,
        "reclaimed-resources",
        section,
        &[
            ("evictionThreshold", "thresholds"),
            ("gracePeriod", "gracePeriodSeconds"),
            ("thresholdMetToleranceDuration", "toleranceSeconds"),
        ],
    );
    if section.contains_key("softEvictionThreshold") {
        builder.note(format!(
            "{at}.softEvictionThreshold: katalyst's reclaimed plugin does not read it; not carried over"
        ));
    }
}

fn cpu_system(
    builder: &mut Builder,
    section: &Map<String, Value>,
    at: &str,
) -> Result<(), MigrateError> {
    if let Some(value) = section.get("enableCPUSystemPressureEviction") {
        let enabled = boolean(value, &format!("{at}.enableCPUSystemPressureEviction"))?;
        builder.strategy("system-cpu-pressure").enabled = Some(enabled);
    }
    copy(
        builder,
        "system-cpu-pressure",
        section,
        &[
            ("loadUpperBoundRatio", "loadUpperBoundRatio"),
            ("loadLowerBoundRatio", "loadLowerBoundRatio"),
            ("usageUpperBoundRatio", "usageUpperBoundRatio"),
            ("usageLowerBoundRatio", "usageLowerBoundRatio"),
            ("thresholdMetPercentage", "thresholdMetPercentage"),
            ("metricRingSize", "metricRingSize"),
            ("gracePeriod", "gracePeriodSeconds"),
            ("checkCPUManager", "checkCpuManager"),
        ],
    );
    if let Some(value) = section.get("evictionCoolDownTime") {
        let cool_down = seconds(value, &format!("{at}.evictionCoolDownTime"))?;
        builder.set("system-cpu-pressure", "coolDownSeconds", json!(cool_down));
    }
    if let Some(metrics) = section
        .get("evictionRankingMetrics")
        .and_then(Value::as_array)
    {
        let (labels, kept): (Vec<&Value>, Vec<&Value>) = metrics
            .iter()
            .partition(|m| m.as_str().is_some_and(|m| m.starts_with("label.")));
        if !labels.is_empty() {
            builder.note(format!(
                "{at}.evictionRankingMetrics: label metrics are not carried over (a sorter of your own can rank by labels)"
            ));
        }
        builder.set(
            "system-cpu-pressure",
            "rankingMetrics",
            Value::Array(kept.into_iter().cloned().collect()),
        );
    }
    if section.contains_key("RankingLabels") {
        builder.note(format!("{at}.RankingLabels: not carried over"));
    }
    Ok(())
}

/// The agent's eviction flags that have a vigil counterpart.
fn flags(builder: &mut Builder, text: &str) -> Result<(), MigrateError> {
    for flag in text.split_whitespace() {
        let Some((name, value)) = flag.strip_prefix("--").and_then(|f| f.split_once('=')) else {
            return Err(MigrateError::Flag(flag.to_owned()));
        };
        let number = |value: &str| {
            value
                .parse::<f64>()
                .map(|n| json!(n))
                .map_err(|_| field_error(&format!("--{name}"), "not a number"))
        };
        let whole = |value: &str| {
            value
                .parse::<u64>()
                .map(|n| json!(n))
                .map_err(|_| field_error(&format!("--{name}"), "not a whole number"))
        };
        let on = |value: &str| {
            value
                .parse::<bool>()
                .map_err(|_| field_error(&format!("--{name}"), "not true or false"))
        };
        let text = || json!(value);
        match name {
            "eviction-system-pressure-cool-down-period" => builder.set("system-memory-pressure", "coolDownSeconds", whole(value)?),
            "eviction-system-pressure-some-threshold" | "eviction-system-pressure-full-threshold" | "eviction-system-pressure-duration" => {
                let key = match name {
                    "eviction-system-pressure-some-threshold" => "someThreshold",
                    "eviction-system-pressure-full-threshold" => "fullThreshold",
                    _ => "durationSeconds",
                };
                let strategy = builder.strategy("system-memory-pressure");
                let psi = strategy.config.entry("workloadPsi").or_insert_with(|| json!({}));
                psi[key] = whole(value)?;
            }
            "eviction-rss-overuse-rate-threshold" => builder.set("rss-overuse", "rateThreshold", number(value)?),
            "eviction-rootfs-enable" => builder.strategy("rootfs-pressure").enabled = Some(on(value)?),
            "eviction-rootfs-minimum-image-fs-free" => builder.set("rootfs-pressure", "minimumFree", text()),
            "eviction-rootfs-minimum-image-fs-inodes-free" => builder.set("rootfs-pressure", "minimumInodesFree", text()),
            "eviction-rootfs-pod-minimum-used" => builder.set("rootfs-pressure", "podMinimumUsed", text()),
            "eviction-rootfs-pod-minimum-inodes-used" => builder.set("rootfs-pressure", "podMinimumInodesUsed", text()),
            "eviction-rootfs-reclaimed-qos-pod-used-priority" => builder.set("rootfs-pressure", "reclaimedPriorityUsed", text()),
            "eviction-rootfs-reclaimed-qos-pod-inodes-used-priority" => builder.set("rootfs-pressure", "reclaimedPriorityInodesUsed", text()),
            "eviction-rootfs-minimum-image-fs-disk-capacity" => builder.set("rootfs-pressure", "minimumDiskCapacity", text()),
            "eviction-rootfs-grace-period" => builder.set("rootfs-pressure", "gracePeriodSeconds", whole(value)?),
            "eviction-rootfs-overuse-enable"
            | "eviction-rootfs-overuse-shared-qos-threshold"
            | "eviction-rootfs-overuse-reclaimed-qos-threshold"
            | "eviction-rootfs-overuse-supported-qos-levels" => overuse_flag(builder, name, value)?,
            "enable-cpu-system-eviction" => builder.strategy("system-cpu-pressure").enabled = Some(on(value)?),
            "system-load-upper-bound-ratio" => builder.set("system-cpu-pressure", "loadUpperBoundRatio", number(value)?),
            "system-load-lower-bound-ratio" => builder.set("system-cpu-pressure", "loadLowerBoundRatio", number(value)?),
            "system-usage-upper-bound-ratio" => builder.set("system-cpu-pressure", "usageUpperBoundRatio", number(value)?),
            "system-usage-lower-bound-ratio" => builder.set("system-cpu-pressure", "usageLowerBoundRatio", number(value)?),
            "cpu-system-eviction-threshold-met-percentage" => builder.set("system-cpu-pressure", "thresholdMetPercentage", number(value)?),
            "cpu-system-eviction-metric-ring-size" => builder.set("system-cpu-pressure", "metricRingSize", whole(value)?),
            "cpu-system-eviction-cool-down-time" => builder.set("system-cpu-pressure", "coolDownSeconds", json!(seconds(&json!(value), name)?)),
            "cpu-system-eviction-grace-period" => builder.set("system-cpu-pressure", "gracePeriodSeconds", whole(value)?),
            "cpu-system-eviction-check-cpu-manager" => builder.set("system-cpu-pressure", "checkCpuManager", json!(on(value)?)),
            "cpu-system-eviction-metric-mode" => builder.set("system-cpu-pressure", "metricMode", text()),
            "eviction-reclaimed-resources-threshold" => builder.set("reclaimed-resources", "thresholds", rates(name, value)?),
            "eviction-reclaimed-resources-grace-period" => builder.set("reclaimed-resources", "gracePeriodSeconds", whole(value)?),
            "eviction-reclaimed-resources-threshold-met-tolerance-duration" => builder.set("reclaimed-resources", "toleranceSeconds", whole(value)?),
            "workload-path" => builder.note(format!(
                "--workload-path={value}: give the agent --workload-cgroup (relative to the cgroup mount)"
            )),
            other => builder.note(format!("--{other}: not carried over")),
        }
    }
    Ok(())
}

/// A flag's `resource=rate,…` list as a map of rates.
fn rates(name: &str, value: &str) -> Result<Value, MigrateError> {
    let mut rates = Map::new();
    for pair in value.split(',').filter(|p| !p.is_empty()) {
        let (resource, rate) = pair
            .split_once('=')
            .ok_or_else(|| field_error(&format!("--{name}"), "not resource=rate pairs"))?;
        let rate: f64 = (rate.trim().parse())
            .map_err(|_| field_error(&format!("--{name}"), "a rate is not a number"))?;
        rates.insert(resource.trim().to_owned(), json!(rate));
    }
    Ok(Value::Object(rates))
}

/// One of the agent's rootfs overuse flags, into the rootfs strategy's
/// `overuse` (which `--eviction-rootfs-overuse-enable=true` turns on).
fn overuse_flag(builder: &mut Builder, name: &str, value: &str) -> Result<(), MigrateError> {
    let strategy = builder.strategy("rootfs-pressure");
    let overuse = strategy
        .config
        .entry("overuse")
        .or_insert_with(|| json!({}));
    match name {
        "eviction-rootfs-overuse-enable" => {
            let on = value
                .parse::<bool>()
                .map_err(|_| field_error(&format!("--{name}"), "not true or false"))?;
            if on {
                strategy.enabled = Some(true);
            } else {
                strategy.config.remove("overuse");
            }
        }
        "eviction-rootfs-overuse-shared-qos-threshold" => overuse["sharedThreshold"] = json!(value),
        "eviction-rootfs-overuse-reclaimed-qos-threshold" => {
            overuse["reclaimedThreshold"] = json!(value)
        }
        _ => overuse["qosLevels"] = json!(value.split(',').collect::<Vec<_>>()),
    }
    Ok(())
}

/// The eviction sections of the objects in `yaml`.
fn objects(builder: &mut Builder, yaml: &str) -> Result<bool, MigrateError> {
    let mut found = false;
    for document in serde_norway::Deserializer::from_str(yaml) {
        let object = Value::deserialize(document)?;
        let kind = object["kind"].as_str().unwrap_or_default();
        let config = &object["spec"]["config"];
        let sections = match kind {
            "AdminQoSConfiguration" => config["evictionConfig"].as_object(),
            "EvictionConfiguration" => config["evictionPluginsConfig"].as_object(),
            _ => None,
        };
        let Some(sections) = sections else { continue };
        found = true;
        for (key, section) in sections {
            let at = format!("{kind}.{key}");
            let empty = Map::new();
            let section_map = section.as_object().unwrap_or(&empty);
            match key.as_str() {
                "dryRun" => {
                    let names = section
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str);
                    builder.dry_run.extend(names.map(str::to_owned));
                }
                "memoryPressureEvictionConfig" | "memoryEvictionPluginConfig" => {
                    memory(builder, section_map, &at)?
                }
                "rootfsPressureEvictionConfig" => rootfs(builder, section_map, &at)?,
                "cpuSystemPressureEvictionConfig" => cpu_system(builder, section_map, &at)?,
                "reclaimedResourcesEvictionConfig" | "reclaimedResourcesEvictionPluginConfig" => {
                    reclaimed(builder, section_map, &at)
                }
                other => builder.note(format!(
                    "{kind}.{other}: vigil has no counterpart; not carried over"
                )),
            }
        }
    }
    Ok(found)
}

/// Migrates `yaml` (katalyst's objects, several documents allowed) and
/// `flags` (the agent's, `--name=value` separated by white space) into a
/// `VigilConfig` named `name`.
///
/// # Errors
/// Neither says anything about eviction, or a value is malformed.
pub fn migrate(yaml: &str, flags_text: &str, name: &str) -> Result<Migration, MigrateError> {
    let mut builder = Builder::default();
    flags(&mut builder, flags_text)?;
    if !objects(&mut builder, yaml)? && flags_text.trim().is_empty() {
        return Err(MigrateError::Nothing);
    }
    // katalyst's own defaults for what it was not told.
    for (strategy, on) in [
        ("numa-pressure", true),
        ("system-memory-pressure", true),
        ("rss-overuse", false),
        ("rootfs-pressure", false),
        ("system-cpu-pressure", false),
        ("reclaimed-resources", true),
    ] {
        let entry = builder.strategy(strategy);
        if entry.enabled.is_none() {
            entry.enabled = Some(on);
            if on {
                builder.note(format!(
                    "{strategy}: on, as katalyst's default (set false in katalyst to turn it off)"
                ));
            }
        }
    }
    // What the node offers, where katalyst's reporter writes it.
    builder.set("reclaimed-resources", "offered", json!("cnr"));
    let every = builder.dry_run.iter().any(|n| n == "*");
    let mut policies = Map::new();
    for (strategy, settings) in &builder.strategies {
        let plugin = PLUGINS.iter().find(|(s, _)| s == strategy).map(|(_, p)| *p);
        let dry_run = every || plugin.is_some_and(|p| builder.dry_run.iter().any(|n| n == p));
        let mut entry = json!({"enabled": settings.enabled.unwrap_or(false), "dryRun": dry_run});
        if !settings.config.is_empty() {
            entry["config"] = Value::Object(settings.config.clone());
        }
        policies.insert((*strategy).to_owned(), entry);
    }
    let object = json!({
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "VigilConfig",
        "metadata": {"name": name},
        "spec": {"priority": 0, "config": {"policies": policies}},
    });
    Ok(Migration {
        object,
        notes: builder.notes,
    })
}

#[cfg(test)]
mod tests;
