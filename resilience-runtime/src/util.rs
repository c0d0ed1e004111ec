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

/// An error and its sources as one line, `outer: inner: ...`: for a status or a log
/// line that shows one string (each error's `Display` never repeats its source).
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "heartbeat",
        all(feature = "config", feature = "tracing")
    )),
    allow(dead_code)
)]
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
