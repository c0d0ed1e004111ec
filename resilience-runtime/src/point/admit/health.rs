//! The health rules, pure: timeouts, exceptions and the exception rate decide on the
//! counts of the point's window (read by the caller) and the compiled thresholds.
//!
//! # The bound they keep
//!
//! A call is refused as soon as the window holds `timeout_count` timeouts,
//! `max_exceptions` exceptions, or an exception rate at or over the threshold. A call
//! that read the counts before the threshold was reached may still run and add its
//! own outcome, so with `n` calls able to be between their check and their end at one
//! time (the threads calling, or the concurrency limit), a window holds at most
//! `threshold - 1 + n` exceptions (timeouts).

use crate::point::form::compiled::{Compiled, R_RATE};
use crate::Reason;

/// What the health rules look at: counts in the window before the asking call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::point) struct Health {
    pub(in crate::point) passes: u64,
    pub(in crate::point) downgrades: u64,
    pub(in crate::point) exceptions: u64,
    pub(in crate::point) timeouts: u64,
}

/// The first health rule of `c` that refuses a call seeing `h`, in SDS order.
/// `rules` are `c`'s rule bits as the caller knows them (see [`MAY_ALL`]): a bit
/// it knows clear costs no test.
///
/// [`MAY_ALL`]: crate::point::form::compiled::MAY_ALL
#[inline]
pub(in crate::point) fn trips(h: Health, c: &Compiled, rules: u64) -> Option<Reason> {
    debug_assert_eq!(rules & !c.rules, 0, "rule bits the form does not have");
    // Without its rule, a threshold is `NO_LIMIT`, which no count reaches.
    if h.timeouts >= c.timeout_count {
        return Some(Reason::Timeouts);
    }
    if h.exceptions >= c.max_exceptions {
        return Some(Reason::Exceptions);
    }
    if rules & R_RATE != 0 {
        // The asking call's own visit and pass count, as SDS counts them
        // (`exceptions / (visits - downgrades)` once `visits > min_visits`).
        let visits = h.passes.saturating_add(h.downgrades).saturating_add(1);
        let passes = h.passes.saturating_add(1);
        if visits > c.rate_floor && h.exceptions as f64 >= c.rate * passes as f64 {
            return Some(Reason::ExceptionRate);
        }
    }
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::point::form::compiled::{ACTIVE, R_EXCEPTIONS, R_TIMEOUTS};
    use proptest::prelude::*;

    /// The rules as the `policy` module's table states them, in its order.
    fn reference(
        h: Health,
        timeouts: Option<u64>,
        exceptions: Option<u64>,
        rate: Option<(f64, u64)>,
    ) -> Option<Reason> {
        if let Some(n) = timeouts {
            if h.timeouts >= n {
                return Some(Reason::Timeouts);
            }
        }
        if let Some(n) = exceptions {
            if h.exceptions >= n {
                return Some(Reason::Exceptions);
            }
        }
        if let Some((r, min_visits)) = rate {
            let visits = h.passes + h.downgrades + 1;
            let admitted = visits - h.downgrades;
            if visits > min_visits && (h.exceptions as f64) / (admitted as f64) >= r {
                return Some(Reason::ExceptionRate);
            }
        }
        None
    }

    proptest! {
        #[test]
        fn trips_matches_the_reference(
            passes in 0u64..1000, downgrades in 0u64..1000,
            exceptions in 0u64..1000, timeouts in 0u64..50,
            t in proptest::option::of(0u64..50),
            e in proptest::option::of(0u64..1000),
            rate in proptest::option::of((0u32..=100, 0u64..2000)),
        ) {
            let h = Health { passes, downgrades, exceptions, timeouts };
            // Rates in whole percent: the division of the reference and the
            // multiplication of the rule agree exactly on them.
            let rate = rate.map(|(p, m)| (f64::from(p) / 100.0, m));
            let mut c = Compiled { rules: ACTIVE, ..Compiled::default() };
            if let Some(n) = t { c.rules |= R_TIMEOUTS; c.timeout_count = n; }
            if let Some(n) = e { c.rules |= R_EXCEPTIONS; c.max_exceptions = n; }
            if let Some((r, m)) = rate { c.rules |= R_RATE; c.rate = r; c.rate_floor = m; }
            let want = reference(h, t, e, rate);
            let got = trips(h, &c, c.rules);
            // The rate rule's product and the reference's quotient may differ in the
            // last bit of a float exactly at the threshold; allow that edge only.
            if got != want {
                let (r, _) = rate.unwrap();
                let q = exceptions as f64 / (passes + 1) as f64;
                prop_assert!((q - r).abs() < 1e-12, "{:?} != {:?} for {:?}", got, want, h);
            }
        }
    }

    #[test]
    fn a_kill_switch_of_zero_always_trips() {
        let c = Compiled {
            rules: ACTIVE | R_EXCEPTIONS,
            max_exceptions: 0,
            ..Compiled::default()
        };
        assert_eq!(
            trips(Health::default(), &c, c.rules),
            Some(Reason::Exceptions)
        );
    }
}
