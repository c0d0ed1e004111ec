//! The fleet quorum of a point's classic breaker (feature `heartbeat`): what the
//! heartbeat client reads after a pull, and the move it makes. Cold: the heartbeat's
//! thread calls it, never a guarded call.

use crate::breaker::{ClassicState, Quorum};
use crate::clock::Instant;
use crate::point::form::slots::BreakerImpl;
use crate::point::Point;
use crate::sync::Ordering;

/// A point's classic breaker as a quorum sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuorumView {
    /// The breaker's quorum, if it has one.
    pub(crate) quorum: Option<Quorum>,
    /// Its state now.
    pub(crate) state: ClassicState,
    /// The point's breaker changes so far.
    pub(crate) transitions: u64,
}

impl Point {
    /// The point's classic breaker for the quorum; `None` without one (no breaker, or
    /// the SRE breaker, which has no quorum).
    pub(crate) fn quorum_view(&self) -> Option<QuorumView> {
        let slot = self.compiled().breaker?.0;
        match &slot.imp {
            BreakerImpl::Classic(b) => Some(QuorumView {
                quorum: b.config().quorum,
                state: b.state(),
                transitions: self.counters.breaker_transitions.load(Ordering::Relaxed),
            }),
            BreakerImpl::Sre(_) => None,
        }
    }

    /// Moves the point's classic breaker from closed to `to` for the quorum, if it is
    /// still closed; listeners and `tracing` see a change caused by
    /// [`TransitionReason::Quorum`](crate::breaker::TransitionReason::Quorum). Returns
    /// the point's breaker changes counted after the move, `None` if it did not move.
    pub(crate) fn quorum_move(&self, to: ClassicState) -> Option<u64> {
        let slot = self.compiled().breaker?.0;
        let BreakerImpl::Classic(b) = &slot.imp else {
            return None;
        };
        let now = Instant::from_nanos(self.clock.now_ns());
        let t = b.quorum_move(ClassicState::Closed, to, now)?;
        self.classic_changed(t);
        Some(self.counters.breaker_transitions.load(Ordering::Relaxed))
    }
}
