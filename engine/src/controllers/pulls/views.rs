//! What the pull controller tells the others of its pulls: the fleet view
//! how each fares ([`report`]), the shadow controller which versions are
//! linked for shadow ([`ShadowPull`]).

use crate::distribution::plan::{PullState, Signing};
use crate::fleet::activity::time;
use crate::fleet::kinds::PullView;
use std::path::PathBuf;
use std::time::SystemTime;
use tokio::time::Instant;

/// What the fleet view shows of one policy's pulls, if a pull was tried,
/// on a node with (`key`) or without a verification key; `now` is `wall`
/// on the wall clock.
pub(super) fn report(
    state: &PullState,
    key: bool,
    now: Instant,
    wall: SystemTime,
) -> Option<PullView> {
    let (status, reason, message, next_retry) = match &state.last_error {
        _ if state.linked => ("Pulled", None, None, None),
        Some((reason, message)) => (
            "PullFailed",
            Some(reason.as_str().to_owned()),
            Some(message.clone()),
            Some(time(wall + state.next.saturating_duration_since(now))),
        ),
        None => return None,
    };
    Some(PullView {
        reference: state.version.reference.clone(),
        stage: state.version.stage.name().to_owned(),
        state: status.to_owned(),
        since: time(state.since),
        signature: (state.linked).then(|| Signing::of(&state.version, key).name().to_owned()),
        reason,
        message,
        next_retry,
    })
}

/// A version this node runs in shadow, as its pulls fare.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShadowPull {
    /// Its component, once pulled, checked and linked.
    pub component: Option<PathBuf>,
    /// The pinned reference.
    pub reference: String,
    /// The most divergence allowed, in percent of comparisons.
    pub max_divergence: Option<u8>,
    /// How its pulls fare, once one was tried.
    pub pull: Option<PullView>,
}
