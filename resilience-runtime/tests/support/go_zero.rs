//! What the SRE breaker tests share: hand-driven instants and go-zero's drop ratio
//! under its own constants.

use resilience_runtime::breaker::{drop_ratio, SreConfig, SreHistory};
use resilience_runtime::Instant;

/// The instant `ns` nanoseconds into the timeline (the tests drive time by hand).
pub(crate) fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// A window's totals and bucket runs, as go-zero's test vectors give them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) total: u64,
    pub(crate) accepts: u64,
    pub(crate) failing_buckets: u64,
    pub(crate) working_buckets: u64,
}

/// [`drop_ratio`] of `w` under go-zero's constants: `k` = 1.5, protection 5, 40
/// buckets.
pub(crate) fn go_zero(w: Window) -> f64 {
    let history = SreHistory {
        total: w.total,
        accepts: w.accepts,
        failing_buckets: w.failing_buckets,
        working_buckets: w.working_buckets,
        ..SreHistory::default()
    };
    let config = SreConfig::builder()
        .k(1.5)
        .protection(5)
        .buckets(40)
        .build()
        .unwrap();
    drop_ratio(&history, &config)
}
