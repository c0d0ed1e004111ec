//! The adaptive (Google SRE) breaker, as go-zero's current `googlebreaker.go`.
//!
//! Used two ways: the engine asks [`SreBreaker::allow`] and records outcomes itself;
//! standalone, go-zero style, [`SreBreaker::try_allow`] returns an [`SrePermit`] to
//! mark [`accept`](SrePermit::accept)ed or [`reject`](SrePermit::reject)ed, and
//! [`mark_success`](SreBreaker::mark_success) / [`mark_failure`](SreBreaker::mark_failure)
//! record an outcome without asking first.

use super::config::{SreConfig, MIN_K};
use super::{nanos, roll, Outcome, OutcomeCounts};
use crate::clock::Instant;
use crate::error::FieldError;
use std::borrow::Borrow;
use std::fmt;
use std::time::Duration;

const SUCCESS: usize = 0;
const FAILURE: usize = 1;
const DROP: usize = 2;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::window::Ring;

/// The probability with which the SRE breaker rejects a call, from the window's
/// statistics (`history`: its totals and trailing bucket runs) and the breaker's
/// constants (`config`: `k`, `protection`, `buckets`); `0.0` means "accept without
/// rolling the dice".
///
/// With `b = config.buckets`:
///
/// ```text
/// w     = max(MIN_K, k - (k - MIN_K) * failing_buckets / b)
/// ratio = (total - protection - w * accepts) / (total + 1)
/// ratio <= 0  ->  0.0
/// else        ->  ratio * (b - working_buckets) / b
/// ```
///
/// go-zero writes `b` as the constant 40 (its bucket count); this function uses the
/// configured count. The breaker applies the second step only after the forced-probe
/// check, see [`SreBreaker::allow`]. [`SreHistory::drop_ratio`] is the same function.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{drop_ratio, SreConfig, SreHistory};
///
/// // go-zero's constants: k 1.5, protection 5, 40 buckets.
/// let config = SreConfig::builder().buckets(40).build()?;
/// let h = SreHistory { total: 100, accepts: 50, ..SreHistory::default() };
/// assert!((drop_ratio(&h, &config) - 0.19802).abs() < 1e-5);
/// let h = SreHistory { total: 80, accepts: 80, ..SreHistory::default() };
/// assert_eq!(drop_ratio(&h, &config), 0.0);
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
pub fn drop_ratio(history: &SreHistory, config: &SreConfig) -> f64 {
    let raw = raw_drop_ratio(history, config);
    if raw <= 0.0 {
        0.0
    } else {
        raw * working_scale(history.working_buckets, config.buckets)
    }
}

/// go-zero's `dropRatio` before the working-bucket scaling; `<= 0` means accept.
fn raw_drop_ratio(h: &SreHistory, c: &SreConfig) -> f64 {
    let b = c.buckets.max(1) as f64;
    let w = (c.k - (c.k - MIN_K) * h.failing_buckets as f64 / b).max(MIN_K);
    let total = h.total as f64;
    (total - c.protection as f64 - w * h.accepts as f64) / (total + 1.0)
}

fn working_scale(working_buckets: u64, buckets: u64) -> f64 {
    buckets.saturating_sub(working_buckets) as f64 / buckets.max(1) as f64
}

/// What the SRE breaker's window holds at one time (go-zero's `windowResult`, plus the
/// failures and drops for statistics).
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{SreBreaker, SreConfig};
///
/// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
/// b.on_success(Instant::from_nanos(0));
/// b.on_failure(Instant::from_nanos(0));
/// let h = b.history(Instant::from_nanos(0));
/// assert_eq!((h.accepts, h.failures, h.total), (1, 1, 2));
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SreHistory {
    /// Successes in the window.
    pub accepts: u64,
    /// Failures in the window.
    pub failures: u64,
    /// Refused calls in the window.
    pub drops: u64,
    /// Every call in the window: successes, failures and drops.
    pub total: u64,
    /// Length of the trailing run of buckets with failures and no success (buckets with
    /// neither do not interrupt the run).
    pub failing_buckets: u64,
    /// Length of the trailing run of buckets with successes and no failure (buckets with
    /// neither do not interrupt the run).
    pub working_buckets: u64,
}

impl SreHistory {
    /// Folds the buckets of a window, oldest first, the way go-zero's `history()` does.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::{OutcomeCounts, SreHistory};
    ///
    /// let fail = OutcomeCounts { success: 0, failure: 3, drop: 1 };
    /// let empty = OutcomeCounts::default();
    /// let ok = OutcomeCounts { success: 2, failure: 0, drop: 0 };
    /// let h = SreHistory::from_buckets([ok, fail, empty, fail].iter());
    /// assert_eq!((h.failing_buckets, h.working_buckets), (2, 0));
    /// assert_eq!((h.accepts, h.total), (2, 10));
    /// ```
    pub fn from_buckets<'a>(buckets: impl IntoIterator<Item = &'a OutcomeCounts>) -> Self {
        let mut h = SreHistory::default();
        for b in buckets {
            h.add(b);
        }
        h
    }

    fn add(&mut self, b: &OutcomeCounts) {
        self.accepts += b.success;
        self.failures += b.failure;
        self.drops += b.drop;
        self.total += b.total();
        if b.failure > 0 {
            self.working_buckets = 0;
        } else if b.success > 0 {
            self.working_buckets += 1;
        }
        if b.success > 0 {
            self.failing_buckets = 0;
        } else if b.failure > 0 {
            self.failing_buckets += 1;
        }
    }

    /// [`drop_ratio`] of this history under `config`.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::{SreConfig, SreHistory};
    ///
    /// let h = SreHistory { total: 6, ..SreHistory::default() };
    /// assert!((h.drop_ratio(&SreConfig::default()) - 1.0 / 7.0).abs() < 1e-12);
    /// ```
    pub fn drop_ratio(&self, config: &SreConfig) -> f64 {
        drop_ratio(self, config)
    }
}

/// How the SRE breaker decided on a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SreVerdict {
    /// The call may run: the breaker is not dropping, or the dice said so.
    Accepted,
    /// The call may run although the breaker is dropping: the last admitted call is
    /// older than [`SreConfig::force_pass_interval`].
    ForcedProbe,
    /// The call must not run; a drop was recorded.
    Refused,
}

/// A change of the SRE breaker's "dropping" condition (the drop ratio went above
/// zero, or back to zero), for the integrator's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DroppingTransition {
    /// The breaker started rejecting calls with a non-zero probability.
    Started,
    /// The drop ratio is back to zero.
    Stopped,
}

/// The result of [`SreBreaker::allow`].
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{SreBreaker, SreConfig, SreVerdict};
///
/// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
/// let d = b.allow(Instant::from_nanos(0));
/// assert!(d.is_admitted());
/// assert_eq!(d.verdict, SreVerdict::Accepted);
/// assert_eq!(d.drop_ratio, 0.0);
/// assert_eq!(d.transition, None);
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "a rejected call must not run"]
pub struct SreDecision {
    /// Whether the call may run.
    pub verdict: SreVerdict,
    /// The rejection probability this call faced: `0.0` when not dropping, else the
    /// full [`drop_ratio`] (also for a forced probe, which skipped the roll).
    pub drop_ratio: f64,
    /// Set when this decision changed the dropping condition.
    pub transition: Option<DroppingTransition>,
}

impl SreDecision {
    /// Whether the call may run ([`SreVerdict::Accepted`] or
    /// [`SreVerdict::ForcedProbe`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// assert!(b.allow(Instant::from_nanos(0)).is_admitted());
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn is_admitted(&self) -> bool {
        self.verdict != SreVerdict::Refused
    }
}

/// go-zero's adaptive breaker (client-side throttling from the Google SRE book).
///
/// It keeps the successes, failures and drops of the last
/// [`window`](SreConfig::window) in [`buckets`](SreConfig::buckets) buckets (the current
/// bucket included). [`allow`](Self::allow) computes
/// `ratio = (total - protection - w * accepts) / (total + 1)` (see [`drop_ratio`]) and:
///
/// 1. accepts when `ratio <= 0`;
/// 2. else, if a call was admitted while dropping and the last such call is more than
///    [`force_pass_interval`](SreConfig::force_pass_interval) old, lets this one through
///    as a probe (at most one thread wins each interval);
/// 3. else scales the ratio by the share of buckets not in the trailing success-only
///    run and rejects with that probability, recording a drop; an admitted call
///    becomes the "last admitted call".
///
/// As in go-zero, there is no forced probe before the first call admitted while
/// dropping. The caller reports the outcome of every admitted call with
/// [`on_success`](Self::on_success) or [`on_failure`](Self::on_failure) (a panic is a
/// failure).
///
/// Everything is lock-free, and the common case is constant-time: the breaker keeps
/// cumulative success/failure/drop counters and, per bucket, their values when the
/// bucket began, so the window's `total` and `accepts` are two subtractions. Since
/// `w >= 1.1`, a window with `total - protection - 1.1 * accepts <= 0` is accepted
/// without looking at single buckets; only otherwise are the buckets rebuilt from the
/// snapshots for `failingBuckets`/`workingBuckets` (go-zero reads all 40 buckets on
/// every call). Recording an outcome is one atomic increment.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{SreBreaker, SreConfig};
///
/// let breaker = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
/// for _ in 0..1_000 {
///     breaker.on_failure(Instant::from_nanos(0));
/// }
/// // 1 000 failures and no success: the ratio is (1000 - 5) / 1001.
/// let d = breaker.allow_with_roll(Instant::from_nanos(1), 0.5);
/// assert!(!d.is_admitted());
/// assert!(breaker.is_dropping());
/// // Ten seconds later the window has rolled over: every call passes again.
/// assert!(breaker.allow(Instant::from_nanos(10_000_000_001)).is_admitted());
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Debug)]
pub struct SreBreaker {
    config: SreConfig,
    /// Bucket-start snapshots of `counts`.
    ring: Ring<3>,
    /// Cumulative successes, failures and drops.
    counts: [AtomicU64; 3],
    /// Time of the last call admitted while dropping, plus one; 0 when none.
    last_pass: AtomicU64,
    /// Whether the last decision saw a positive drop ratio.
    dropping: AtomicBool,
    force_pass_ns: u64,
}

impl SreBreaker {
    /// A breaker with an empty window starting at `now`.
    ///
    /// # Errors
    ///
    /// The [`FieldError`] [`SreConfigBuilder::build`](super::SreConfigBuilder::build) would give: the fields are
    /// public, so `config` is checked again.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{SreBreaker, SreConfig};
    ///
    /// assert!(SreBreaker::new(SreConfig::default(), Instant::from_nanos(0)).is_ok());
    /// // The fields are public, so a configuration may have changed since it was built.
    /// let mut config = SreConfig::default();
    /// config.k = 0.5;
    /// let err = SreBreaker::new(config, Instant::from_nanos(0)).unwrap_err();
    /// assert_eq!(err.field, "k");
    /// ```
    pub fn new(config: SreConfig, now: Instant) -> Result<Self, FieldError> {
        let now = now.as_nanos();
        config.validate()?;
        let width = nanos(config.bucket_width());
        if width == 0 {
            return Err(FieldError::new(
                "window",
                format!(
                    "must be at least one nanosecond per bucket, got {:?} for {} buckets",
                    config.window, config.buckets
                ),
            ));
        }
        Ok(SreBreaker {
            config,
            ring: Ring::new(config.buckets, width, now, [0; 3]),
            counts: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            last_pass: AtomicU64::new(0),
            dropping: AtomicBool::new(false),
            force_pass_ns: nanos(config.force_pass_interval),
        })
    }

    /// The configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.config().buckets, 40);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn config(&self) -> &SreConfig {
        &self.config
    }

    /// Decides whether a call at `now` may run (go-zero's `accept` + `markDrop`),
    /// rolling the dice with the crate's per-thread random source.
    ///
    /// A rejection is recorded as a drop in the window.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// let d = b.allow(Instant::from_nanos(0));
    /// if d.is_admitted() {
    ///     b.on_success(Instant::from_nanos(0));
    /// }
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn allow(&self, now: Instant) -> SreDecision {
        let now = now.as_nanos();
        self.decide(now, roll, |p| p)
    }

    /// Like [`allow`](Self::allow) with the dice given: the call is rejected iff
    /// `roll < probability`. `roll` should be uniform in `[0, 1)`; pass fixed values for
    /// deterministic tests and simulations.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig, SreVerdict};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// for _ in 0..6 {
    ///     b.on_failure(Instant::from_nanos(0));
    /// }
    /// // ratio = (6 - 5) / 7
    /// assert_eq!(b.allow_with_roll(Instant::from_nanos(0), 0.2).verdict, SreVerdict::Accepted);
    /// assert_eq!(b.allow_with_roll(Instant::from_nanos(0), 0.1).verdict, SreVerdict::Refused);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn allow_with_roll(&self, now: Instant, roll: f64) -> SreDecision {
        let now = now.as_nanos();
        self.decide(now, || roll, |p| p)
    }

    /// The closed path in integer arithmetic: `true` when [`allow`](Self::allow) at
    /// `now` would accept without a state change (the breaker is not dropping and,
    /// since `w >= 1.1`, `10 * (total - protection) <= 11 * accepts`). `false` says
    /// nothing: ask `allow`.
    #[inline]
    pub(crate) fn accepts_surely(&self, now: u64) -> bool {
        if self.dropping.load(Ordering::Relaxed) {
            return false;
        }
        let base = self.ring.base(now, || self.current());
        let bad = |i: usize| {
            self.counts[i]
                .load(Ordering::Relaxed)
                .saturating_sub(base[i])
        };
        if bad(FAILURE) == 0 && bad(DROP) == 0 {
            // Every call of the window accepted: `total = accepts`, and
            // `10 x (accepts - protection) <= 11 x accepts` always holds.
            return true;
        }
        let current = self.current();
        let accepts = current[SUCCESS].saturating_sub(base[SUCCESS]);
        let total = current[SUCCESS].saturating_sub(base[SUCCESS])
            + current[FAILURE].saturating_sub(base[FAILURE])
            + current[DROP].saturating_sub(base[DROP]);
        u128::from(total.saturating_sub(self.config.protection)) * 10 <= u128::from(accepts) * 11
    }

    /// [`allow`](Self::allow) for a call of tier `priority`: the drop probability is
    /// the tier's ([`Priority::sre_drop`](crate::priority::Priority::sre_drop)), so
    /// the lowest tier is shed first. The decision reports the breaker's own ratio.
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{SreBreaker, SreConfig, SreVerdict};
    /// use resilience_runtime::priority::Priority;
    ///
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0)).unwrap();
    /// for _ in 0..100 {
    ///     b.record(Instant::from_nanos(0), resilience_runtime::breaker::Outcome::Failure);
    /// }
    /// // Every call fails: the ratio is high, but a critical call is dropped less often.
    /// let critical = (0..1000)
    ///     .filter(|_| b.allow_priority(Instant::from_nanos(0), Priority::Critical).verdict == SreVerdict::Refused)
    ///     .count();
    /// let sheddable = (0..1000)
    ///     .filter(|_| b.allow_priority(Instant::from_nanos(0), Priority::Sheddable).verdict == SreVerdict::Refused)
    ///     .count();
    /// assert!(critical < sheddable, "{critical} {sheddable}");
    /// ```
    pub fn allow_priority(&self, now: Instant, priority: crate::priority::Priority) -> SreDecision {
        let now = now.as_nanos();
        self.decide(now, roll, |p| priority.sre_drop(p))
    }

    fn decide(
        &self,
        now: u64,
        roll: impl FnOnce() -> f64,
        tier: impl FnOnce(f64) -> f64,
    ) -> SreDecision {
        let c = &self.config;
        let base = self.ring.base(now, || self.current());
        let current = self.current();
        let accepts = current[SUCCESS].saturating_sub(base[SUCCESS]);
        let total: u64 = (0..3).map(|i| current[i].saturating_sub(base[i])).sum();
        // w >= MIN_K, so this bound is enough to accept without the bucket runs.
        if total as f64 - c.protection as f64 - MIN_K * accepts as f64 <= 0.0 {
            return SreDecision {
                verdict: SreVerdict::Accepted,
                drop_ratio: 0.0,
                transition: self.note_dropping(false),
            };
        }
        let h = self.history_of(current);
        let raw = raw_drop_ratio(&h, c);
        let transition = self.note_dropping(raw > 0.0);
        if raw <= 0.0 {
            return SreDecision {
                verdict: SreVerdict::Accepted,
                drop_ratio: 0.0,
                transition,
            };
        }
        let drop_ratio = raw * working_scale(h.working_buckets, c.buckets);
        let last = self.last_pass.load(Ordering::Relaxed);
        if last > 0
            && now.saturating_sub(last - 1) > self.force_pass_ns
            && self
                .last_pass
                .compare_exchange(
                    last,
                    now.saturating_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return SreDecision {
                verdict: SreVerdict::ForcedProbe,
                drop_ratio,
                transition,
            };
        }
        if roll() < tier(drop_ratio) {
            self.record_ns(now, Outcome::Drop);
            return SreDecision {
                verdict: SreVerdict::Refused,
                drop_ratio,
                transition,
            };
        }
        self.last_pass
            .fetch_max(now.saturating_add(1), Ordering::Relaxed);
        SreDecision {
            verdict: SreVerdict::Accepted,
            drop_ratio,
            transition,
        }
    }

    /// Records the dropping condition of a decision; returns the transition if this
    /// call flipped it.
    fn note_dropping(&self, dropping: bool) -> Option<DroppingTransition> {
        if self.dropping.load(Ordering::Relaxed) == dropping {
            return None;
        }
        self.dropping
            .compare_exchange(!dropping, dropping, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
            .map(|_| {
                if dropping {
                    DroppingTransition::Started
                } else {
                    DroppingTransition::Stopped
                }
            })
    }

    /// Records the outcome of a call (or a drop decided elsewhere).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{Outcome, SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.record(Instant::from_nanos(0), Outcome::Drop);
    /// assert_eq!(b.history(Instant::from_nanos(0)).drops, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    #[inline]
    pub fn record(&self, now: Instant, outcome: Outcome) {
        self.record_ns(now.as_nanos(), outcome);
    }

    /// [`record`](Self::record) at `now` nanoseconds (the engine's form).
    #[inline]
    pub(crate) fn record_ns(&self, now: u64, outcome: Outcome) {
        // Bring the window to `now` first, so the outcome lands in its bucket.
        let _ = self.ring.base(now, || self.current());
        self.record_admitted(outcome);
    }

    /// Records an outcome in the newest bucket the window has reached, without reading
    /// the window's time: for a call admitted by [`allow`](Self::allow), whose bucket
    /// is at most one step old. One atomic increment.
    #[inline]
    pub(crate) fn record_admitted(&self, outcome: Outcome) {
        let i = match outcome {
            Outcome::Success => SUCCESS,
            Outcome::Failure => FAILURE,
            Outcome::Drop => DROP,
        };
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a successful (acceptable) call.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.on_success(Instant::from_nanos(0));
    /// assert_eq!(b.history(Instant::from_nanos(0)).accepts, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    #[inline]
    pub fn on_success(&self, now: Instant) {
        self.record(now, Outcome::Success);
    }

    /// Records a failed call (a panic included).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.on_failure(Instant::from_nanos(0));
    /// assert_eq!(b.history(Instant::from_nanos(0)).failures, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    #[inline]
    pub fn on_failure(&self, now: Instant) {
        self.record(now, Outcome::Failure);
    }

    /// The window's statistics at `now` (does not change the window).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.on_success(Instant::from_nanos(0));
    /// assert_eq!(b.history(Instant::from_nanos(0)).working_buckets, 1);
    /// assert_eq!(b.history(Instant::from_nanos(10_000_000_000)).total, 0);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn history(&self, now: Instant) -> SreHistory {
        let now = now.as_nanos();
        let _ = self.ring.base(now, || self.current());
        self.history_of(self.current())
    }

    fn history_of(&self, current: [u64; 3]) -> SreHistory {
        let mut h = SreHistory::default();
        self.ring.for_each_bucket(current, |b| {
            h.add(&OutcomeCounts {
                success: b[SUCCESS],
                failure: b[FAILURE],
                drop: b[DROP],
            })
        });
        h
    }

    #[inline]
    fn current(&self) -> [u64; 3] {
        self.counts.each_ref().map(|c| c.load(Ordering::Relaxed))
    }

    /// Forces the breaker to drop (feature `testing`), as if every call of its window
    /// had failed: `trip` failures are recorded now, so it drops nearly every call
    /// (ratio `trip / (trip + 1)`) and recovers by its own rules, through its forced
    /// passes and the successes that follow, as that bucket leaves the window. Returns
    /// whether this started the dropping.
    #[cfg(feature = "testing")]
    pub(crate) fn force_drop(&self, now: u64, trip: u64) -> bool {
        let _ = self.ring.base(now, || self.current());
        self.counts[FAILURE].fetch_add(trip, Ordering::Relaxed);
        self.note_dropping(true).is_some()
    }

    /// Empties the window and stops dropping (feature `testing`): the breaker is as
    /// new. Returns whether it was dropping.
    #[cfg(feature = "testing")]
    pub(crate) fn reset(&self, now: u64) -> bool {
        self.ring.reset(now, self.current());
        self.last_pass.store(0, Ordering::Relaxed);
        self.note_dropping(false).is_some()
    }

    /// Approximate heap size in bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
    }

    /// Whether the last decision saw a positive drop ratio.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// assert!(!b.is_dropping());
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn is_dropping(&self) -> bool {
        self.dropping.load(Ordering::Relaxed)
    }

    /// The `now` of the last call admitted while dropping (by the dice or as a forced
    /// probe), which paces the forced probes; `None` before the first one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.last_pass(), None);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn last_pass(&self) -> Option<Instant> {
        match self.last_pass.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Instant::from_nanos(t - 1)),
        }
    }

    /// go-zero's `Allow`: asks whether a call at `now` may run (as
    /// [`allow`](Self::allow), dice included) and, if so, returns the promise to
    /// mark with the call's outcome.
    ///
    /// # Errors
    ///
    /// [`SreRefused`] when the call must not run; the drop is already recorded.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{SreBreaker, SreConfig};
    ///
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// match b.try_allow(Instant::from_nanos(0)) {
    ///     Ok(promise) => promise.accept(Instant::from_nanos(1_000)), // the call succeeded
    ///     Err(rejected) => panic!("an empty window never drops: {rejected}"),
    /// }
    /// assert_eq!(b.history(Instant::from_nanos(1_000)).accepts, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn try_allow(&self, now: Instant) -> Result<SrePermit<&Self>, SreRefused> {
        let decision = self.allow(now);
        self.promise(self, decision)
    }

    /// [`try_allow`](Self::try_allow) with the dice given, as
    /// [`allow_with_roll`](Self::allow_with_roll).
    ///
    /// # Errors
    ///
    /// [`SreRefused`] when `roll` is below the drop ratio.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{SreBreaker, SreConfig};
    ///
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// for _ in 0..10 {
    ///     b.mark_failure(Instant::from_nanos(0));
    /// }
    /// // ratio (10 - 5) / 11 = 0.4545...
    /// let rejected = b.try_allow_with_roll(Instant::from_nanos(0), 0.3).unwrap_err();
    /// assert!((rejected.drop_ratio - 5.0 / 11.0).abs() < 1e-12);
    /// assert!(b.try_allow_with_roll(Instant::from_nanos(0), 0.6).is_ok());
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn try_allow_with_roll(
        &self,
        now: Instant,
        roll: f64,
    ) -> Result<SrePermit<&Self>, SreRefused> {
        let decision = self.allow_with_roll(now, roll);
        self.promise(self, decision)
    }

    /// [`try_allow`](Self::try_allow) with a promise that owns a reference count of
    /// the breaker (to move into a task or another thread).
    ///
    /// # Errors
    ///
    /// As [`try_allow`](Self::try_allow).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// use std::sync::Arc;
    ///
    /// let b = Arc::new(SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?);
    /// let promise = b.try_allow_owned(Instant::from_nanos(0)).unwrap();
    /// std::thread::spawn(move || promise.reject(Instant::from_nanos(5))).join().unwrap();
    /// assert_eq!(b.history(Instant::from_nanos(5)).failures, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn try_allow_owned(
        self: &crate::sync::Arc<Self>,
        now: Instant,
    ) -> Result<SrePermit<crate::sync::Arc<Self>>, SreRefused> {
        let decision = self.allow(now);
        self.promise(crate::sync::Arc::clone(self), decision)
    }

    fn promise<B: Borrow<SreBreaker>>(
        &self,
        breaker: B,
        decision: SreDecision,
    ) -> Result<SrePermit<B>, SreRefused> {
        if decision.is_admitted() {
            Ok(SrePermit { breaker, decision })
        } else {
            Err(SreRefused {
                drop_ratio: decision.drop_ratio,
                transition: decision.transition,
                retry_after: self.config.force_pass_interval,
            })
        }
    }

    /// go-zero's `MarkSuccess`: records a successful call at `now` without having
    /// asked first (the same as [`on_success`](Self::on_success)).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.mark_success(Instant::from_nanos(0));
    /// assert_eq!(b.stats(Instant::from_nanos(0)).history.accepts, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    #[inline]
    pub fn mark_success(&self, now: Instant) {
        self.record(now, Outcome::Success);
    }

    /// go-zero's `MarkFailed`: records a failed call at `now` without having asked
    /// first (the same as [`on_failure`](Self::on_failure)).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{SreBreaker, SreConfig};
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.mark_failure(Instant::from_nanos(0));
    /// assert_eq!(b.stats(Instant::from_nanos(0)).history.failures, 1);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    #[inline]
    pub fn mark_failure(&self, now: Instant) {
        self.record(now, Outcome::Failure);
    }

    /// The breaker's statistics at `now`: the window's counts and its trailing
    /// failing and working bucket runs (the inputs of go-zero's current formula),
    /// the drop ratio a call at `now` faces, whether the breaker is dropping and its
    /// last pass. Does not change the window.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{SreBreaker, SreConfig};
    ///
    /// const BUCKET: u64 = 250_000_000; // 10 s / 40
    /// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
    /// b.mark_success(Instant::from_nanos(0));
    /// b.mark_failure(Instant::from_nanos(BUCKET));
    /// b.mark_failure(Instant::from_nanos(2 * BUCKET));
    /// let s = b.stats(Instant::from_nanos(2 * BUCKET));
    /// assert_eq!((s.history.failing_buckets, s.history.working_buckets), (2, 0));
    /// assert_eq!(s.drop_ratio, 0.0, "3 calls are within the protection of 5");
    /// assert!(!s.dropping);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn stats(&self, now: Instant) -> SreStats {
        let history = self.history(now);
        SreStats {
            history,
            drop_ratio: history.drop_ratio(&self.config),
            dropping: self.is_dropping(),
            last_pass: self.last_pass(),
        }
    }
}

/// A snapshot of an [`SreBreaker`]; [`SreBreaker::stats`].
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{SreBreaker, SreConfig};
///
/// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
/// for _ in 0..20 {
///     b.mark_failure(Instant::from_nanos(0));
/// }
/// let s = b.stats(Instant::from_nanos(0));
/// assert_eq!((s.history.failures, s.history.failing_buckets), (20, 1));
/// assert!((s.drop_ratio - 15.0 / 21.0).abs() < 1e-12); // (20 - 5) / (20 + 1)
/// assert!(!s.dropping, "no call was asked for yet");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SreStats {
    /// The window's counts with the trailing `failing_buckets` (failures and no
    /// success) and `working_buckets` (successes and no failure) runs.
    pub history: SreHistory,
    /// [`drop_ratio`] of the window: the probability with which a call now would be
    /// rejected, unless it is a forced probe.
    pub drop_ratio: f64,
    /// Whether the last decision saw a positive drop ratio
    /// ([`SreBreaker::is_dropping`]).
    pub dropping: bool,
    /// [`SreBreaker::last_pass`].
    pub last_pass: Option<Instant>,
}

/// The [`SreBreaker`] refused a call (go-zero's `ErrServiceUnavailable`); the drop is
/// already recorded in the window.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{SreBreaker, SreConfig};
/// use std::time::Duration;
///
/// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
/// for _ in 0..100 {
///     b.mark_failure(Instant::from_nanos(0));
/// }
/// let r = b.try_allow_with_roll(Instant::from_nanos(0), 0.0).unwrap_err();
/// assert_eq!(r.to_string(), "circuit breaker is open");
/// assert_eq!(r.retry_after, Duration::from_secs(1));
/// assert_eq!(b.history(Instant::from_nanos(0)).drops, 1);
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SreRefused {
    /// The rejection probability the call faced ([`SreDecision::drop_ratio`]).
    pub drop_ratio: f64,
    /// Set when this decision started (or stopped) the dropping condition.
    pub transition: Option<DroppingTransition>,
    /// The breaker's [`force_pass_interval`](SreConfig::force_pass_interval): while
    /// it drops, a call is let through as a probe at least this often, so a client
    /// should not come back sooner.
    pub retry_after: Duration,
}

impl fmt::Display for SreRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("circuit breaker is open")
    }
}

impl std::error::Error for SreRefused {}

/// A call an [`SreBreaker`] admitted (go-zero's `Promise`): mark it with
/// [`accept`](Self::accept) (the call succeeded) or [`reject`](Self::reject) (it
/// failed) at its end. Dropping it unmarked records nothing, as for a cancelled call.
///
/// `B` is `&SreBreaker` ([`SreBreaker::try_allow`]) or `Arc<SreBreaker>`
/// ([`SreBreaker::try_allow_owned`]).
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{SreBreaker, SreConfig, SreVerdict};
///
/// let b = SreBreaker::new(SreConfig::default(), Instant::from_nanos(0))?;
/// let p = b.try_allow(Instant::from_nanos(0)).unwrap();
/// assert_eq!(p.decision().verdict, SreVerdict::Accepted);
/// assert!(!p.is_forced_probe());
/// p.reject(Instant::from_nanos(10)); // the call failed
/// let unmarked = b.try_allow(Instant::from_nanos(20)).unwrap();
/// drop(unmarked); // records nothing
/// let h = b.history(Instant::from_nanos(20));
/// assert_eq!((h.failures, h.total), (1, 1));
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[must_use = "mark the call's outcome with accept() or reject()"]
pub struct SrePermit<B: Borrow<SreBreaker>> {
    breaker: B,
    decision: SreDecision,
}

impl<B: Borrow<SreBreaker>> fmt::Debug for SrePermit<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrePermit")
            .field("decision", &self.decision)
            .finish_non_exhaustive()
    }
}

impl<B: Borrow<SreBreaker>> SrePermit<B> {
    /// The decision that admitted the call (a forced probe or an accepted roll, the
    /// drop ratio it faced, a dropping transition it caused).
    pub fn decision(&self) -> &SreDecision {
        &self.decision
    }

    /// Whether the call was let through as a forced probe while dropping.
    pub fn is_forced_probe(&self) -> bool {
        self.decision.verdict == SreVerdict::ForcedProbe
    }

    /// The call succeeded (go-zero's `Accept`): records a success at `now`.
    pub fn accept(self, now: Instant) {
        self.breaker.borrow().record(now, Outcome::Success);
    }

    /// The call failed (go-zero's `Reject`): records a failure at `now`.
    pub fn reject(self, now: Instant) {
        self.breaker.borrow().record(now, Outcome::Failure);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_integer_closed_path_never_accepts_what_allow_rejects() {
        for protection in [0u64, 1, 5, 17] {
            for total in 0u64..60 {
                for accepts in 0..=total {
                    let cfg = SreConfig {
                        protection,
                        ..SreConfig::default()
                    };
                    let b = SreBreaker::new(cfg, at(0)).unwrap();
                    for _ in 0..accepts {
                        b.record(at(0), Outcome::Success);
                    }
                    for _ in accepts..total {
                        b.record(at(0), Outcome::Failure);
                    }
                    let sure = b.accepts_surely(0);
                    // With the dice at 0 every positive ratio rejects.
                    let d = b.allow_with_roll(at(0), 0.0);
                    if sure {
                        assert!(
                            d.is_admitted() && d.transition.is_none(),
                            "{protection} {total} {accepts}"
                        );
                    }
                    // And the fast path is not needlessly pessimistic.
                    let exact = total as f64 - protection as f64 - 1.1 * accepts as f64;
                    if exact < -0.01 {
                        assert!(sure, "{protection} {total} {accepts}");
                    }
                }
            }
        }
    }

    use super::*;

    /// The instant `ns` nanoseconds into the timeline.
    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    /// [`drop_ratio`] of a history with these totals and runs, under `k`, `protection`
    /// and `buckets` (go-zero's test vectors are written so).
    fn go_zero(
        total: u64,
        accepts: u64,
        failing_buckets: u64,
        working_buckets: u64,
        k: f64,
        protection: u64,
        buckets: u64,
    ) -> f64 {
        let history = SreHistory {
            total,
            accepts,
            failing_buckets,
            working_buckets,
            ..SreHistory::default()
        };
        let config = SreConfig {
            k,
            protection,
            buckets,
            ..SreConfig::default()
        };
        drop_ratio(&history, &config)
    }

    const BUCKET: u64 = 250_000_000;
    const SECOND: u64 = 1_000_000_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-6
    }

    #[test]
    fn drop_ratio_vectors() {
        // (total, accepts, failing, working) -> ratio; k = 1.5, protection = 5, 40 buckets.
        let cases: [((u64, u64, u64, u64), f64); 10] = [
            ((80, 80, 0, 0), 0.0),
            ((5, 0, 0, 0), 0.0),
            ((6, 0, 0, 0), 0.14286),
            ((10, 0, 1, 0), 0.45455),
            ((100, 50, 0, 0), 0.19802),
            ((100, 50, 0, 10), 0.14851),
            ((200, 100, 0, 0), 0.22388),
            ((200, 100, 40, 0), 0.42289),
            ((2000, 1000, 0, 10), 0.18553),
            ((100_010, 10, 0, 0), 0.99979),
        ];
        for ((total, accepts, failing, working), expect) in cases {
            let got = go_zero(total, accepts, failing, working, 1.5, 5, 40);
            assert!(
                close(got, expect),
                "{total} {accepts} {failing} {working}: {got} != {expect}"
            );
        }
    }

    #[test]
    fn weight_never_goes_below_min_k() {
        // failing > buckets cannot happen from a window, but the formula clamps anyway.
        let a = go_zero(200, 100, 40, 0, 1.5, 5, 40);
        let b = go_zero(200, 100, 400, 0, 1.5, 5, 40);
        assert_eq!(a, b);
        // All buckets working: the ratio is scaled to zero.
        assert_eq!(go_zero(200, 10, 0, 40, 1.5, 5, 40), 0.0);
        // Other bucket counts use the configured count.
        let ten = go_zero(200, 100, 10, 5, 1.5, 5, 10);
        assert!(close(ten, (200.0 - 5.0 - 110.0) / 201.0 * 0.5), "{ten}");
    }

    #[test]
    fn history_trailing_runs() {
        let s = OutcomeCounts {
            success: 1,
            failure: 0,
            drop: 0,
        };
        let f = OutcomeCounts {
            success: 0,
            failure: 1,
            drop: 0,
        };
        let m = OutcomeCounts {
            success: 1,
            failure: 1,
            drop: 0,
        };
        let d = OutcomeCounts {
            success: 0,
            failure: 0,
            drop: 4,
        };
        let e = OutcomeCounts::default();
        let h = |v: &[OutcomeCounts]| {
            let h = SreHistory::from_buckets(v);
            (h.failing_buckets, h.working_buckets)
        };
        assert_eq!(h(&[f, f, s, s, e, s]), (0, 3));
        assert_eq!(h(&[s, s, f, e, f, d]), (2, 0));
        assert_eq!(h(&[f, f, m]), (0, 0));
        assert_eq!(h(&[s, m, s]), (0, 1));
        assert_eq!(h(&[e, e, d]), (0, 0));
        let all = SreHistory::from_buckets(&[s, f, m, d]);
        assert_eq!(
            (all.accepts, all.failures, all.drops, all.total),
            (2, 2, 4, 8)
        );
    }

    #[test]
    fn history_over_the_window_ignores_expired_buckets() {
        let b = SreBreaker::new(SreConfig::default(), at(0)).unwrap();
        b.on_failure(at(0));
        b.on_success(at(BUCKET));
        b.on_success(at(2 * BUCKET));
        let h = b.history(at(2 * BUCKET));
        assert_eq!((h.failing_buckets, h.working_buckets, h.total), (0, 2, 3));
        // 40 buckets later the failure has expired, the successes not yet.
        let h = b.history(at(40 * BUCKET));
        assert_eq!((h.failing_buckets, h.working_buckets, h.total), (0, 2, 2));
        assert_eq!(b.history(at(42 * BUCKET)).total, 0);
    }

    #[test]
    fn dropping_transitions_are_reported_once() {
        let b = SreBreaker::new(SreConfig::default(), at(0)).unwrap();
        for _ in 0..100 {
            b.on_failure(at(0));
        }
        let first = b.allow_with_roll(at(0), 0.999_999);
        assert_eq!(first.transition, Some(DroppingTransition::Started));
        assert_eq!(first.verdict, SreVerdict::Accepted);
        assert!(b.is_dropping());
        assert_eq!(b.allow_with_roll(at(0), 0.0).transition, None);
        let later = b.allow_with_roll(at(20 * SECOND), 0.0);
        assert_eq!(later.transition, Some(DroppingTransition::Stopped));
        assert_eq!(later.verdict, SreVerdict::Accepted);
        assert_eq!(b.allow(at(20 * SECOND)).transition, None);
        assert!(!b.is_dropping());
    }

    #[test]
    fn rejection_records_a_drop_and_acceptance_sets_last_pass() {
        let b = SreBreaker::new(SreConfig::default(), at(0)).unwrap();
        for _ in 0..10 {
            b.on_failure(at(0));
        }
        let d = b.allow_with_roll(at(7), 0.0);
        assert_eq!(d.verdict, SreVerdict::Refused);
        assert!(close(d.drop_ratio, 5.0 / 11.0));
        assert_eq!(b.history(at(7)).drops, 1);
        assert_eq!(b.last_pass(), None);
        let d = b.allow_with_roll(at(9), 0.99);
        assert_eq!(d.verdict, SreVerdict::Accepted);
        assert_eq!(b.last_pass(), Some(at(9)));
        // Accepting without dropping leaves last_pass alone.
        let quiet = SreBreaker::new(SreConfig::default(), at(0)).unwrap();
        assert!(quiet.allow_with_roll(at(3), 0.0).is_admitted());
        assert_eq!(quiet.last_pass(), None);
    }

    #[test]
    fn forced_probe_needs_a_previous_pass_and_a_full_interval() {
        let b = SreBreaker::new(SreConfig::default(), at(0)).unwrap();
        for _ in 0..1_000 {
            b.on_failure(at(0));
        }
        // No pass yet: no forced probe, however long we wait inside the window.
        assert_eq!(
            b.allow_with_roll(at(5 * SECOND), 0.0).verdict,
            SreVerdict::Refused
        );
        assert_eq!(
            b.allow_with_roll(at(5 * SECOND), 0.999_999).verdict,
            SreVerdict::Accepted
        );
        // Exactly one interval later: not yet ("more than").
        assert_eq!(
            b.allow_with_roll(at(6 * SECOND), 0.0).verdict,
            SreVerdict::Refused
        );
        assert_eq!(
            b.allow_with_roll(at(6 * SECOND + 1), 0.0).verdict,
            SreVerdict::ForcedProbe
        );
        assert_eq!(
            b.allow_with_roll(at(6 * SECOND + 2), 0.0).verdict,
            SreVerdict::Refused
        );
        assert_eq!(b.last_pass(), Some(at(6 * SECOND + 1)));
    }

    #[test]
    fn working_buckets_soften_the_ratio() {
        let b = SreBreaker::new(SreConfig::default(), at(0)).unwrap();
        for _ in 0..200 {
            b.on_failure(at(0));
        }
        for i in 1..=10 {
            b.on_success(at(i * BUCKET));
        }
        let h = b.history(at(10 * BUCKET));
        assert_eq!((h.working_buckets, h.failing_buckets), (10, 0));
        let d = b.allow_with_roll(at(10 * BUCKET), 0.999_999);
        let expect = (210.0 - 5.0 - 15.0) / 211.0 * 30.0 / 40.0;
        assert!(close(d.drop_ratio, expect), "{}", d.drop_ratio);
    }
}
