//! Retrying a call through a point (see [`mod@crate::retry`]): every attempt is a call of
//! the point; a downgrade ends the call with the fallback at once.

use crate::point::admit::permit::Permit;
use crate::point::Point;
use crate::retry::{Retry, RetryBudget, RetryStats};
use crate::sync::Ordering;
use crate::Downgraded;

/// Indices of the retry counters (`RetryStats` order). Attempts are not counted on
/// their own: every attempt is a call's first or a retry, so `attempts` is
/// `calls + retries`, and a call costs one counter.
const CALLS: usize = 0;
const RETRIES: usize = 2;
const EXHAUSTED: usize = 3;
const REFUSED: usize = 4;
/// Hedged attempts started (`#[retry(hedge = "..")]`), counted in `attempts` too.
const HEDGES: usize = 5;
/// Attempts dropped because another attempt of their call answered first.
const CANCELLED: usize = 6;

/// What happened to an attempt.
enum Attempt<T, E> {
    /// Returned `Ok`, or an error not to retry: the call's result.
    Done(Result<T, E>),
    /// Downgraded: the fallback answers.
    Downgraded(Downgraded),
    /// Failed with an error `retry_if` chose.
    Failed(E),
}

impl Point {
    fn count_retry(&self, what: usize) {
        self.counters.reason_cells().retry[what].fetch_add(1, Ordering::Relaxed);
    }

    /// `#[retry]`: counts a call (and so its first attempt), deposits into the
    /// budget it uses (the point's own if its retry section sets one, else `code`),
    /// which it returns.
    #[inline]
    pub(crate) fn begin_retrying<'a>(
        &self,
        code: Option<&'a RetryBudget>,
    ) -> Option<&'a RetryBudget> {
        self.count_retry(CALLS);
        let budget = self.effective_budget(code);
        if let Some(b) = budget {
            b.deposit();
        }
        budget
    }

    /// `#[retry]`: after failed attempt number `done` (from 1), whether to retry (a
    /// retry counted is the next attempt counted) and how long to wait first, by the
    /// point's retry section, else by `code`.
    pub(crate) fn retry_after(
        &self,
        code: impl FnOnce() -> Retry,
        budget: Option<&RetryBudget>,
        done: u32,
    ) -> Option<std::time::Duration> {
        let retry = self.effective_retry(code);
        if !self.may_retry(&retry, budget, done) {
            return None;
        }
        Some(
            retry
                .backoff
                .wait(u64::from(done - 1), crate::breaker::roll()),
        )
    }

    /// The point's clock (the registry's), which `#[retry]` sleeps on.
    pub(crate) fn retry_clock(&self) -> &crate::Clock {
        &self.clock
    }

    /// The retry counters (zeros until the first retrying call).
    pub fn retry_stats(&self) -> RetryStats {
        let Some(cells) = self.counters.by_reason.get() else {
            return RetryStats::default();
        };
        let n = |i: usize| cells.retry[i].load(Ordering::Relaxed);
        RetryStats {
            calls: n(CALLS),
            attempts: n(CALLS) + n(RETRIES) + n(HEDGES),
            retries: n(RETRIES),
            exhausted: n(EXHAUSTED),
            refused_by_budget: n(REFUSED),
            hedges: n(HEDGES),
            cancelled: n(CANCELLED),
        }
    }

    /// One attempt: a call of the point (an `Err` counts as an exception, a panic
    /// keeps unwinding).
    fn attempt<T, E>(
        &self,
        f: &mut impl FnMut() -> Result<T, E>,
        retry_if: &impl Fn(&E) -> bool,
    ) -> Attempt<T, E> {
        let mut permit = None;
        if let Err(d) = self.enter_in(&mut permit) {
            return Attempt::Downgraded(d);
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *f)) {
            Ok(out) => {
                Permit::finish_in(self, &mut permit, out.is_err());
                match out {
                    Err(e) if retry_if(&e) => Attempt::Failed(e),
                    out => Attempt::Done(out),
                }
            }
            Err(panic) => {
                Permit::finish_in(self, &mut permit, true);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Whether to retry after failed attempt number `done` (from 1): attempts left,
    /// and the budget (if any) allows it. Counts what it decides.
    fn may_retry(&self, retry: &Retry, budget: Option<&RetryBudget>, done: u32) -> bool {
        if u64::from(done) >= retry.attempts {
            self.count_retry(EXHAUSTED);
            return false;
        }
        if budget.is_some_and(|b| !b.try_retry()) {
            self.count_retry(REFUSED);
            return false;
        }
        self.count_retry(RETRIES);
        true
    }

    /// Runs `f` through this point up to `retry.attempts` times, waiting
    /// `retry.backoff` between attempts (the thread sleeps; a manual clock advances),
    /// while `budget` (if any) allows: see [`mod@crate::retry`]. The point's retry
    /// section, if a layer sets one ([`Registry::set_retry`](crate::Registry::set_retry)),
    /// replaces `retry` (read after each failed attempt) and, if it sets a budget,
    /// `budget`. An `Err` that `retry_if`
    /// chooses is retried; any other result, a downgrade (answered by `fallback`, at
    /// once) and a panic end the call. Every `Err` counts as an exception of the
    /// point, every attempt as a call.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::retry::{BudgetConfig, Retry};
    /// use resilience_runtime::{Clock, ManualClock, Registry};
    /// use std::time::Duration;
    ///
    /// let manual = ManualClock::new();
    /// let registry: &'static Registry =
    ///     Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    /// let point = registry.point("docs.retrying")?;
    /// let budget = registry.retry_budget("docs");
    /// let mut failures_left = 2;
    /// let out = point.call_retrying(
    ///     &Retry::builder(3).build()?,
    ///     Some(budget),
    ///     || if failures_left > 0 { failures_left -= 1; Err("busy") } else { Ok(7) },
    ///     |_downgraded| Ok(0),
    ///     |e| *e == "busy",
    /// );
    /// assert_eq!(out, Ok(7));
    /// let stats = point.retry_stats();
    /// assert_eq!((stats.calls, stats.attempts, stats.retries), (1, 3, 2));
    /// assert_eq!(point.stats().totals.exceptions, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn call_retrying<T, E>(
        &self,
        retry: &Retry,
        budget: Option<&RetryBudget>,
        mut f: impl FnMut() -> Result<T, E>,
        fallback: impl FnOnce(Downgraded) -> Result<T, E>,
        retry_if: impl Fn(&E) -> bool,
    ) -> Result<T, E> {
        let budget = self.begin_retrying(budget);
        let mut done = 0;
        loop {
            match self.attempt(&mut f, &retry_if) {
                Attempt::Done(out) => return out,
                Attempt::Downgraded(d) => return fallback(d),
                Attempt::Failed(e) => {
                    done += 1;
                    match self.retry_after(|| *retry, budget, done) {
                        Some(wait) => self.clock.sleep(wait),
                        None => return Err(e),
                    }
                }
            }
        }
    }
}

// ---- hedging (`#[retry(hedge = "..")]`, see `retry::hedge`) ----

// Used by the hedging combinator, which needs the `tokio` feature.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
impl Point {
    /// `#[retry(hedge)]`: asks for one hedged attempt, once the attempt count allows
    /// it: `true` (counted as a hedge) if the budget, if any, lets it spend one retry,
    /// else `false` (counted as refused by the budget).
    pub(crate) fn try_hedge(&self, budget: Option<&RetryBudget>) -> bool {
        if budget.is_some_and(|b| !b.try_retry()) {
            self.count_retry(REFUSED);
            return false;
        }
        self.count_retry(HEDGES);
        true
    }

    /// `#[retry(hedge)]`: `n` attempts dropped because another one answered first.
    pub(crate) fn count_hedges_cancelled(&self, n: u64) {
        if n > 0 {
            self.counters.reason_cells().retry[CANCELLED].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `#[retry(hedge)]`: after every attempt of a round failed (`started` attempts
    /// made in all, hedges included; `round` backoffs waited so far), whether to
    /// retry and how long to wait first (`round` indexes the backoff, so hedges do
    /// not lengthen it). Counts what it decides, as [`retry_after`](Self::retry_after).
    pub(crate) fn retry_after_round(
        &self,
        retry: &Retry,
        budget: Option<&RetryBudget>,
        started: u32,
        round: u32,
    ) -> Option<std::time::Duration> {
        if !self.may_retry(retry, budget, started) {
            return None;
        }
        Some(retry.backoff.wait(u64::from(round), crate::breaker::roll()))
    }
}
