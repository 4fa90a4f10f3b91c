//! `/proc/meminfo`, and the kubelet's node working set.

use super::error::{SignalError, malformed, read};
use std::path::Path;

/// The fields of `/proc/meminfo` vigil uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemFree`.
    pub free: u64,
    /// `MemAvailable`: the kernel's estimate, not what the kubelet judges
    /// by (`memory.available` is [`MemInfo::available`]).
    pub mem_available: u64,
    /// `Inactive(file)`.
    pub inactive_file: u64,
}

impl MemInfo {
    /// Reads `path` (normally `/proc/meminfo`).
    ///
    /// # Errors
    /// The file is missing or lacks a field.
    pub fn read(path: &Path) -> Result<Self, SignalError> {
        Self::parse(path, &read(path)?)
    }

    pub(super) fn parse(path: &Path, text: &str) -> Result<Self, SignalError> {
        let field = |name: &str| -> Result<u64, SignalError> {
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
                .ok_or_else(|| malformed(path, format!("no {name} line")))?;
            let kib = line.trim().strip_suffix("kB").unwrap_or(line).trim();
            kib.parse::<u64>()
                .ok()
                .and_then(|v| v.checked_mul(1024))
                .ok_or_else(|| malformed(path, format!("{name} is not a number of kB")))
        };
        Ok(Self {
            total: field("MemTotal")?,
            free: field("MemFree")?,
            mem_available: field("MemAvailable")?,
            inactive_file: field("Inactive(file)")?,
        })
    }

    /// The kubelet's node working set: usage (total minus free) minus inactive file pages.
    pub fn working_set(&self) -> u64 {
        (self.total - self.free.min(self.total)).saturating_sub(self.inactive_file)
    }

    /// `memory.available` as the kubelet computes it: total minus the working set.
    pub fn available(&self) -> u64 {
        self.total.saturating_sub(self.working_set())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_this_machines_meminfo() {
        let info = MemInfo::parse(Path::new("meminfo"), include_str!("fixtures/meminfo")).unwrap();
        assert_eq!(info.total, 24_684_096 * 1024);
        assert!(info.free <= info.total && info.mem_available <= info.total);
        assert!(info.working_set() < info.total);
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it() {
        let error = MemInfo::parse(
            Path::new("/proc/meminfo"),
            "MemTotal: 10 kB\nMemFree: 5 kB\n",
        )
        .unwrap_err();
        assert_eq!(error.to_string(), "/proc/meminfo: no MemAvailable line");
    }
}
