//! The live eviction loop on paused tokio time: a signal event starts a cycle
//! at once, the period keeps cycles coming, and shutdown ends the loop.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use vigil::eviction::runner::{Heartbeat, NodeSource, Report, Runner};
use vigil::eviction::{CycleReport, EvictionManager, EvictionSettings, NodeState};
use vigil::model::{Pod, QosClass, Resources, Signal, Usage};
use vigil_tests::{RecordingKiller, registry};

/// The node as the test sets it.
struct Shared(Arc<Mutex<NodeState>>);

impl NodeSource for Shared {
    fn observe(&mut self) -> NodeState {
        self.0.lock().unwrap().clone()
    }
}

fn node(available_mib: u64) -> NodeState {
    let hog: Pod =
        policy_kit::pod!("hog", QosClass::BestEffort, priority: 0, usage_mib: 600, request_mib: 0);
    let signal = Signal {
        name: "memory.available".into(),
        value: (available_mib << 20) as f64,
        capacity: Some((8192u64 << 20) as f64),
    };
    NodeState {
        signals: vec![signal],
        pods: vec![hog],
        terminating: Vec::new(),
    }
}

/// The next cycle's report (eviction outcomes in between are skipped).
async fn next(reports: &mut mpsc::Receiver<Report>) -> CycleReport {
    loop {
        match reports.recv().await.expect("the loop is running") {
            Report::Cycle(report, _) => return report,
            Report::Settled { .. } => {}
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
    let (send_report, mut reports) = mpsc::channel(64);
    let (stop, stopped) = oneshot::channel::<()>();
    let source = Shared(Arc::clone(&state));
    let shutdown = async { stopped.await.unwrap_or(()) };
    let runner = Runner {
        manager,
        clock,
        killer: killer.clone(),
        wakes,
        reports: Some(send_report),
        heartbeat: Heartbeat::default(),
    };
    let task = tokio::spawn(runner.run(source, shutdown));

    let start = Instant::now();
    assert!(
        next(&mut reports).await.requested.is_empty(),
        "calm at first"
    );
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
fn polling_wakes_are_forwarded_until_the_loop_goes_away() {
    use vigil::eviction::runner::forward_wakes;
    use vigil::signals::wake::Wake;
    let poll = Wake::Poll {
        interval: Duration::from_millis(10),
        reason: "the test polls".into(),
    };
    let (wake, mut wakes) = mpsc::channel(1);
    let thread = forward_wakes(poll, Duration::from_secs(5), wake);
    assert_eq!(
        wakes.blocking_recv(),
        Some(()),
        "polling sends a wake each interval"
    );
    assert_eq!(wakes.blocking_recv(), Some(()));
    drop(wakes);
    thread
        .join()
        .expect("the wake thread ends once nobody listens");
}
