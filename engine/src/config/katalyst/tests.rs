//! Migration of katalyst's own example configurations (katalyst-core's
//! `examples/kcc-eviction-*.yaml`, written here again) and of a whole
//! `AdminQoSConfiguration`, each result checked as vigil checks a layer.
use super::*;
use crate::config::ConfigLayer;

/// The result, checked by vigil's layer schema, and its policies.
fn checked(migration: &Migration) -> Value {
    let layer: ConfigLayer = serde_json::from_value(migration.object.clone()).unwrap();
    let layer = crate::model::Layer {
        source: layer.source(),
        json: layer.spec.config.to_string(),
    };
    crate::config::schema::check_layer(&layer).unwrap();
    migration.object["spec"]["config"]["policies"].clone()
}

/// katalyst's `examples/kcc-eviction-memory-system-config.yaml`: the
/// eviction configuration's CRD registration, then the configuration.
const MEMORY_SYSTEM_EXAMPLE: &str = r#"
apiVersion: config.katalyst.kubewharf.io/v1alpha1
kind: KatalystCustomConfig
metadata:
  name: eviction-configuration
spec:
  targetType:
    group: config.katalyst.kubewharf.io
    resource: evictionconfigurations
    version: v1alpha1
---
apiVersion: config.katalyst.kubewharf.io/v1alpha1
kind: EvictionConfiguration
metadata:
  name: default
spec:
  config:
    evictionPluginsConfig:
      memoryEvictionPluginConfig:
        enableNumaLevelDetection: false
        systemKswapdRateExceedTimesThreshold: 1
        systemKswapdRateThreshold: 2000
"#;

#[test]
fn katalysts_memory_system_example_turns_numa_off_and_keeps_system_memory_on() {
    let migration = migrate(MEMORY_SYSTEM_EXAMPLE, "", "from-katalyst").unwrap();
    let policies = checked(&migration);
    assert_eq!(policies["numa-pressure"]["enabled"], false);
    assert_eq!(
        policies["system-memory-pressure"]["enabled"], true,
        "katalyst's default"
    );
    assert_eq!(policies["rss-overuse"]["enabled"], false);
    assert_eq!(policies["system-memory-pressure"]["dryRun"], false);
    let notes = migration.notes.join("\n");
    assert!(
        notes.contains("systemKswapdRateThreshold: katalyst no longer calls"),
        "{notes}"
    );
    assert!(
        notes.contains("system-memory-pressure: on, as katalyst's default"),
        "{notes}"
    );
}

/// katalyst's `examples/kcc-eviction-reclaimed-resource-config.yaml`.
const RECLAIMED_EXAMPLE: &str = r#"
apiVersion: config.katalyst.kubewharf.io/v1alpha1
kind: EvictionConfiguration
metadata:
  name: default
spec:
  config:
    evictionPluginsConfig:
      reclaimedResourcesEvictionPluginConfig:
        evictionThreshold:
          "katalyst.kubewharf.io/reclaimed_millicpu": 10
          "katalyst.kubewharf.io/reclaimed_memory": 10
"#;

#[test]
fn katalysts_reclaimed_resource_example_carries_its_rates() {
    let migration = migrate(RECLAIMED_EXAMPLE, "", "from-katalyst").unwrap();
    let policies = checked(&migration);
    let reclaimed = &policies["reclaimed-resources"];
    assert_eq!(reclaimed["enabled"], true, "katalyst runs it by default");
    assert_eq!(
        reclaimed["config"]["thresholds"],
        json!({"katalyst.kubewharf.io/reclaimed_millicpu": 10, "katalyst.kubewharf.io/reclaimed_memory": 10})
    );
    assert_eq!(
        reclaimed["config"]["offered"], "cnr",
        "the offer from katalyst's CustomNodeResource, as katalyst reads it"
    );
}

#[test]
fn the_reclaimed_flags_carry_over_and_a_bad_rate_is_refused() {
    let flags = "--eviction-reclaimed-resources-threshold=resource.katalyst.kubewharf.io/reclaimed_millicpu=2.5 \
                 --eviction-reclaimed-resources-grace-period=30 \
                 --eviction-reclaimed-resources-threshold-met-tolerance-duration=10";
    let migration = migrate("", flags, "x").unwrap();
    let config = &checked(&migration)["reclaimed-resources"]["config"];
    assert_eq!(
        *config,
        json!({
            "offered": "cnr",
            "thresholds": {"resource.katalyst.kubewharf.io/reclaimed_millicpu": 2.5},
            "gracePeriodSeconds": 30,
            "toleranceSeconds": 10,
        })
    );
    katalyst_strategies::reclaimed_resources::Config::parse(&config.to_string()).unwrap();
    let error = migrate("", "--eviction-reclaimed-resources-threshold=cpu", "x").unwrap_err();
    assert!(
        error.to_string().contains("not resource=rate pairs"),
        "{error}"
    );
}

const ADMIN_QOS: &str = r#"
apiVersion: config.katalyst.kubewharf.io/v1alpha1
kind: AdminQoSConfiguration
metadata:
  name: default
spec:
  config:
    evictionConfig:
      dryRun: ["rootfs-pressure-eviction-plugin"]
      memoryPressureEvictionConfig:
        enableNumaLevelEviction: true
        enableSystemLevelEviction: false
        numaFreeBelowWatermarkTimesThreshold: 8
        numaVictimMinimumUtilizationThreshold: 0.01
        systemFreeMemoryThresholdMinimum: 2Gi
        enableRSSOveruseEviction: true
        rssOveruseRateThreshold: 1.2
        gracePeriod: 30
      rootfsPressureEvictionConfig:
        enableRootfsPressureEviction: true
        minimumImageFsFreeThreshold: "10%"
        minimumImageFsInodesFreeThreshold: "100000"
        reclaimedQoSPodUsedPriorityThreshold: 50Gi
        enableRootfsOveruseEviction: true
        sharedQoSRootfsOveruseThreshold: "20%"
      cpuSystemPressureEvictionConfig:
        enableCPUSystemPressureEviction: true
        usageUpperBoundRatio: 0.95
        usageLowerBoundRatio: 0.85
        evictionCoolDownTime: 5m
        evictionRankingMetrics: ["qos.pod", "label.team", "priority.pod"]
      networkEvictionConfig:
        enableNICNetworkEviction: true
"#;

#[test]
fn an_admin_qos_configuration_carries_every_threshold_and_its_dry_run() {
    let flags =
        "--eviction-system-pressure-cool-down-period=60 --eviction-rss-overuse-rate-threshold=1.5";
    let migration = migrate(ADMIN_QOS, flags, "from-katalyst").unwrap();
    let policies = checked(&migration);
    let numa = &policies["numa-pressure"];
    assert_eq!(numa["enabled"], true);
    assert_eq!(numa["config"]["belowWatermarkTimesThreshold"], 8);
    assert_eq!(numa["config"]["victimMinimumUtilization"], 0.01);
    assert_eq!(numa["config"]["gracePeriodSeconds"], 30);
    let system = &policies["system-memory-pressure"];
    assert_eq!(system["enabled"], false);
    assert_eq!(system["config"]["freeMemoryThresholdMinimum"], "2Gi");
    assert_eq!(
        system["config"]["coolDownSeconds"], 60,
        "from the agent's flag"
    );
    assert_eq!(
        policies["rss-overuse"]["config"]["rateThreshold"], 1.2,
        "the object overrides the flag, as katalyst's dynamic config does"
    );
    let rootfs = &policies["rootfs-pressure"];
    assert_eq!(
        (rootfs["enabled"].clone(), rootfs["dryRun"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(rootfs["config"]["minimumFree"], "10%");
    assert_eq!(rootfs["config"]["minimumInodesFree"], "100000");
    assert_eq!(
        rootfs["config"]["overuse"],
        json!({"sharedThreshold": "20%"})
    );
    let cpu = &policies["system-cpu-pressure"];
    assert_eq!(cpu["config"]["coolDownSeconds"], 300);
    assert_eq!(
        cpu["config"]["rankingMetrics"],
        json!(["qos.pod", "priority.pod"])
    );
    let notes = migration.notes.join("\n");
    for expected in [
        "label metrics are not carried over",
        "networkEvictionConfig: vigil has no counterpart",
    ] {
        assert!(notes.contains(expected), "{expected}: {notes}");
    }
}

#[test]
fn every_strategy_the_result_names_accepts_its_config() {
    // Each migrated config parses with the strategy's own parser: the
    // built-ins refuse an unknown field, so a mistranslated name fails here.
    let migration = migrate(ADMIN_QOS, "--eviction-system-pressure-duration=20", "x").unwrap();
    let policies = checked(&migration);
    let config = |name: &str| policies[name]["config"].to_string();
    use katalyst_strategies::{
        cpu_pressure, numa_pressure, reclaimed_resources, rootfs_pressure, rss_overuse,
        system_memory,
    };
    numa_pressure::Config::parse(&config("numa-pressure")).unwrap();
    system_memory::Config::parse(&config("system-memory-pressure")).unwrap();
    rss_overuse::Config::parse(&config("rss-overuse")).unwrap();
    rootfs_pressure::Config::parse(&config("rootfs-pressure")).unwrap();
    cpu_pressure::Config::parse(&config("system-cpu-pressure")).unwrap();
    let reclaimed = migrate(RECLAIMED_EXAMPLE, "", "x").unwrap();
    let config = &checked(&reclaimed)["reclaimed-resources"]["config"];
    reclaimed_resources::Config::parse(&config.to_string()).unwrap();
}

#[test]
fn a_file_without_eviction_configuration_or_a_bad_value_is_refused() {
    let error = migrate("kind: ConfigMap\n", "", "x").unwrap_err();
    assert!(
        error.to_string().contains("no AdminQoSConfiguration"),
        "{error}"
    );
    let bad = ADMIN_QOS.replace(
        "enableNumaLevelEviction: true",
        "enableNumaLevelEviction: maybe",
    );
    let error = migrate(&bad, "", "x").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("memoryPressureEvictionConfig.enableNumaLevelEviction"),
        "{error}"
    );
    let error = migrate(ADMIN_QOS, "eviction-rootfs-enable", "x").unwrap_err();
    assert!(error.to_string().contains("--name=value"), "{error}");
}
