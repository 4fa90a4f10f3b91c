//! A policy's name, checked once: what its file is called (`NAME.wasm`), what
//! the config (`policies.NAME`, `sorter`) and the `VigilPolicy` objects call
//! it. And the names of the built-in policies.

use std::fmt;

/// The built-in memory strategy.
pub const MEMORY_PRESSURE: &str = "memory-pressure";
/// The built-in disk strategy.
pub const DISK_PRESSURE: &str = "disk-pressure";
/// The built-in pid strategy.
pub const PID_PRESSURE: &str = "pid-pressure";
/// The built-in PSI strategy.
pub const PSI_PRESSURE: &str = "psi-pressure";
/// katalyst's RSS overuse strategy, built in and off.
pub const RSS_OVERUSE: &str = "rss-overuse";
/// katalyst's NUMA memory pressure strategy, built in and off.
pub const NUMA_PRESSURE: &str = "numa-pressure";
/// katalyst's system memory pressure strategy, built in and off.
pub const SYSTEM_MEMORY_PRESSURE: &str = "system-memory-pressure";
/// katalyst's system CPU pressure strategy, built in and off.
pub const SYSTEM_CPU_PRESSURE: &str = "system-cpu-pressure";
/// katalyst's rootfs pressure strategy, built in and off.
pub const ROOTFS_PRESSURE: &str = "rootfs-pressure";
/// katalyst's reclaimed resources strategy, built in and off.
pub const RECLAIMED_RESOURCES: &str = "reclaimed-resources";
/// The built-in sorter: the configured sorter by default, and the fallback
/// when the configured one fails under hard pressure.
pub const DEFAULT_SORTER: &str = "default-sorter";
/// The built-in config merger, the one that merges config layers.
pub const DEFAULT_MERGER: &str = "default-merger";

/// The file name extension of a policy component.
pub const EXTENSION: &str = ".wasm";

/// The name of a policy. Any name a file can carry, except those editors,
/// Kubernetes' volume updates and backups leave beside it: not empty, not
/// starting with `.` or `#`, without `@`, `~` or `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyName(String);

/// Why a text is not a policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a policy name: {1}")]
pub struct NameError(String, &'static str);

impl PolicyName {
    /// `name`, if it is a policy name.
    ///
    /// # Errors
    /// It is empty, hidden or a backup, or holds `@`, `~` or `/`.
    pub fn parse(name: &str) -> Result<Self, NameError> {
        let why = if name.is_empty() {
            "empty"
        } else if name.starts_with(['.', '#']) {
            "it starts with . or # (hidden, or an editor's file)"
        } else if name.contains(['@', '~', '/']) {
            "it holds @, ~ or /"
        } else {
            return Ok(Self(name.to_owned()));
        };
        Err(NameError(name.to_owned(), why))
    }

    /// The policy a file of a policies directory holds: `NAME.wasm` with a
    /// policy name; nothing for any other file.
    pub fn of_file(file_name: &str) -> Option<Self> {
        Self::parse(file_name.strip_suffix(EXTENSION)?).ok()
    }

    /// The policy the component file at `path` would serve as: its name
    /// without the extension.
    ///
    /// # Errors
    /// That is not a policy name.
    pub fn of_path(path: &std::path::Path) -> Result<Self, NameError> {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        Self::parse(&stem)
    }

    /// Whether a new policy should take this name: a DNS label (lower-case
    /// letters, digits and `-`, a letter first, at most 63), so that its file,
    /// its config key and a `VigilPolicy` object can all carry it.
    pub fn is_dns_label(&self) -> bool {
        let name = self.0.as_str();
        name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.ends_with('-')
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of its component file.
    pub fn file_name(&self) -> String {
        format!("{}{EXTENSION}", self.0)
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<PolicyName> for String {
    fn from(name: PolicyName) -> Self {
        name.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_wasm_files_hold_policies() {
        let name = PolicyName::of_file("memory-pressure.wasm").unwrap();
        assert_eq!(name.as_str(), MEMORY_PRESSURE);
        assert_eq!(name.file_name(), "memory-pressure.wasm");
        for ignored in [
            ".sorter.wasm.swp",
            ".sorter.wasm",
            "..data",
            "sorter.wasm~",
            "#sorter.wasm#",
            "x@y.wasm",
            ".wasm",
            "notes.txt",
        ] {
            assert_eq!(PolicyName::of_file(ignored), None, "{ignored}");
        }
        let error = PolicyName::parse("a/b").unwrap_err();
        assert_eq!(
            error.to_string(),
            r#""a/b" is not a policy name: it holds @, ~ or /"#
        );
    }

    #[test]
    fn a_new_policy_takes_a_name_a_file_a_config_key_and_an_object_can_carry() {
        for good in ["my-sorter", "a", "psi2", DEFAULT_SORTER] {
            assert!(PolicyName::parse(good).unwrap().is_dns_label(), "{good}");
        }
        for bad in ["My-Sorter", "2fast", "a_b", "a-", "a.b", &"a".repeat(64)] {
            assert!(!PolicyName::parse(bad).unwrap().is_dns_label(), "{bad}");
        }
        assert!(PolicyName::parse("").is_err());
    }
}
