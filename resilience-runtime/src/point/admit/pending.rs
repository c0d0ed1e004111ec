//! The cancel guard of an async call: [`Pending`], the permit slot held across the
//! call's awaits, which records a cancelled call when the call's future is dropped
//! before it ended.

use crate::point::admit::permit::{Outcome, Permit};
use crate::point::Point;

/// The permit slot of an async call (see `__private::enter`), held across its awaits:
/// dropped before the call ended (its future dropped by its caller), it records a
/// cancelled call, with or without a permit in the slot. The code that drives the call
/// sets `done` once the call is refused, finished, panicked or cut.
#[derive(Debug)]
pub struct Pending<'a> {
    /// The point the call entered.
    pub point: &'a Point,
    /// The call's permit, if any.
    pub slot: Option<Permit<'a>>,
    /// Whether the call ended (or never began): nothing is left to record.
    pub done: bool,
    /// Whether the call is one of generated code, which runs in its own `tracing`
    /// span: its cancellation is that span's outcome (a manual `call_async` has no
    /// span of its own, and must not write into its caller's).
    traced: bool,
}

impl<'a> Pending<'a> {
    /// The slot of a generated call about to enter `point`.
    #[inline(always)]
    pub fn new(point: &'a Point) -> Pending<'a> {
        Pending {
            point,
            slot: None,
            done: false,
            traced: true,
        }
    }

    /// The slot of a call of the manual API (`Point::call_async`, ...).
    #[inline(always)]
    pub(crate) fn manual(point: &'a Point) -> Pending<'a> {
        Pending {
            point,
            slot: None,
            done: false,
            traced: false,
        }
    }
}

impl Drop for Pending<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.done {
            if self.traced {
                trace_outcome("cancelled", None);
            }
            Permit::end_in(self.point, &mut self.slot, Outcome::Cancelled);
        }
    }
}

/// The outcome of the current generated call, into its `tracing` span (feature
/// `tracing`; see `crate::call_span`); nothing without the feature.
#[inline(always)]
pub(crate) fn trace_outcome(outcome: &'static str, reason: Option<crate::Reason>) {
    #[cfg(feature = "tracing")]
    crate::call_span::record(outcome, reason);
    #[cfg(not(feature = "tracing"))]
    let _ = (outcome, reason);
}
