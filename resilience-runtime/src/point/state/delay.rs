//! The delay rule: after a trip the point stays downgraded until the delay's end,
//! letting one probe through every retry interval; a succeeding probe ends the delay
//! early, a failing one schedules the next a full interval later.
//!
//! The decisions are pure functions ([`in_delay`], [`may_probe`]); [`Delay`] is their
//! thin atomic shell: the delay's end and the next probe time in two words.
//!
//! # The guarantee kept here
//!
//! At most one probe is out at a time (claiming it swaps the probe time for
//! [`PROBE_TAKEN`]), and none is claimed before its time: the thread that starts a
//! delay marks it [`STARTING`] until the first probe time is written, so no call sees
//! the new delay with the previous delay's probe time. A probe refused by a limit after
//! its claim is put back, so the next call may probe instead.

use crate::sync::{AtomicU64, AtomicU8, Ordering};

/// The next probe time while a probe is out (or the delay has none).
pub(crate) const PROBE_TAKEN: u64 = u64::MAX;
/// The delay's end while the thread starting it sets the first probe time.
pub(crate) const STARTING: u64 = u64::MAX - 1;
/// No delay has started yet.
pub(crate) const NO_CAUSE: u8 = u8::MAX;

/// Whether a delay ending at `until` runs at `now`.
#[inline(always)]
pub(crate) fn in_delay(now: u64, until: u64) -> bool {
    now < until
}

/// Whether a call at `now`, inside the delay ending at `until`, may claim the probe
/// whose time is `next`: one probe at a time, none before its time, none while the
/// delay is being started.
#[inline]
pub(crate) fn may_probe(now: u64, until: u64, next: u64) -> bool {
    until != STARTING && next != PROBE_TAKEN && now >= next
}

/// How a probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProbeEnd {
    /// It succeeded: the delay ends.
    Succeeded,
    /// It failed: the next probe comes a retry interval later.
    Failed,
    /// It was cancelled: the next call may probe at once.
    Cancelled,
}

/// The delay state of one point.
#[derive(Debug)]
pub(crate) struct Delay {
    until: AtomicU64,
    next_probe: AtomicU64,
    cause: AtomicU8,
}

impl Delay {
    pub(crate) fn new() -> Delay {
        Delay {
            until: AtomicU64::new(0),
            next_probe: AtomicU64::new(0),
            cause: AtomicU8::new(NO_CAUSE),
        }
    }

    /// The end of the current (or last) delay.
    #[inline]
    pub(crate) fn until(&self) -> u64 {
        self.until.load(Ordering::Acquire)
    }

    /// The index of the reason that started the last delay, or [`NO_CAUSE`].
    pub(crate) fn cause(&self) -> u8 {
        self.cause.load(Ordering::Relaxed)
    }

    /// Claims the probe at `now` inside the delay ending at `until` (as read by the
    /// caller before); returns the probe time it replaced, to give back with
    /// [`unclaim`](Self::unclaim) if the probe is refused after all. `retry_ns` 0
    /// means the delay has no probes.
    pub(crate) fn claim(&self, now: u64, until: u64, retry_ns: u64) -> Option<u64> {
        if retry_ns == 0 {
            return None;
        }
        let next = self.next_probe.load(Ordering::Acquire);
        (may_probe(now, until, next)
            && self
                .next_probe
                .compare_exchange(next, PROBE_TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok())
        .then_some(next)
    }

    /// Gives back a probe claimed at `claimed`: the next call may probe at once.
    pub(crate) fn unclaim(&self, claimed: u64) {
        let _ = self.next_probe.compare_exchange(
            PROBE_TAKEN,
            claimed,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Starts a delay of `delay_ns` at `now` for the reason `cause`, unless one runs.
    pub(crate) fn start(&self, now: u64, delay_ns: u64, retry_ns: u64, cause: u8) {
        let until = self.until.load(Ordering::Acquire);
        if in_delay(now, until)
            || self
                .until
                .compare_exchange(until, STARTING, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.cause.store(cause, Ordering::Relaxed);
        let next = if retry_ns == 0 {
            PROBE_TAKEN
        } else {
            now.saturating_add(retry_ns)
        };
        self.next_probe.store(next, Ordering::Release);
        self.until.store(
            now.saturating_add(delay_ns).min(STARTING - 1),
            Ordering::Release,
        );
    }

    /// A probe of the delay ending at `probe_of` ended at `now`. Only that delay is
    /// touched: a probe of an older one changes nothing.
    pub(crate) fn probe_ended(&self, probe_of: u64, now: u64, end: ProbeEnd, retry_ns: u64) {
        if self.until.load(Ordering::Acquire) != probe_of {
            return;
        }
        match end {
            // A succeeding probe ends the delay early (SDS never does).
            ProbeEnd::Succeeded => {
                let _ =
                    self.until
                        .compare_exchange(probe_of, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            ProbeEnd::Cancelled => self.next_probe.store(now, Ordering::Release),
            ProbeEnd::Failed => self
                .next_probe
                .store(now.saturating_add(retry_ns), Ordering::Release),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_probe_per_interval_and_a_refused_one_comes_back() {
        let d = Delay::new();
        d.start(100, 1000, 10, 3);
        assert_eq!((d.until(), d.cause()), (1100, 3));
        assert_eq!(d.claim(105, 1100, 10), None, "not before its time");
        let claimed = d.claim(110, 1100, 10).expect("on time");
        assert_eq!(d.claim(111, 1100, 10), None, "one at a time");
        d.unclaim(claimed);
        let claimed = d.claim(111, 1100, 10).expect("given back");
        assert_eq!(claimed, 110);
        d.probe_ended(1100, 120, ProbeEnd::Failed, 10);
        assert_eq!(d.claim(129, 1100, 10), None);
        assert!(d.claim(130, 1100, 10).is_some());
        d.probe_ended(1100, 131, ProbeEnd::Succeeded, 10);
        assert!(!in_delay(132, d.until()), "a good probe ends the delay");
        d.start(200, 1000, 0, 1);
        assert_eq!(d.claim(10_000, 1200, 0), None, "no probes without a retry");
    }

    #[test]
    fn a_delay_being_started_has_no_probe() {
        assert!(!may_probe(500, STARTING, 0));
        assert!(in_delay(500, STARTING));
        assert!(may_probe(500, 600, 500));
        assert!(!may_probe(499, 600, 500));
        assert!(!may_probe(500, 600, PROBE_TAKEN));
    }
}
