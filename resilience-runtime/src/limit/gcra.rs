//! The token bucket's decision (GCRA), pure: no atomics, no clock.
//!
//! A bucket of `rate` tokens per second holding `capacity` is a theoretical arrival
//! time `tat`: the bucket is full while `tat <= now`, and taking a token moves `tat`
//! one `interval` on. A call may take `n` tokens while `tat` (from `now` on) plus `n`
//! intervals runs at most `capacity` intervals ahead of `now`.
//!
//! # Exact arithmetic
//!
//! Time is counted in units of `1 / scale` of the clock's unit, with `scale` chosen so
//! that the interval is a whole number of units. For a rate that is a multiple of
//! 0.001 token per second this is exact: 15 tokens a second is an interval of
//! 200 000 000 units of a third of a nanosecond, so exactly 200 ms refills exactly 3
//! tokens, and admissions never drift from `capacity + rate * t`. Other rates (and
//! buckets whose `capacity * interval` would not fit) round the interval up to the
//! clock's unit, so they can only refill slower than asked, never faster.
//!
//! Scaled times wrap around `u64`; `tat` never runs more than 2^62 units ahead of
//! `now`, so a wrapped difference is read correctly whenever `tat` is ahead. After an
//! idle gap of more than 2^63 units (at least 9 s, for the finest scales) a full
//! bucket may be misread as holding a deficit of up to `capacity` tokens: that errs
//! only towards refusing, for at most the time the bucket takes to refill.

/// The most a bucket's `capacity * interval` may span, in units.
const MAX_SPAN: u64 = 1 << 62;
/// Nanoseconds in a second, times the 1000 that makes a rate of 0.001 token per
/// second whole: the interval of a rate of `m` thousandths is `1e12 / m` ns.
const MILLI_NS: u64 = 1_000_000_000_000;

/// A bucket's parameters in scaled units (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Gcra {
    /// Units per unit of the clock.
    scale: u64,
    /// Units between two tokens; 0 for a closed bucket (rate 0), which admits none.
    interval: u64,
    /// How far `tat` may run ahead of now: `capacity * interval`.
    burst: u64,
}

impl Gcra {
    /// A bucket of `rate` tokens per second holding `capacity`, on a clock counting
    /// nanoseconds. A rate of 0 (or not a positive number) admits nothing.
    pub(crate) fn per_second(rate: f64, capacity: u64) -> Gcra {
        if !(rate > 0.0 && rate.is_finite()) {
            return Gcra::CLOSED;
        }
        // A rate given as a whole number of thousandths is taken as exactly that (the
        // f64 nearest to `m / 1000` stands for `m / 1000`).
        let milli = (rate * 1000.0).round();
        if milli >= 1.0 && milli <= MILLI_NS as f64 && milli / 1000.0 == rate {
            let m = milli as u64;
            let g = gcd(MILLI_NS, m);
            let interval = MILLI_NS / g;
            if let Some(burst) = interval.checked_mul(capacity) {
                if burst.saturating_add(interval) <= MAX_SPAN {
                    return Gcra {
                        scale: m / g,
                        interval,
                        burst,
                    };
                }
            }
        }
        Gcra::with_interval(1e9 / rate, capacity)
    }

    /// A bucket taking one token every `interval` clock units (rounded up to a whole
    /// unit) and holding `capacity`.
    pub(crate) fn with_interval(interval: f64, capacity: u64) -> Gcra {
        if interval.is_nan() || interval <= 0.0 {
            return Gcra::CLOSED;
        }
        let interval = if interval >= MAX_SPAN as f64 {
            MAX_SPAN
        } else {
            (interval.ceil() as u64).max(1)
        };
        Gcra {
            scale: 1,
            interval,
            burst: interval.saturating_mul(capacity).min(MAX_SPAN - interval),
        }
    }

    /// The bucket that admits nothing.
    pub(crate) const CLOSED: Gcra = Gcra {
        scale: 1,
        interval: 0,
        burst: 0,
    };

    /// `now` (in clock units) in this bucket's units.
    #[inline(always)]
    pub(crate) fn scaled(&self, now: u64) -> u64 {
        now.wrapping_mul(self.scale)
    }

    /// The arrival time of a full bucket at `now` (scaled).
    pub(crate) fn full(&self, now: u64) -> u64 {
        now
    }

    /// How far `tat` runs ahead of `now` (both scaled): 0 for a full bucket.
    #[inline(always)]
    fn ahead(tat: u64, now: u64) -> u64 {
        let ahead = tat.wrapping_sub(now);
        if ahead as i64 > 0 {
            ahead
        } else {
            0
        }
    }

    /// The decision: the new arrival time if `n` tokens may be taken at `now` from a
    /// bucket at `tat` (both scaled), else `None`.
    #[inline(always)]
    pub(crate) fn take(&self, tat: u64, now: u64, n: u64) -> Option<u64> {
        if self.interval == 0 {
            return None;
        }
        let after = Gcra::ahead(tat, now).saturating_add(self.interval.saturating_mul(n));
        (after <= self.burst).then(|| now.wrapping_add(after))
    }

    /// The decision of a call that may wait up to `max_wait` (scaled) for its token:
    /// `Some((new arrival time, wait))` if `n` tokens are there now (wait 0) or will
    /// be within `max_wait`, reserving them (the arrival time moves on as for a
    /// take, so later calls wait behind this one), else `None`. The call may run
    /// `wait` units from `now`: by then the reserved tokens have refilled, so the
    /// calls run within `capacity + rate * t` over any interval `t`.
    #[inline]
    pub(crate) fn reserve(&self, tat: u64, now: u64, n: u64, max_wait: u64) -> Option<(u64, u64)> {
        if self.interval == 0 {
            return None;
        }
        let after = Gcra::ahead(tat, now).saturating_add(self.interval.saturating_mul(n));
        let wait = after.saturating_sub(self.burst);
        (wait <= max_wait && after <= MAX_SPAN).then(|| (now.wrapping_add(after), wait))
    }

    /// Takes `n` tokens at `now` whether or not they are there: the arrival time a
    /// bucket at `tat` has after it (both scaled), never more than the longest span
    /// ahead. What a cell shared by several keys records for each call of any of
    /// them (see `keys::shard`).
    #[inline]
    pub(crate) fn charge(&self, tat: u64, now: u64, n: u64) -> u64 {
        let after = Gcra::ahead(tat, now).saturating_add(self.interval.saturating_mul(n));
        now.wrapping_add(after.min(MAX_SPAN))
    }

    /// Scaled units as clock units, rounded up.
    #[inline]
    pub(crate) fn unscaled_ceil(&self, units: u64) -> u64 {
        units.div_ceil(self.scale)
    }

    /// Clock units as scaled units (saturating).
    #[inline]
    pub(crate) fn scaled_span(&self, units: u64) -> u64 {
        units.saturating_mul(self.scale)
    }

    /// The arrival time that carries the deficit of `from` (a bucket at `tat`, at
    /// `then`, scaled for `from`) into this bucket at `now` (scaled for `self`): the
    /// tokens taken and not yet refilled are owed here too, at most `capacity` of
    /// them, rounded up to this bucket's units. A closed bucket owes nothing.
    pub(crate) fn carry(&self, from: &Gcra, tat: u64, then: u64, now: u64) -> u64 {
        if from.interval == 0 || self.interval == 0 {
            return self.full(now);
        }
        let owed = u128::from(Gcra::ahead(tat, then)) * u128::from(self.interval);
        let ahead = owed.div_ceil(u128::from(from.interval));
        let ahead = u64::try_from(ahead).map_or(self.burst, |a| a.min(self.burst));
        now.wrapping_add(ahead)
    }

    /// Tokens left in a bucket at `tat` at `now` (both scaled).
    #[cfg(test)]
    pub(crate) fn available(&self, tat: u64, now: u64) -> u64 {
        match self.interval {
            0 => 0,
            i => (self.burst - Gcra::ahead(tat, now).min(self.burst)) / i,
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    /// Takes one token at a time from `g` at `now` (ns) until refused.
    fn drain(g: &Gcra, tat: &mut u64, now: u64) -> u64 {
        let mut n = 0;
        while let Some(next) = g.take(*tat, g.scaled(now), 1) {
            *tat = next;
            n += 1;
        }
        n
    }

    #[test]
    fn fifteen_a_second_refill_exactly_three_in_200_ms() {
        let g = Gcra::per_second(15.0, 3);
        assert_eq!((g.scale, g.interval), (3, 200_000_000));
        let start = 5_000 * MS;
        let mut tat = g.full(g.scaled(start));
        assert_eq!(drain(&g, &mut tat, start), 3, "starts full");
        assert_eq!(drain(&g, &mut tat, start + 200 * MS - 1), 2);
        assert_eq!(
            drain(&g, &mut tat, start + 200 * MS),
            1,
            "the third, on time"
        );
        // Drained every 200 ms for a thousand seconds: still exact, no drift.
        let mut total = 0;
        for step in 1..=5000 {
            total += drain(&g, &mut tat, start + 200 * MS + step * 200 * MS);
        }
        assert_eq!(total, 15_000);
    }

    #[test]
    fn rates_that_are_not_whole_thousandths_round_the_interval_up() {
        let g = Gcra::per_second(1.0 / 3.0, 1);
        assert_eq!(Gcra::per_second(0.003, 1).scale, 3, "thousandths are exact");
        assert_eq!(g.scale, 1);
        assert_eq!(g.interval, 3_000_000_000, "never faster than asked");
        let g = Gcra::per_second(0.5, 2);
        assert_eq!(
            (g.scale, g.interval, g.burst),
            (1, 2_000_000_000, 4_000_000_000)
        );
        assert_eq!(Gcra::per_second(0.0, 5), Gcra::CLOSED);
        assert_eq!(Gcra::per_second(f64::NAN, 5), Gcra::CLOSED);
        assert_eq!(
            Gcra::CLOSED.take(0, 0, 1),
            None,
            "a closed bucket admits none"
        );
    }

    #[test]
    fn the_fastest_bucket_fits() {
        let g = Gcra::per_second(1e9, 1_000_000_000);
        assert_eq!((g.scale, g.interval, g.burst), (1, 1, 1_000_000_000));
        let g = Gcra::per_second(999_999_999.999, 1_000_000_000);
        assert!(g.burst <= MAX_SPAN);
        let g = Gcra::per_second(0.001, 1_000_000_000);
        assert!(g.burst + g.interval <= MAX_SPAN, "clamped to fit");
    }

    #[test]
    fn a_raised_capacity_is_there_at_once_and_a_lowered_one_clamps() {
        let now = 7_000 * MS;
        let small = Gcra::per_second(1.0, 1);
        let mut tat = small.full(small.scaled(now));
        assert_eq!(drain(&small, &mut tat, now), 1);
        let big = Gcra::per_second(1e9, 1_000_000_000);
        let mut carried = big.carry(&small, tat, small.scaled(now), big.scaled(now));
        assert_eq!(big.available(carried, big.scaled(now)), 999_999_999);
        assert!(big.take(carried, big.scaled(now), 1).is_some());
        // Back: 10 owed of the big bucket are more than the small one holds.
        for _ in 0..10 {
            carried = big.take(carried, big.scaled(now), 1).unwrap();
        }
        let back = small.carry(&big, carried, big.scaled(now), small.scaled(now));
        assert_eq!(small.available(back, small.scaled(now)), 0);
        assert_eq!(small.take(back, small.scaled(now + 999 * MS), 1), None);
        assert!(small.take(back, small.scaled(now + 1000 * MS), 1).is_some());
    }

    #[test]
    fn a_long_idle_gap_only_errs_towards_refusing() {
        let g = Gcra::per_second(999_999.999, 1000);
        assert!(g.scale > 1_000_000);
        let now = 1_000 * MS;
        let mut tat = g.full(g.scaled(now));
        drain(&g, &mut tat, now);
        // Every gap reads as a bucket at most full, never fuller.
        for gap_s in [1u64, 9, 10, 18, 19, 37, 1000, 86_400] {
            let later = g.scaled(now + gap_s * 1000 * MS);
            assert!(g.available(tat, later) <= 1000);
        }
    }

    /// The reference: a bucket of rational tokens, refilled by elapsed time.
    #[test]
    fn reservations_queue_behind_each_other_within_the_wait() {
        // 10 a second holding 1: a token every 100 ms.
        let g = Gcra::per_second(10.0, 1);
        let ms = |m: u64| g.scaled(m * 1_000_000);
        let now = ms(1_000);
        let mut tat = g.full(now);
        let mut waits = Vec::new();
        while let Some((next, wait)) = g.reserve(tat, now, 1, ms(250)) {
            tat = next;
            waits.push(g.unscaled_ceil(wait) / 1_000_000);
        }
        // Now, then 100, 200 ms; the fourth would wait 300 ms > 250.
        assert_eq!(waits, [0, 100, 200]);
        // A reservation is a take: once the wait has passed, the bucket is as if the
        // calls had arrived then.
        assert_eq!(g.take(tat, ms(1_300), 1), Some(ms(1_400)));
        assert_eq!(g.take(tat, ms(1_299), 1), None);
        assert_eq!(Gcra::CLOSED.reserve(0, now, 1, u64::MAX), None);
    }

    fn reference_admits(rate_milli: u64, capacity: u64, calls: &[(u64, u64)]) -> Vec<bool> {
        // Tokens in units of 1 / (1e12) token: refill rate_milli units per ns.
        let full = u128::from(capacity) * u128::from(MILLI_NS);
        let (mut level, mut last) = (full, calls.first().map_or(0, |c| c.0));
        calls
            .iter()
            .map(|&(t, n)| {
                level = (level + u128::from(t - last) * u128::from(rate_milli)).min(full);
                last = t;
                let cost = u128::from(n) * u128::from(MILLI_NS);
                if level >= cost {
                    level -= cost;
                    true
                } else {
                    false
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn take_matches_a_rational_bucket(
            rate_milli in 1u64..50_000_000,
            capacity in 1u64..50,
            gaps in proptest::collection::vec((0u64..200_000_000, 1u64..4), 1..60),
        ) {
            let g = Gcra::per_second(rate_milli as f64 / 1000.0, capacity);
            let mut t = 1_000_000_000u64;
            let calls: Vec<(u64, u64)> = gaps.iter().map(|&(gap, n)| { t += gap; (t, n) }).collect();
            let want = reference_admits(rate_milli, capacity, &calls);
            let mut tat = g.full(g.scaled(calls[0].0));
            for (i, &(t, n)) in calls.iter().enumerate() {
                let got = match g.take(tat, g.scaled(t), n) {
                    Some(next) => { tat = next; true }
                    None => false,
                };
                prop_assert_eq!(got, want[i], "call {} at {} of {}", i, t, n);
            }
        }
    }
}
