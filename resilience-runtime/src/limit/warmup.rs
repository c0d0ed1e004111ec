//! The warm-up rate limiter (Sentinel's `WarmUpController`, issue 18 §3): a limit of
//! `count` passes a second that a cold point reaches only gradually, starting at
//! `count / cold_factor` and climbing to `count` over about the warm-up period of
//! sustained traffic; idle time makes it cold again. The decision is pure
//! ([`WarmUp`]: no atomics, no clock); [`WarmUpCell`] is its atomic shell.
//!
//! # The model
//!
//! For `count` passes a second, a cold factor `c` (> 1) and a warm-up period of `p`
//! seconds, a point holds `stored` tokens: many tokens is cold, few is warm.
//!
//! - `warning_token = floor(floor(p * count) / (c - 1))`. Sentinel computes
//!   `(int)(p * count) / (coldFactor - 1)` in `int`s (its cold factor is an `int`),
//!   an integer division; for a whole `c` ours is the same number, and for a
//!   fractional one it is the same rule (truncate the product, then the quotient).
//! - `max_token = warning_token + floor(2 * p * count / (1 + c))`.
//! - `slope = (c - 1) / count / (max_token - warning_token)`: the rate falls from
//!   `count` at `warning_token` to `count / c` at `max_token`. When the band is empty
//!   (`max_token == warning_token`, as for 1 a second over 1 s) the slope is 0 and the
//!   limit is `count` at once; Sentinel divides by zero there and, its limit
//!   becoming NaN, refuses every call.
//! - The limit for a second: with `stored >= warning_token`,
//!   `1 / ((stored - warning_token) * slope + 1 / count)` (raised by one ulp, like
//!   Sentinel's `Math.nextUp`, so that an exact limit such as 10 is not rounded to
//!   9.999..); below, `count`. A call passes while the second's passes plus one stay
//!   within it, so a second admits `floor(limit)` ([`WarmUp::cap`]).
//! - Once a second, at the first call of a new second, the tokens are resynced from
//!   the previous second's passes `q` and the milliseconds `e` since the last resync
//!   ([`WarmUp::cool_down`]): below `warning_token`, or above it while
//!   `q < floor(floor(count) / c)` (Sentinel's `(int)count / coldFactor`, again an
//!   integer division: with a real division a point held at its cold limit of
//!   `floor(count / c)` would refill every second and never warm up), add
//!   `e * count / 1000` tokens; cap at `max_token`; then take `q` away (not below 0).
//!
//! A new point starts with `max_token` tokens: cold. Sustained traffic drains `q`
//! tokens a second (and no refill happens while it stays at or above the cold rate),
//! so the limit climbs; once below `warning_token` the refill of `count` a second
//! balances a full-rate load and the point stays warm; idle seconds refill it.
//!
//! Two differences from Sentinel: tokens are an `f64` here (Sentinel truncates the
//! refilled amount to a `long`; the same for a whole `count`, as the time elapsed is
//! whole seconds), and passes are counted per calendar second of the timeline, where
//! Sentinel reads them from its sliding one-second window.
//!
//! # Idle gaps
//!
//! Like Sentinel, which uses the pass count of the second just before now, a resync
//! after more than one idle second takes `q = 0` (the previous second had no passes)
//! and refills for the whole gap. The passes of the last busy second before such a gap
//! are never taken away: Sentinel does the same, and it errs towards cold (more
//! tokens, a lower limit).

// Wired into the admission path next (issue 18 §3); until then only the tests use it.
// The derived numbers' accessors and `stored` serve the tests and the loom models.
#![allow(dead_code)]

use crate::sync::{AtomicU64, Ordering};

/// Milliseconds in a second, as the refill counts them.
const MS_PER_SECOND: u64 = 1_000;
/// Nanoseconds in a second: the timeline's seconds are `now_ns / NS_PER_SECOND`.
const NS_PER_SECOND: u64 = 1_000_000_000;

/// The largest rate accepted (passes a second).
pub(crate) const MAX_RATE: f64 = 1e9;
/// The largest cold factor accepted.
pub(crate) const MAX_COLD_FACTOR: f64 = 100.0;
/// The shortest warm-up period accepted.
pub(crate) const MIN_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest warm-up period accepted.
pub(crate) const MAX_PERIOD: std::time::Duration = std::time::Duration::from_secs(3_600);

/// A warm-up limit's parameters and the numbers derived from them (see the module
/// docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct WarmUp {
    /// Passes a second once warm (`count`).
    count: f64,
    /// The cold factor `c`.
    cold_factor: f64,
    /// Tokens at and below which the point is warm.
    warning_token: f64,
    /// Tokens of a cold point.
    max_token: f64,
    /// How fast the limit falls per token above `warning_token`.
    slope: f64,
    /// A previous second with fewer passes than this refills above `warning_token`:
    /// `floor(floor(count) / c)`.
    cold_qps: f64,
    /// The smallest [`cap`](WarmUp::cap) of any token level: what a second may admit
    /// before its tokens are known.
    cold_cap: u64,
}

impl WarmUp {
    /// A limit of `rate` passes a second, warming up over `period` from
    /// `rate / cold_factor`.
    ///
    /// `rate` must be a number in (0, 1e9], `period` within 1 s..=1 h and
    /// `cold_factor` a number in (1, 100].
    #[cfg(not(loom))]
    pub(crate) fn new(
        rate: f64,
        period: std::time::Duration,
        cold_factor: f64,
    ) -> Result<WarmUp, crate::FieldError> {
        use crate::FieldError;
        if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
            return Err(FieldError::new(
                "warm_up.rate",
                format!("must be a number of passes a second in (0, 1e9], not {rate}"),
            ));
        }
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(FieldError::new(
                "warm_up.period",
                format!("must be between 1 s and 1 h, not {period:?}"),
            ));
        }
        if !(cold_factor.is_finite() && cold_factor > 1.0 && cold_factor <= MAX_COLD_FACTOR) {
            return Err(FieldError::new(
                "warm_up.cold_factor",
                format!("must be a number in (1, 100], not {cold_factor}"),
            ));
        }
        Ok(WarmUp::from_valid(rate, period.as_secs_f64(), cold_factor))
    }

    /// [`new`](WarmUp::new) for parameters already checked (`period` in seconds).
    /// The loom models, which have no `FieldError`, build theirs here.
    pub(crate) fn from_valid(rate: f64, period: f64, cold_factor: f64) -> WarmUp {
        let count = rate;
        // Sentinel: `(int)(p * count) / (coldFactor - 1)`, an integer division.
        let warning_token = ((period * count).floor() / (cold_factor - 1.0)).floor();
        // Sentinel: `warningToken + (int)(2 * p * count / (1.0 + coldFactor))`.
        let max_token = warning_token + (2.0 * period * count / (1.0 + cold_factor)).floor();
        let slope = if max_token > warning_token {
            (cold_factor - 1.0) / count / (max_token - warning_token)
        } else {
            0.0
        };
        // Sentinel: `(int)count / coldFactor`, an integer division.
        let cold_qps = (count.floor() / cold_factor).floor();
        let mut w = WarmUp {
            count,
            cold_factor,
            warning_token,
            max_token,
            slope,
            cold_qps,
            cold_cap: 0,
        };
        // The limit falls as the tokens rise (each step of `allowed` is monotonic in
        // floating point too), so its least value over [0, max_token] is at
        // `max_token` or, below `warning_token`, `count`.
        w.cold_cap = w.cap(max_token).min(w.cap_of(count));
        w
    }

    /// Passes a second once warm.
    pub(crate) fn count(&self) -> f64 {
        self.count
    }

    /// The cold factor.
    pub(crate) fn cold_factor(&self) -> f64 {
        self.cold_factor
    }

    /// Tokens at and below which the point is warm.
    pub(crate) fn warning_token(&self) -> f64 {
        self.warning_token
    }

    /// Tokens of a cold (new or long idle) point.
    pub(crate) fn max_token(&self) -> f64 {
        self.max_token
    }

    /// The limit's slope per token above [`warning_token`](WarmUp::warning_token).
    pub(crate) fn slope(&self) -> f64 {
        self.slope
    }

    /// The pass count of a previous second below which tokens above the warning
    /// level are refilled.
    pub(crate) fn cold_qps(&self) -> f64 {
        self.cold_qps
    }

    /// The least number of passes any second admits (that of a cold point, at most).
    pub(crate) fn cold_cap(&self) -> u64 {
        self.cold_cap
    }

    /// The pass limit of a second whose tokens are `stored`: a call passes while the
    /// second's passes plus one are at most this.
    #[inline]
    pub(crate) fn allowed(&self, stored: f64) -> f64 {
        if stored >= self.warning_token {
            let above = stored - self.warning_token;
            (1.0 / (above * self.slope + 1.0 / self.count)).next_up()
        } else {
            self.count
        }
    }

    /// How many passes a second whose tokens are `stored` admits: `floor(allowed)`.
    #[inline]
    pub(crate) fn cap(&self, stored: f64) -> u64 {
        self.cap_of(self.allowed(stored))
    }

    /// `floor(limit)` as a count of passes (at most `u32::MAX`, far above 1e9).
    #[inline]
    fn cap_of(&self, limit: f64) -> u64 {
        // `as` saturates: a limit below 1 admits nothing.
        (limit.floor() as u64).min(u64::from(u32::MAX))
    }

    /// The once-a-second resync: the tokens at a new second, from those at the last
    /// resync (`stored`), the milliseconds since it and the previous second's passes.
    #[inline]
    pub(crate) fn cool_down(&self, stored: f64, elapsed_ms: u64, previous_qps: u64) -> f64 {
        let previous = previous_qps as f64;
        let refill = elapsed_ms as f64 * self.count / MS_PER_SECOND as f64;
        let mut tokens = stored;
        if stored < self.warning_token || (stored > self.warning_token && previous < self.cold_qps)
        {
            tokens = stored + refill;
        }
        (tokens.min(self.max_token) - previous).max(0.0)
    }
}

/// The pending flag of [`WarmUpCell`]'s word: the second has moved on, its tokens
/// are being computed.
const PENDING: u64 = 1 << 63;
/// Where the second starts in the word.
const SECOND_SHIFT: u32 = 32;
/// The largest second the word holds (from the cell's creation: 68 years).
const MAX_SECOND: u64 = (1 << 31) - 1;
/// The passes of the word's second.
const PASSES: u64 = (1 << SECOND_SHIFT) - 1;

/// The word's second, pending flag and passes.
#[inline]
fn unpack(word: u64) -> (u64, bool, u64) {
    (
        (word & !PENDING) >> SECOND_SHIFT,
        word & PENDING != 0,
        word & PASSES,
    )
}

/// The word of a second and its passes.
#[inline]
fn pack(second: u64, pending: bool, passes: u64) -> u64 {
    let flag = if pending { PENDING } else { 0 };
    flag | (second << SECOND_SHIFT) | passes
}

/// The state of one warm-up limit: the current second with its passes, and the
/// tokens.
///
/// # The guarantee kept here
///
/// `word` packs the current second (counted from the cell's creation, 31 bits), a
/// pending flag and the second's passes (32 bits). Every pass is one successful
/// compare-and-swap of `word` that adds one to the passes of its second, decided on
/// the word it replaces: so under any number of threads the passes of a second never
/// exceed the limit each of them checked, and the limit they check is
///
/// - while the word is pending: [`WarmUp::cold_cap`], the least limit of any token
///   level, so not above the second's own;
/// - once it is not: the second's limit, [`WarmUp::cap`] of the tokens published for
///   it.
///
/// # The resync
///
/// The first call of a new second moves the word from `(old second, q passes)` to
/// `(new second, pending, 0)`. Exactly one caller does so per second reached (the
/// compare-and-swap includes the old second and its passes, and the second only grows,
/// so it succeeds once); it then computes the tokens from the old ones and `q` (or 0
/// after a gap of more than a second, see the module docs), stores them in `stored`,
/// and clears the pending flag (`fetch_and`), keeping the passes the others counted
/// meanwhile. No one waits for it: callers that find the word pending decide on the
/// cold cap. A call whose second is behind the word's (a clock read before another
/// thread's) counts in the word's second; one whose second is ahead of a pending word
/// counts in that pending second (the resync after it takes its place).
///
/// # Orderings
///
/// `stored` is written only by the resync-er, between its pending compare-and-swap and
/// its clearing of the flag, which is `Release`. Every other change of `word` is a
/// read-modify-write, so continues that release sequence: a caller that reads the word
/// with `Acquire` (a load, or a failed compare-and-swap) and finds its second not
/// pending therefore sees the tokens stored for it. It sees no later tokens: those are
/// stored after a later pending compare-and-swap, which, being `AcqRel` and reading
/// (through the release sequence) the caller's own successful `AcqRel`
/// compare-and-swap, happens after the caller's load of `stored` (and if the pending
/// one comes first, the caller's compare-and-swap fails and it decides again). The
/// resync-er's own load of the old tokens is ordered the same way.
#[derive(Debug)]
pub(crate) struct WarmUpCell {
    /// The timeline's second at creation: the word's seconds count from it.
    base: u64,
    /// The current second, the pending flag and the second's passes.
    word: AtomicU64,
    /// The tokens of the word's second, as `f64` bits.
    stored: AtomicU64,
}

impl WarmUpCell {
    /// A cold cell (`max_token` tokens) whose first second is that of `now_ns`.
    pub(crate) fn new(w: &WarmUp, now_ns: u64) -> WarmUpCell {
        WarmUpCell {
            base: now_ns / NS_PER_SECOND,
            word: AtomicU64::new(pack(0, false, 0)),
            stored: AtomicU64::new(w.max_token.to_bits()),
        }
    }

    /// The second of `now_ns`, counted from the cell's creation (0 before it).
    #[inline]
    fn second(&self, now_ns: u64) -> u64 {
        (now_ns / NS_PER_SECOND)
            .saturating_sub(self.base)
            .min(MAX_SECOND)
    }

    /// Admits one call of `w` at `now_ns` (ns on a monotonic timeline) if the
    /// second's limit allows it, and counts it.
    #[inline]
    pub(crate) fn try_pass(&self, w: &WarmUp, now_ns: u64) -> bool {
        let now = self.second(now_ns);
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let (second, pending, passes) = unpack(word);
            if now > second && !pending {
                let next = pack(now, true, 0);
                match self.word.compare_exchange_weak(
                    word,
                    next,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        word = self.resync(w, second, passes, now);
                        continue;
                    }
                    Err(seen) => {
                        word = seen;
                        continue;
                    }
                }
            }
            let cap = if pending {
                w.cold_cap
            } else {
                w.cap(f64::from_bits(self.stored.load(Ordering::Relaxed)))
            };
            if passes >= cap {
                return false;
            }
            match self.word.compare_exchange_weak(
                word,
                word + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
    }

    /// The resync after this caller moved the word from `(second, passes)` on to
    /// `now`, pending: stores the tokens of `now` and publishes them. Returns the word
    /// after (not pending, with the passes counted meanwhile).
    #[cold]
    fn resync(&self, w: &WarmUp, second: u64, passes: u64, now: u64) -> u64 {
        let gap = now - second;
        let previous_qps = if gap == 1 { passes } else { 0 };
        let old = f64::from_bits(self.stored.load(Ordering::Relaxed));
        let tokens = w.cool_down(old, gap * MS_PER_SECOND, previous_qps);
        self.stored.store(tokens.to_bits(), Ordering::Relaxed);
        self.word.fetch_and(!PENDING, Ordering::Release) & !PENDING
    }

    /// The tokens now (those of the last resync), for statistics.
    pub(crate) fn stored(&self) -> f64 {
        f64::from_bits(self.stored.load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    const NS: u64 = NS_PER_SECOND;
    /// Some instant on the timeline, the start of a second (ns).
    const T0: u64 = 1_000 * NS;

    fn warm_up(rate: f64, period_s: u64, factor: f64) -> WarmUp {
        WarmUp::new(rate, Duration::from_secs(period_s), factor).unwrap()
    }

    /// Calls `calls` times spread evenly over second `i` (counted from 1 at
    /// [`T0`]); returns the passes.
    fn offer(cell: &WarmUpCell, w: &WarmUp, i: u64, calls: u64) -> u64 {
        let start = T0 + (i - 1) * NS;
        (0..calls)
            .filter(|c| cell.try_pass(w, start + c * (NS / calls)))
            .count() as u64
    }

    #[test]
    fn derived_numbers() {
        // 10/s over 10 s, factor 3: p * count = 100; warning = 100 / 2 = 50;
        // max = 50 + floor(200 / 4) = 100; slope = 2 / 10 / 50 = 0.004;
        // cold qps = floor(10 / 3) = 3; cold limit 1 / (50 * 0.004 + 0.1) = 3.33: 3.
        let w = warm_up(10.0, 10, 3.0);
        assert_eq!(w.warning_token(), 50.0);
        assert_eq!(w.max_token(), 100.0);
        assert!((w.slope() - 0.004).abs() < 1e-15);
        assert_eq!(w.cold_qps(), 3.0);
        assert_eq!(w.cold_cap(), 3);
        assert_eq!(w.cap(100.0), 3);
        assert_eq!(w.cap(50.0), 10, "exactly 10 at the warning level (next_up)");
        assert_eq!(w.cap(0.0), 10);

        // 100/s over 5 s, factor 4: p * count = 500; warning = floor(500 / 3) = 166
        // (integer division); max = 166 + floor(1000 / 5) = 366;
        // slope = 3 / 100 / 200 = 0.00015; cold qps = floor(100 / 4) = 25;
        // cold limit 1 / (200 * 0.00015 + 0.01) = 1 / 0.04 = 25.
        let w = warm_up(100.0, 5, 4.0);
        assert_eq!(w.warning_token(), 166.0);
        assert_eq!(w.max_token(), 366.0);
        assert!((w.slope() - 0.00015).abs() < 1e-18);
        assert_eq!(w.cold_qps(), 25.0);
        assert_eq!(w.cap(366.0), 25);
        assert_eq!(w.cold_cap(), 25);
        // Half way, 100 tokens above warning: 1 / (0.015 + 0.01) = 40.
        assert_eq!(w.cap(266.0), 40);

        // 7.5/s over 2 s, factor 2.5: p * count = 15; warning = floor(15 / 1.5) = 10;
        // max = 10 + floor(30 / 3.5 = 8.57) = 18; slope = 1.5 / 7.5 / 8 = 0.025;
        // cold qps = floor(7 / 2.5 = 2.8) = 2; cold limit 1 / (0.2 + 0.1333) = 3: 3.
        let w = warm_up(7.5, 2, 2.5);
        assert_eq!(w.warning_token(), 10.0);
        assert_eq!(w.max_token(), 18.0);
        assert!((w.slope() - 0.025).abs() < 1e-15);
        assert_eq!(w.cold_qps(), 2.0);
        assert_eq!(w.cap(18.0), 3);
        assert_eq!(w.cap(5.0), 7, "warm: floor(7.5)");
        assert_eq!(w.cold_cap(), 3);

        // 3/s over 1 s, factor 3: p * count = 3; warning = floor(3 / 2) = 1;
        // max = 1 + floor(6 / 4) = 2; slope = 2 / 3 / 1; cold limit
        // 1 / (2/3 + 1/3) = 1.
        let w = warm_up(3.0, 1, 3.0);
        assert_eq!((w.warning_token(), w.max_token()), (1.0, 2.0));
        assert_eq!(w.cold_qps(), 1.0);
        assert_eq!(w.cap(2.0), 1);
        assert_eq!(w.cap(1.0), 3);
    }

    #[test]
    fn an_empty_band_is_the_full_rate_at_once() {
        // 1/s over 1 s, factor 3: warning = floor(1 / 2) = 0, max = 0 + floor(2 / 4)
        // = 0. Sentinel's slope is 2 / 0 there; ours is 0, the limit is `count`.
        let w = warm_up(1.0, 1, 3.0);
        assert_eq!(
            (w.warning_token(), w.max_token(), w.slope()),
            (0.0, 0.0, 0.0)
        );
        assert_eq!(w.cap(0.0), 1);
        assert_eq!(w.cold_cap(), 1);
        let cell = WarmUpCell::new(&w, T0);
        assert_eq!(offer(&cell, &w, 1, 10), 1);
        assert_eq!(offer(&cell, &w, 2, 10), 1);
    }

    #[test]
    fn cool_down_follows_the_rules() {
        let w = warm_up(10.0, 10, 3.0);
        // Below warning: refill 1 s = 10 tokens, then take the passes away.
        assert_eq!(w.cool_down(40.0, 1_000, 10), 40.0);
        // Above warning, previous second at the cold qps (3 is not < 3): no refill.
        assert_eq!(w.cool_down(100.0, 1_000, 3), 97.0);
        // Above warning and a quiet previous second: refill, capped at max.
        assert_eq!(w.cool_down(90.0, 1_000, 2), 98.0);
        assert_eq!(w.cool_down(60.0, 500, 0), 65.0);
        // Exactly at warning: no refill either way.
        assert_eq!(w.cool_down(50.0, 1_000, 0), 50.0);
        assert_eq!(w.cool_down(50.0, 1_000, 10), 40.0);
        // Never below zero; a long gap is capped at max.
        assert_eq!(w.cool_down(2.0, 0, 10), 0.0);
        assert_eq!(w.cool_down(0.0, 3_600_000, 0), 100.0);
    }

    /// The table: 10/s over 10 s, factor 3 (warning 50, max 100, slope 0.004, cold
    /// qps 3; see `derived_numbers`), 100 calls spread over each second, far more
    /// than any limit, so every second admits its whole limit, `q` of second `i` is
    /// its admitted count, and the resync at second `i + 1` is
    /// `stored - q` (no refill while stored > 50 and q >= 3), then
    /// `min(stored + 10, 100) - q` once below 50.
    ///
    /// limit(s) = 1 / ((s - 50) * 0.004 + 0.1) for s >= 50, 10 below.
    ///
    /// | second | stored | limit                          | admitted |
    /// |--------|--------|--------------------------------|----------|
    /// | 1      | 100    | 1 / (0.200 + 0.1) = 3.333      | 3        |
    /// | 2      | 97     | 1 / (0.188 + 0.1) = 3.472      | 3        |
    /// | 3      | 94     | 1 / (0.176 + 0.1) = 3.623      | 3        |
    /// | 4      | 91     | 1 / (0.164 + 0.1) = 3.788      | 3        |
    /// | 5      | 88     | 1 / (0.152 + 0.1) = 3.968      | 3        |
    /// | 6      | 85     | 1 / (0.140 + 0.1) = 4.167      | 4        |
    /// | 7      | 81     | 1 / (0.124 + 0.1) = 4.464      | 4        |
    /// | 8      | 77     | 1 / (0.108 + 0.1) = 4.808      | 4        |
    /// | 9      | 73     | 1 / (0.092 + 0.1) = 5.208      | 5        |
    /// | 10     | 68     | 1 / (0.072 + 0.1) = 5.814      | 5        |
    /// | 11     | 63     | 1 / (0.052 + 0.1) = 6.579      | 6        |
    /// | 12     | 57     | 1 / (0.028 + 0.1) = 7.812      | 7        |
    /// | 13     | 50     | 1 / (0 + 0.1) = 10 (next_up)   | 10       |
    /// | 14     | 40     | = 50 (no refill) - 10; 10      | 10       |
    /// | 15..25 | 40     | min(40 + 10, 100) - 10; 10     | 10       |
    ///
    /// Then 60 idle seconds (26..=85): the resync at 86 has q = 0 (a gap of more than
    /// a second) and refills 61 s * 10 = 610 onto 40, capped at 100: cold again, 3.
    #[test]
    fn table_warms_up_in_the_period_and_cools_when_idle() {
        let w = warm_up(10.0, 10, 3.0);
        let cell = WarmUpCell::new(&w, T0);
        let table: [(u64, f64); 25] = [
            (3, 100.0),
            (3, 97.0),
            (3, 94.0),
            (3, 91.0),
            (3, 88.0),
            (4, 85.0),
            (4, 81.0),
            (4, 77.0),
            (5, 73.0),
            (5, 68.0),
            (6, 63.0),
            (7, 57.0),
            (10, 50.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
            (10, 40.0),
        ];
        for (i, (admitted, stored)) in (1..).zip(table) {
            assert_eq!(offer(&cell, &w, i, 100), admitted, "second {i}");
            assert_eq!(cell.stored(), stored, "second {i}");
        }
        // Idle 26..=85.
        assert_eq!(offer(&cell, &w, 86, 100), 3, "cold again");
        assert_eq!(cell.stored(), 100.0);
        assert_eq!(offer(&cell, &w, 87, 100), 3);
        assert_eq!(cell.stored(), 97.0);
    }

    /// A short pause while warm: one idle second refills 10 (q = 0 for the gap of
    /// two), 40 + 20 = 60 > 50: the limit drops to 1 / (0.04 + 0.1) = 7.14.
    #[test]
    fn a_short_pause_cools_a_little() {
        let w = warm_up(10.0, 10, 3.0);
        let cell = WarmUpCell::new(&w, T0);
        for i in 1..=20 {
            offer(&cell, &w, i, 100);
        }
        assert_eq!(cell.stored(), 40.0);
        // Second 21 idle; at 22: gap 2, q = 0, 40 < 50: 40 + 20 = 60.
        assert_eq!(offer(&cell, &w, 22, 100), 7);
        assert_eq!(cell.stored(), 60.0);
        // 23: 60 > 50 and q = 7 >= 3: 60 - 7 = 53: 1 / (0.012 + 0.1) = 8.9.
        assert_eq!(offer(&cell, &w, 23, 100), 8);
        assert_eq!(cell.stored(), 53.0);
    }

    #[test]
    fn a_clock_behind_counts_in_the_current_second() {
        let w = warm_up(10.0, 10, 3.0);
        let cell = WarmUpCell::new(&w, T0);
        assert!(cell.try_pass(&w, T0 + NS));
        // Earlier than the cell and than the word's second: counted in second 2.
        assert!(cell.try_pass(&w, 0));
        assert!(cell.try_pass(&w, T0 + 5));
        assert!(!cell.try_pass(&w, T0 + NS + 1), "3 passes in second 2");
    }

    #[test]
    fn invalid_parameters_name_their_field() {
        let s = Duration::from_secs;
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 1.5e9] {
            let e = WarmUp::new(rate, s(10), 3.0).unwrap_err();
            assert_eq!(e.field, "warm_up.rate", "{rate}");
        }
        for period in [Duration::ZERO, Duration::from_millis(999), s(3_601)] {
            let e = WarmUp::new(10.0, period, 3.0).unwrap_err();
            assert_eq!(e.field, "warm_up.period", "{period:?}");
        }
        for factor in [1.0, 0.5, f64::NAN, f64::INFINITY, 100.5] {
            let e = WarmUp::new(10.0, s(10), factor).unwrap_err();
            assert_eq!(e.field, "warm_up.cold_factor", "{factor}");
        }
        assert!(WarmUp::new(1e9, s(3_600), 100.0).is_ok());
        assert!(WarmUp::new(1e-9, s(1), 1.000_001).is_ok());
        let e = WarmUp::new(0.0, s(10), 3.0).unwrap_err();
        assert!(e.to_string().contains("`warm_up.rate`"), "{e}");
    }

    /// The largest parameters: the counts fit the word.
    #[test]
    fn the_largest_limit_fits() {
        let w = warm_up(1e9, 3_600, 100.0);
        assert_eq!(w.cap(0.0), 1_000_000_000);
        assert_eq!(w.cold_cap(), 10_000_000);
        let cell = WarmUpCell::new(&w, T0);
        assert!(cell.try_pass(&w, T0));
    }

    /// Sentinel's formulas written out plainly, with a per-second pass count.
    struct Reference {
        count: f64,
        factor: f64,
        warning: f64,
        max: f64,
        slope: f64,
        stored: f64,
        last: u64,
        passes: Vec<u64>,
    }

    impl Reference {
        fn new(count: f64, period: f64, factor: f64, first: u64) -> Reference {
            let warning = ((period * count).floor() / (factor - 1.0)).floor();
            let max = warning + (2.0 * period * count / (1.0 + factor)).floor();
            let slope = if max > warning {
                (factor - 1.0) / count / (max - warning)
            } else {
                0.0
            };
            Reference {
                count,
                factor,
                warning,
                max,
                slope,
                stored: max,
                last: first,
                passes: vec![0; first as usize + 1],
            }
        }

        fn call(&mut self, second: u64) -> bool {
            let second = second.max(self.last);
            if second > self.last {
                let previous = if second == self.last + 1 {
                    self.passes[self.last as usize]
                } else {
                    0
                } as f64;
                let elapsed_ms = (second - self.last) * 1_000;
                let mut tokens = self.stored;
                let cold_qps = (self.count.floor() / self.factor).floor();
                if self.stored < self.warning || (self.stored > self.warning && previous < cold_qps)
                {
                    tokens += elapsed_ms as f64 * self.count / 1000.0;
                }
                self.stored = (tokens.min(self.max) - previous).max(0.0);
                self.last = second;
                self.passes.resize(second as usize + 1, 0);
            }
            let limit = if self.stored >= self.warning {
                (1.0 / ((self.stored - self.warning) * self.slope + 1.0 / self.count)).next_up()
            } else {
                self.count
            };
            let passes = &mut self.passes[second as usize];
            if (*passes + 1) as f64 <= limit {
                *passes += 1;
                true
            } else {
                false
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// One thread, random rates and call times: the cell admits exactly what the
        /// reference does, call by call, and holds the same tokens.
        #[test]
        fn one_thread_matches_the_reference(
            rate in prop_oneof![1u32..60u32, 1u32..2_000u32].prop_map(f64::from),
            fraction in prop_oneof![Just(0.0), 0.0f64..1.0],
            period in 1u64..30,
            factor in prop_oneof![Just(3.0), 1.1f64..8.0],
            gaps in proptest::collection::vec(
                prop_oneof![
                    8 => 0u64..NS / 20,
                    2 => 0u64..2 * NS,
                    1 => 0u64..40 * NS,
                ],
                1..600,
            ),
        ) {
            let rate = rate + fraction;
            let w = WarmUp::new(rate, Duration::from_secs(period), factor).unwrap();
            let start = T0 + 123_456_789;
            let cell = WarmUpCell::new(&w, start);
            let mut reference = Reference::new(rate, period as f64, factor, 0);
            let mut now = start;
            for (n, gap) in gaps.into_iter().enumerate() {
                now += gap;
                let second = now / NS - start / NS;
                prop_assert_eq!(cell.try_pass(&w, now), reference.call(second), "call {}", n);
                prop_assert_eq!(cell.stored(), reference.stored, "call {}", n);
            }
        }
    }

    /// `threads` threads call `calls` times each at instants of the cell's first
    /// second; returns the passes.
    fn hammer(w: &WarmUp, cell: &WarmUpCell, threads: u64, calls: u64, second_start: u64) -> u64 {
        let barrier = crate::sync::Barrier::new(threads as usize);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        (0..calls)
                            .filter(|c| cell.try_pass(w, second_start + (t * calls + c) % NS))
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        })
    }

    #[test]
    fn many_threads_in_one_second_pass_exactly_the_limit() {
        // Cold: 10 000/s over 10 s, factor 3: cold limit 3 333.33.
        let w = warm_up(10_000.0, 10, 3.0);
        assert_eq!(w.cap(w.max_token()), 3_333);
        for threads in [1, 2, 8, 32, 64] {
            let cell = WarmUpCell::new(&w, T0);
            let calls = 2 * 3_334 / threads + 10;
            assert_eq!(
                hammer(&w, &cell, threads, calls, T0),
                3_333,
                "{threads} threads"
            );
        }
    }

    #[test]
    fn many_threads_crossing_a_second_resync_once() {
        // 100/s over 10 s, factor 3: warning 500, max 1000, slope 2/100/500,
        // cold 33. Second 1 admits 33; the resync at 2 takes 1000 - 33 = 967:
        // 1 / (467 * 0.00004 + 0.01) = 34.8, 34 (a second resync would take more).
        let w = warm_up(100.0, 10, 3.0);
        assert_eq!(w.cool_down(w.max_token(), 1_000, 33), 967.0);
        assert_eq!(w.cap(967.0), 34);
        for threads in [1, 2, 8, 32, 64] {
            let cell = WarmUpCell::new(&w, T0);
            let calls = 2 * 35 / threads + 10;
            assert_eq!(
                hammer(&w, &cell, threads, calls, T0),
                33,
                "{threads}, first"
            );
            assert_eq!(
                hammer(&w, &cell, threads, calls, T0 + NS),
                34,
                "{threads}, second"
            );
            assert_eq!(cell.stored(), 967.0, "{threads} threads");
        }
    }

    /// Threads calling at instants of two seconds at once: each second's passes stay
    /// within its limit (the first's 33; the second's at most 34, or the cold cap if
    /// its resync-er was slow), and there is one resync.
    #[test]
    fn many_threads_racing_across_a_second() {
        let w = warm_up(100.0, 10, 3.0);
        for threads in [2, 8, 32, 64] {
            let cell = WarmUpCell::new(&w, T0 + NS - 1_000);
            let barrier = crate::sync::Barrier::new(threads);
            let passed: u64 = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads as u64)
                    .map(|t| {
                        let (barrier, cell, w) = (&barrier, &cell, &w);
                        s.spawn(move || {
                            barrier.wait();
                            (0..200u64)
                                .filter(|c| cell.try_pass(w, T0 + NS - 100 + (t * 7 + c) % 200))
                                .count() as u64
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            // Second 1 admitted some q <= 33 before the word moved on; second 2's
            // tokens come from that q, its limit from them.
            let stored = cell.stored();
            let (_, _, second_passes) = unpack(cell.word.load(Ordering::Relaxed));
            let first_passes = passed - second_passes;
            assert!(first_passes <= 33, "{threads}: {first_passes}");
            assert_eq!(stored, w.cool_down(w.max_token(), 1_000, first_passes));
            assert!(second_passes <= w.cap(stored), "{threads}: {second_passes}");
        }
    }
}
