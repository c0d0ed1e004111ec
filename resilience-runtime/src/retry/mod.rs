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
//! spend the budget like retries: a hedge the budget refuses is not sent (counted in
//! [`RetryStats::refused_by_budget`]). An attempt that fails with an error to retry
//! while others run waits for them; when none is left, the call goes on as without
//! hedging (backoff, then a new attempt). A downgraded attempt ends the call at once.
//! [`RetryStats::hedges`] counts the hedges started, [`RetryStats::cancelled`] the
//! attempts dropped because another answered. `hedge = "p95"` (`"p50"` ..
//! `"p99.9"`) hedges at that percentile of the call site's own attempt latencies,
//! kept in a small log-bucket histogram (4 buckets per octave, halved every 256
//! samples so it follows recent latency; the delay is the upper bound of the
//! percentile's bucket, at most 25% above it), and not at all before the site has
//! measured 20 attempts. Hedge delays and latencies are on tokio's clock (pause it
//! in tests), not the registry's. Only for idempotent calls.
//!
//! ```
//! # #[cfg(all(feature = "tokio", feature = "macros"))] {
//! use resilience_runtime::{registry, retry};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//!
//! static CALLS: AtomicU32 = AtomicU32::new(0);
//!
//! // Idempotent: if an attempt has not answered in 30 ms, another starts beside it.
//! #[retry(point = "docs.hedge", attempts = 3, hedge = "30ms")]
//! async fn price(sku: String) -> Result<u32, std::io::Error> {
//!     if CALLS.fetch_add(1, Ordering::Relaxed) == 0 {
//!         tokio::time::sleep(Duration::from_secs(5)).await; // a stalled replica
//!     }
//!     Ok(sku.len() as u32)
//! }
//!
//! let rt = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()?;
//! rt.block_on(async {
//!     let t0 = tokio::time::Instant::now();
//!     assert_eq!(price("abc".to_owned()).await?, 3);
//!     // The hedge started at 30 ms and answered at once; the stalled one was dropped.
//!     assert_eq!(t0.elapsed(), Duration::from_millis(30));
//!     Ok::<(), std::io::Error>(())
//! })?;
//! let s = registry().point("docs.hedge")?.retry_stats();
//! assert_eq!((s.calls, s.attempts, s.hedges, s.cancelled), (1, 2, 1, 1));
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backoff;
mod budget;
mod error;
pub(crate) mod hedge;
mod signature;
mod take;

pub use backoff::Backoff;
pub use budget::{BudgetConfig, BudgetConfigBuilder, BudgetStats, RetryBudget};
pub use error::RetryError;
pub use signature::{Fallible, RetryArgument, RetryPredicate};

use crate::builder::builder;
use crate::error::FieldError;
use std::time::Duration;

/// How a call is retried: attempts and the backoff between them; build one with
/// [`Retry::builder`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::{Backoff, Retry};
/// use std::time::Duration;
///
/// let retry = Retry::builder(3)
///     .backoff(Backoff::exponential(Duration::from_millis(50), 2.0, Duration::from_secs(2)).with_jitter(1.0))
///     .build()?;
/// assert_eq!(retry.attempts, 3);
/// assert_eq!(Retry::builder(0).build().unwrap_err().field, "attempts");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Retry {
    /// Attempts in all, the first included (1 ..= 100; 1 never retries).
    pub attempts: u64,
    /// The wait before each retry.
    pub backoff: Backoff,
}

/// The most attempts a [`Retry`] may make.
pub const MAX_ATTEMPTS: u64 = 100;

impl Retry {
    /// Starts a retry of `attempts` in all (the first included; 1 ..= 100), 50 ms
    /// doubling up to 2 s with full jitter between them.
    pub fn builder(attempts: u64) -> RetryBuilder {
        RetryBuilder {
            config: Retry::new(attempts),
        }
    }

    /// `attempts` with the default backoff, unchecked.
    pub(crate) fn new(attempts: u64) -> Retry {
        Retry {
            attempts,
            backoff: Backoff::exponential(Duration::from_millis(50), 2.0, Duration::from_secs(2))
                .with_jitter(1.0),
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one
    /// (`attempts`, `backoff.base`, `backoff.multiplier`, `backoff.max`,
    /// `backoff.jitter`).
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        if !(1..=MAX_ATTEMPTS).contains(&self.attempts) {
            return Err(FieldError::new(
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

builder! {
    /// Builds a [`Retry`]; start from [`Retry::builder`]. [`build`](Self::build)
    /// checks every setting.
    pub struct RetryBuilder => Retry;

    /// Checks every setting and returns the retry.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field (`attempts`, `backoff.base`,
    /// `backoff.multiplier`, `backoff.max`, `backoff.jitter`).
    build -> Result<FieldError> = Retry::validate;

    /// The wait before each retry (default 50 ms doubling up to 2 s, full jitter).
    backoff: Backoff,
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
/// Build one with [`RetryPolicy::builder`]; the fields are public for reading.
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::{BudgetConfig, Retry, RetryPolicy};
///
/// let policy = RetryPolicy::builder(Retry::builder(5).build()?)
///     .budget(BudgetConfig::default())
///     .build()?;
/// assert!(policy.budget.is_some());
/// let bad = BudgetConfig::builder().percent(-1.0).build();
/// assert_eq!(bad.unwrap_err().field, "percent");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts and backoff.
    pub retry: Retry,
    /// A budget of the point's own, or `None` to keep the budget the code names.
    pub budget: Option<BudgetConfig>,
}

impl RetryPolicy {
    /// Starts a policy retrying as `retry`, keeping the code's budget.
    pub fn builder(retry: Retry) -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            config: RetryPolicy::new(retry),
        }
    }

    /// `retry`, keeping the code's budget; unchecked.
    pub(crate) fn new(retry: Retry) -> RetryPolicy {
        RetryPolicy {
            retry,
            budget: None,
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one as a policy
    /// file does: `attempts`, `base`, `multiplier`, `max`, `jitter`,
    /// `budget.percent`, `budget.min_per_second`, `budget.window`.
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        if !(1..=MAX_ATTEMPTS).contains(&self.retry.attempts) {
            return Err(FieldError::new(
                "attempts",
                format!("must be in 1..={MAX_ATTEMPTS}, got {}", self.retry.attempts),
            ));
        }
        self.retry
            .backoff
            .check_as(["base", "multiplier", "max", "jitter"])?;
        if let Some(b) = &self.budget {
            b.validate().map_err(|e| FieldError {
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

builder! {
    /// Builds a [`RetryPolicy`]; start from [`RetryPolicy::builder`].
    /// [`build`](Self::build) checks every setting.
    pub struct RetryPolicyBuilder => RetryPolicy;

    /// Checks every setting and returns the policy.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field as a policy file does:
    /// `attempts`, `base`, `multiplier`, `max`, `jitter`, `budget.percent`,
    /// `budget.min_per_second`, `budget.window`.
    build -> Result<FieldError> = RetryPolicy::validate;

    /// A budget of the point's own, instead of the budget the code names.
    budget: Option<BudgetConfig>,
}

/// What a point's retries did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
