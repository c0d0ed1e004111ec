//! Small conversions every layer of the crate uses, below the clock and the engine.

use std::time::Duration;

/// Nanoseconds of a duration, saturated to `u64`: the crate's one conversion of a
/// `Duration` to timeline nanoseconds (re-exported as `clock::nanos`).
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
