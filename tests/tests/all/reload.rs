//! Hot reload through the real `notify` watcher on a real directory: every
//! test drives `Reloader::run` and waits on its scan reports (never a sleep),
//! with a timeout so a missed event fails instead of hanging.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use vigil::base::digest::Digest;
use vigil::policy::{CacheOutcome, LoadError, Origin, Registry};
use vigil::policy::{Reloader, ScanReport};
use vigil_tests::*;

/// A running reloader over a temporary policies directory.
struct Agent {
    registry: Arc<Registry>,
    reports: mpsc::UnboundedReceiver<ScanReport>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Agent {
    /// Starts the reloader and waits for its initial scan.
    async fn start(dir: &Path) -> (Self, ScanReport) {
        let (registry, _clock) = registry(None);
        let (send, reports) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let reloader = Reloader::new(Arc::clone(&registry), dir.to_owned());
        let task = tokio::spawn(async move {
            reloader
                .run(async { stopped.await.unwrap_or(()) }, Some(send))
                .await
                .expect("reloader runs");
        });
        let mut agent = Self {
            registry,
            reports,
            stop: Some(stop),
            task,
        };
        let initial = agent.next_report().await;
        (agent, initial)
    }

    async fn next_report(&mut self) -> ScanReport {
        // Generous: a JavaScript component compiles for seconds on a busy machine.
        tokio::time::timeout(Duration::from_secs(120), self.reports.recv())
            .await
            .expect("no scan within 120 s")
            .expect("reloader stopped")
    }

    /// Waits for a scan that satisfies `done`.
    async fn until(&mut self, mut done: impl FnMut(&ScanReport) -> bool) -> ScanReport {
        loop {
            let report = self.next_report().await;
            if done(&report) {
                return report;
            }
        }
    }

    async fn until_loaded(&mut self, name: &str, bytes: &[u8]) {
        let want = (name.to_owned(), Digest::of(bytes));
        self.until(|r| r.loaded.contains(&want)).await;
        assert_eq!(self.registry.get(name).unwrap().digest(), want.1);
    }

    fn sorts(&self, name: &str) -> Vec<String> {
        sort_names(&self.registry, name)
    }

    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap();
    }
}

/// Writes `bytes` to `name` in `dir` the way tools that replace files do:
/// into a temporary file, then renamed over the target.
fn replace_by_rename(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_registered_replaced_and_deregistered_while_running() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, initial) = Agent::start(dir.path()).await;
    assert!(initial.loaded.is_empty() && initial.failed.is_empty());
    assert_eq!(agent.sorts("default-sorter"), ["a", "b", "c"]);

    std::fs::write(dir.path().join("default-sorter.wasm"), REVERSE_SORTER).unwrap();
    agent.until_loaded("default-sorter", REVERSE_SORTER).await;
    assert_eq!(agent.sorts("default-sorter"), ["c", "b", "a"]);

    replace_by_rename(dir.path(), "default-sorter.wasm", FLAKY_SORTER);
    agent.until_loaded("default-sorter", FLAKY_SORTER).await;

    std::fs::write(dir.path().join("extra-sorter.wasm"), REVERSE_SORTER).unwrap();
    agent.until_loaded("extra-sorter", REVERSE_SORTER).await;

    std::fs::remove_file(dir.path().join("default-sorter.wasm")).unwrap();
    std::fs::remove_file(dir.path().join("extra-sorter.wasm")).unwrap();
    // The two deletions may arrive in one scan or in two.
    let mut removed = std::collections::BTreeSet::new();
    agent
        .until(|r| {
            removed.extend(r.removed.iter().cloned());
            removed.len() == 2
        })
        .await;
    let serving = agent.registry.get("default-sorter").unwrap();
    assert_eq!(
        serving.origin(),
        &Origin::Builtin,
        "falls back to the built-in"
    );
    assert!(agent.registry.get("extra-sorter").is_none());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_file_keeps_the_old_version_until_the_write_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, _) = Agent::start(dir.path()).await;
    let path = dir.path().join("default-sorter.wasm");
    std::fs::write(&path, &REVERSE_SORTER[..REVERSE_SORTER.len() / 3]).unwrap();
    agent
        .until(|r| r.failed.iter().any(|(name, _)| name == "default-sorter"))
        .await;
    assert_eq!(
        agent.registry.get("default-sorter").unwrap().origin(),
        &Origin::Builtin
    );
    assert_eq!(agent.sorts("default-sorter"), ["a", "b", "c"]);

    std::fs::write(&path, REVERSE_SORTER).unwrap();
    agent.until_loaded("default-sorter", REVERSE_SORTER).await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editor_leftovers_and_bad_files_never_replace_a_good_policy() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("default-sorter.wasm"), REVERSE_SORTER).unwrap();
    let (mut agent, initial) = Agent::start(dir.path()).await;
    assert_eq!(
        initial.loaded,
        [("default-sorter".to_owned(), Digest::of(REVERSE_SORTER))]
    );

    for leftover in [
        ".default-sorter.wasm.swp",
        "default-sorter.wasm~",
        "#default-sorter.wasm#",
    ] {
        std::fs::write(dir.path().join(leftover), b"garbage").unwrap();
    }
    replace_by_rename(dir.path(), "default-sorter.wasm", TRAP_SORTER);
    let report = agent.until(|r| !r.failed.is_empty()).await;
    assert!(
        matches!(report.failed.as_slice(), [(name, LoadError::Canary(_))] if name == "default-sorter"),
        "{report:?}"
    );
    assert_eq!(
        agent.sorts("default-sorter"),
        ["c", "b", "a"],
        "the good version still answers"
    );
    agent.stop().await;
}

/// A ConfigMap volume written as the kubelet's atomic writer writes it: the
/// keys in a new `..YYYY_MM_DD_HH_MM_SS.N` directory, a `..data_tmp` link
/// to it renamed over `..data`, links `KEY -> ..data/KEY` added for new keys
/// and removed for keys gone, and the old directory removed last.
struct ConfigMapVolume {
    root: std::path::PathBuf,
    keys: Vec<String>,
    generation: u32,
}

impl ConfigMapVolume {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            keys: Vec::new(),
            generation: 0,
        }
    }

    fn publish(&mut self, payload: &[(&str, &[u8])]) {
        let root = &self.root;
        let old = std::fs::read_link(root.join("..data")).ok();
        self.generation += 1;
        let dir = format!(
            "..2026_11_23_10_00_{:02}.{}",
            self.generation,
            418_000_000 + self.generation
        );
        std::fs::create_dir(root.join(&dir)).unwrap();
        for (key, bytes) in payload {
            std::fs::write(root.join(&dir).join(key), bytes).unwrap();
        }
        std::os::unix::fs::symlink(&dir, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let keys: Vec<String> = payload.iter().map(|(k, _)| (*k).to_owned()).collect();
        for key in keys.iter().filter(|k| !self.keys.contains(k)) {
            std::os::unix::fs::symlink(format!("..data/{key}"), root.join(key)).unwrap();
        }
        for key in self.keys.iter().filter(|k| !keys.contains(k)) {
            std::fs::remove_file(root.join(key)).unwrap();
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(root.join(old)).unwrap();
        }
        self.keys = keys;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_volume_is_followed_through_its_life() {
    let dir = tempfile::tempdir().unwrap();
    let mut volume = ConfigMapVolume::new(dir.path());
    volume.publish(&[
        ("default-sorter.wasm", REVERSE_SORTER),
        ("a-sorter.wasm", FLAKY_SORTER),
        ("b-sorter.wasm", FLAKY_SORTER),
    ]);
    let (mut agent, initial) = Agent::start(dir.path()).await;
    assert_eq!(initial.loaded.len(), 3, "{initial:?}");
    let generation = agent.registry.subscribe();
    let before = *generation.borrow();

    // Two keys change, one does not: one change, and no new trial for the third.
    volume.publish(&[
        ("default-sorter.wasm", REVERSE_SORTER),
        ("a-sorter.wasm", CHATTY_SORTER),
        ("b-sorter.wasm", REVERSE_SORTER),
    ]);
    let report = agent.until(|r| !r.loaded.is_empty()).await;
    let loaded: Vec<&str> = report.loaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(loaded, ["a-sorter", "b-sorter"], "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(
        *generation.borrow() - before,
        1,
        "both versions were swapped in together"
    );
    assert_eq!(
        agent.registry.get("a-sorter").unwrap().digest(),
        Digest::of(CHATTY_SORTER)
    );

    // A key removed from the ConfigMap deregisters its policy, and only that.
    volume.publish(&[
        ("default-sorter.wasm", REVERSE_SORTER),
        ("a-sorter.wasm", CHATTY_SORTER),
    ]);
    let report = agent.until(|r| !r.removed.is_empty()).await;
    assert_eq!(report.removed, ["b-sorter"], "{report:?}");
    assert!(
        report.loaded.is_empty() && report.failed.is_empty(),
        "{report:?}"
    );
    assert!(agent.registry.get("b-sorter").is_none());
    assert_eq!(agent.sorts("default-sorter"), ["c", "b", "a"]);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_link_left_pointing_at_nothing_deregisters_without_an_error() {
    // Between the kubelet's `..data` swap and its removal of a dropped key's link.
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("a-sorter.wasm");
    std::fs::write(&link, REVERSE_SORTER).unwrap();
    let (registry, _clock) = registry(None);
    let mut reloader = Reloader::new(Arc::clone(&registry), dir.path().to_owned());
    assert_eq!(reloader.scan().await.loaded.len(), 1);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("..data/a-sorter.wasm", &link).unwrap();
    let report = reloader.scan().await;
    assert_eq!(report.removed, ["a-sorter"], "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(registry.get("a-sorter").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_policy_compiles_while_the_serving_version_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, _) = Agent::start(dir.path()).await;
    let serving = agent.registry.get("default-sorter").unwrap().digest();
    // A caller on its own thread, as the eviction loop's, notes which version
    // answered each call, until the new one answers.
    let answered = Arc::new(Mutex::new(Vec::<Digest>::new()));
    let caller = {
        let (registry, answered) = (Arc::clone(&agent.registry), Arc::clone(&answered));
        std::thread::spawn(move || {
            let candidates = three_candidates();
            loop {
                let policy = registry.get("default-sorter").unwrap();
                let sorted = registry.sorter(&policy).expect("a sorter").sort(
                    &strategies(),
                    &mut candidates.clone(),
                    "{}",
                );
                assert_eq!(
                    order_of(&candidates, &sorted.unwrap().unwrap().order),
                    ["a", "b", "c"]
                );
                answered.lock().unwrap().push(policy.digest());
                if policy.digest() != serving {
                    return;
                }
            }
        })
    };
    while answered.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    let js = example_policy("js-sorter");
    replace_by_rename(dir.path(), "default-sorter.wasm", &js);
    let dropped = answered.lock().unwrap().len();
    agent.until_loaded("default-sorter", &js).await;
    let loaded = answered.lock().unwrap().len();
    tokio::task::spawn_blocking(move || caller.join().unwrap())
        .await
        .unwrap();

    let new = agent.registry.get("default-sorter").unwrap();
    assert_eq!(
        new.cache_outcome(),
        CacheOutcome::Disabled,
        "it was compiled"
    );
    let answered = std::mem::take(&mut *answered.lock().unwrap());
    let during_load = answered[dropped..loaded]
        .iter()
        .filter(|&&d| d == serving)
        .count();
    eprintln!(
        "{during_load} calls answered by the serving version during a {:?} compile",
        new.compile_time()
    );
    assert!(
        during_load >= 100,
        "only {during_load} calls answered during a {:?} compile",
        new.compile_time()
    );
    let switched = answered.iter().position(|&d| d != serving).unwrap();
    assert!(switched >= dropped + during_load);
    assert!(
        answered[switched..].iter().all(|&d| d == new.digest()),
        "once the new version answers, the old one never does again"
    );
    agent.stop().await;
}

/// Resident memory of this process, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib << 10
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The entries a scan refused, with why, by name.
fn refused(report: &ScanReport) -> std::collections::BTreeMap<String, String> {
    report
        .failed
        .iter()
        .map(|(name, error)| (name.clone(), error.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_devices_huge_sparse_files_and_directories_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    mkfifo(&path("fifo.wasm"));
    std::os::unix::fs::symlink("/dev/zero", path("zero.wasm")).unwrap();
    std::fs::File::create(path("sparse.wasm"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    std::fs::create_dir(path("folder.wasm")).unwrap();
    std::fs::write(path("extra-sorter.wasm"), REVERSE_SORTER).unwrap();
    let before = rss_bytes();

    let (agent, initial) = Agent::start(dir.path()).await;
    let loaded: Vec<_> = initial.loaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        loaded,
        ["extra-sorter"],
        "the good policy beside them loads"
    );
    let refused = refused(&initial);
    let expect = |name: &str, what: &str| {
        let why = &refused[name];
        assert!(why.contains(what), "{name}: {why}");
    };
    expect("fifo", "is a FIFO, not a regular file");
    expect("zero", "is a character device, not a regular file");
    expect("folder", "is a directory, not a regular file");
    expect("sparse", "is 1073741824 bytes, over the 33554432-byte cap");
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 256 << 20, "RSS grew by {} MiB", grown >> 20);
    assert_eq!(agent.sorts("extra-sorter"), ["c", "b", "a"]);
    agent.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_bad_entry_is_reported_once_until_it_changes() {
    let logs = CapturedLogs::default();
    let _guard = tracing::subscriber::set_default(logs.subscriber());
    let dir = tempfile::tempdir().unwrap();
    let entry = dir.path().join("x.wasm");
    std::fs::create_dir(&entry).unwrap();
    let (mut agent, initial) = Agent::start(dir.path()).await;
    assert!(refused(&initial).contains_key("x"));
    for i in 0..3 {
        std::fs::write(dir.path().join(format!("note-{i}.txt")), "n").unwrap();
        let report = agent.next_report().await;
        assert!(refused(&report).contains_key("x"), "still refused");
    }
    assert_eq!(logs.text().matches("is a directory").count(), 1);

    std::fs::remove_dir(&entry).unwrap();
    mkfifo(&entry);
    agent
        .until(|r| refused(r).get("x").is_some_and(|why| why.contains("FIFO")))
        .await;
    assert_eq!(logs.text().matches("is a FIFO").count(), 1);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_and_recreated_directory_is_watched_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("policies");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("old-sorter.wasm"), REVERSE_SORTER).unwrap();
    let (mut agent, initial) = Agent::start(&dir).await;
    assert_eq!(initial.loaded.len(), 1);

    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("new-sorter.wasm"), REVERSE_SORTER).unwrap();
    let (mut removed, mut loaded) = (false, false);
    agent
        .until(|r| {
            removed |= r.removed.iter().any(|n| n == "old-sorter");
            loaded |= r.loaded.iter().any(|(n, _)| n == "new-sorter");
            removed && loaded
        })
        .await;
    assert!(agent.registry.get("old-sorter").is_none());

    // The new directory is watched: a file added to it is picked up.
    std::fs::write(dir.join("third-sorter.wasm"), REVERSE_SORTER).unwrap();
    agent.until_loaded("third-sorter", REVERSE_SORTER).await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_evicts_past_a_hostile_policies_directory_and_a_sleeping_sorter() {
    use std::os::unix::fs::DirBuilderExt;
    use vigil::base::digest::Digest;
    use vigil_testbed::{ApiServer, NodeFiles, objects};
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node("node-1"));
    let files = NodeFiles::default();
    let pod = objects::best_effort_pod("node-1", "shop", TRIGGER, 3);
    files.best_effort_pod(pod["metadata"]["uid"].as_str().unwrap(), 900);
    server.put("pods", "shop", pod);
    files.write("kubeconfig", &server.kubeconfig());
    files.write(
        "config.yaml",
        "evictionPeriodSeconds: 1\npolicies:\n  memory-pressure:\n    config: {hard: 500Mi}\n  disk-pressure: {enabled: false}\n",
    );
    // The sorter sleeps through WASI whenever it sees the pod: it serves from
    // the start, as the last-known-good, and from the policies directory.
    let policies = files.path("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("default-sorter.wasm"), SLEEPY_SORTER).unwrap();
    let lkg = files.path("state/lkg");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&lkg)
        .unwrap();
    let saved = format!("default-sorter@{}.wasm", Digest::of(SLEEPY_SORTER).hex());
    std::fs::write(lkg.join(saved), SLEEPY_SORTER).unwrap();
    mkfifo(&policies.join("fifo.wasm"));
    std::os::unix::fs::symlink("/dev/zero", policies.join("zero.wasm")).unwrap();
    std::fs::File::create(policies.join("sparse.wasm"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    std::fs::create_dir(policies.join("folder.wasm")).unwrap();
    files.memory_available(50);
    let before = rss_bytes();

    let config = agent_config(&files);
    let agent = InProcessAgent::start(config);
    server
        .until(Duration::from_secs(60), "the pod is evicted", |s| {
            !s.evictions().is_empty()
        })
        .await;
    assert!(
        server.evictions()[0]
            .uri
            .ends_with(&format!("/pods/{TRIGGER}/eviction"))
    );
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 256 << 20, "RSS grew by {} MiB", grown >> 20);
    agent.stop().await;
}
