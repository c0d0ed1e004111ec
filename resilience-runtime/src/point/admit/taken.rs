//! What a call takes on its way in, given back in one place: a delay's probe, an
//! adaptive limiter's flight, a breaker's call. A later rule that refuses the call,
//! or tells it to wait, hands the guard to [`Taken::give_back`]; an admitted call
//! keeps what it took ([`Taken::keep`]) and gives it back through its permit. (A key's
//! slot needs no guard: its hold gives it back when dropped.)
//!
//! Not a `Drop`: a guard that runs on unwinding keeps the entry's locals in memory
//! across every call that may unwind, which the hot path pays for on every call. A
//! debug build checks instead that every guard is kept or given back.

use crate::point::admit::permit::Outcome;
use crate::point::form::compiled::R_QUEUE;
use crate::point::form::slots::{AdaptiveCall, BreakerCall};
use crate::point::Point;

/// The guard (see the module docs).
pub(in crate::point) struct Taken<'p> {
    point: &'p Point,
    /// The unit of the breaker call's start (ticks or timeline).
    fine: bool,
    /// The probe of the delay ending at `.0`, claimed as `.1`.
    pub(in crate::point) probe: Option<(u64, u64)>,
    pub(in crate::point) adaptive: Option<AdaptiveCall>,
    pub(in crate::point) breaker: Option<BreakerCall>,
}

/// What an admitted call keeps, for its permit.
pub(in crate::point) struct Kept {
    pub(in crate::point) probe: Option<(u64, u64)>,
    pub(in crate::point) adaptive: Option<AdaptiveCall>,
    pub(in crate::point) breaker: Option<BreakerCall>,
}

impl<'p> Taken<'p> {
    /// Nothing taken yet.
    #[inline(always)]
    pub(in crate::point) fn new(point: &'p Point, fine: bool) -> Taken<'p> {
        Taken {
            point,
            fine,
            probe: None,
            adaptive: None,
            breaker: None,
        }
    }

    /// Whether anything was taken.
    #[inline(always)]
    pub(in crate::point) fn is_empty(&self) -> bool {
        self.probe.is_none() && self.adaptive.is_none() && self.breaker.is_none()
    }

    /// The call is admitted: it keeps what it took.
    #[inline(always)]
    pub(in crate::point) fn keep(mut self) -> Kept {
        Kept {
            probe: self.probe.take(),
            adaptive: self.adaptive.take(),
            breaker: self.breaker.take(),
        }
    }

    /// The call goes no further: the probe goes back for the next call, the
    /// adaptive flight ends without a sample (waking a waiter of the queue, if the
    /// policy has one, as an ending call's release does), the breaker forgets the call
    /// (as one cancelled in time). In line: where the entry's code knows the guard
    /// empty (a policy without a delay, an adaptive limit or a breaker), nothing of
    /// it is left, not even the guard's fields.
    #[inline(always)]
    pub(in crate::point) fn give_back(mut self) {
        if let Some((_, claimed)) = self.probe.take() {
            self.point.delay.unclaim(claimed);
        }
        if let Some(a) = self.adaptive.take() {
            end_unadmitted(self.point, a);
        }
        if let Some(b) = self.breaker.take() {
            self.point
                .breaker_outcome(b, Outcome::Cancelled, false, 0, self.fine);
        }
    }
}

/// The adaptive flight of a call that goes no further ends without a sample; under a
/// policy with a queue, a waiter for the room it gives back is woken, as an ending
/// call's release wakes one (see `queue`). Out of line: only refused calls come here.
#[cold]
#[inline(never)]
fn end_unadmitted(point: &Point, a: AdaptiveCall) {
    a.end(false);
    if point.compiled().rules & R_QUEUE != 0 && point.flow.given_back() {
        point.wake_waiter();
    }
}

/// A debug build's check that no exit of an entry forgets what the call took.
#[cfg(debug_assertions)]
impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            debug_assert!(
                self.is_empty(),
                "an entry's exit neither kept nor gave back what the call took"
            );
        }
    }
}
