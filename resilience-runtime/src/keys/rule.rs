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
    /// How long (clock ns) a call may wait for its key's next token, 0 for not at all
    /// (the section's `max_wait`; set to 0 for a call that may not wait).
    pub(crate) max_wait: u64,
    /// The call holds its token already (it waited for it): only the concurrency
    /// rule is asked.
    pub(crate) held: bool,
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
    /// Not a refusal: the key's next token is reserved for the call, due this many
    /// clock nanoseconds from now; the call waits, then asks again holding it
    /// ([`Rule::held`]). No slot is taken yet.
    Wait(u64),
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
    /// rule counts them, a slot) or says why not, changing nothing; or, with a
    /// `max_wait`, reserves the next token if it is due within it
    /// ([`Refusal::Wait`], which changes the bucket: keep the state).
    #[inline]
    pub(crate) fn admit(&mut self, rule: &Rule, now: u64) -> Result<(), Refusal> {
        if rule.holds() && self.inflight >= rule.max_inflight {
            return Err(Refusal::Concurrency);
        }
        if let (Some(g), false) = (&rule.gcra, rule.held) {
            let scaled = g.scaled(now);
            match g.take(self.tat, scaled, 1) {
                Some(tat) => self.tat = tat,
                None if rule.max_wait != 0 => {
                    match g.reserve(self.tat, scaled, 1, g.scaled_span(rule.max_wait)) {
                        Some((tat, wait)) => {
                            self.tat = tat;
                            return Err(Refusal::Wait(g.unscaled_ceil(wait).max(1)));
                        }
                        None => return Err(Refusal::Tokens),
                    }
                }
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

    fn rule(limit: u64, burst: Option<u64>, conc: Option<u64>) -> Rule {
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

    #[test]
    fn a_waiting_rule_reserves_the_next_token_within_its_wait() {
        let r = Rule {
            max_wait: 150_000_000,
            ..rule(10, Some(1), Some(5))
        };
        let mut s = KeyState::default();
        let t0 = 1_000_000_000_000;
        assert!(s.admit(&r, t0).is_ok());
        // The next token is due in 100 ms: reserved, no slot taken yet.
        assert_eq!(s.admit(&r, t0), Err(Refusal::Wait(100_000_000)));
        assert_eq!(s.inflight, 1);
        // The one after that would be 200 ms away: beyond the wait.
        assert_eq!(s.admit(&r, t0), Err(Refusal::Tokens));
        // Coming back with the token held: only the slot is taken.
        let held = Rule { held: true, ..r };
        assert!(s.admit(&held, t0 + 100_000_000).is_ok());
        assert_eq!(s.inflight, 2);
        // Held or not, the concurrency rule still decides.
        let mut full = KeyState {
            tat: 0,
            inflight: 5,
        };
        assert_eq!(full.admit(&held, t0), Err(Refusal::Concurrency));
    }
}
