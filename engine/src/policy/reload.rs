//! Hot reload of the policies directory.
//!
//! A `notify` watcher only signals "something changed"; one loop
//! ([`Reloader::run`]) waits for the changes to settle, then [`Reloader::scan`]s
//! the directory: new or changed `*.wasm` files are loaded and canaried on a
//! blocking thread (a JS or Python component compiles for seconds while the
//! serving version keeps answering) and swapped in; deleted ones are
//! deregistered. The same loop graduates versions whose trial is over.
//!
//! What counts as a policy file: `NAME.wasm`, read through symlinks (so a
//! ConfigMap's swapped `..data` link works). Hidden files (`.x.wasm`,
//! `..data`), editor leftovers (`x.wasm~`, `#x.wasm#`) and anything else are
//! ignored. A half-written file fails to load and leaves the serving version
//! alone; the write that completes it triggers another scan.

use super::{Digest, LoadError, Registry, Source, WasmBytes};
use crate::report::Chain;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;

/// How long the directory must be quiet before a scan.
pub const DEBOUNCE: Duration = Duration::from_millis(25);
/// How often trials are checked for graduation.
pub const GRADUATION_PERIOD: Duration = Duration::from_secs(1);

/// Why the reloader cannot run.
#[derive(Debug, Error)]
pub enum ReloadError {
    /// The policies directory cannot be watched (missing, or no permission).
    #[error("cannot watch the policies directory {dir}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// The watcher's error.
        #[source]
        source: notify::Error,
    },
}

/// What one scan did.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// Versions swapped in, by name.
    pub loaded: Vec<(String, Digest)>,
    /// Files that did not load; what served before still serves.
    pub failed: Vec<(String, LoadError)>,
    /// Policies deregistered because their file is gone.
    pub removed: Vec<String>,
}

/// Keeps the registry in step with the policies directory.
#[derive(Debug)]
pub struct Reloader {
    registry: Arc<Registry>,
    dir: PathBuf,
    /// The digest last tried for each name, so unchanged files are not reloaded.
    tried: HashMap<String, Digest>,
}

/// The policy name of a directory entry, if it is a policy file.
fn policy_name(file_name: &str) -> Option<&str> {
    let stem = file_name.strip_suffix(".wasm")?;
    let plain =
        !stem.is_empty() && !stem.starts_with(['.', '#']) && !stem.contains(['@', '~', '/']);
    plain.then_some(stem)
}

impl Reloader {
    /// A reloader for `dir` feeding `registry`.
    pub fn new(registry: Arc<Registry>, dir: PathBuf) -> Self {
        Self {
            registry,
            dir,
            tried: HashMap::new(),
        }
    }

    /// The policy files in the directory, by name.
    fn list(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str().and_then(policy_name) {
                found.push((name.to_owned(), entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Brings the registry in step with the directory once.
    pub async fn scan(&mut self) -> ScanReport {
        let mut report = ScanReport::default();
        let dir = self.dir.clone();
        let files = match tokio::task::spawn_blocking(move || Self::list(&dir))
            .await
            .expect("listing panicked")
        {
            Ok(files) => files,
            Err(error) => {
                tracing::error!(dir = %self.dir.display(), %error, "cannot list the policies directory; keeping what serves");
                return report;
            }
        };
        let present: BTreeSet<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        let gone: BTreeSet<String> = self
            .registry
            .file_backed()
            .into_iter()
            .chain(self.tried.keys().cloned())
            .filter(|name| !present.contains(name.as_str()))
            .collect();
        for name in gone {
            self.tried.remove(&name);
            self.registry.remove(&name);
            report.removed.push(name);
        }
        for (name, path) in files {
            self.load(name, path, &mut report).await;
        }
        report
    }

    /// Loads one file if its bytes are new, recording the outcome in `report`.
    async fn load(&mut self, name: String, path: PathBuf, report: &mut ScanReport) {
        let registry = Arc::clone(&self.registry);
        let read_path = path.clone();
        let bytes = match tokio::task::spawn_blocking(move || std::fs::read(&read_path))
            .await
            .expect("read panicked")
        {
            Ok(bytes) => WasmBytes::from(bytes),
            Err(source) => {
                let error = LoadError::Read { path, source };
                tracing::error!(policy = name, error = %Chain(&error), "cannot read policy file; keeping what serves");
                report.failed.push((name, error));
                return;
            }
        };
        let digest = bytes.digest();
        let serving = registry.get(&name).map(|p| p.digest());
        if self.tried.insert(name.clone(), digest) == Some(digest) || serving == Some(digest) {
            return;
        }
        let task_name = name.clone();
        let prepared = tokio::task::spawn_blocking(move || {
            registry.prepare(&task_name, bytes, Source::File(path))
        })
        .await
        .expect("policy load panicked");
        match prepared {
            Ok(policy) => {
                self.registry.install(policy);
                report.loaded.push((name, digest));
            }
            Err(error) => {
                tracing::error!(policy = %format!("{name}@{digest}"), error = %Chain(&error), "policy file rejected; keeping what serves");
                report.failed.push((name, error));
            }
        }
    }

    /// Scans once, then watches the directory until `shutdown` resolves,
    /// sending each scan's report to `reports` (if given).
    ///
    /// # Errors
    /// The directory cannot be watched.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
        reports: Option<mpsc::UnboundedSender<ScanReport>>,
    ) -> Result<(), ReloadError> {
        let (signal, mut changes) = mpsc::channel::<()>(1);
        let mut watcher =
            notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
                // A full channel already holds a pending signal; that is enough.
                let _ = signal.try_send(());
            })
            .map_err(|source| ReloadError::Watch {
                dir: self.dir.clone(),
                source,
            })?;
        notify::Watcher::watch(&mut watcher, &self.dir, notify::RecursiveMode::NonRecursive)
            .map_err(|source| ReloadError::Watch {
                dir: self.dir.clone(),
                source,
            })?;
        let send = |report: ScanReport| {
            if let Some(reports) = &reports {
                let _ = reports.send(report);
            }
        };
        send(self.scan().await);
        let mut graduation = tokio::time::interval(GRADUATION_PERIOD);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                _ = graduation.tick() => {
                    self.registry.graduate_due();
                }
                signal = changes.recv() => {
                    if signal.is_none() {
                        return Ok(());
                    }
                    settle(&mut changes).await;
                    send(self.scan().await);
                }
            }
        }
    }
}

/// Waits until no change has been signalled for [`DEBOUNCE`].
async fn settle(changes: &mut mpsc::Receiver<()>) {
    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, changes.recv()).await {}
}

#[cfg(test)]
mod tests {
    use super::policy_name;

    #[test]
    fn only_plain_wasm_files_are_policies() {
        assert_eq!(policy_name("memory-pressure.wasm"), Some("memory-pressure"));
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
            assert_eq!(policy_name(ignored), None, "{ignored}");
        }
    }
}
