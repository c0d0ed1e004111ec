//! A latency-gradient concurrency limit in the spirit of Netflix's `Gradient2Limit`
//! (concurrency-limits), sampled in windows like its `WindowedLimit`, whose reference
//! is the service's no-load latency, measured as Envoy's adaptive concurrency filter
//! measures its `minRTT`.
//!
//! Each sampling window (at least `sample_window` long and `min_samples` calls) gives
//! a short-term latency, the average of the window. The reference is the no-load
//! latency, measured by a probe. A probe holds the limit at `limit / (2 x
//! rtt_tolerance)` (at least `min_limit`) until one whole window stays within it
//! (the backlog admitted at the old limit has drained), takes the latency of the next
//! window as the no-load latency (a higher one moves it half the way), and puts the
//! limit back. The first probe follows the first window, the next ones come every
//! `long_window` windows, or after 5 windows while a probe finds a latency more than
//! 10% away from the one before (a cold start above the service's capacity, where each
//! probe at least halves the flight; a service that got slower; a noisy window).
//! Between probes a window quieter than the reference lowers it (by `smoothing` of
//! the gap). Then
//!
//! ```text
//! gradient  = clamp(rtt_tolerance x no_load / short, 0.5, 1)
//! new_limit = limit + queue_size        if gradient = 1 (latency within tolerance)
//!             limit x gradient          otherwise
//! limit     = clamp(limit x (1 - smoothing) + new_limit x smoothing, min_limit, max_limit)
//! ```
//!
//! so the limit grows by `smoothing x queue_size` per window while the latency stays
//! within `rtt_tolerance` of the no-load latency, and shrinks (by at most 10% a window)
//! once queueing takes it past. The limit does not move while fewer than half of it
//! are in flight and it refused nothing in the window (the service is not the
//! bottleneck).
//!
//! **The bound.** A saturated service of real concurrency `C` (the calls it serves at
//! once) has a latency of `no_load x flight / C` once the flight passes `C`, so the
//! limit settles in `[C, rtt_tolerance x C + smoothing x queue_size + 1]` (with the
//! defaults, `1.25 C + 1.8`) and the latency of admitted calls near `rtt_tolerance x
//! no_load`, whatever the start (the property tests check this on a model of such a
//! service, `settles_within_the_bound`): a reference that learned the queued latency
//! (as `Gradient2`'s long-term average does, which follows the latency it tolerates)
//! lets the limit drift up with the queue instead. Probes cost a dip of the flight to
//! `limit / (2 x rtt_tolerance)` (about half the real concurrency) for two or three
//! windows every `long_window` windows.

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
/// `Gradient2Limit` (with a larger `max_limit`, a shorter sampling window, and a
/// tolerance over the no-load latency rather than a long-term average).
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
    /// How much the short-term latency may exceed the no-load latency before the
    /// limit shrinks (>= 1); 1.25. The limit settles near this times the service's
    /// real concurrency (see [`GradientLimiter`]).
    pub rtt_tolerance: f64,
    /// The growth step: calls added to the limit per window (times `smoothing`) while
    /// the latency is within tolerance (>= 0); 4.
    pub queue_size: f64,
    /// Windows between two probes of the no-load latency (>= 1); 600, a minute of
    /// 100 ms windows. The first probe follows the first window.
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
            rtt_tolerance: 1.25,
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
    /// How much the short-term latency may exceed the no-load latency before the
    /// limit shrinks (>= 1; default 1.25).
    rtt_tolerance: f64,
    /// The growth step per window while the latency is within tolerance (>= 0;
    /// default 4).
    queue_size: f64,
    /// Windows between two probes of the no-load latency (>= 1; default 600).
    long_window: u64,
    /// Shortest sampling window (default 100 ms).
    sample_window: Duration,
    /// Fewest completed calls in a sampling window (>= 1; default 10).
    min_samples: u64,
    /// The share of the limit kept for critical calls (`0 <= x < 1`; default 0; see
    /// [`GradientConfig::critical_reserve`]).
    critical_reserve: f64,
}

/// What one sampling window saw: the estimator's input.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    /// The window's mean latency, nanoseconds (> 0).
    short: f64,
    /// The most calls in flight during the window (its start included).
    peak: u64,
    /// Whether the limit refused a call during the window.
    refused: bool,
}

/// Where the estimator is in its cycle of following the gradient and measuring the
/// no-load latency.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Following the gradient; a probe starts when `left` more windows have closed.
    Follow { left: u64 },
    /// A probe holds the limit at `at` until a whole window stays within it (the
    /// backlog admitted at the old limit has drained); `saved` is the limit to go
    /// back to, `windows` the windows waited so far.
    Drain { saved: f64, at: f64, windows: u32 },
    /// The window after the drain: its latency, at a flight of at most
    /// `limit / (2 x rtt_tolerance)`, is the no-load latency (a higher one moves it
    /// half the way).
    Measure { saved: f64 },
}

/// Windows until the next probe while probes keep finding a lower latency (the flight
/// of the last one was still queueing: a cold start above the service's capacity).
const QUICK_PROBE: u64 = 5;
/// Windows a probe waits for the backlog to drain before giving up.
const MAX_DRAIN: u32 = 10;

/// The estimator, updated once per sampling window by whichever call closes it: a
/// pure function of its state, the configuration and the window ([`Estimator::update`]).
#[derive(Debug)]
struct Estimator {
    limit: f64,
    /// The no-load latency, nanoseconds (0 before the first window).
    no_load: f64,
    phase: Phase,
    /// The limiter's refusals when the last window closed (the shell's bookkeeping,
    /// which gives [`Sample::refused`]).
    drops: u64,
}

impl Estimator {
    fn new(limit: f64) -> Estimator {
        Estimator {
            limit,
            no_load: 0.0,
            drops: 0,
            // The first probe follows the first window: a service started under
            // overload measures its no-load latency at once.
            phase: Phase::Follow { left: 1 },
        }
    }
}

/// A concurrency limit that follows the latency gradient; admission is a fail-fast
/// semaphore of the current limit.
///
/// Each sampling window (at least `sample_window` and `min_samples` completed calls)
/// gives a short-term latency, the window's average. The reference is the no-load
/// latency, measured by probes: a probe holds the limit at `limit / (2 x
/// rtt_tolerance)` until a whole window stays within it, takes the next window's
/// latency as the no-load latency (a higher one half the way) and puts the limit back
/// (the first probe follows the first window, then one every `long_window` windows,
/// or every 5 while probes find a latency more than 10% away from the last one).
/// Between probes, when a window closes:
///
/// ```text
/// gradient  = clamp(rtt_tolerance x no_load / short, 0.5, 1)
/// new_limit = limit + queue_size        if gradient = 1 (latency within tolerance)
///             limit x gradient          otherwise
/// limit     = clamp(limit x (1 - smoothing) + new_limit x smoothing, min_limit, max_limit)
/// ```
///
/// unless fewer than half of the limit were in flight and none was refused (the limit
/// then stays). Against a saturated service that serves `C` calls at once the limit
/// settles in
/// `[C, rtt_tolerance x C + smoothing x queue_size + 1]` (`1.25 C + 1.8` with the
/// defaults), so admitted calls wait about `rtt_tolerance - 1` of the no-load latency
/// in its queue, whatever the start (a cold start above `C` included).
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
            estimator: Mutex::new(Estimator::new(initial)),
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
        // Refusals since the last close; one racing the close may land in either.
        let drops = self.drops.load(Ordering::Relaxed);
        let refused = drops != est.drops;
        est.drops = drops;
        let limit = est.update(
            &self.config,
            Sample {
                short,
                peak,
                refused,
            },
        );
        self.limit.store(limit.to_bits(), Ordering::Relaxed);
    }
}

impl Estimator {
    /// The limit after a window `w` (see the module docs): probes the no-load latency
    /// every `long_window` windows (or sooner while probes keep finding it lower),
    /// and between probes follows `rtt_tolerance x no_load / short`.
    fn update(&mut self, c: &GradientConfig, w: Sample) -> f64 {
        let (min, max) = (c.min_limit as f64, c.max_limit as f64);
        match self.phase {
            Phase::Drain { saved, at, windows } => {
                if w.peak as f64 <= at {
                    self.phase = Phase::Measure { saved };
                } else if windows + 1 >= MAX_DRAIN {
                    // Calls that never end: give the probe up.
                    self.phase = Phase::Follow {
                        left: c.long_window,
                    };
                    self.limit = saved;
                } else {
                    self.phase = Phase::Drain {
                        saved,
                        at,
                        windows: windows + 1,
                    };
                }
                return self.limit;
            }
            Phase::Measure { saved } => {
                let (before, m) = (self.no_load, w.short);
                // Lower: believed at once. Higher: half the way, and checked again
                // soon (one slow window, a scheduling hiccup, must not hold the limit
                // down for `long_window` windows; a service that got slower is
                // followed within a few probes).
                let quick = if before == 0.0 || m <= before {
                    self.no_load = m;
                    m < 0.9 * before
                } else {
                    self.no_load = before + (m - before) / 2.0;
                    m > 1.1 * before
                };
                self.limit = saved;
                self.phase = Phase::Follow {
                    left: if quick { QUICK_PROBE } else { c.long_window },
                };
                return self.limit;
            }
            Phase::Follow { left } => {
                if self.no_load == 0.0 {
                    self.no_load = w.short;
                } else if w.short < self.no_load {
                    // A quieter window: the no-load latency is lower (smoothed, so
                    // that one lucky window does not pull it down alone).
                    self.no_load += (w.short - self.no_load) * c.smoothing;
                }
                if left <= 1 {
                    // Below the real concurrency even when the limit is up to twice
                    // too high (a no-load latency that still had queueing in it).
                    let at = (self.limit / (2.0 * c.rtt_tolerance)).floor().max(min);
                    self.phase = Phase::Drain {
                        saved: self.limit,
                        at,
                        windows: 0,
                    };
                    self.limit = at;
                    return at;
                }
                self.phase = Phase::Follow { left: left - 1 };
            }
        }
        if (w.peak as f64) < self.limit / 2.0 && !w.refused {
            // The service is not the bottleneck: no evidence either way. (With a
            // critical reserve, refused calls can keep the flight low: they count.)
            return self.limit;
        }
        let gradient = (c.rtt_tolerance * self.no_load / w.short).clamp(0.5, 1.0);
        let target = if gradient >= 1.0 {
            self.limit + c.queue_size
        } else {
            self.limit * gradient
        };
        let next = self.limit * (1.0 - c.smoothing) + target * c.smoothing;
        self.limit = next.clamp(min, max);
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

    /// An estimator following the gradient (no probe due) with a known no-load
    /// latency.
    fn est(limit: f64, no_load: f64) -> Estimator {
        Estimator {
            limit,
            no_load,
            phase: Phase::Follow { left: 1_000 },
            drops: 0,
        }
    }

    fn window(short: f64, peak: u64) -> Sample {
        Sample {
            short,
            peak,
            refused: false,
        }
    }

    #[test]
    fn grows_while_latency_holds() {
        let c = GradientConfig::default();
        let mut e = est(20.0, 10e6);
        // Within tolerance: limit x 0.8 + (limit + 4) x 0.2 = limit + 0.8
        assert!((e.update(&c, window(10e6, 20)) - 20.8).abs() < 1e-9);
        assert!((e.update(&c, window(12e6, 20)) - 21.6).abs() < 1e-9);
    }

    #[test]
    fn does_not_grow_when_app_limited() {
        let c = GradientConfig::default();
        let mut e = est(20.0, 10e6);
        assert_eq!(e.update(&c, window(10e6, 9)), 20.0);
        // Unless calls were refused (a critical reserve keeps the others low).
        let w = Sample {
            refused: true,
            ..window(10e6, 9)
        };
        assert!((e.update(&c, w) - 20.8).abs() < 1e-9);
    }

    #[test]
    fn shrinks_when_latency_passes_the_tolerance() {
        let c = GradientConfig::default();
        let mut e = est(100.0, 10e6);
        // short = 2 x no_load: gradient = 1.25 / 2 = 0.625, no growth step.
        let want = 100.0 * 0.8 + 100.0 * 0.625 * 0.2;
        assert!((e.update(&c, window(20e6, 100)) - want).abs() < 1e-9);
        // short = 4 x no_load: gradient = max(0.5, 1.25 / 4) = 0.5.
        let before = e.limit;
        let after = e.update(&c, window(40e6, 100));
        assert!((after - before * 0.9).abs() < 1e-9, "{after}");
    }

    #[test]
    fn limits_are_clamped() {
        let c = GradientConfig {
            min_limit: 5,
            max_limit: 21,
            ..GradientConfig::default()
        };
        let mut e = est(20.0, 10e6);
        e.update(&c, window(10e6, 20));
        assert_eq!(e.update(&c, window(10e6, 20)), 21.0);
        let mut e = est(5.0, 1e6);
        // gradient 0.5: 5 x 0.8 + 2.5 x 0.2 = 4.5, raised to the minimum
        assert_eq!(e.update(&c, window(1e9, 5)), 5.0);
    }

    #[test]
    fn a_probe_drains_then_measures_the_no_load_latency() {
        let c = GradientConfig::default();
        // A cold start at 40 against a service of 8 calls of 20 ms: 100 ms windows.
        let mut e = Estimator::new(40.0);
        // Probe at 40 / (2 x 1.25) = 16.
        assert_eq!(e.update(&c, window(100e6, 40)), 16.0, "probe");
        assert_eq!(e.no_load, 100e6, "the first window, queueing included");
        // The backlog admitted at 40 is still there: keep draining.
        assert_eq!(e.update(&c, window(90e6, 40)), 16.0);
        assert_eq!(e.update(&c, window(60e6, 16)), 16.0, "drained");
        assert_eq!(e.phase, Phase::Measure { saved: 40.0 });
        // The measure window: 16 in flight, still queueing (40 ms), but lower.
        assert_eq!(
            e.update(&c, window(40e6, 16)),
            40.0,
            "back to the saved limit"
        );
        assert_eq!(e.no_load, 40e6);
        assert_eq!(e.phase, Phase::Follow { left: QUICK_PROBE });
        // A probe that finds the same latency schedules the next one a
        // `long_window` later.
        e.phase = Phase::Measure { saved: 10.0 };
        e.update(&c, window(40e6, 5));
        assert_eq!(
            e.phase,
            Phase::Follow {
                left: c.long_window
            }
        );
        // A higher one moves it half the way, and is checked again soon.
        e.phase = Phase::Measure { saved: 10.0 };
        e.update(&c, window(88e6, 5));
        assert_eq!(e.no_load, 64e6);
        assert_eq!(e.phase, Phase::Follow { left: QUICK_PROBE });
        // A drain that never ends (calls that never complete) gives the probe up.
        e.phase = Phase::Drain {
            saved: 30.0,
            at: 15.0,
            windows: 0,
        };
        e.limit = 15.0;
        for _ in 0..MAX_DRAIN - 1 {
            assert_eq!(e.update(&c, window(1e9, 30)), 15.0);
        }
        assert_eq!(e.update(&c, window(1e9, 30)), 30.0);
    }

    /// Drives `e` against a saturated service of `capacity` calls at once, `rtt` each
    /// (a window at a flight of `n` has a latency of `rtt x max(1, n / capacity)`);
    /// the limit of every window that follows the gradient.
    fn saturated(
        e: &mut Estimator,
        c: &GradientConfig,
        capacity: f64,
        rtt: f64,
        windows: usize,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        for _ in 0..windows {
            let n = e.limit.floor().max(1.0);
            let short = rtt * (n / capacity).max(1.0);
            let limit = e.update(c, window(short, n as u64));
            if matches!(e.phase, Phase::Follow { .. }) {
                out.push(limit);
            }
        }
        out
    }

    #[test]
    fn settles_near_the_real_concurrency_from_a_cold_start() {
        let c = GradientConfig::default();
        // The issue's service: 8 calls of 20 ms, the limit starting at 20.
        let mut e = Estimator::new(20.0);
        let settled = saturated(&mut e, &c, 8.0, 20e6, 300).split_off(40);
        let (lo, hi) = settled
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), l| (lo.min(*l), hi.max(*l)));
        assert!(lo >= 8.0 && hi <= 12.0, "{lo}..{hi}");
        assert!((e.no_load - 20e6).abs() < 1.0, "{}", e.no_load);
    }

    proptest::proptest! {
        /// Whatever the start, a saturated service's limit settles within
        /// `[capacity, rtt_tolerance x capacity + a growth step + 1]`, and the
        /// estimator learns the no-load latency.
        #[test]
        fn settles_within_the_bound(
            capacity in 2u32..300,
            rtt_us in 500u32..200_000,
            initial in 1u64..1000,
            tolerance in 1.05f64..2.0,
        ) {
            let c = GradientConfig { initial_limit: initial, rtt_tolerance: tolerance, ..GradientConfig::default() };
            let (capacity, rtt) = (f64::from(capacity), f64::from(rtt_us) * 1e3);
            let mut e = Estimator::new(initial as f64);
            // Growth from 1 to 300 takes 375 windows at 0.8 a window.
            let settled = saturated(&mut e, &c, capacity, rtt, 1000).split_off(600);
            let hi = tolerance * capacity + c.smoothing * c.queue_size + 1.0;
            for l in settled {
                proptest::prop_assert!(l >= capacity.min(hi) - 1.0 && l <= hi, "{l} vs {capacity} (<= {hi})");
            }
            proptest::prop_assert!((e.no_load - rtt).abs() <= 0.01 * rtt, "{} vs {rtt}", e.no_load);
        }
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
