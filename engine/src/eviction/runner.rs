//! The live eviction loop: a cycle every period, and at once whenever a
//! signal event arrives (a PSI trigger, a `memory.events` change, or the
//! polling fallback), until shutdown.

use super::{CycleReport, EvictionManager, NodeState};
use crate::clock::Clock;
use crate::signals::wake::{Wake, Woke};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Where each cycle's view of the node comes from (signals and pods).
pub trait NodeSource: Send {
    /// The node now.
    fn observe(&mut self) -> NodeState;
}

/// Runs `manager` until `shutdown` resolves: one cycle at start, then one
/// per `period` and one per signal event received on `wakes`. Each cycle's
/// report goes to `reports`, if given.
pub async fn run(
    mut manager: EvictionManager,
    clock: Arc<dyn Clock>,
    mut source: impl NodeSource,
    mut wakes: mpsc::Receiver<()>,
    reports: Option<mpsc::UnboundedSender<CycleReport>>,
    shutdown: impl Future<Output = ()>,
) {
    let period = manager.settings().period;
    let mut wakes_open = true;
    tokio::pin!(shutdown);
    loop {
        let node = source.observe();
        let report = manager.cycle(clock.now(), &node);
        if let Some(reports) = &reports {
            let _ = reports.send(report);
        }
        let period_over = tokio::time::sleep(period);
        tokio::pin!(period_over);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = &mut period_over => break,
                wake = wakes.recv(), if wakes_open => match wake {
                    Some(()) => break,
                    // Without event sources left, the period alone drives the loop.
                    None => wakes_open = false,
                },
            }
        }
    }
}

/// Turns a blocking wake source into events on `wakes`, on a thread of its
/// own, until the receiver is dropped. With a PSI trigger an event is sent
/// when it fires; when polling, one per interval.
pub fn forward_wakes(
    wake: Wake,
    period: Duration,
    wakes: mpsc::Sender<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("vigil-wake".into())
        .spawn(move || {
            loop {
                let send = match wake.wait(period) {
                    Ok(Woke::Pressure) => true,
                    Ok(Woke::Timeout) => matches!(wake, Wake::Poll { .. }),
                    Err(error) => {
                        tracing::error!(%error, "the PSI trigger failed; the period alone drives evictions now");
                        return;
                    }
                };
                if (send && wakes.blocking_send(()).is_err()) || wakes.is_closed() {
                    return;
                }
            }
        })
        .expect("cannot spawn the wake thread")
}
