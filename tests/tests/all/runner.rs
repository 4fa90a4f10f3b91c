//! The live eviction loop on paused tokio time: a signal event starts a cycle
//! at once, the period keeps cycles coming, and shutdown ends the loop.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use vigil::eviction::{CycleReport, EvictionManager, EvictionSettings, NodeState};
use vigil::eviction::{Heartbeat, LoopReport, NodeSource, Runner};
use vigil::model::{Pod, Signal};
use vigil::signals::wake::MemoryLine;
use vigil_tests::{RecordingKiller, registry};

/// The node as the test sets it.
struct Shared(Arc<Mutex<NodeState>>);

impl NodeSource for Shared {
    fn observe(&mut self) -> NodeState {
        self.0.lock().unwrap().clone()
    }
}

fn node(available_mib: u64) -> NodeState {
    let hog: Pod = vigil::model::fixture::pod("hog").usage_mib(600).build();
    let signal = Signal {
        name: "memory.available".into(),
        value: (available_mib << 20) as f64,
        capacity: Some((8192u64 << 20) as f64),
    };
    NodeState {
        signals: vec![signal],
        pods: vec![hog],
        ..NodeState::default()
    }
}

/// The next cycle's report (eviction outcomes in between are skipped).
async fn next(reports: &mut broadcast::Receiver<Arc<LoopReport>>) -> CycleReport {
    loop {
        match reports.recv().await.expect("the loop is running").as_ref() {
            LoopReport::Cycle(report, _) => return report.as_ref().clone(),
            LoopReport::Settled { .. } => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_signal_event_starts_a_cycle_at_once_and_the_period_keeps_them_coming() {
    let (registry, clock) = registry(None);
    let killer = Arc::new(RecordingKiller::default());
    let manager = EvictionManager::new(registry, EvictionSettings::default());
    let state = Arc::new(Mutex::new(node(4096)));
    let (wake, wakes) = mpsc::channel(1);
    let (send_report, mut reports) = broadcast::channel(64);
    let (stop, stopped) = oneshot::channel::<()>();
    let source = Shared(Arc::clone(&state));
    let shutdown = async { stopped.await.unwrap_or(()) };
    let line = MemoryLine::default();
    let runner = Runner {
        manager,
        clock,
        killer: killer.clone(),
        wakes,
        memory_line: Some(line.clone()),
        reports: Some(send_report),
        heartbeat: Heartbeat::default(),
        settings: None,
    };
    let task = tokio::spawn(runner.run(source, shutdown));

    let start = Instant::now();
    let calm = next(&mut reports).await;
    assert!(calm.requested.is_empty(), "calm at first");
    let highest = (calm.reported.iter())
        .filter(|(_, t)| t.signal == "memory.available")
        .map(|(_, t)| t.threshold as u64)
        .max();
    assert!(highest.is_some(), "{calm:?}");
    assert_eq!(line.get(), highest, "the runner set the memory line itself");
    *state.lock().unwrap() = node(50);
    wake.send(()).await.unwrap();
    let woken = next(&mut reports).await;
    assert_eq!(woken.requested.len(), 1, "{woken:?}");
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the event did not wait for the period"
    );

    // With no event source left, the 5 s period alone drives the loop.
    drop(wake);
    next(&mut reports).await;
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    next(&mut reports).await;
    assert_eq!(start.elapsed(), Duration::from_secs(10));

    stop.send(()).unwrap();
    task.await.unwrap();
    assert_eq!(
        killer.evicted().len(),
        1,
        "the terminating pod was not picked twice"
    );
}

#[test]
fn polled_stall_growth_is_forwarded_as_wakes_until_the_loop_goes_away() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use vigil::signals::wake::forward_wakes;
    use vigil::signals::wake::{TriggerSettings, Wake};
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("memory");
    let write = move |total: u64| {
        let text = format!(
            "some avg10=50.00 avg60=10.00 avg300=1.00 total={total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        );
        let temp = target.with_extension("tmp");
        std::fs::write(&temp, text).unwrap();
        std::fs::rename(&temp, &target).unwrap();
    };
    write(0);
    let file = dir.path().join("memory");
    let settings = TriggerSettings {
        poll_interval: Duration::from_millis(10),
        ..TriggerSettings::default()
    };
    let poll = Wake::poll(&file, &settings, "the test polls".into());
    // Tasks stall on memory all the time: 200 ms more every 5 ms.
    let stalling = Arc::new(AtomicBool::new(true));
    let stall = {
        let stalling = Arc::clone(&stalling);
        let write = write.clone();
        std::thread::spawn(move || {
            let mut total = 0;
            while stalling.load(Ordering::Relaxed) {
                total += 200_000;
                write(total);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let (wake, mut wakes) = mpsc::channel(1);
    let thread = forward_wakes(poll, Duration::from_secs(5), wake);
    assert_eq!(
        wakes.blocking_recv(),
        Some(()),
        "stall growth wakes the loop"
    );
    assert_eq!(wakes.blocking_recv(), Some(()));
    drop(wakes);
    thread
        .join()
        .expect("the wake thread ends once nobody listens");
    stalling.store(false, Ordering::Relaxed);
    stall.join().unwrap();
}

/// A runner on `state` with `killer`, its reports and a way to stop it.
fn start(
    killer: Arc<dyn vigil::eviction::Killer>,
    state: NodeState,
) -> (
    broadcast::Receiver<Arc<LoopReport>>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
    mpsc::Sender<()>,
) {
    let (registry, clock) = registry(None);
    let manager = EvictionManager::new(registry, EvictionSettings::default());
    let (wake, wakes) = mpsc::channel(1);
    let (send_report, reports) = broadcast::channel(256);
    let (stop, stopped) = oneshot::channel::<()>();
    let source = Shared(Arc::new(Mutex::new(state)));
    let runner = Runner {
        manager,
        clock,
        killer,
        wakes,
        memory_line: None,
        reports: Some(send_report),
        heartbeat: Heartbeat::default(),
        settings: None,
    };
    let shutdown = async { stopped.await.unwrap_or(()) };
    (
        reports,
        stop,
        tokio::spawn(runner.run(source, shutdown)),
        wake,
    )
}

/// A node under hard pressure with `n` pods, each a candidate.
fn crowded(n: usize) -> NodeState {
    let mut state = node(50);
    state.pods = (0..n)
        .map(|i| {
            let mut pod: Pod = vigil::model::fixture::pod("p")
                .usage_mib(100 + i as u64)
                .build();
            pod.name = format!("p{i}");
            pod.uid = format!("uid-p{i}");
            pod
        })
        .collect();
    state
}

#[tokio::test(start_paused = true)]
async fn refusals_in_a_row_start_a_few_cycles_at_once_then_wait_their_turn() {
    use vigil::testing::RECYCLE_BURST;
    let killer = Arc::new(RecordingKiller::default());
    killer.protect_all();
    let (mut reports, stop, task, _wake) = start(killer.clone(), crowded(20));
    // Every refusal is a report; count the calls made before time moves.
    let start = Instant::now();
    let mut asked = Vec::new();
    loop {
        let report = reports.recv().await.expect("the loop runs");
        if !start.elapsed().is_zero() {
            break;
        }
        if let LoopReport::Settled { settled, .. } = report.as_ref() {
            asked.push(settled.result().0.pod.name.clone());
        }
    }
    assert_eq!(
        asked.len(),
        1 + RECYCLE_BURST as usize,
        "the first call, then one cycle per token: {asked:?}"
    );
    stop.send(()).unwrap();
    task.await.unwrap();
}

/// A killer whose first call panics and whose later calls succeed.
#[derive(Default)]
struct PanicsOnce {
    calls: std::sync::atomic::AtomicUsize,
}

impl vigil::eviction::Killer for PanicsOnce {
    fn evict(
        &self,
        _: &vigil::eviction::Victim,
    ) -> futures::future::BoxFuture<'static, Result<(), vigil::eviction::KillError>> {
        let first = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        Box::pin(async move {
            assert!(!first, "the killer's first call panics");
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_kill_call_that_panics_settles_its_victim_and_frees_its_slot() {
    let killer = Arc::new(PanicsOnce::default());
    let (mut reports, stop, task, _wake) = start(killer.clone(), node(50));
    let mut results = Vec::new();
    while results.len() < 2 {
        if let LoopReport::Settled { settled, .. } =
            reports.recv().await.expect("the loop runs").as_ref()
        {
            let (victim, result) = settled.result();
            results.push((victim.pod.name.clone(), result));
        }
    }
    assert_eq!(
        results,
        [("hog".to_owned(), "failed"), ("hog".to_owned(), "accepted")],
        "the victim waits again and is evicted by the next call"
    );
    stop.send(()).unwrap();
    task.await.unwrap();
}
