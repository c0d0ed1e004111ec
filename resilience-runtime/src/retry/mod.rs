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

mod budget;
mod registry;
mod take;

pub use crate::breaker::Backoff;
pub use budget::{BudgetConfig, BudgetStats, RetryBudget};
pub use registry::RetryError;

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
#[derive(Clone, Copy, Debug, PartialEq)]
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

/// A point's `retry` section: how its retrying calls retry, set at runtime (code,
/// policy files, the console), over what the code says.
///
/// When a point has one, `#[retry]` and [`Point::call_retrying`](crate::Point::call_retrying)
/// on that point use its [`retry`](Self::retry) (attempts and backoff) instead of the
/// attribute's or the argument's, and, if it has a [`budget`](Self::budget), a budget of
/// the point's own with those limits instead of the budget the code names. The change
/// applies from the next call (a call in progress keeps the budget it began with and
/// reads attempts and backoff at each failure). Set it with
/// [`Registry::set_retry`](crate::Registry::set_retry) or a policy file's
/// `[points."name".retry]`.
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::{BudgetConfig, Retry, RetryPolicy};
///
/// let policy = RetryPolicy::new(Retry::new(5)).with_budget(BudgetConfig::default());
/// assert!(policy.validate().is_ok());
/// let bad = RetryPolicy::new(Retry::new(101));
/// assert_eq!(bad.validate().unwrap_err().field, "attempts");
/// let bad = RetryPolicy::new(Retry::new(2))
///     .with_budget(BudgetConfig { percent: -1.0, ..BudgetConfig::default() });
/// assert_eq!(bad.validate().unwrap_err().field, "budget.percent");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts and backoff.
    pub retry: Retry,
    /// A budget of the point's own, or `None` to keep the budget the code names.
    pub budget: Option<BudgetConfig>,
}

impl RetryPolicy {
    /// `retry`, keeping the code's budget.
    pub fn new(retry: Retry) -> RetryPolicy {
        RetryPolicy {
            retry,
            budget: None,
        }
    }

    /// The same with a budget of the point's own.
    #[must_use]
    pub fn with_budget(mut self, budget: BudgetConfig) -> RetryPolicy {
        self.budget = Some(budget);
        self
    }

    /// Checks every field.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid field as a policy file does:
    /// `attempts`, `base`, `multiplier`, `max`, `jitter`, `budget.percent`,
    /// `budget.min_per_second`, `budget.window`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_ATTEMPTS).contains(&self.retry.attempts) {
            return Err(ConfigError::new(
                "attempts",
                format!("must be in 1..={MAX_ATTEMPTS}, got {}", self.retry.attempts),
            ));
        }
        self.retry
            .backoff
            .check_as(["base", "multiplier", "max", "jitter"])?;
        if let Some(b) = &self.budget {
            b.validate().map_err(|e| ConfigError {
                field: match e.field {
                    "percent" => "budget.percent",
                    "min_per_second" => "budget.min_per_second",
                    _ => "budget.window",
                },
                message: e.message,
            })?;
        }
        Ok(())
    }
}

/// What a point's retries did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Calls made through [`Point::call_retrying`](crate::Point::call_retrying).
    pub calls: u64,
    /// Attempts in all (first attempts and retries).
    pub attempts: u64,
    /// Retries made.
    pub retries: u64,
    /// Calls that failed on their last attempt.
    pub exhausted: u64,
    /// Retries the budget refused (the call then returned its last error).
    pub refused_by_budget: u64,
}
