//! A latency-gradient concurrency limit in the style of Netflix's `Gradient2Limit`
//! (concurrency-limits), sampled in windows like its `WindowedLimit`.
//!
//! Each sampling window (at least `sample_window` long and `min_samples` calls) gives
//! a short-term latency, the average of the window; a long-term latency is an
//! exponential average of those over `long_window` windows. Then
//!
//! ```text
//! gradient  = clamp(rtt_tolerance x long / short, 0.5, 1)
//! new_limit = limit x gradient + queue_size
//! limit     = clamp(limit x (1 - smoothing) + new_limit x smoothing, min_limit, max_limit)
//! ```
//!
//! so the limit grows by `smoothing x queue_size` per window while latency holds, and
//! shrinks as queueing inflates the short-term latency past `rtt_tolerance` times the
//! long-term one. The limit does not grow while fewer than half of it are in flight
//! (the service is not the bottleneck), and when the long-term latency is more than
//! twice the short-term one (load just went away) it decays by 5% per window.

use super::error::LimitRefused;
use super::permit::{LatencyLimiter, LatencyPermit};
use super::{nanos, Timer};
use crate::builder::builder;
use crate::clock::Clock;
use crate::clock::Instant;
use crate::error::FieldError;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Recover;
use crate::sync::{Arc, Mutex};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// The constants of a [`GradientLimiter`]; [`Default`] follows Netflix's
/// `Gradient2Limit` (with a larger `max_limit` and a shorter sampling window).
///
/// Build one with [`GradientConfig::builder`]; the fields are public for reading.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::GradientConfig;
///
/// let config = GradientConfig::builder().initial_limit(50).max_limit(200).build()?;
/// assert_eq!(config.min_limit, 1);
/// let bad = GradientConfig::builder().min_limit(0).build();
/// assert_eq!(bad.unwrap_err().field, "min_limit");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct GradientConfig {
    /// The limit before the first window closes (`min_limit ..= max_limit`).
    pub initial_limit: u64,
    /// The smallest limit (>= 1).
    pub min_limit: u64,
    /// The largest limit.
    pub max_limit: u64,
    /// Weight of each new limit (`0 < x <= 1`); 0.2.
    pub smoothing: f64,
    /// How much the short-term latency may exceed the long-term one before the limit
    /// shrinks (>= 1); 1.5.
    pub rtt_tolerance: f64,
    /// Calls the limit allows over its estimate, the growth step (>= 0); 4.
    pub queue_size: f64,
    /// Windows in the long-term latency average (>= 1); 600.
    pub long_window: u64,
    /// Shortest sampling window; 100 ms.
    pub sample_window: Duration,
    /// Fewest completed calls in a sampling window (>= 1); 10.
    pub min_samples: u64,
    /// The share of the limit kept for [`Priority::Critical`](crate::priority::Priority)
    /// calls (`0 <= x < 1`); 0. Other calls are refused once the calls in flight reach
    /// `limit * (1 - critical_reserve)`; critical ones up to the limit. The reserve is
    /// checked on a read of the flight count (two calls racing may both pass it); the
    /// limit itself stays exact.
    pub critical_reserve: f64,
}

impl Default for GradientConfig {
    fn default() -> Self {
        GradientConfig {
            initial_limit: 20,
            min_limit: 1,
            max_limit: 1000,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            queue_size: 4.0,
            long_window: 600,
            sample_window: Duration::from_millis(100),
            min_samples: 10,
            critical_reserve: 0.0,
        }
    }
}

impl GradientConfig {
    /// Starts a configuration with the defaults (the [`Default`], Netflix's
    /// `Gradient2Limit` with a larger `max_limit` and a shorter sampling window).
    pub fn builder() -> GradientConfigBuilder {
        GradientConfigBuilder {
            config: GradientConfig::default(),
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one.
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        if self.min_limit == 0 {
            return Err(FieldError::new("min_limit", "must be at least 1"));
        }
        if self.max_limit < self.min_limit {
            return Err(FieldError::new(
                "max_limit",
                format!(
                    "must be at least `min_limit` ({}), got {}",
                    self.min_limit, self.max_limit
                ),
            ));
        }
        if !(self.min_limit..=self.max_limit).contains(&self.initial_limit) {
            return Err(FieldError::new(
                "initial_limit",
                format!(
                    "must be in {}..={}, got {}",
                    self.min_limit, self.max_limit, self.initial_limit
                ),
            ));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(FieldError::new(
                "smoothing",
                format!("must be in (0, 1], got {}", self.smoothing),
            ));
        }
        if !(self.rtt_tolerance.is_finite() && self.rtt_tolerance >= 1.0) {
            return Err(FieldError::new(
                "rtt_tolerance",
                format!("must be a finite number >= 1, got {}", self.rtt_tolerance),
            ));
        }
        if !(self.queue_size.is_finite() && self.queue_size >= 0.0) {
            return Err(FieldError::new(
                "queue_size",
                format!("must be a finite number >= 0, got {}", self.queue_size),
            ));
        }
        if self.long_window == 0 {
            return Err(FieldError::new("long_window", "must be at least 1"));
        }
        if self.min_samples == 0 {
            return Err(FieldError::new("min_samples", "must be at least 1"));
        }
        if !(0.0..1.0).contains(&self.critical_reserve) {
            return Err(FieldError::new(
                "critical_reserve",
                format!("must be in [0, 1), got {}", self.critical_reserve),
            ));
        }
        Ok(())
    }
}

builder! {
    /// Builds a [`GradientConfig`]; start from [`GradientConfig::builder`]. Each
    /// setter is named after the field it sets; [`build`](Self::build) checks them all.
    pub struct GradientConfigBuilder => GradientConfig;

    /// Checks every setting and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field.
    build -> Result<FieldError> = GradientConfig::validate;

    /// The limit before the first window closes (`min_limit ..= max_limit`;
    /// default 20).
    initial_limit: u64,
    /// The smallest limit (>= 1; default 1).
    min_limit: u64,
    /// The largest limit (>= `min_limit`; default 1000).
    max_limit: u64,
    /// Weight of each new limit (`0 < x <= 1`; default 0.2).
    smoothing: f64,
    /// How much the short-term latency may exceed the long-term one before the limit
    /// shrinks (>= 1; default 1.5).
    rtt_tolerance: f64,
    /// Calls the limit allows over its estimate, the growth step (>= 0; default 4).
    queue_size: f64,
    /// Windows in the long-term latency average (>= 1; default 600).
    long_window: u64,
    /// Shortest sampling window (default 100 ms).
    sample_window: Duration,
    /// Fewest completed calls in a sampling window (>= 1; default 10).
    min_samples: u64,
    /// The share of the limit kept for critical calls (`0 <= x < 1`; default 0; see
    /// [`GradientConfig::critical_reserve`]).
    critical_reserve: f64,
}

/// The estimator, updated once per sampling window by whichever call closes it.
#[derive(Debug)]
struct Estimator {
    limit: f64,
    long_rtt: f64,
    long_samples: u32,
}

/// A concurrency limit that follows the latency gradient; admission is a fail-fast
/// semaphore of the current limit.
///
/// Each sampling window (at least `sample_window` and `min_samples` completed calls)
/// gives a short-term latency, the window's average; the long-term latency is an
/// exponential average of those over `long_window` windows. When the window closes:
///
/// ```text
/// gradient  = clamp(rtt_tolerance x long / short, 0.5, 1)
/// new_limit = limit x gradient + queue_size
/// limit     = clamp(limit x (1 - smoothing) + new_limit x smoothing, min_limit, max_limit)
/// ```
///
/// unless fewer than half of the limit were in flight (the limit then stays). When the
/// long-term latency is over twice the short-term one it decays by 5% per window.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::{GradientConfig, GradientLimiter};
/// use resilience_runtime::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let config = GradientConfig::builder().initial_limit(2).build()?;
/// let limiter = GradientLimiter::with_clock(config, Clock::manual(&clock))?;
/// let now = limiter.now();
/// let a = limiter.try_acquire(now)?;
/// let _b = limiter.try_acquire(now)?;
/// assert!(limiter.try_acquire(now).is_err(), "limit 2");
/// a.pass(now + Duration::from_millis(1));
/// assert!(limiter.try_acquire(now).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct GradientLimiter {
    config: GradientConfig,
    in_flight: CachePadded<AtomicU64>,
    /// The limit, `f64` bits (admission uses its floor).
    limit: AtomicU64,
    window_start: AtomicU64,
    window_rtt_ns: AtomicU64,
    window_count: AtomicU64,
    window_peak: AtomicU64,
    sample_window_ns: u64,
    estimator: Mutex<Estimator>,
    drops: AtomicU64,
    timer: Timer,
}

impl fmt::Debug for GradientLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GradientLimiter")
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl GradientLimiter {
    /// A limiter on the system clock.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field of `config`.
    pub fn new(config: GradientConfig) -> Result<Self, FieldError> {
        Self::build(config, Timer::system())
    }

    /// A limiter on `clock` (which sets the timeline of `now`).
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field of `config`.
    pub fn with_clock(config: GradientConfig, clock: Clock) -> Result<Self, FieldError> {
        Self::build(config, Timer::new(clock))
    }

    fn build(config: GradientConfig, timer: Timer) -> Result<Self, FieldError> {
        config.validate()?;
        let initial = config.initial_limit as f64;
        Ok(GradientLimiter {
            in_flight: CachePadded::new(AtomicU64::new(0)),
            limit: AtomicU64::new(initial.to_bits()),
            window_start: AtomicU64::new(timer.now()),
            window_rtt_ns: AtomicU64::new(0),
            window_count: AtomicU64::new(0),
            window_peak: AtomicU64::new(0),
            sample_window_ns: nanos(config.sample_window),
            estimator: Mutex::new(Estimator {
                limit: initial,
                long_rtt: 0.0,
                long_samples: 0,
            }),
            drops: AtomicU64::new(0),
            config,
            timer,
        })
    }

    /// The current time on the limiter's timeline, in nanoseconds.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.timer.now())
    }

    /// The current limit (fractional; admission allows its floor, at least 1).
    pub fn limit(&self) -> f64 {
        f64::from_bits(self.limit.load(Ordering::Relaxed))
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// How many calls were refused since the limiter was created.
    pub fn drops(&self) -> u64 {
        self.drops.load(Ordering::Relaxed)
    }

    /// Admits a call at `now` if fewer than the limit are in flight.
    ///
    /// # Errors
    ///
    /// [`LimitRefused`] when the limit is reached.
    #[inline]
    pub fn try_acquire(&self, now: Instant) -> Result<LatencyPermit<&Self>, LimitRefused> {
        let now = now.as_nanos();
        self.admit(1.0)?;
        Ok(LatencyPermit::new(self, now))
    }

    /// [`try_acquire`](GradientLimiter::try_acquire) for a call whose tier
    /// `priority` gives (asked only when the configuration keeps a
    /// [`critical_reserve`](GradientConfig::critical_reserve)): a call below
    /// [`Priority::Critical`](crate::priority::Priority::Critical) is admitted only
    /// while fewer than `floor(limit * (1 - critical_reserve))` calls are in flight,
    /// exactly (the same compare-and-swap as the limit's).
    ///
    /// # Errors
    ///
    /// [`LimitRefused`] when the call's share of the limit is used up.
    ///
    /// ```
    /// use resilience_runtime::adaptive::{GradientConfig, GradientLimiter};
    /// use resilience_runtime::priority::Priority;
    ///
    /// let config = GradientConfig::builder().initial_limit(10).critical_reserve(0.3).build()?;
    /// let limiter = GradientLimiter::new(config)?;
    /// let now = limiter.now();
    /// let default: Vec<_> = (0..10).filter_map(|_| limiter.try_acquire_for(now, || Priority::Default).ok()).collect();
    /// assert_eq!(default.len(), 7, "30% kept for critical calls");
    /// let critical: Vec<_> = (0..10).filter_map(|_| limiter.try_acquire_for(now, || Priority::Critical).ok()).collect();
    /// assert_eq!(critical.len(), 3);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    #[inline]
    pub fn try_acquire_for(
        &self,
        now: Instant,
        priority: impl FnOnce() -> crate::priority::Priority,
    ) -> Result<LatencyPermit<&Self>, LimitRefused> {
        let now = now.as_nanos();
        let share = if self.config.critical_reserve > 0.0
            && priority() < crate::priority::Priority::Critical
        {
            1.0 - self.config.critical_reserve
        } else {
            1.0
        };
        self.admit(share)?;
        Ok(LatencyPermit::new(self, now))
    }

    /// Like [`try_acquire`](GradientLimiter::try_acquire), with a permit that owns a
    /// reference count of the limiter.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](GradientLimiter::try_acquire).
    #[inline]
    pub fn try_acquire_owned(
        self: &Arc<Self>,
        now: Instant,
    ) -> Result<LatencyPermit<Arc<Self>>, LimitRefused> {
        let now = now.as_nanos();
        self.admit(1.0)?;
        Ok(LatencyPermit::new(Arc::clone(self), now))
    }

    /// Admits while fewer than `share` of the limit are in flight (`share` 1: the
    /// limit, at least 1; below 1: its floor, possibly 0).
    fn admit(&self, share: f64) -> Result<(), LimitRefused> {
        let limit = self.limit();
        let max = if share >= 1.0 {
            (limit as u64).max(1)
        } else {
            (limit.floor() * share).floor() as u64
        };
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if current >= max {
                self.drops.fetch_add(1, Ordering::Relaxed);
                return Err(LimitRefused {
                    in_flight: current,
                    limit,
                    cpu: None,
                });
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.window_peak.fetch_max(current + 1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Records a completed call's latency at `now`; closes the sampling window and
    /// updates the limit when the window is long enough.
    pub fn record(&self, now: Instant, latency: Duration) {
        let now = now.as_nanos();
        self.window_rtt_ns
            .fetch_add(nanos(latency), Ordering::Relaxed);
        let count = self.window_count.fetch_add(1, Ordering::Relaxed) + 1;
        let start = self.window_start.load(Ordering::Relaxed);
        if count >= self.config.min_samples && now.saturating_sub(start) >= self.sample_window_ns {
            self.close_window(now, start);
        }
    }

    fn close_window(&self, now: u64, start: u64) {
        // Whoever moves the window start closes the window; others keep recording.
        if self
            .window_start
            .compare_exchange(start, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let count = self.window_count.swap(0, Ordering::Relaxed);
        let rtt = self.window_rtt_ns.swap(0, Ordering::Relaxed);
        let peak = self
            .window_peak
            .swap(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
        if count == 0 || rtt == 0 {
            return;
        }
        let short = rtt as f64 / count as f64;
        let mut est = self.estimator.lock().recover();
        let limit = est.update(&self.config, short, peak);
        self.limit.store(limit.to_bits(), Ordering::Relaxed);
    }
}

impl Estimator {
    fn update(&mut self, c: &GradientConfig, short: f64, in_flight: u64) -> f64 {
        // Long-term average: a plain mean over the first 10 windows, then exponential.
        const WARMUP: u32 = 10;
        if self.long_samples < WARMUP {
            self.long_samples += 1;
            self.long_rtt += (short - self.long_rtt) / f64::from(self.long_samples);
        } else {
            let factor = 2.0 / (c.long_window as f64 + 1.0);
            self.long_rtt = self.long_rtt * (1.0 - factor) + short * factor;
        }
        if self.long_rtt / short > 2.0 {
            // Load went away after a long overload: forget the inflated average faster.
            self.long_rtt *= 0.95;
        }
        if (in_flight as f64) < self.limit / 2.0 {
            return self.limit;
        }
        let gradient = (c.rtt_tolerance * self.long_rtt / short).clamp(0.5, 1.0);
        let target = self.limit * gradient + c.queue_size;
        let next = self.limit * (1.0 - c.smoothing) + target * c.smoothing;
        self.limit = next.clamp(c.min_limit as f64, c.max_limit as f64);
        self.limit
    }
}

impl LatencyLimiter for GradientLimiter {
    fn now(&self) -> Instant {
        GradientLimiter::now(self)
    }

    fn end_call(&self, start: u64, end: Option<u64>) {
        self.in_flight.fetch_sub(1, Ordering::Release);
        if let Some(now) = end {
            self.record(
                Instant::from_nanos(now),
                Duration::from_nanos(now.saturating_sub(start)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(limit: f64) -> Estimator {
        Estimator {
            limit,
            long_rtt: 0.0,
            long_samples: 0,
        }
    }

    #[test]
    fn grows_while_latency_holds() {
        let c = GradientConfig::default();
        let mut e = est(20.0);
        // gradient 1: limit x 0.8 + (limit + 4) x 0.2 = limit + 0.8
        assert!((e.update(&c, 10e6, 20) - 20.8).abs() < 1e-9);
        assert!((e.update(&c, 10e6, 20) - 21.6).abs() < 1e-9);
    }

    #[test]
    fn does_not_grow_when_app_limited() {
        let c = GradientConfig::default();
        let mut e = est(20.0);
        assert_eq!(e.update(&c, 10e6, 9), 20.0);
    }

    #[test]
    fn shrinks_when_latency_doubles() {
        let c = GradientConfig::default();
        let mut e = est(100.0);
        for _ in 0..10 {
            e.update(&c, 10e6, 100);
        }
        let before = e.limit;
        // short = 4 x long: gradient = max(0.5, 1.5 / 4) = 0.5
        let after = e.update(&c, 40e6, 200);
        let want = before * 0.8 + (before * 0.5 + 4.0) * 0.2;
        assert!((after - want).abs() < 1e-9, "{after} vs {want}");
        assert!(after < before);
    }

    #[test]
    fn limits_are_clamped() {
        let c = GradientConfig {
            min_limit: 5,
            max_limit: 21,
            ..GradientConfig::default()
        };
        let mut e = est(20.0);
        e.update(&c, 10e6, 20);
        assert_eq!(e.update(&c, 10e6, 20), 21.0);
        let c = GradientConfig {
            queue_size: 0.0,
            ..c
        };
        let mut e = est(5.0);
        e.long_rtt = 1e6;
        e.long_samples = 10;
        // gradient 0.5: 5 x 0.8 + 2.5 x 0.2 = 4.5, raised to the minimum
        assert_eq!(e.update(&c, 1e9, 5), 5.0);
    }

    #[test]
    fn config_errors_name_fields() {
        let base = GradientConfig::default();
        let cases = [
            (
                GradientConfig {
                    max_limit: 0,
                    ..base
                },
                "max_limit",
            ),
            (
                GradientConfig {
                    initial_limit: 5000,
                    ..base
                },
                "initial_limit",
            ),
            (
                GradientConfig {
                    smoothing: 0.0,
                    ..base
                },
                "smoothing",
            ),
            (
                GradientConfig {
                    rtt_tolerance: 0.5,
                    ..base
                },
                "rtt_tolerance",
            ),
            (
                GradientConfig {
                    queue_size: f64::NAN,
                    ..base
                },
                "queue_size",
            ),
            (
                GradientConfig {
                    long_window: 0,
                    ..base
                },
                "long_window",
            ),
            (
                GradientConfig {
                    min_samples: 0,
                    ..base
                },
                "min_samples",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(GradientLimiter::new(config).unwrap_err().field, field);
        }
    }
}
