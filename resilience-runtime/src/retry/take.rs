//! The atomic step of a retry budget: take one unit of a cumulative counter while it
//! stays below a limit. Its own file so that the loom model in `resilience-loom`
//! (`models/take.rs`) checks this very code.

use crate::sync::{AtomicU64, Ordering};

/// Adds one to `counter` if that keeps it at most `limit` (`counter < limit` before);
/// `true` if it did. Exact under any number of threads: the compare-and-swap adds
/// only to the value it checked, so `counter` never passes `limit` through this
/// function, and every call that returns `true` added one.
pub(crate) fn take_below(counter: &AtomicU64, limit: u64) -> bool {
    let mut seen = counter.load(Ordering::Acquire);
    loop {
        if seen >= limit {
            return false;
        }
        match counter.compare_exchange_weak(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
}
