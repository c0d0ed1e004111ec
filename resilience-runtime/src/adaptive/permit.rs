//! The permit shared by the limiters that learn from latency ([`GradientLimiter`] and
//! [`AdaptiveLimiter`]).
//!
//! [`GradientLimiter`]: super::GradientLimiter
//! [`AdaptiveLimiter`]: super::AdaptiveLimiter

use crate::clock::Instant;
use std::fmt;
use std::ops::Deref;

/// A limiter whose admitted calls end by reporting their latency, or by failing.
pub trait LatencyLimiter {
    /// The limiter's clock reading, the `now` to give [`LatencyPermit::pass`].
    fn now(&self) -> Instant;

    /// Ends a call admitted at `start`: completed at `end`, or failed (`None`).
    /// Called once per admitted call, by its permit.
    #[doc(hidden)]
    fn end_call(&self, start: u64, end: Option<u64>);
}

/// A call admitted by a [`LatencyLimiter`]; report how it ended.
///
/// `L` is `&Limiter` from `try_acquire` or `Arc<Limiter>` from `try_acquire_owned`.
/// Dropping the permit without [`pass`](LatencyPermit::pass) ends the call as failed:
/// it leaves the flight without a latency sample.
#[must_use = "dropping the permit ends the call as failed; call `pass`"]
pub struct LatencyPermit<L>
where
    L: Deref,
    L::Target: LatencyLimiter,
{
    limiter: L,
    start: u64,
    /// Set by `pass`; the destructor does the accounting either way.
    end: Option<u64>,
}

impl<L> LatencyPermit<L>
where
    L: Deref,
    L::Target: LatencyLimiter,
{
    /// A permit for a call the limiter admitted at `start`.
    pub(crate) fn new(limiter: L, start: u64) -> Self {
        LatencyPermit {
            limiter,
            start,
            end: None,
        }
    }

    /// When the call was admitted (the `now` given to `try_acquire`).
    pub fn start(&self) -> Instant {
        Instant::from_nanos(self.start)
    }

    /// The limiter that admitted the call.
    pub fn limiter(&self) -> &L::Target {
        &self.limiter
    }

    /// The call completed at `now`: it leaves the flight and its latency
    /// (`now - start`) is recorded.
    pub fn pass(mut self, now: Instant) {
        let now = now.as_nanos();
        self.end = Some(now);
    }

    /// The call failed: it leaves the flight without a latency sample.
    pub fn fail(self) {
        drop(self);
    }
}

impl<T: LatencyLimiter> LatencyPermit<&T> {
    /// Takes the permit apart into its start time, leaving the call in flight: the
    /// caller ends it later with [`LatencyLimiter::end_call`].
    pub(crate) fn into_start(self) -> u64 {
        std::mem::ManuallyDrop::new(self).start
    }
}

impl<L> fmt::Debug for LatencyPermit<L>
where
    L: Deref,
    L::Target: LatencyLimiter,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyPermit")
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl<L> Drop for LatencyPermit<L>
where
    L: Deref,
    L::Target: LatencyLimiter,
{
    fn drop(&mut self) {
        self.limiter.end_call(self.start, self.end);
    }
}
