//! Retries with backoff and budgets: [`Point::call_retrying`](crate::Point::call_retrying)
//! runs a call up to [`Retry::attempts`] times through a point, waiting a
//! [`Backoff`] between attempts, and only while a shared [`RetryBudget`] allows it.
//!
//! # What is retried
//!
//! An `Err` that `retry_if` chooses (by default every `Err`). Never a panic (it keeps
//! unwinding), never a downgrade or an open breaker: those end the call at once with
//! the fallback, since asking again would only add load to what refused it. Each
//! attempt is a call of the point: its rules, breaker and statistics see every
//! attempt (the recommended order: retry outside, the point's rules inside).
//!
//! # Waiting
//!
//! The wait before retry `n` (from 0) is `backoff.wait(n, roll)` (see [`Backoff`]:
//! `jitter = 1.0` is "full jitter", `0.5` "equal jitter"). The sync form sleeps on the
//! thread (on a manual clock it advances the clock instead, so tests are instant and
//! deterministic).
//!
//! # Hedging
//!
//! `#[retry(hedge = "30ms")]` (or `hedge = "p95"`) on an `async fn` does not wait for
//! a slow attempt to fail: once an attempt has not answered after the hedge delay,
//! another one starts beside it, and the first answer that is not an error to retry
//! wins; the others are dropped (cancelled) at once. Hedges count as attempts and
//! spend the budget like retries. See the `hedge` argument of the `#[retry]`
//! attribute for the rules, [`RetryStats::hedges`] and [`RetryStats::cancelled`]
//! for what is counted.

mod budget;
pub(crate) mod hedge;

pub use crate::breaker::Backoff;
pub use budget::{BudgetConfig, BudgetStats, RetryBudget};

use crate::error::ConfigError;
use std::time::Duration;

/// How a call is retried.
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::{Backoff, Retry};
/// use std::time::Duration;
///
/// let retry = Retry::new(3)
///     .backoff(Backoff::exponential(Duration::from_millis(50), 2.0, Duration::from_secs(2)).with_jitter(1.0));
/// assert!(retry.validate().is_ok());
/// assert_eq!(Retry::new(0).validate().unwrap_err().field, "attempts");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Retry {
    /// Attempts in all, the first included (1 ..= 100; 1 never retries).
    pub attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
}

/// The most attempts a [`Retry`] may make.
pub const MAX_ATTEMPTS: u32 = 100;

impl Retry {
    /// `attempts` in all, 50 ms doubling up to 2 s with full jitter between them.
    pub fn new(attempts: u32) -> Retry {
        Retry {
            attempts,
            backoff: Backoff::exponential(Duration::from_millis(50), 2.0, Duration::from_secs(2))
                .with_jitter(1.0),
        }
    }

    /// The same with another backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Retry {
        self.backoff = backoff;
        self
    }

    /// Checks every field.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid field (`attempts`, `backoff.base`,
    /// `backoff.multiplier`, `backoff.max`, `backoff.jitter`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_ATTEMPTS).contains(&self.attempts) {
            return Err(ConfigError::new(
                "attempts",
                format!("must be in 1..={MAX_ATTEMPTS}, got {}", self.attempts),
            ));
        }
        self.backoff.check_as([
            "backoff.base",
            "backoff.multiplier",
            "backoff.max",
            "backoff.jitter",
        ])
    }
}

/// What a point's retries did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Calls made through [`Point::call_retrying`](crate::Point::call_retrying).
    pub calls: u64,
    /// Attempts in all: first attempts, retries and hedges (`calls + retries +
    /// hedges`).
    pub attempts: u64,
    /// Retries made.
    pub retries: u64,
    /// Calls that failed on their last attempt.
    pub exhausted: u64,
    /// Retries and hedges the budget refused (a refused retry ends the call with its
    /// last error; a refused hedge is not sent, the attempts running go on).
    pub refused_by_budget: u64,
    /// Hedged attempts started: attempts begun beside one still running, because it
    /// had not answered after the hedge delay (`#[retry(hedge = "..")]`).
    pub hedges: u64,
    /// Attempts dropped while still running because another attempt of the same call
    /// answered first (or was downgraded). An attempt dropped because the caller
    /// dropped the whole call is not counted here (its point counts it cancelled).
    pub cancelled: u64,
}
