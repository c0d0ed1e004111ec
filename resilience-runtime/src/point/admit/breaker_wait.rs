//! How long until a point's breaker may admit a probe: the tower layer's
//! `Retry-After` for an open breaker.

use crate::point::form::slots::BreakerImpl;
use crate::point::Point;
use std::time::Duration;

impl Point {
    /// While the point's breaker refuses calls, how long until it may admit a probe:
    /// the classic breaker, until its open wait ends (zero once it has ended and no
    /// call came yet); the SRE breaker while dropping, its force-pass interval (it
    /// lets a probe through at least that often). `None` without a breaker, or when
    /// it is not refusing for a known time (classic closed or half-open, SRE not
    /// dropping).
    pub(crate) fn breaker_retry_in(&self) -> Option<Duration> {
        let slot = self.compiled().breaker?.0;
        match &slot.imp {
            BreakerImpl::Sre(b) => b.is_dropping().then(|| b.config().force_pass_interval),
            BreakerImpl::Classic(b) => {
                let now = self.clock.now();
                let until = b.stats(now).open_until?;
                Some(until - now)
            }
        }
    }
}
