//! A keyed limiter on its own, without a point: the `keys` section's rules and table
//! (governor's keyed limiter, with per-value overrides, bounded memory and the
//! concurrency rule).

use super::overrides::OverrideIndex;
use super::policy::KeyPolicy;
use super::rule::{Refusal, Rule};
use super::table::{admit_key, HotKeyStats, KeyHold, KeyTable, KeyTableStats, OverrideCell};
use super::{fingerprint, HotKey, KeyText};
use crate::Clock;
use std::fmt;

/// Why a [`KeyLimiter`] refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRefused {
    /// The key used up its calls per period (its burst).
    Limit,
    /// The key has its `max_concurrency` calls in flight.
    Concurrency,
}

impl fmt::Display for KeyRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyRefused::Limit => "the key used up its limit",
            KeyRefused::Concurrency => "the key has its most calls in flight",
        })
    }
}

impl std::error::Error for KeyRefused {}

impl From<Refusal> for KeyRefused {
    fn from(r: Refusal) -> KeyRefused {
        match r {
            // A limiter's rules never wait (see `with_clock`).
            Refusal::Tokens | Refusal::Wait(_) => KeyRefused::Limit,
            Refusal::Concurrency => KeyRefused::Concurrency,
        }
    }
}

/// The limits of a [`KeyPolicy`] on their own: what a point's `keys` section does
/// to a call's key, without the point (no registry, no statistics but the keys', no
/// listener), with the same bounds (see [`KeyPolicy`]) and the same bounded memory.
///
/// # Examples
///
/// ```
/// use resilience_runtime::keys::{KeyLimiter, KeyPolicy, KeyRefused};
/// use resilience_runtime::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let policy = KeyPolicy::builder()
///     .limit(2, Duration::from_secs(1))
///     .max_concurrency(1)
///     .override_limit("vip", 100)
///     .build()?;
/// let limiter = KeyLimiter::with_clock(policy, Clock::manual(&clock));
/// assert!(limiter.check("alice").is_ok());
/// let held = limiter.acquire("alice")?; // a call in flight
/// assert_eq!(limiter.acquire("alice").unwrap_err(), KeyRefused::Concurrency);
/// drop(held);
/// assert_eq!(limiter.check("alice").unwrap_err(), KeyRefused::Limit);
/// clock.advance(Duration::from_millis(500)); // one call refilled
/// assert!(limiter.check("alice").is_ok());
/// assert!((0..50).all(|_| limiter.check("vip").is_ok()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyLimiter {
    policy: KeyPolicy,
    rule: Rule,
    table: KeyTable,
    index: OverrideIndex,
    overrides: Box<[(OverrideCell, Rule)]>,
    clock: Clock,
}

/// A call of a key in flight under a [`KeyLimiter`]'s concurrency rule: its slot,
/// given back when dropped.
#[derive(Debug)]
#[must_use = "dropping the guard ends the call at once"]
pub struct KeyPermit<'a> {
    _hold: Option<KeyHold<'a>>,
}

impl KeyLimiter {
    /// A limiter of `policy` on the system clock.
    pub fn new(policy: KeyPolicy) -> KeyLimiter {
        KeyLimiter::with_clock(policy, Clock::system())
    }

    /// A limiter of `policy` on `clock` (a [`ManualClock`](crate::ManualClock) in
    /// tests).
    pub fn with_clock(policy: KeyPolicy, clock: Clock) -> KeyLimiter {
        // A limiter answers at once: a `max_wait` of the section is not used.
        let compile = |r: &super::policy::KeyRule| Rule {
            max_wait: 0,
            ..policy.compile(r)
        };
        let overrides = policy
            .overrides
            .iter()
            .map(|(value, o)| (OverrideCell::new(value), compile(&policy.merged(o))))
            .collect();
        KeyLimiter {
            rule: compile(&policy.rule),
            table: KeyTable::new(policy.max_keys),
            index: OverrideIndex::of(&policy),
            overrides,
            policy,
            clock,
        }
    }

    /// The section this limiter enforces.
    pub fn policy(&self) -> &KeyPolicy {
        &self.policy
    }

    /// A call of `key` that ends at once: takes one of its calls per period (a
    /// concurrency rule only needs a free slot).
    #[inline]
    pub fn check<K: HotKey + ?Sized>(&self, key: &K) -> Result<(), KeyRefused> {
        self.acquire(key).map(drop)
    }

    /// A call of `key` that lasts until the guard is dropped: takes one of its calls
    /// per period and, under a concurrency rule, one of its slots.
    #[inline]
    pub fn acquire<K: HotKey + ?Sized>(&self, key: &K) -> Result<KeyPermit<'_>, KeyRefused> {
        let fp = fingerprint(key);
        let over = self
            .index
            .get(fp)
            .map(|n| (&self.overrides[n].0, &self.overrides[n].1));
        let now = self.clock.now_ns();
        let hold = admit_key(&self.table, over, &self.rule, fp, now, || KeyText::of(key))?;
        Ok(KeyPermit { _hold: hold })
    }

    /// The `n` tracked keys (overridden values included) with the most calls, most
    /// first.
    pub fn hot_keys(&self, n: usize) -> Vec<HotKeyStats> {
        let mut out = Vec::new();
        self.table.busiest(n, &mut out);
        out.extend(self.overrides.iter().map(|(c, _)| c.stats()));
        super::sort_hot_keys(&mut out);
        out.truncate(n);
        out
    }

    /// The table's totals.
    pub fn stats(&self) -> KeyTableStats {
        self.table.stats()
    }
}
