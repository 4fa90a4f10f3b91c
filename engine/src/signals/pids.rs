//! Process ids: `pid_max` against the number of tasks the kernel runs.

use super::error::{SignalError, malformed, read, read_u64};
use std::path::Path;

/// `(pid_max, tasks now)` under `proc_root`: `sys/kernel/pid_max`, and the
/// total after the slash in `loadavg`'s fourth field.
///
/// # Errors
/// A file is missing or malformed.
pub(super) fn read_pids(proc_root: &Path) -> Result<(u64, u64), SignalError> {
    let max = read_u64(&proc_root.join("sys/kernel/pid_max"))?;
    let path = proc_root.join("loadavg");
    let text = read(&path)?;
    let tasks = text
        .split_whitespace()
        .nth(3)
        .and_then(|field| field.split_once('/'))
        .and_then(|(_, total)| total.parse().ok())
        .ok_or_else(|| malformed(&path, "no running/total field"))?;
    Ok((max, tasks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pid_max_and_the_task_count_captured_here() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sys/kernel")).unwrap();
        std::fs::write(root.path().join("sys/kernel/pid_max"), "32768\n").unwrap();
        std::fs::write(
            root.path().join("loadavg"),
            include_str!("fixtures/loadavg"),
        )
        .unwrap();
        assert_eq!(read_pids(root.path()).unwrap(), (32768, 81));
        std::fs::write(root.path().join("loadavg"), "0.1 0.2 0.3\n").unwrap();
        assert!(
            read_pids(root.path())
                .unwrap_err()
                .to_string()
                .ends_with("no running/total field")
        );
    }
}
