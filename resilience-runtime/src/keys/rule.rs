//! A key's rule compiled for the hot path, and its decision on one key's state: pure
//! functions, no atomics and no clock (the table runs them under its shard's lock).

use crate::limit::Gcra;

/// No concurrency limit.
pub(crate) const NO_INFLIGHT_LIMIT: u32 = u32::MAX;

/// A [`KeyRule`] in hot-path form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Rule {
    /// The token bucket of `limit` per period holding `burst`, if the rule limits calls.
    pub(crate) gcra: Option<Gcra>,
    /// Calls in flight at once, or [`NO_INFLIGHT_LIMIT`].
    pub(crate) max_inflight: u32,
}

impl Rule {
    /// Whether the rule counts calls in flight (and calls must give their slot back).
    #[inline(always)]
    pub(crate) fn holds(&self) -> bool {
        self.max_inflight != NO_INFLIGHT_LIMIT
    }
}

/// Why a key refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its token bucket was empty.
    Tokens,
    /// Its calls in flight were at the limit.
    Concurrency,
}

/// One key's counting state: the token bucket's arrival time (scaled for the rule's
/// bucket) and the calls in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyState {
    pub(crate) tat: u64,
    pub(crate) inflight: u32,
}

impl KeyState {
    /// The decision at `now` (clock nanoseconds): admits (taking a token and, if the
    /// rule counts them, a slot) or says why not, changing nothing.
    #[inline]
    pub(crate) fn admit(&mut self, rule: &Rule, now: u64) -> Result<(), Refusal> {
        if rule.holds() && self.inflight >= rule.max_inflight {
            return Err(Refusal::Concurrency);
        }
        if let Some(g) = &rule.gcra {
            match g.take(self.tat, g.scaled(now), 1) {
                Some(tat) => self.tat = tat,
                None => return Err(Refusal::Tokens),
            }
        }
        if rule.holds() {
            self.inflight += 1;
        }
        Ok(())
    }

    /// A call admitted with a slot ended.
    #[inline]
    pub(crate) fn release(&mut self) {
        self.inflight = self.inflight.saturating_sub(1);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::keys::policy::{KeyPolicy, KeyRule};
    use std::time::Duration;

    fn rule(limit: u64, burst: Option<u64>, conc: Option<u32>) -> Rule {
        let p = KeyPolicy::builder()
            .limit(limit, Duration::from_secs(1))
            .build()
            .unwrap();
        p.compile(&KeyRule {
            limit: Some(limit),
            burst,
            max_concurrency: conc,
        })
    }

    #[test]
    fn a_key_gets_its_burst_then_its_rate() {
        let r = rule(10, Some(3), None);
        let mut s = KeyState::default();
        let t0 = 1_000_000_000_000;
        assert_eq!((0..5).filter(|_| s.admit(&r, t0).is_ok()).count(), 3);
        // 100 ms refill one token at 10 per second.
        assert!(s.admit(&r, t0 + 100_000_000).is_ok());
        assert_eq!(s.admit(&r, t0 + 100_000_000), Err(Refusal::Tokens));
    }

    #[test]
    fn concurrency_is_checked_first_and_given_back() {
        let r = rule(100, None, Some(1));
        let mut s = KeyState::default();
        assert!(s.admit(&r, 5).is_ok());
        assert_eq!(s.admit(&r, 5), Err(Refusal::Concurrency));
        s.release();
        assert!(s.admit(&r, 5).is_ok());
    }

    #[test]
    fn a_limit_of_zero_admits_nothing() {
        let r = rule(0, None, None);
        let mut s = KeyState::default();
        assert_eq!(s.admit(&r, 1 << 40), Err(Refusal::Tokens));
    }
}
