//! The live eviction loop: a cycle every period, at once whenever a signal
//! event arrives (a PSI trigger, a `memory.events` change, `memory.available`
//! falling under the strategies' line, or the polling fallback), at once
//! when an eviction was refused (so the next candidate is tried; at most
//! [`RECYCLE_BURST`] such cycles in a row, then one per
//! [`RECYCLE_EVERY`]), and when a throttling API server's wait is over,
//! until shutdown.
//!
//! The runner owns the eviction calls: each runs as a task of its own with a
//! timeout, at most `burst` at once (the queue hands out no more), and its
//! outcome goes back to the manager — a call that panicked or was cancelled
//! too, as not asked, so it never holds a burst slot. On shutdown no new
//! eviction starts; the calls already running may finish within their
//! timeout.

use super::manager::passes_the_turn;
use super::{
    CycleReport, EvictionManager, EvictionSettings, KillError, Killer, NodeState, Settled, Victim,
    Wanted,
};
use crate::base::clock::{Clock, sleep_or_pending};
use crate::base::rate::TokenBucket;
use crate::signals::wake::MemoryLine;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Where each cycle's view of the node comes from (signals and pods).
pub trait NodeSource: Send {
    /// The node now.
    fn observe(&mut self) -> NodeState;

    /// What the policies read beyond what every cycle reads (signals, pod
    /// facts), told before each observation: a source reads only those.
    fn want(&mut self, _wanted: Wanted) {}

    /// What the cycle that observed it decided (e.g. whether a threshold
    /// holds, so that what only ranking needs is fetched only then).
    fn decided(&mut self, _report: &CycleReport) {}
}

/// What the runner reports as it goes.
#[derive(Debug)]
pub enum LoopReport {
    /// A cycle ran, and how long it took (each variant boxed: a cycle's
    /// report and a victim carry pods, and the channel holds a backlog).
    Cycle(Box<CycleReport>, Duration),
    /// An eviction call ended.
    Settled {
        /// What became of it.
        settled: Box<Settled>,
        /// For an accepted eviction decided on a signal event: from the event
        /// to the API server's answer.
        latency: Option<Duration>,
    },
}

/// How many reports may wait for a subscriber before it misses the oldest
/// (the loop never waits for a slow reader).
pub(crate) const REPORT_BACKLOG: usize = 1024;

/// Cycles a row of refusals may start at once before they are paced.
pub const RECYCLE_BURST: u32 = 4;
/// Once the burst is spent, one refusal-started cycle per this long.
pub(crate) const RECYCLE_EVERY: Duration = Duration::from_secs(1);

/// The next of the runner's reports for a subscriber called `reader`;
/// `None` once the runner is gone. A subscriber that fell behind skips what
/// it missed (logged): the loop never waits for a reader.
pub(crate) async fn next_report(
    reports: &mut broadcast::Receiver<Arc<LoopReport>>,
    reader: &str,
) -> Option<Arc<LoopReport>> {
    loop {
        match reports.recv().await {
            Ok(report) => return Some(report),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, reader, "a reader fell behind the loop's reports");
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// When the loop last cycled, for health checks.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat(Arc<std::sync::Mutex<Option<Instant>>>);

impl Heartbeat {
    fn beat(&self) {
        *self.0.lock().expect("heartbeat lock poisoned") = Some(Instant::now());
    }

    /// Time since the last cycle; none before the first.
    pub fn since_last(&self) -> Option<Duration> {
        let last = *self.0.lock().expect("heartbeat lock poisoned");
        last.map(|at| at.elapsed())
    }
}

/// The live loop's parts.
pub struct Runner {
    /// Decides each cycle.
    pub manager: EvictionManager,
    /// Time for the manager's decisions.
    pub clock: Arc<dyn Clock>,
    /// Carries out evictions.
    pub killer: Arc<dyn Killer>,
    /// Signal events.
    pub wakes: mpsc::Receiver<()>,
    /// Set after each cycle to the strategies' highest threshold on
    /// `memory.available`, for the watcher that wakes the loop at a fall
    /// under it (`signals::wake::memory_line`), if one runs.
    pub memory_line: Option<MemoryLine>,
    /// Where reports go, to every subscriber, if anywhere.
    pub reports: Option<broadcast::Sender<Arc<LoopReport>>>,
    /// Beats after every cycle.
    pub heartbeat: Heartbeat,
    /// New settings, put in force as they come (a cycle runs at once).
    pub settings: Option<watch::Receiver<EvictionSettings>>,
}

/// One eviction call's result, with when its decision's signal event came.
type Call = (Victim, Result<(), KillError>, Option<Instant>);

/// Why the loop wakes up.
enum Next {
    Cycle(Option<Instant>),
    Stop,
}

impl Runner {
    /// Runs until `shutdown` resolves: one cycle at start, then one per
    /// period, per signal event and per refused eviction.
    pub async fn run(self, mut source: impl NodeSource, shutdown: impl Future<Output = ()>) {
        let Self {
            mut manager,
            clock,
            killer,
            mut wakes,
            memory_line,
            reports,
            heartbeat,
            mut settings,
        } = self;
        let send = |report: LoopReport| {
            // An error only means nobody subscribes.
            if let Some(reports) = &reports {
                let _ = reports.send(Arc::new(report));
            }
        };
        let mut calls = Calls::default();
        // The "refused, so cycle now" shortcut, bounded: a pod refused over
        // and over cannot spin the loop.
        let mut recycles = TokenBucket::new(
            1.0 / RECYCLE_EVERY.as_secs_f64(),
            RECYCLE_BURST,
            Instant::now(),
        );
        let mut wakes_open = true;
        let mut woken = None;
        tokio::pin!(shutdown);
        loop {
            let (period, timeout) = (manager.settings().period, manager.settings().call_timeout);
            let started = Instant::now();
            source.want(manager.wanted());
            let report = manager.cycle(clock.now(), source.observe());
            source.decided(&report);
            if let Some(line) = &memory_line {
                line.follow(&report.reported);
            }
            for victim in &report.requested {
                calls.start(killer.as_ref(), victim, timeout, woken);
            }
            heartbeat.beat();
            send(LoopReport::Cycle(Box::new(report), started.elapsed()));
            let period_over = tokio::time::sleep(period);
            tokio::pin!(period_over);
            let throttle_over = sleep_or_pending(throttle_wait(&manager, clock.as_ref()));
            tokio::pin!(throttle_over);
            let next = loop {
                tokio::select! {
                    () = &mut shutdown => break Next::Stop,
                    () = &mut period_over => break Next::Cycle(None),
                    () = &mut throttle_over => break Next::Cycle(None),
                    changed = next_settings(&mut settings) => match changed {
                        Some(new) => {
                            manager.set_settings(new);
                            break Next::Cycle(None);
                        }
                        None => settings = None,
                    },
                    wake = wakes.recv(), if wakes_open => match wake {
                        Some(()) => break Next::Cycle(Some(Instant::now())),
                        // Without event sources left, the period alone drives the loop.
                        None => wakes_open = false,
                    },
                    Some(call) = calls.next() => {
                        let woken = call.2;
                        if settle(&mut manager, clock.as_ref(), &mut recycles, &send, call) {
                            break Next::Cycle(woken);
                        }
                    }
                }
            };
            match next {
                Next::Cycle(at) => woken = at,
                Next::Stop => break,
            }
        }
        let timeout = manager.settings().call_timeout;
        drain(&mut manager, clock.as_ref(), calls, timeout, &send).await;
    }
}

/// Settles the eviction call that ended, reporting it; answers whether to
/// cycle now: the victim passed the turn (refused, and the shortcut's
/// bucket allows), or the API server throttles (the next cycle sleeps
/// until the wait is over).
fn settle(
    manager: &mut EvictionManager,
    clock: &dyn Clock,
    recycles: &mut TokenBucket,
    send: &impl Fn(LoopReport),
    (victim, result, woken): (Victim, Result<(), KillError>, Option<Instant>),
) -> bool {
    let refused = passes_the_turn(&result) && !victim.dry_run;
    let throttled = matches!(result, Err(KillError::Throttled { .. }));
    let accepted = result.is_ok();
    if let Some(settled) = manager.outcome(clock.now(), &victim, result) {
        let latency = woken.filter(|_| accepted).map(|w| w.elapsed());
        send(LoopReport::Settled {
            settled: Box::new(settled),
            latency,
        });
    }
    (refused && recycles.take(Instant::now()).is_ok()) || throttled
}

/// The eviction calls running, each task's victim kept by its id, so that
/// a call that panicked or was cancelled still settles its victim.
#[derive(Default)]
struct Calls {
    running: JoinSet<Result<(), KillError>>,
    victims: HashMap<tokio::task::Id, (Victim, Option<Instant>)>,
}

impl Calls {
    /// Starts evicting `victim` with `killer`, bounded by `timeout`.
    fn start(
        &mut self,
        killer: &dyn Killer,
        victim: &Victim,
        timeout: Duration,
        woken: Option<Instant>,
    ) {
        let call = killer.evict(victim);
        let handle = self.running.spawn(async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(KillError::Unavailable(format!(
                    "no answer within {timeout:?}"
                ))),
            }
        });
        self.victims.insert(handle.id(), (victim.clone(), woken));
    }

    fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    fn len(&self) -> usize {
        self.running.len()
    }

    /// The next call to end; none while none runs.
    async fn next(&mut self) -> Option<Call> {
        let joined = self.running.join_next_with_id().await?;
        let id = match &joined {
            Ok((id, _)) => *id,
            Err(error) => error.id(),
        };
        let (victim, woken) = self
            .victims
            .remove(&id)
            .expect("every call is recorded with its victim");
        let result = match joined {
            Ok((_, result)) => result,
            Err(error) => {
                let how = if error.is_panic() {
                    "panicked"
                } else {
                    "was cancelled"
                };
                tracing::error!(pod = %victim.pod.name, "the eviction call {how}");
                Err(KillError::Unavailable(format!("the eviction call {how}")))
            }
        };
        Some((victim, result, woken))
    }
}

/// How long until the API server's throttling of evictions is over, if it throttles.
fn throttle_wait(manager: &EvictionManager, clock: &dyn Clock) -> Option<Duration> {
    let until = manager.throttled_until()?;
    Some(until.duration_since(clock.now()).unwrap_or_default())
}

/// The next settings sent, or `None` once the sender is gone; pending
/// forever without a channel.
async fn next_settings(
    settings: &mut Option<watch::Receiver<EvictionSettings>>,
) -> Option<EvictionSettings> {
    match settings {
        Some(settings) => match settings.changed().await {
            Ok(()) => Some(settings.borrow_and_update().clone()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// Lets the eviction calls already running finish (each is bounded by its
/// timeout), recording their outcomes; starts none.
async fn drain(
    manager: &mut EvictionManager,
    clock: &dyn Clock,
    mut calls: Calls,
    timeout: Duration,
    send: &impl Fn(LoopReport),
) {
    if calls.is_empty() {
        return;
    }
    tracing::info!(
        calls = calls.len(),
        "shutting down: waiting for eviction calls in flight"
    );
    let finish = async {
        while let Some((victim, result, _)) = calls.next().await {
            if let Some(settled) = manager.outcome(clock.now(), &victim, result) {
                send(LoopReport::Settled {
                    settled: Box::new(settled),
                    latency: None,
                });
            }
        }
    };
    // Each call has its own timeout; this bound only guards against a killer
    // that ignores cancellation.
    if tokio::time::timeout(timeout * 2, finish).await.is_err() {
        tracing::warn!("eviction calls still running at shutdown were abandoned");
    }
}
