//! cgroup v2's `memory.events` of the kubepods cgroup, watched with
//! inotify: the kernel touches it on every high, max and oom event.

use crate::signals::SignalFiles;
use std::path::Path;
use tokio::sync::mpsc;

/// Watches a cgroup's `memory.events` and sends a unit on every change until
/// the receiver is dropped. Keep the returned watcher alive while watching.
///
/// # Errors
/// The file cannot be watched.
pub fn watch_memory_events(
    path: &Path,
    changes: mpsc::Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| e.kind.is_modify()) {
            // A full channel already holds a pending wake-up.
            let _ = changes.try_send(());
        }
    })?;
    notify::Watcher::watch(&mut watcher, path, notify::RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Watches the kubepods cgroup's `memory.events` under `files` (cgroup
/// v2), if it can be: none (logged) on cgroup v1 or when it cannot.
pub fn watch_kubepods(
    files: &SignalFiles,
    wakes: mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    let cgroups = files.cgroups();
    let path = cgroups.memory_events(&cgroups.kubepods());
    match watch_memory_events(&path, wakes) {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::info!(path = %path.display(), %error, "memory.events not watched; PSI and the period drive the loop");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn memory_events_changes_wake_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("memory.events");
        std::fs::write(&events, include_str!("../fixtures/v2-memory.events")).unwrap();
        let (send, mut woken) = mpsc::channel(1);
        let _watcher = watch_memory_events(&events, send).unwrap();
        std::fs::write(
            &events,
            "low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
        )
        .unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(10), woken.recv()).await;
        assert_eq!(woke.expect("no wake-up within 10 s"), Some(()));
    }
}
