//! Retry budgets (Finagle's `RetryBudget`, tower's `TpsBudget`): retries may add at
//! most `percent` of the calls of the last `window`, plus `min_per_second` for every
//! second of it, so a failing dependency is never hit by a retry storm.
//!
//! # The bound, exactly
//!
//! The window is a ring of ten buckets of `window / 10` (see `crate::window`). A
//! retry is allowed only if, counted from the start of the window's oldest bucket,
//! `retries + 1 <= min_per_second * window_seconds + calls * percent / 100` (the
//! calls and retries are cumulative counts, the retries counted by the same
//! compare-and-swap that checks them), so under any number of threads the retries in
//! the window never exceed that allowance of the calls counted when the last of them
//! was allowed. Counting a call is a load and a store in a cell only the counting
//! thread writes (threads past the owned cells share one atomic counter): about a
//! nanosecond, made for every first attempt.

use super::take::take_below;
use crate::builder::builder;
use crate::clock::Clock;
use crate::error::FieldError;
use crate::sync::Recover;
use crate::sync::{AtomicPtr, AtomicU64, Mutex, Ordering};
use crate::window::Ring;
use std::time::Duration;

/// The limits of a [`RetryBudget`]; build them with [`BudgetConfig::builder`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::BudgetConfig;
/// use std::time::Duration;
///
/// let config = BudgetConfig::builder()
///     .percent(20.0)
///     .min_per_second(10)
///     .window(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(config.allowance(1_000), 10 * 10 + 200);
/// let bad = BudgetConfig::builder().percent(-1.0).build();
/// assert_eq!(bad.unwrap_err().field, "percent");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct BudgetConfig {
    /// Retries allowed per hundred calls of the window (0 ..= 1000; tower's default
    /// is 20).
    pub percent: f64,
    /// Retries allowed for every second of the window whatever the traffic (so a
    /// quiet service can still retry).
    pub min_per_second: u64,
    /// How far back calls and retries count (1 s ..= 1 hour).
    pub window: Duration,
}

impl Default for BudgetConfig {
    /// 20% of the calls of the last 10 s plus 10 retries a second, as tower's
    /// `TpsBudget` defaults.
    fn default() -> BudgetConfig {
        BudgetConfig {
            percent: 20.0,
            min_per_second: 10,
            window: Duration::from_secs(10),
        }
    }
}

/// Buckets of a budget's window.
const BUCKETS: u64 = 10;
/// The longest window.
const MAX_WINDOW: Duration = Duration::from_secs(3600);

impl BudgetConfig {
    /// Starts from the defaults (the [`Default`]: 20% of the calls of the last 10 s
    /// plus 10 retries a second).
    pub fn builder() -> BudgetConfigBuilder {
        BudgetConfigBuilder {
            config: BudgetConfig::default(),
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one.
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        if !self.percent.is_finite() || !(0.0..=1000.0).contains(&self.percent) {
            return Err(FieldError::new(
                "percent",
                format!("must be a number in 0..=1000, got {}", self.percent),
            ));
        }
        if self.min_per_second > 1_000_000 {
            return Err(FieldError::new(
                "min_per_second",
                format!("must be at most 1000000, got {}", self.min_per_second),
            ));
        }
        if self.window < Duration::from_secs(1) || self.window > MAX_WINDOW {
            return Err(FieldError::new(
                "window",
                format!("must be between 1s and 1h, got {:?}", self.window),
            ));
        }
        Ok(())
    }

    /// The retries allowed in a window that counted `calls` calls. Pure.
    pub fn allowance(&self, calls: u64) -> u64 {
        let seconds = self.window.as_secs_f64().ceil() as u64;
        let share = (calls as f64 * self.percent / 100.0).floor() as u64;
        self.min_per_second
            .saturating_mul(seconds)
            .saturating_add(share)
    }
}

builder! {
    /// Builds a [`BudgetConfig`]; start from [`BudgetConfig::builder`]. Each setter
    /// is named after the field it sets; [`build`](Self::build) checks them all.
    pub struct BudgetConfigBuilder => BudgetConfig;

    /// Checks every setting and returns the limits.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field.
    build -> Result<FieldError> = BudgetConfig::validate;

    /// Retries allowed per hundred calls of the window (0 ..= 1000; default 20).
    percent: f64,
    /// Retries allowed for every second of the window whatever the traffic
    /// (at most 1 000 000; default 10).
    min_per_second: u64,
    /// How far back calls and retries count (1 s ..= 1 hour; default 10 s).
    window: Duration,
}

/// Whether one more retry fits a window that holds `retries` retries and `calls`
/// calls. Pure: the decision of [`RetryBudget::try_retry`].
#[cfg(test)]
pub(crate) fn admits(config: &BudgetConfig, retries: u64, calls: u64) -> bool {
    retries < config.allowance(calls)
}

/// Calls counted by threads with a cell of their own.
const OWNED: usize = 16;

#[repr(align(64))]
#[derive(Debug)]
struct Cell(AtomicU64);

/// A shared retry budget: every first attempt deposits (see [`deposit`](Self::deposit)),
/// every retry asks [`try_retry`](Self::try_retry). Get a named one, shared by every
/// point that names it, from [`Registry::retry_budget`](crate::Registry::retry_budget).
///
/// Its limits can change while it is in use ([`reconfigure`](Self::reconfigure)): a
/// new configuration counts from zero, an earlier one comes back with its counts (a
/// budget keeps one set of counters per configuration it has had).
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::{BudgetConfig, RetryBudget};
/// use resilience_runtime::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let manual = ManualClock::new();
/// let config = BudgetConfig::builder()
///     .percent(10.0)
///     .min_per_second(0)
///     .window(Duration::from_secs(10))
///     .build()?;
/// let budget = RetryBudget::new(config, Clock::manual(&manual))?;
/// for _ in 0..100 {
///     budget.deposit();
/// }
/// let allowed = (0..50).filter(|_| budget.try_retry()).count();
/// assert_eq!(allowed, 10, "10% of 100 calls");
/// // Ten seconds later the window has forgotten them.
/// manual.advance(Duration::from_secs(11));
/// assert!(!budget.try_retry());
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    clock: Clock,
    /// The counters of the configuration in force (one of `kept`).
    current: AtomicPtr<Counts>,
    /// Every configuration's counters, leaked until the budget is dropped: a caller
    /// may still hold a replaced one.
    kept: Mutex<Vec<&'static Counts>>,
}

/// The counters of one configuration.
#[derive(Debug)]
struct Counts {
    config: BudgetConfig,
    /// Calls counted per thread (`OWNED` cells, then the shared one), cumulative.
    calls: Box<[Cell]>,
    /// Retries allowed, cumulative.
    retries: AtomicU64,
    /// Retries refused, cumulative.
    refused: AtomicU64,
    /// Bucket-start snapshots of `[calls, retries]`.
    window: Ring<2>,
}

impl Counts {
    fn new(config: BudgetConfig, now: u64) -> Counts {
        let width = crate::clock::nanos(config.window) / BUCKETS;
        Counts {
            config,
            window: Ring::new(BUCKETS, width.max(1), now, [0, 0]),
            calls: (0..=OWNED).map(|_| Cell(AtomicU64::new(0))).collect(),
            retries: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    fn calls_total(&self) -> u64 {
        self.calls.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

/// What a budget has counted since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetStats {
    /// First attempts counted.
    pub calls: u64,
    /// Retries allowed.
    pub retries: u64,
    /// Retries refused.
    pub refused: u64,
}

impl Drop for RetryBudget {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut().recover());
        // SAFETY: each `Counts` came from `Box::leak`, is listed once, and a budget
        // being dropped has no caller left.
        kept.into_iter()
            .for_each(|c| unsafe { crate::util::reclaim(c) });
    }
}

impl RetryBudget {
    /// A budget on `clock`.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming an invalid field of `config`.
    pub fn new(config: BudgetConfig, clock: Clock) -> Result<RetryBudget, FieldError> {
        config.validate()?;
        let counts: &'static Counts = Box::leak(Box::new(Counts::new(config, clock.now_ns())));
        Ok(RetryBudget {
            clock,
            current: AtomicPtr::new(std::ptr::from_ref(counts).cast_mut()),
            kept: Mutex::new(vec![counts]),
        })
    }

    #[inline]
    fn counts(&self) -> &Counts {
        // SAFETY: `current` only ever holds pointers from `Box::leak` (in `new` and
        // `reconfigure`), kept in `kept` and freed only when the budget is dropped.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The budget's limits.
    pub fn config(&self) -> BudgetConfig {
        self.counts().config
    }

    /// Changes the budget's limits, at once for every caller (a call site that looked
    /// the budget up keeps the same `&RetryBudget`). A configuration the budget has not
    /// had starts with empty counts; one it had before takes its counts back.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming an invalid field of `config` (the budget is unchanged).
    pub fn reconfigure(&self, config: BudgetConfig) -> Result<(), FieldError> {
        config.validate()?;
        let mut kept = self.kept.lock().recover();
        let counts = match kept.iter().find(|c| c.config == config) {
            Some(c) => *c,
            None => {
                let c: &'static Counts =
                    Box::leak(Box::new(Counts::new(config, self.clock.now_ns())));
                kept.push(c);
                c
            }
        };
        self.current
            .store(std::ptr::from_ref(counts).cast_mut(), Ordering::Release);
        Ok(())
    }

    /// Counts a call (a first attempt): it adds `percent / 100` of a retry to the
    /// budget for the length of the window.
    #[inline]
    pub fn deposit(&self) {
        let counts = self.counts();
        let lane = crate::lane::thread_lane() as usize;
        match counts.calls.get(lane).filter(|_| lane < OWNED) {
            // Only this thread writes its cell.
            Some(own) => own
                .0
                .store(own.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed),
            None => {
                counts.calls[OWNED].0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Asks for one retry: `true` (and counted) if it fits the budget, else `false`
    /// (counted as refused). Exact under any number of threads (see the module docs).
    pub fn try_retry(&self) -> bool {
        let c = self.counts();
        let now = self.clock.now_ns();
        let base = c
            .window
            .base(now, || [c.calls_total(), c.retries.load(Ordering::Acquire)]);
        let calls = c.calls_total().saturating_sub(base[0]);
        let allowance = c.config.allowance(calls);
        // The window's retries are `retries - base[1]`: take one while below.
        if take_below(&c.retries, allowance.saturating_add(base[1])) {
            true
        } else {
            c.refused.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// What the budget counted, over every configuration it has had.
    pub fn stats(&self) -> BudgetStats {
        let kept = self.kept.lock().recover();
        kept.iter()
            .fold(BudgetStats::default(), |s, c| BudgetStats {
                calls: s.calls + c.calls_total(),
                retries: s.retries + c.retries.load(Ordering::Relaxed),
                refused: s.refused + c.refused.load(Ordering::Relaxed),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use proptest::prelude::*;

    fn config(percent: f64, min: u64) -> BudgetConfig {
        BudgetConfig {
            percent,
            min_per_second: min,
            window: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_minimum_lets_a_quiet_service_retry() {
        let manual = ManualClock::new();
        let b = RetryBudget::new(config(20.0, 2), Clock::manual(&manual)).unwrap();
        assert_eq!((0..100).filter(|_| b.try_retry()).count(), 20);
        assert_eq!(b.stats().refused, 80);
    }

    #[test]
    fn invalid_configs_name_their_field() {
        let field = |c: BudgetConfig| c.validate().unwrap_err().field;
        assert_eq!(field(config(f64::NAN, 0)), "percent");
        assert_eq!(field(config(1000.5, 0)), "percent");
        assert_eq!(field(config(10.0, 2_000_000)), "min_per_second");
        let short = BudgetConfig {
            window: Duration::from_millis(500),
            ..config(10.0, 0)
        };
        assert_eq!(field(short), "window");
    }

    /// Many threads deposit and retry at once: the retries allowed never exceed the
    /// allowance of all the calls deposited (the window does not move: a manual clock).
    #[test]
    fn racing_threads_never_exceed_the_allowance() {
        for threads in [1usize, 2, 8, 32, 64] {
            let manual = ManualClock::new();
            let b = std::sync::Arc::new(
                RetryBudget::new(config(25.0, 1), Clock::manual(&manual)).unwrap(),
            );
            let allowed = std::sync::Arc::new(AtomicU64::new(0));
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let (b, allowed) = (b.clone(), allowed.clone());
                    std::thread::spawn(move || {
                        for i in 0..400 {
                            b.deposit();
                            if i % 2 == 0 && b.try_retry() {
                                allowed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            let calls = threads as u64 * 400;
            let allowed = allowed.load(Ordering::Relaxed);
            assert!(allowed <= 10 + calls / 4, "{threads}: {allowed}");
            assert_eq!(b.stats().calls, calls);
            assert_eq!(b.stats().retries, allowed);
            // Every refusal was counted too.
            assert_eq!(b.stats().retries + b.stats().refused, calls / 2);
            // With everything deposited, the rest of the allowance is there.
            let more = (0..calls).filter(|_| b.try_retry()).count() as u64;
            assert_eq!(allowed + more, 10 + calls / 4, "{threads}");
        }
    }

    proptest! {
        /// Against a plain model of the window (a snapshot of the cumulative counts at
        /// the first ask of each 1-s bucket; the window starts at the snapshot of the
        /// bucket nine before the current one): deposits and asks at random times,
        /// the budget allows exactly what the model does.
        #[test]
        fn matches_a_reference(
            steps in proptest::collection::vec((0u64..3_000, 0u64..20, 0u64..20), 1..30)
        ) {
            let manual = ManualClock::new();
            let cfg = config(30.0, 1);
            let b = RetryBudget::new(cfg, Clock::manual(&manual)).unwrap();
            let tick = || manual.now_ns() / 1_000_000_000;
            let created = tick();
            let mut snapshots = std::collections::BTreeMap::new();
            let mut rotated = created;
            let (mut calls, mut retries) = (0u64, 0u64);
            for (dt_ms, deposits, asks) in steps {
                manual.advance(Duration::from_millis(dt_ms));
                for _ in 0..deposits {
                    b.deposit();
                }
                calls += deposits;
                for _ in 0..asks {
                    let now = tick();
                    if now > rotated {
                        for t in rotated + 1..=now {
                            snapshots.insert(t, (calls, retries));
                        }
                        rotated = now;
                    }
                    let oldest = now.saturating_sub(9);
                    let base = if oldest <= created {
                        (0, 0)
                    } else {
                        snapshots[&oldest]
                    };
                    let want = admits(&cfg, retries - base.1, calls - base.0);
                    prop_assert_eq!(b.try_retry(), want);
                    retries += u64::from(want);
                }
            }
        }
    }
}
