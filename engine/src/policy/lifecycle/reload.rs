//! Hot reload of the policies directory.
//!
//! A `notify` watcher only signals "something changed" (our own reads, which
//! inotify reports as opens, are not changes); one loop ([`Reloader::run`])
//! waits for the changes to settle, then [`Reloader::scan`]s the directory:
//! new or changed `*.wasm` files are loaded and canaried on a blocking thread
//! (a JS or Python component compiles for seconds while the serving version
//! keeps answering); then what loaded is swapped in and deleted ones are
//! deregistered, together: one scan is one change of the serving set. The same
//! loop graduates versions whose trial is over, and notices a directory that
//! vanished or was replaced (deleted and created again, or a new mount): it
//! watches the new one and rescans; while it is gone, what serves serves on.
//!
//! A ConfigMap volume is followed through its whole life: the kubelet
//! writes a new timestamped directory, swaps the `..data` link to it, and
//! adds or removes the per-key links (`NAME.wasm -> ..data/NAME.wasm`). A
//! key removed deregisters its policy; keys whose bytes did not change are
//! not loaded again (no new trial); keys changed by one swap are swapped in
//! as one change.
//!
//! Policies pulled from a registry ([`crate::distribution`]) are linked into
//! a second directory the agent alone writes ([`Reloader::with_pulled`]),
//! watched and scanned with the first: a name found in both serves the
//! pulled one, and the shadowed file is logged once.
//!
//! What counts as a policy file: `NAME.wasm`, read through symlinks, as
//! untrusted input (see
//! [`crate::policy::artifacts::files`]): only regular files, opened without blocking, at most
//! the size cap. Hidden files (`.x.wasm`, `..data`), editor leftovers
//! (`x.wasm~`, `#x.wasm#`) and anything else are ignored. A half-written file
//! fails to load and leaves the serving version alone; the write that
//! completes it triggers another scan. A file that did not change since the
//! last scan (same inode, size and times) is not read again, and a problem
//! with an entry is logged once, until it changes.

use crate::base::digest::{Digest, WasmBytes};
use crate::base::policy_name::PolicyName;
use crate::base::report::Chain;
use crate::policy::artifacts::files::{self, DEFAULT_MAX_POLICY_BYTES, Stamp};
use crate::policy::{Collected, LoadError, Origin, Registry};
use notify::{EventKind, RecommendedWatcher, Watcher};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;

/// How long the directory must be quiet before a scan.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(25);
/// How often trials are checked for graduation and the directory's identity
/// is checked.
pub(crate) const GRADUATION_PERIOD: Duration = Duration::from_secs(1);

/// Why the reloader cannot run.
#[derive(Debug, Error)]
pub enum ReloadError {
    /// The watcher cannot be created.
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
    /// What the cache's garbage collection removed after the scan, if the
    /// reloader collects garbage.
    pub collected: Option<Collected>,
}

/// What is known of one policy file from earlier scans.
#[derive(Debug, Clone, Copy)]
struct Seen {
    stamp: Stamp,
    digest: Digest,
}

/// Keeps the registry in step with the policies directory.
#[derive(Debug)]
pub struct Reloader {
    registry: Arc<Registry>,
    dir: PathBuf,
    /// The pulled policies' directory, which overrides `dir`.
    pulled: Option<PathBuf>,
    /// The names shadowed at the last scan, so each is logged once.
    shadowed: BTreeSet<String>,
    max_file_bytes: u64,
    /// The file and digest last tried for each name, so unchanged files are
    /// neither read nor loaded again.
    tried: HashMap<String, Seen>,
    /// The problem last logged for each entry (or `""` for the directory
    /// itself), so each is logged once per change.
    problems: HashMap<String, String>,
    /// Whether scans and graduations collect the cache's garbage.
    collects_garbage: bool,
}

/// A policy file found: its policy's name and its path.
type PolicyFile = (String, PathBuf);

/// Which directory a path names right now: device and inode.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|m| (m.dev(), m.ino()))
}

/// One policy file as found by a scan: its bytes if they are new.
enum Found {
    Unchanged,
    New(Stamp, WasmBytes),
}

impl Reloader {
    /// A reloader for `dir` feeding `registry`, with the default cap on
    /// policy file size.
    pub fn new(registry: Arc<Registry>, dir: PathBuf) -> Self {
        Self {
            registry,
            dir,
            pulled: None,
            shadowed: BTreeSet::new(),
            max_file_bytes: DEFAULT_MAX_POLICY_BYTES,
            tried: HashMap::new(),
            problems: HashMap::new(),
            collects_garbage: false,
        }
    }

    /// After each scan and each graduation, removes from the cache the
    /// artifacts of versions the registry no longer holds. Only for a cache
    /// the registry owns (the agent's), never one shared with other
    /// processes. A compile running beside it (a version loaded for
    /// shadow) keeps its half-written file: only a dead writer's goes.
    #[must_use]
    pub fn collecting_garbage(mut self) -> Self {
        self.collects_garbage = true;
        self
    }

    /// Collects the cache's garbage, if this reloader does.
    async fn collect_garbage(&self) -> Option<Collected> {
        if !self.collects_garbage {
            return None;
        }
        let registry = Arc::clone(&self.registry);
        let result = tokio::task::spawn_blocking(move || registry.collect_garbage())
            .await
            .expect("garbage collection panicked")?;
        match result {
            Ok(collected) => {
                if collected.files > 0 {
                    tracing::info!(
                        files = collected.files,
                        bytes = collected.bytes,
                        "removed precompiled artifacts no version needs"
                    );
                }
                Some(collected)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot collect the artifact cache's garbage");
                None
            }
        }
    }

    /// Also serves the policies linked in `dir` (pulled from a registry),
    /// over those of the same name in the policies directory.
    #[must_use]
    pub fn with_pulled(mut self, dir: PathBuf) -> Self {
        self.pulled = Some(dir);
        self
    }

    /// The policy files of the policies directory and, over them, of the
    /// pulled directory, by name; and the names the second shadows.
    fn list_all(
        dir: &Path,
        pulled: Option<&Path>,
    ) -> std::io::Result<(Vec<PolicyFile>, Vec<String>)> {
        let mut files: BTreeMap<String, PathBuf> = Self::list(dir)?.into_iter().collect();
        let mut shadowed = Vec::new();
        for (name, path) in pulled.map(Self::list).transpose()?.into_iter().flatten() {
            if files.insert(name.clone(), path).is_some() {
                shadowed.push(name);
            }
        }
        Ok((files.into_iter().collect(), shadowed))
    }

    /// Refuses policy files larger than `bytes`.
    #[must_use]
    pub fn max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// The policy files in the directory, by name. A link to nothing is no
    /// file (the kubelet removes a key's link just after `..data` moved on).
    fn list(dir: &Path) -> std::io::Result<Vec<PolicyFile>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let dangling = || {
                std::fs::metadata(entry.path())
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            };
            if let Some(name) = entry.file_name().to_str().and_then(PolicyName::of_file)
                && !dangling()
            {
                found.push((name.into(), entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Logs `problem` with `entry` unless it is the one logged last time;
    /// `None` clears it. Returns whether it was logged.
    fn note(&mut self, entry: &str, problem: Option<String>) -> bool {
        match problem {
            Some(problem) if self.problems.get(entry) != Some(&problem) => {
                self.problems.insert(entry.to_owned(), problem);
                true
            }
            Some(_) => false,
            None => {
                self.problems.remove(entry);
                false
            }
        }
    }

    /// Brings the registry in step with the directory once.
    pub async fn scan(&mut self) -> ScanReport {
        let mut report = ScanReport::default();
        let (dir, pulled) = (self.dir.clone(), self.pulled.clone());
        let files = match tokio::task::spawn_blocking(move || {
            Self::list_all(&dir, pulled.as_deref())
        })
        .await
        .expect("listing panicked")
        {
            Ok((files, shadowed)) => {
                self.note("", None);
                self.report_shadowed(shadowed);
                files
            }
            Err(error) => {
                if self.note("", Some(error.to_string())) {
                    tracing::error!(dir = %self.dir.display(), %error, "cannot list the policies directory; keeping what serves");
                }
                return report;
            }
        };
        let present: BTreeSet<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        self.problems
            .retain(|entry, _| entry.is_empty() || present.contains(entry.as_str()));
        let serving: BTreeSet<String> = self.registry.file_backed().into_iter().collect();
        let gone: BTreeSet<String> = serving
            .iter()
            .chain(self.tried.keys())
            .filter(|name| !present.contains(name.as_str()))
            .cloned()
            .collect();
        for name in &gone {
            self.tried.remove(name);
        }
        report.removed = gone.into_iter().filter(|n| serving.contains(n)).collect();
        let mut installs = Vec::new();
        for (name, path) in files {
            if let Some(policy) = self.load(name, path, &mut report).await {
                installs.push(policy);
            }
        }
        self.registry.apply(installs, &report.removed);
        report.collected = self.collect_garbage().await;
        report
    }

    /// Logs the names newly shadowed by a pulled policy.
    fn report_shadowed(&mut self, shadowed: Vec<String>) {
        for name in &shadowed {
            if !self.shadowed.contains(name) {
                tracing::warn!(policy = %name, dir = %self.dir.display(), "a VigilPolicy and the policies directory both define this policy; serving the VigilPolicy's");
            }
        }
        self.shadowed = shadowed.into_iter().collect();
    }

    /// Reads `path` unless the file is the one tried last time.
    async fn read(&self, name: &str, path: &Path) -> Result<Found, LoadError> {
        let known = self.tried.get(name).map(|seen| seen.stamp);
        let max = self.max_file_bytes;
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || {
            let (file, stamp) = files::open(&path, max)?;
            if known == Some(stamp) {
                return Ok(Found::Unchanged);
            }
            let bytes = files::read(&path, file, max)?;
            Ok(Found::New(stamp, WasmBytes::from(bytes)))
        })
        .await
        .expect("reading a policy file panicked")
    }

    /// Prepares one file if its bytes are new, recording the outcome in `report`.
    async fn load(
        &mut self,
        name: String,
        path: PathBuf,
        report: &mut ScanReport,
    ) -> Option<Arc<crate::policy::Policy>> {
        let (stamp, bytes) = match self.read(&name, &path).await {
            Ok(Found::Unchanged) => return None,
            Ok(Found::New(stamp, bytes)) => (stamp, bytes),
            Err(error) => {
                if self.note(&name, Some(Chain(&error).to_string())) {
                    tracing::error!(policy = name, error = %Chain(&error), "cannot read policy file; keeping what serves");
                    self.registry.refuse(&name, None, Chain(&error).to_string());
                }
                self.tried.remove(&name);
                report.failed.push((name, error));
                return None;
            }
        };
        self.note(&name, None);
        let digest = bytes.digest();
        let registry = Arc::clone(&self.registry);
        let serving = registry.get(&name).map(|p| p.digest());
        let before = self.tried.insert(name.clone(), Seen { stamp, digest });
        if serving == Some(digest) {
            self.registry.forget_refusal(&name);
            return None;
        }
        if before.map(|seen| seen.digest) == Some(digest) {
            return None;
        }
        let task_name = name.clone();
        let prepared = tokio::task::spawn_blocking(move || {
            registry.prepare(&task_name, bytes, Origin::File(path))
        })
        .await
        .expect("policy load panicked");
        match prepared {
            Ok(policy) => {
                report.loaded.push((name, digest));
                Some(policy)
            }
            Err(error) => {
                tracing::error!(policy = %format!("{name}@{digest}"), error = %Chain(&error), "policy file rejected; keeping what serves");
                report.failed.push((name, error));
                None
            }
        }
    }

    /// Watches the directory as it is now; `None` if it cannot (gone).
    fn watch(&mut self, watcher: &mut RecommendedWatcher) -> Option<(u64, u64)> {
        let identity = identity(&self.dir)?;
        let _ = watcher.unwatch(&self.dir);
        match watcher.watch(&self.dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => Some(identity),
            Err(error) => {
                if self.note("", Some(error.to_string())) {
                    tracing::error!(dir = %self.dir.display(), %error, "cannot watch the policies directory; keeping what serves");
                }
                None
            }
        }
    }

    /// A watcher of the policies directory: a signal on `changes` after
    /// anything in it changed, and `itself` set when the directory itself
    /// was.
    fn watcher(
        &self,
    ) -> Result<(RecommendedWatcher, mpsc::Receiver<()>, Arc<AtomicBool>), ReloadError> {
        let (signal, changes) = mpsc::channel::<()>(1);
        let itself = Arc::new(AtomicBool::new(false));
        let (dir, flag) = (self.dir.clone(), Arc::clone(&itself));
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if !is_change(&event) {
                return;
            }
            if event.paths.contains(&dir) {
                flag.store(true, Ordering::Relaxed);
            }
            // A full channel already holds a pending signal; that is enough.
            let _ = signal.try_send(());
        })
        .map_err(|source| ReloadError::Watch {
            dir: self.dir.clone(),
            source,
        })?;
        Ok((watcher, changes, itself))
    }

    /// Watches the policies directory again after it was replaced or went
    /// away, saying which; answers the identity of the one watched, if any.
    fn rewatch(&mut self, watcher: &mut RecommendedWatcher) -> Option<(u64, u64)> {
        let watched = self.watch(watcher);
        match watched {
            Some(_) => {
                tracing::warn!(dir = %self.dir.display(), "the policies directory was replaced; watching the new one");
            }
            None => {
                if self.note("", Some("gone".into())) {
                    tracing::error!(dir = %self.dir.display(), "the policies directory is gone; serving what was loaded until it comes back");
                }
            }
        }
        watched
    }

    /// Scans once, then watches the directory until `shutdown` resolves,
    /// sending each scan's report to `reports` (if given). A scan under way
    /// when `shutdown` resolves is abandoned (a compile on a blocking thread
    /// runs to its end, but nothing waits for it).
    ///
    /// # Errors
    /// The watcher cannot be created.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
        reports: Option<mpsc::UnboundedSender<ScanReport>>,
    ) -> Result<(), ReloadError> {
        let (mut watcher, mut changes, itself) = self.watcher()?;
        let mut watched = self.watch(&mut watcher);
        if let Some(pulled) = &self.pulled
            && let Err(error) = watcher.watch(pulled, notify::RecursiveMode::NonRecursive)
        {
            tracing::error!(dir = %pulled.display(), %error, "cannot watch the pulled policies' directory; it is read at each scan of the policies directory");
        }
        let send = |report: ScanReport| {
            if let Some(reports) = &reports {
                let _ = reports.send(report);
            }
        };
        tokio::pin!(shutdown);
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            report = self.scan() => send(report),
        }
        let mut graduation = tokio::time::interval(GRADUATION_PERIOD);
        loop {
            let changed = tokio::select! {
                () = &mut shutdown => return Ok(()),
                _ = graduation.tick() => {
                    if !self.registry.graduate_due().is_empty() {
                        // The versions they replaced are no one's fallback now.
                        self.collect_garbage().await;
                    }
                    false
                }
                signal = changes.recv() => {
                    if signal.is_none() {
                        return Ok(());
                    }
                    settle(&mut changes).await;
                    true
                }
            };
            // The directory itself was deleted or moved (its inode may be
            // reused by a new one at once), or it changed under our watch.
            if itself.swap(false, Ordering::Relaxed) {
                watched = None;
            }
            let replaced = identity(&self.dir) != watched;
            if replaced {
                watched = self.rewatch(&mut watcher);
            }
            if changed || (replaced && watched.is_some()) {
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    report = self.scan() => send(report),
                }
            }
        }
    }
}

/// Whether `event` may have changed what the directory holds: a file closed
/// after writing did; our own reads (opens and closes, which inotify reports
/// too) did not, and must not trigger the scan that reads again.
fn is_change(event: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Waits until no change has been signalled for [`DEBOUNCE`].
async fn settle(changes: &mut mpsc::Receiver<()>) {
    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, changes.recv()).await {}
}

#[cfg(test)]
mod tests {
    use super::{EventKind, is_change};
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};

    #[test]
    fn our_own_reads_are_not_changes() {
        let event = |kind| notify::Event::new(kind);
        assert!(!is_change(&event(EventKind::Access(AccessKind::Open(
            AccessMode::Read
        )))));
        assert!(!is_change(&event(EventKind::Access(AccessKind::Close(
            AccessMode::Read
        )))));
        assert!(is_change(&event(EventKind::Create(CreateKind::File))));
        assert!(is_change(&event(EventKind::Modify(ModifyKind::Any))));
        assert!(is_change(&event(EventKind::Access(AccessKind::Close(
            AccessMode::Write
        )))));
    }
}
