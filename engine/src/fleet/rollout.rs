//! How far a config change and an upgrade of vigil have rolled out, from
//! the `VigilNodeStatus` objects (one per node): the nodes per mode
//! (observe, enforce or paused), assigned config, running config and state, with the
//! nodes that refused or rolled back theirs and why; and the nodes per agent
//! build. What `vigil status
//! --config` and `vigil version` print.

use super::kinds::{Mode, VigilNodeStatus};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// The first digits of a config hash, as the table shows it.
const SHORT: usize = 12;

/// A mode, an assigned config, the running config and the state.
type Row = (String, String, String, String);

/// The config across the nodes that report it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ConfigRollout {
    /// Nodes that report.
    pub nodes: usize,
    /// Nodes by mode, assigned config, running config and state.
    pub rows: BTreeMap<Row, usize>,
    /// Nodes whose assigned config does not run: node, state, why.
    pub failed: Vec<(String, String, String)>,
}

impl ConfigRollout {
    /// The rollout from `statuses` (any order).
    pub(crate) fn of(statuses: &[VigilNodeStatus]) -> Self {
        let mut rollout = Self::default();
        for object in statuses {
            rollout.nodes += 1;
            let Some(status) = &object.status else {
                let row = ("-".into(), "-".into(), "-".into(), "NoStatus".into());
                *rollout.rows.entry(row).or_default() += 1;
                continue;
            };
            let config = &status.config;
            let short = |hash: &Option<String>, none: &str| {
                hash.as_deref()
                    .map_or_else(|| none.to_owned(), |h| h.chars().take(SHORT).collect())
            };
            let mode = status.mode.map_or("-", Mode::as_str);
            let row = (
                mode.to_owned(),
                short(&config.assigned, "-"),
                short(&config.active, "defaults"),
                config.state.clone(),
            );
            *rollout.rows.entry(row).or_default() += 1;
            if matches!(config.state.as_str(), "Rejected" | "RolledBack") {
                let why = config.last_error.clone().unwrap_or(config.message.clone());
                let node = object.spec.node.clone();
                rollout.failed.push((node, config.state.clone(), why));
            }
        }
        rollout.failed.sort();
        rollout
    }
}

impl fmt::Display for ConfigRollout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "config: {} node(s) report", self.nodes)?;
        if self.nodes == 0 {
            return Ok(());
        }
        let mut table = String::new();
        let (assigned, running) = ("ASSIGNED", "RUNNING");
        writeln!(
            table,
            "{:<8} {assigned:<14} {running:<14} {:<16} {:>6}",
            "MODE", "STATE", "NODES"
        )?;
        for ((mode, assigned, running, state), nodes) in &self.rows {
            writeln!(
                table,
                "{mode:<8} {assigned:<14} {running:<14} {state:<16} {nodes:>6}"
            )?;
        }
        f.write_str(&table)?;
        if !self.failed.is_empty() {
            writeln!(
                f,
                "not running their assigned config: {} node(s):",
                self.failed.len()
            )?;
            for (node, state, why) in &self.failed {
                writeln!(f, "  {node}: {state}: {why}")?;
            }
        }
        Ok(())
    }
}

/// The nodes per agent build.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Builds(pub BTreeMap<String, usize>);

impl Builds {
    /// The builds of the agents that wrote `statuses`.
    pub(crate) fn of(statuses: &[VigilNodeStatus]) -> Self {
        let mut builds = BTreeMap::new();
        for object in statuses {
            let agent = object.status.as_ref().and_then(|s| s.agent.clone());
            let build = agent.unwrap_or_else(|| "an agent before 0.2 (or no status yet)".into());
            *builds.entry(build).or_default() += 1;
        }
        Self(builds)
    }
}

impl fmt::Display for Builds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: usize = self.0.values().sum();
        writeln!(f, "agents: {nodes} node(s) report")?;
        for (build, nodes) in &self.0 {
            writeln!(f, "{nodes:>6}  {build}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::kinds::{ConfigState, NodeView, VigilNodeStatusSpec};

    fn node(name: &str, agent: Option<&str>, config: ConfigState) -> VigilNodeStatus {
        let spec = VigilNodeStatusSpec { node: name.into() };
        let mut object = VigilNodeStatus::new(name, spec);
        object.status = Some(NodeView {
            agent: agent.map(str::to_owned),
            mode: agent.map(|_| Mode::of(false, name == "n2")),
            config,
            ..NodeView::default()
        });
        object
    }

    fn config(state: &str, assigned: &str, active: Option<&str>) -> ConfigState {
        ConfigState {
            state: state.into(),
            message: format!("{state} message"),
            assigned: Some(assigned.into()),
            active: active.map(str::to_owned),
            ..ConfigState::default()
        }
    }

    const NEW: &str = "bbbbbbbbbbbbbbbbbbbbbbbb";
    const OLD: &str = "aaaaaaaaaaaaaaaaaaaaaaaa";

    fn fleet() -> Vec<VigilNodeStatus> {
        let v2 = Some("vigil 0.2.0 (abc) wasmtime 48.0.8");
        let mut rolled_back = config("RolledBack", NEW, Some(OLD));
        rolled_back.last_error = Some("policies faulted 3 times during its trial".into());
        vec![
            node("n1", v2, config("Active", NEW, Some(NEW))),
            node("n2", v2, config("Trial", NEW, Some(NEW))),
            node("n3", None, rolled_back),
            node("n4", v2, config("Active", NEW, Some(NEW))),
            node("n5", v2, config("Rejected", NEW, None)),
            VigilNodeStatus::new("n6", VigilNodeStatusSpec { node: "n6".into() }),
        ]
    }

    #[test]
    fn a_config_rollout_counts_nodes_per_config_and_state_and_names_the_failed() {
        let rollout = ConfigRollout::of(&fleet());
        assert_eq!(rollout.nodes, 6);
        let row = |m: &str, a: &str, r: &str, s: &str| {
            (m.to_owned(), a.to_owned(), r.to_owned(), s.to_owned())
        };
        let new = &NEW[..SHORT];
        assert_eq!(rollout.rows[&row("enforce", new, new, "Active")], 2);
        assert_eq!(rollout.rows[&row("observe", new, new, "Trial")], 1);
        assert_eq!(rollout.rows[&row("-", new, &OLD[..SHORT], "RolledBack")], 1);
        assert_eq!(
            rollout.rows[&row("enforce", new, "defaults", "Rejected")],
            1
        );
        assert_eq!(rollout.rows[&row("-", "-", "-", "NoStatus")], 1);
        assert_eq!(
            rollout.failed,
            [
                (
                    "n3".to_owned(),
                    "RolledBack".to_owned(),
                    "policies faulted 3 times during its trial".to_owned()
                ),
                (
                    "n5".to_owned(),
                    "Rejected".to_owned(),
                    "Rejected message".to_owned()
                ),
            ]
        );
        let text = rollout.to_string();
        assert!(text.starts_with("config: 6 node(s) report\n"), "{text}");
        assert!(
            text.contains(&format!(
                "{:<8} {new:<14} {new:<14} {:<16} {:>6}\n",
                "enforce", "Active", 2
            )),
            "{text}"
        );
        assert!(
            text.ends_with("  n5: Rejected: Rejected message\n"),
            "{text}"
        );
    }

    #[test]
    fn builds_count_the_nodes_of_each_agent_version() {
        let builds = Builds::of(&fleet());
        assert_eq!(builds.0["vigil 0.2.0 (abc) wasmtime 48.0.8"], 4);
        assert_eq!(builds.0["an agent before 0.2 (or no status yet)"], 2);
        assert_eq!(
            builds.to_string(),
            "agents: 6 node(s) report\n     2  an agent before 0.2 (or no status yet)\n     4  vigil 0.2.0 (abc) wasmtime 48.0.8\n"
        );
    }
}
