//! Hedged attempts of an async `#[retry(hedge = "..")]` call: when an attempt has not
//! answered after the hedge delay, another starts beside it; the first answer that is
//! not an error to retry wins and the others are dropped at once.
//!
//! # The rules
//!
//! - Attempt 1 starts. Each time the hedge delay passes (counted from the last attempt
//!   started) with attempts still running and none answered, a hedge starts, while
//!   attempts remain (`attempts` counts hedges too) and while the budget, if any,
//!   allows it: a hedge spends one [`RetryBudget::try_retry`]. A hedge the budget
//!   refuses is counted in `refused_by_budget` and not sent, and the call sends no
//!   more hedges (the attempts running go on).
//! - The first answer that is `Ok` or an error not to retry ends the call; every
//!   other attempt still running is dropped at once (counted `cancelled`; with a
//!   `#[downgrade]`/`#[breaker]` stacked below, its point counts a cancelled call).
//! - An attempt that fails with an error to retry while others run does not end the
//!   call. Once none is running, the normal retry path goes on: a backoff (on the
//!   point's clock, as `sleep_async`), then a new attempt (with hedges again), if
//!   attempts remain and the budget allows; else the last error is returned.
//! - A downgraded attempt (refused or cut by the attribute stacked below) ends the
//!   call at once with its result, dropping the others. A panic propagates (the
//!   others are dropped while it unwinds).
//!
//! All attempts of a call are polled in the caller's task: nothing is spawned, and the
//! call's future is `Send` when the attempts' futures are. The first attempt lives in
//! the call's future; hedges are boxed (the only allocations, made when a hedge
//! starts). The delay is a `tokio::time::Sleep`, armed only once the first attempt
//! returned `Pending` (an attempt that answers on its first poll costs no timer), so
//! hedge delays and latencies are on tokio's clock: a test pauses it with
//! `#[tokio::test(start_paused = true)]` (a registry's manual clock does not move
//! them; it only drives the backoff between rounds).
//!
//! # Percentile delays (`hedge = "p95"`)
//!
//! Each call site keeps a [`LatencyLog`] of its attempts' latencies: 128 counters of
//! log-spaced buckets (4 per octave, from 1.28 µs up to about 73 minutes; 512 bytes in
//! a `static`, atomics only). An attempt that answers records its latency (downgraded
//! attempts record nothing); an attempt dropped because another answered records how
//! long it ran, a lower bound of its latency, so that hedging does not hide the slow
//! tail it cuts. Every [`DECAY_EVERY`] samples every counter is halved (rounded down),
//! so a sample's weight halves with each 256 newer ones and the percentile follows
//! the last few hundred attempts. The delay is the upper bound of the bucket holding
//! the percentile (at most 25% above the true value), refreshed every
//! [`REFRESH_EVERY`] samples. Until the site has measured [`MIN_SAMPLES`] attempts
//! there is no hedge.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Buckets of a [`LatencyLog`].
pub(crate) const BUCKETS: usize = 128;
/// Buckets per octave.
const PER_OCTAVE: usize = 4;
/// Latencies below `2^MIN_SHIFT` ns (about 1 µs) share bucket 0.
const MIN_SHIFT: u32 = 10;
/// Attempts a site measures before a percentile delay hedges.
pub(crate) const MIN_SAMPLES: u64 = 20;
/// Every this many samples, every bucket is halved.
pub(crate) const DECAY_EVERY: u64 = 256;
/// Every this many samples (and at the [`MIN_SAMPLES`]th), the delay is recomputed.
pub(crate) const REFRESH_EVERY: u64 = 8;

/// The bucket of a latency of `nanos`: bucket `4 * o + s` holds
/// `[2^(o+10) * (4+s) / 4, 2^(o+10) * (5+s) / 4)` (bucket 0 also everything below,
/// the last one everything above). Pure.
pub(crate) fn bucket_of(nanos: u64) -> usize {
    if nanos < 1 << MIN_SHIFT {
        return 0;
    }
    let msb = 63 - nanos.leading_zeros();
    let sub = ((nanos >> (msb - 2)) & 3) as usize;
    ((msb - MIN_SHIFT) as usize * PER_OCTAVE + sub).min(BUCKETS - 1)
}

/// The (exclusive) upper bound of `bucket`, in nanoseconds: what a percentile that
/// falls in it is taken to be. Pure.
pub(crate) fn upper_bound(bucket: usize) -> u64 {
    let octave = (bucket / PER_OCTAVE) as u32;
    let sub = (bucket % PER_OCTAVE) as u64;
    ((1u64 << (octave + MIN_SHIFT)) / 4) * (5 + sub)
}

/// The bucket holding percentile `tenths / 10` (500 ..= 999: p50 ..= p99.9) of the
/// samples counted in `counts`: the first bucket whose cumulative count reaches
/// `tenths / 1000` of the total. `None` without samples. Pure.
pub(crate) fn percentile_bucket(counts: &[u32], tenths: u32) -> Option<usize> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return None;
    }
    let want = total * u64::from(tenths);
    let mut seen = 0u64;
    for (bucket, &c) in counts.iter().enumerate() {
        seen += u64::from(c);
        if c > 0 && seen * 1000 >= want {
            return Some(bucket);
        }
    }
    None
}

/// What a call's hedging does next, given the delay (`None`: no hedging, as a
/// percentile site before [`MIN_SAMPLES`]), the attempts started and allowed, whether
/// the budget refused a hedge already, and how long ago the last attempt started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) enum Plan {
    /// Start a hedge now.
    Hedge,
    /// Ask again after this long.
    Wait(Duration),
    /// No more hedges in this round.
    Never,
}

/// "Start a hedge now?" Pure: the decision the combinator takes at each step.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) fn plan(
    delay: Option<Duration>,
    started: u64,
    attempts: u64,
    refused: bool,
    since_last: Duration,
) -> Plan {
    let Some(delay) = delay else {
        return Plan::Never;
    };
    if refused || started >= attempts {
        return Plan::Never;
    }
    match delay.checked_sub(since_last) {
        Some(left) if !left.is_zero() => Plan::Wait(left),
        _ => Plan::Hedge,
    }
}

/// The latencies of one call site's attempts (see the module docs): a `static` per
/// `hedge = "pNN"` site.
#[derive(Debug)]
pub struct LatencyLog {
    buckets: [AtomicU32; BUCKETS],
    /// Samples recorded, cumulative (never decayed).
    samples: AtomicU64,
    /// The delay last computed, in nanoseconds (0: none yet).
    delay: AtomicU64,
}

impl Default for LatencyLog {
    fn default() -> LatencyLog {
        LatencyLog::new()
    }
}

impl LatencyLog {
    /// An empty log.
    pub const fn new() -> LatencyLog {
        LatencyLog {
            buckets: [const { AtomicU32::new(0) }; BUCKETS],
            samples: AtomicU64::new(0),
            delay: AtomicU64::new(0),
        }
    }

    /// Records one attempt's latency; refreshes the delay for percentile `tenths`.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn record(&self, latency: Duration, tenths: u32) {
        let nanos = crate::clock::nanos(latency);
        self.buckets[bucket_of(nanos)].fetch_add(1, Ordering::Relaxed);
        let n = self.samples.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(DECAY_EVERY) {
            for b in &self.buckets {
                let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c / 2));
            }
        }
        if n == MIN_SAMPLES || (n > MIN_SAMPLES && n.is_multiple_of(REFRESH_EVERY)) {
            let counts = self.counts();
            if let Some(bucket) = percentile_bucket(&counts, tenths) {
                self.delay.store(upper_bound(bucket), Ordering::Relaxed);
            }
        }
    }

    /// The bucket counts (decayed).
    pub(crate) fn counts(&self) -> [u32; BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }

    /// Samples recorded in all.
    pub fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// The hedge delay: `None` before [`MIN_SAMPLES`] samples.
    pub fn delay(&self) -> Option<Duration> {
        if self.samples() < MIN_SAMPLES {
            return None;
        }
        match self.delay.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }
}

/// The hedge delay of one `#[retry(hedge = "..")]` site, checked at compile time.
#[derive(Debug)]
pub enum HedgeSpec {
    /// `hedge = "30ms"`.
    Fixed {
        /// The delay.
        nanos: u64,
    },
    /// `hedge = "p95"`.
    Percentile {
        /// The percentile in tenths (500 ..= 999).
        tenths: u32,
        /// The site's latencies.
        log: &'static LatencyLog,
    },
}

impl HedgeSpec {
    /// The delay before a hedge, now (`None`: no hedge).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn delay(&self) -> Option<Duration> {
        match self {
            HedgeSpec::Fixed { nanos } => Some(Duration::from_nanos(*nanos)),
            HedgeSpec::Percentile { log, .. } => log.delay(),
        }
    }

    /// The log that attempts' latencies go into, with the percentile.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn log(&self) -> Option<(&'static LatencyLog, u32)> {
        match self {
            HedgeSpec::Fixed { .. } => None,
            HedgeSpec::Percentile { tenths, log } => Some((log, *tenths)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_four_per_octave() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1279), 0);
        assert_eq!(bucket_of(1280), 1);
        assert_eq!(bucket_of(2047), 3);
        assert_eq!(bucket_of(2048), 4);
        assert_eq!(upper_bound(0), 1280);
        assert_eq!(upper_bound(3), 2048);
        // 30 ms: in [29.36 ms, 33.55 ms).
        let b = bucket_of(30_000_000);
        assert!(upper_bound(b - 1) <= 30_000_000 && 30_000_000 < upper_bound(b));
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert!(upper_bound(BUCKETS - 1) > 3_600_000_000_000, "over an hour");
    }

    #[test]
    fn percentiles_of_simple_counts() {
        let mut counts = [0u32; BUCKETS];
        assert_eq!(percentile_bucket(&counts, 950), None);
        counts[3] = 95;
        counts[40] = 5;
        assert_eq!(percentile_bucket(&counts, 950), Some(3));
        assert_eq!(percentile_bucket(&counts, 951), Some(40));
        assert_eq!(percentile_bucket(&counts, 999), Some(40));
        assert_eq!(percentile_bucket(&counts, 500), Some(3));
    }

    #[test]
    fn no_delay_before_twenty_samples_then_the_bucket_bound() {
        let log = LatencyLog::new();
        for _ in 0..MIN_SAMPLES - 1 {
            log.record(Duration::from_millis(10), 950);
        }
        assert_eq!(log.delay(), None);
        log.record(Duration::from_millis(10), 950);
        let d = log.delay().unwrap();
        assert!(
            d > Duration::from_millis(10) && d <= Duration::from_micros(12_500),
            "{d:?}"
        );
    }

    #[test]
    fn decay_follows_recent_latency() {
        let log = LatencyLog::new();
        for _ in 0..DECAY_EVERY * 4 {
            log.record(Duration::from_millis(100), 500);
        }
        assert!(log.delay().unwrap() > Duration::from_millis(100));
        // A few hundred fast attempts later the median is fast.
        for _ in 0..DECAY_EVERY * 2 {
            log.record(Duration::from_millis(1), 500);
        }
        assert!(
            log.delay().unwrap() < Duration::from_millis(2),
            "{:?}",
            log.delay()
        );
        let total: u32 = log.counts().iter().sum();
        assert!(total < 2 * DECAY_EVERY as u32, "bounded weight: {total}");
    }

    #[test]
    fn plan_cases() {
        let ms = Duration::from_millis;
        assert_eq!(plan(None, 1, 3, false, ms(100)), Plan::Never);
        assert_eq!(plan(Some(ms(30)), 1, 3, false, ms(10)), Plan::Wait(ms(20)));
        assert_eq!(plan(Some(ms(30)), 1, 3, false, ms(30)), Plan::Hedge);
        assert_eq!(plan(Some(ms(30)), 3, 3, false, ms(30)), Plan::Never);
        assert_eq!(plan(Some(ms(30)), 1, 3, true, ms(30)), Plan::Never);
    }

    proptest! {
        /// Every latency falls in its bucket's range.
        #[test]
        fn a_latency_is_in_its_bucket(nanos in 0u64..(1 << 43)) {
            let b = bucket_of(nanos);
            if b + 1 < BUCKETS {
                prop_assert!(nanos < upper_bound(b));
            }
            if b > 0 {
                prop_assert!(upper_bound(b - 1) <= nanos);
            }
        }

        /// Against a plain reference: sort the samples, take the one of rank
        /// `ceil(n * q)`, and its bucket.
        #[test]
        fn percentile_matches_sorted_samples(
            samples in proptest::collection::vec(0u64..10_000_000_000, 1..300),
            tenths in 500u32..=999,
        ) {
            let mut counts = [0u32; BUCKETS];
            for &s in &samples {
                counts[bucket_of(s)] += 1;
            }
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            let n = sorted.len() as u64;
            let rank = (n * u64::from(tenths)).div_ceil(1000).max(1);
            let want = bucket_of(sorted[(rank - 1) as usize]);
            prop_assert_eq!(percentile_bucket(&counts, tenths), Some(want));
        }

        /// Against a plain reference of "start a hedge now?".
        #[test]
        fn plan_matches_a_reference(
            delay in proptest::option::of(0u64..1_000),
            started in 1u64..6,
            attempts in 1u64..6,
            refused: bool,
            since in 0u64..2_000,
        ) {
            let ms = Duration::from_millis;
            let got = plan(delay.map(ms), started, attempts, refused, ms(since));
            let want = if delay.is_none() || refused || started >= attempts {
                Plan::Never
            } else if since >= delay.unwrap() {
                Plan::Hedge
            } else {
                Plan::Wait(ms(delay.unwrap() - since))
            };
            prop_assert_eq!(got, want);
        }
    }
}
