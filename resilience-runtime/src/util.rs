//! Small conversions every layer of the crate uses, below the clock and the engine.

use std::time::Duration;

/// Nanoseconds of a duration, saturated to `u64`: the crate's one conversion of a
/// `Duration` to timeline nanoseconds (re-exported as `clock::nanos`).
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Frees a value that `Box::leak` made: the one way the engine returns the memory of
/// a slot, a compiled form or a point's other kept parts, when their owner is dropped.
///
/// # Safety
///
/// `kept` came from `Box::leak`, is reclaimed once, and nothing uses a reference to it
/// afterwards (its owner is being dropped, and every reference to it was reachable
/// only through that owner).
pub(crate) unsafe fn reclaim<T>(kept: &'static T) {
    // SAFETY: see the function's contract.
    drop(unsafe { Box::from_raw(std::ptr::from_ref(kept).cast_mut()) });
}
