//! How far one policy has rolled out, from its `VigilPolicyStatus` objects
//! (one per node): the nodes per version, stage (`newest`, `previous`,
//! `shadow`, or `-` for a file or built-in), signature (`verified`,
//! `unsigned`, or `-`) and state; the agreement of
//! its version in shadow; the nodes where something failed, with why.
//! What `vigil status POLICY` prints.

use super::kinds::VigilPolicyStatus;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// A version, a stage, a signature and a state.
type Row = (String, String, String, String);

/// The agreement of one version in shadow, over the nodes that compare it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Agreement {
    /// Nodes comparing it.
    pub nodes: usize,
    /// Their comparisons.
    pub comparisons: u64,
    /// Of those, the same decision.
    pub agreements: u64,
    /// Of those, the shadow faulted.
    pub faults: u64,
}

/// One policy's rollout across the nodes that report it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The policy.
    pub policy: String,
    /// Nodes that report it.
    pub nodes: usize,
    /// Nodes by version, stage, signature and state; a node in shadow counts twice:
    /// for what it serves and for what it runs in shadow.
    pub rows: BTreeMap<Row, usize>,
    /// The versions in shadow.
    pub shadow: BTreeMap<String, Agreement>,
    /// Nodes where something failed: node, what, why.
    pub failed: Vec<(String, String, String)>,
}

impl Summary {
    /// The summary of `policy` from `statuses` (any order).
    pub(crate) fn of(policy: &str, statuses: &[VigilPolicyStatus]) -> Self {
        let mut summary = Self {
            policy: policy.to_owned(),
            ..Self::default()
        };
        for object in statuses.iter().filter(|o| o.spec.policy == policy) {
            summary.nodes += 1;
            let Some(status) = &object.status else {
                let row = ("-".into(), "-".into(), "-".into(), "NoStatus".into());
                *summary.rows.entry(row).or_default() += 1;
                continue;
            };
            let node = &object.spec.node;
            let version = status.version.clone().unwrap_or_else(|| "-".into());
            let pulled = status.pull.as_ref();
            let stage = pulled.map_or_else(|| "-".into(), |p| p.stage.clone());
            let signature =
                (pulled.and_then(|p| p.signature.clone())).unwrap_or_else(|| "-".into());
            *(summary.rows)
                .entry((version, stage, signature, status.state.clone()))
                .or_default() += 1;
            let pull = status.pull.as_ref().filter(|p| p.state == "PullFailed");
            if let Some(pull) = pull {
                let why = pull.message.clone().unwrap_or_default();
                summary.fail(node, format!("pull {}", pull.reference), why);
            }
            if matches!(status.state.as_str(), "Failed" | "RolledBack") {
                let why =
                    (status.last_fault.as_ref()).map_or_else(String::new, |f| f.message.clone());
                summary.fail(node, status.state.clone(), why);
            }
            if let Some(shadow) = &status.shadow {
                let version = shadow.version.clone().unwrap_or_else(|| "-".into());
                let row = (
                    version.clone(),
                    "shadow".into(),
                    "-".into(),
                    shadow.state.clone(),
                );
                *summary.rows.entry(row).or_default() += 1;
                if shadow.state == "Comparing" || shadow.state == "Rejected" {
                    let agreement = summary.shadow.entry(version).or_default();
                    agreement.nodes += 1;
                    agreement.comparisons += shadow.comparisons;
                    agreement.agreements += shadow.agreements;
                    agreement.faults += shadow.faults;
                }
                if matches!(shadow.state.as_str(), "PullFailed" | "Refused" | "Rejected") {
                    let why = shadow.message.clone().unwrap_or_default();
                    summary.fail(node, format!("shadow {}", shadow.state), why);
                }
            }
        }
        summary.failed.sort();
        summary
    }

    fn fail(&mut self, node: &str, what: String, why: String) {
        self.failed.push((node.to_owned(), what, why));
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "policy {}: {} node(s) report it",
            self.policy, self.nodes
        )?;
        if self.nodes == 0 {
            return Ok(());
        }
        let mut table = String::new();
        writeln!(
            table,
            "{:<14} {:<9} {:<9} {:<11} {:>6}",
            "VERSION", "STAGE", "SIGNED", "STATE", "NODES"
        )?;
        for ((version, stage, signature, state), nodes) in &self.rows {
            writeln!(
                table,
                "{version:<14} {stage:<9} {signature:<9} {state:<11} {nodes:>6}"
            )?;
        }
        f.write_str(&table)?;
        for (version, a) in &self.shadow {
            let share = |n: u64| {
                if a.comparisons == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.1}%", 100.0 * n as f64 / a.comparisons as f64)
                }
            };
            let differed = (a.comparisons).saturating_sub(a.agreements + a.faults);
            writeln!(
                f,
                "shadow {version} on {} node(s): {} comparison(s), {} agreed ({}), {differed} differed, {} faulted",
                a.nodes,
                a.comparisons,
                a.agreements,
                share(a.agreements),
                a.faults
            )?;
        }
        if !self.failed.is_empty() {
            writeln!(f, "failed on {} node(s):", self.failed.len())?;
            for (node, what, why) in &self.failed {
                writeln!(f, "  {node}: {what}: {why}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
