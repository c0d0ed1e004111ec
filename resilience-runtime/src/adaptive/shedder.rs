//! go-zero's adaptive load shedder (`core/load/adaptiveshedder.go`) as a standalone
//! concurrency limit.
//!
//! The limit is Little's law applied to what the service recently sustained:
//! `max_flight = max_pass x min_rt x window_scale`, where `max_pass` is the largest
//! number of completed calls in one bucket of the window, `min_rt` the lowest bucket
//! average latency (milliseconds, rounded) and `window_scale = buckets per second /
//! 1000`. A call is dropped only while the CPU is at or over `cpu_threshold`, or was
//! during the last `cool_off` and a call was dropped since, *and* both the average and
//! the current number of calls in flight exceed `max_flight x overload_factor`, where
//! the factor `(1000 - cpu) / (1000 - cpu_threshold)` (clamped to
//! `min_overload_factor ..= 1`) tightens the limit as the CPU nears saturation.
//!
//! go-zero keeps completed calls and their latencies in two rolling windows whose
//! counts are always equal (each pass adds one latency sample); here one window of
//! latencies serves both: a bucket's count is its number of passes.
//!
//! The formulas are pure and public: [`ShedderWindow`] folds the window's buckets into
//! `max_pass`, `min_rt` and `max_flight`, and [`ShedderRules`] holds the overload
//! factor, the "still hot" rule ([`CoolOff`]) and the drop decision.
//! [`AdaptiveLimiter`] evaluates exactly these on its live state.

use super::cpu::{CpuSource, SystemCpu, CPU_MAX};
use super::error::LimitRefused;
use super::ewma::AtomicEwma;
use super::permit::{LatencyLimiter, LatencyPermit};
use super::{nanos, Timer};
use crate::builder::builder;
use crate::clock::Clock;
use crate::clock::Instant;
use crate::error::FieldError;
use crate::rolling::{Bucket, RollingWindow, MAX_BUCKETS};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::Arc;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// The constants of an [`AdaptiveLimiter`]; [`Default`] is go-zero's.
///
/// | field | go-zero | meaning |
/// |---|---|---|
/// | `window` | 5 s | length of the statistics window |
/// | `buckets` | 50 | buckets of the window (100 ms each) |
/// | `cpu_threshold` | 900 | CPU usage (millicores of the quota) from which the system is overloaded |
/// | `cool_off` | 1 s | after the CPU falls below the threshold, drops continue this long if any happened |
/// | `default_min_rt` | 1 s | the minimum latency assumed while no bucket has a completed call |
/// | `flying_beta` | 0.9 | weight of the old value in the average of calls in flight |
/// | `min_overload_factor` | 0.1 | the smallest share of the sustainable flight admitted at full CPU |
///
/// Build one with [`AdaptiveConfig::builder`]; the fields are public for reading.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::AdaptiveConfig;
/// use std::time::Duration;
///
/// let config = AdaptiveConfig::builder().window(Duration::from_secs(1)).buckets(10).build()?;
/// assert_eq!(config.window_scale(), 0.01);
///
/// let bad = AdaptiveConfig::builder().cpu_threshold(1000).build();
/// assert_eq!(bad.unwrap_err().field, "cpu_threshold");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct AdaptiveConfig {
    /// Length of the statistics window (at least one nanosecond per bucket).
    pub window: Duration,
    /// Number of buckets of the window (1 ..= [`MAX_BUCKETS`]).
    pub buckets: u64,
    /// CPU usage in millicores of the quota (0 ..= 999) at or above which the system is
    /// overloaded. With 0 and a [`FixedCpu`](super::FixedCpu) of 0 the CPU never
    /// matters and the flight rule alone decides (overload factor 1).
    pub cpu_threshold: u64,
    /// How long drops continue after the CPU fell below the threshold.
    pub cool_off: Duration,
    /// The minimum latency assumed when no bucket of the window has a completed call
    /// (> 0; large, so that a cold limiter does not drop).
    pub default_min_rt: Duration,
    /// Weight of the old value in the average of calls in flight, updated when a call
    /// ends (`0 ..< 1`).
    pub flying_beta: f64,
    /// Lower bound of the overload factor (`0 < x <= 1`).
    pub min_overload_factor: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            window: Duration::from_secs(5),
            buckets: 50,
            cpu_threshold: 900,
            cool_off: Duration::from_secs(1),
            default_min_rt: Duration::from_secs(1),
            flying_beta: 0.9,
            min_overload_factor: 0.1,
        }
    }
}

impl AdaptiveConfig {
    /// Starts a configuration with go-zero's constants (the [`Default`]).
    pub fn builder() -> AdaptiveConfigBuilder {
        AdaptiveConfigBuilder {
            config: AdaptiveConfig::default(),
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one.
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        if self.buckets == 0 || self.buckets > MAX_BUCKETS {
            return Err(FieldError::new(
                "buckets",
                format!("must be in 1..={MAX_BUCKETS}, got {}", self.buckets),
            ));
        }
        if nanos(self.window) < self.buckets {
            return Err(FieldError::new(
                "window",
                format!(
                    "must be at least one nanosecond per bucket ({} buckets), got {:?}",
                    self.buckets, self.window
                ),
            ));
        }
        if self.cpu_threshold >= CPU_MAX {
            return Err(FieldError::new(
                "cpu_threshold",
                format!("must be in 0..=999 millicores, got {}", self.cpu_threshold),
            ));
        }
        if self.default_min_rt.is_zero() {
            return Err(FieldError::new("default_min_rt", "must be non-zero"));
        }
        if !(0.0..1.0).contains(&self.flying_beta) {
            return Err(FieldError::new(
                "flying_beta",
                format!("must be in 0..1, got {}", self.flying_beta),
            ));
        }
        if !(self.min_overload_factor > 0.0 && self.min_overload_factor <= 1.0) {
            return Err(FieldError::new(
                "min_overload_factor",
                format!("must be in (0, 1], got {}", self.min_overload_factor),
            ));
        }
        Ok(())
    }

    /// The width of one bucket.
    pub fn bucket_width(&self) -> Duration {
        Duration::from_nanos(nanos(self.window) / self.buckets.max(1))
    }

    /// Buckets per second divided by 1000: turns "passes per bucket x milliseconds"
    /// into "calls per second x seconds".
    pub fn window_scale(&self) -> f64 {
        1e9 / nanos(self.bucket_width()).max(1) as f64 / 1000.0
    }
}

builder! {
    /// Builds an [`AdaptiveConfig`]; start from [`AdaptiveConfig::builder`]. Each
    /// setter is named after the field it sets; [`build`](Self::build) checks them all.
    pub struct AdaptiveConfigBuilder => AdaptiveConfig;

    /// Checks every setting and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field.
    build -> Result<FieldError> = AdaptiveConfig::validate;

    /// Length of the statistics window (at least one nanosecond per bucket;
    /// default 5 s).
    window: Duration,
    /// Number of buckets of the window (1 ..= [`MAX_BUCKETS`]; default 50).
    buckets: u64,
    /// CPU usage in millicores of the quota (0 ..= 999) at or above which the system
    /// is overloaded (default 900).
    cpu_threshold: u64,
    /// How long drops continue after the CPU fell below the threshold (default 1 s).
    cool_off: Duration,
    /// The minimum latency assumed when no bucket of the window has a completed call
    /// (> 0; default 1 s).
    default_min_rt: Duration,
    /// Weight of the old value in the average of calls in flight (`0 ..< 1`;
    /// default 0.9).
    flying_beta: f64,
    /// Lower bound of the overload factor (`0 < x <= 1`; default 0.1).
    min_overload_factor: f64,
}

/// go-zero's window statistics (`maxPass`, `minRt`, `maxFlight`) folded from the
/// buckets of the shedder's window, oldest first; pure.
///
/// * `max_pass`: the most passes (completed calls) in one bucket, at least 1;
/// * `min_rt_ms`: the lowest bucket average latency in milliseconds, rounded half
///   away from zero, over the buckets with at least one call; the default (go-zero:
///   1000 ms, large so that a cold shedder does not drop) when there are none;
/// * [`max_flight`](ShedderWindow::max_flight)` = max(1, max_pass x min_rt_ms x
///   window_scale)`: Little's law, peak calls per second x minimum latency in
///   seconds.
///
/// A [`Bucket`] of the shedder's window holds the latencies (ms) of the calls that
/// passed in it: `sum` their total, `count` the passes.
///
/// # Examples
///
/// go-zero's `TestAdaptiveShedderMaxFlight` fixture, without its current bucket:
/// bucket `i` holds `(i + 1) x 100` passes; bucket 0 averages 5.5 ms (go-zero: the
/// latencies 1 ..= 10), rounded to 6.
///
/// ```
/// use resilience_runtime::adaptive::ShedderWindow;
/// use resilience_runtime::rolling::Bucket;
///
/// let buckets: Vec<Bucket> = (0..9u64)
///     .map(|i| {
///         let passes = (i + 1) * 100;
///         let avg = if i == 0 { 5.5 } else { 10.0 * i as f64 + 5.5 };
///         Bucket { sum: avg * passes as f64, count: passes }
///     })
///     .collect();
/// let w = ShedderWindow::from_buckets(1000.0, &buckets);
/// assert_eq!((w.max_pass, w.min_rt_ms), (900, 6.0));
/// assert_eq!(w.max_flight(0.01), 54.0); // 900 per 100 ms x 6 ms
/// assert_eq!(ShedderWindow::new(1000.0).max_pass, 1, "an empty window");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShedderWindow {
    /// The most passes in one bucket seen so far, at least 1.
    pub max_pass: u64,
    /// The lowest rounded bucket average latency seen so far (ms), or the default.
    pub min_rt_ms: f64,
}

impl ShedderWindow {
    /// The statistics of an empty window: `max_pass` 1, `min_rt_ms` the default.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::ShedderWindow;
    /// let w = ShedderWindow::new(1000.0);
    /// assert_eq!((w.max_pass, w.min_rt_ms), (1, 1000.0));
    /// ```
    pub fn new(default_min_rt_ms: f64) -> Self {
        ShedderWindow {
            max_pass: 1,
            min_rt_ms: default_min_rt_ms,
        }
    }

    /// Folds the buckets (oldest first; the order does not matter) into the
    /// statistics of [`new`](Self::new)`(default_min_rt_ms)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::ShedderWindow;
    /// # use resilience_runtime::rolling::Bucket;
    /// let w = ShedderWindow::from_buckets(1000.0, &[
    ///     Bucket { sum: 0.0, count: 0 },  // no calls: ignored by min_rt
    ///     Bucket { sum: 25.0, count: 10 }, // 2.5 ms -> 3
    /// ]);
    /// assert_eq!((w.max_pass, w.min_rt_ms), (10, 3.0));
    /// ```
    pub fn from_buckets<'a>(
        default_min_rt_ms: f64,
        buckets: impl IntoIterator<Item = &'a Bucket>,
    ) -> Self {
        let mut w = ShedderWindow::new(default_min_rt_ms);
        for b in buckets {
            w.add(b);
        }
        w
    }

    /// Folds one more bucket in.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::ShedderWindow;
    /// # use resilience_runtime::rolling::Bucket;
    /// let mut w = ShedderWindow::new(1000.0);
    /// w.add(&Bucket { sum: 12.0, count: 3 });
    /// assert_eq!((w.max_pass, w.min_rt_ms), (3, 4.0));
    /// ```
    pub fn add(&mut self, b: &Bucket) {
        self.max_pass = self.max_pass.max(b.count);
        if b.count > 0 {
            // f64::round rounds half away from zero, like Go's math.Round.
            self.min_rt_ms = self.min_rt_ms.min((b.sum / b.count as f64).round());
        }
    }

    /// `max(1, max_pass x min_rt_ms x window_scale)`: the flight the service
    /// sustained (go-zero's `maxFlight`); `window_scale` is
    /// [`AdaptiveConfig::window_scale`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::ShedderWindow;
    /// let w = ShedderWindow { max_pass: 200, min_rt_ms: 5.0 };
    /// assert_eq!(w.max_flight(0.01), 10.0);
    /// assert_eq!(ShedderWindow::new(40.0).max_flight(0.01), 1.0, "at least 1");
    /// ```
    pub fn max_flight(&self, window_scale: f64) -> f64 {
        (self.max_pass as f64 * self.min_rt_ms * window_scale).max(1.0)
    }
}

/// The "still hot" state of the shedder ([`ShedderRules::cool_off`]): go-zero's
/// `stillHot`, which keeps dropping for `cool_off` after the CPU fell below the
/// threshold, if a call was dropped since.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::adaptive::{AdaptiveConfig, CoolOff, ShedderRules};
///
/// let rules = ShedderRules::new(&AdaptiveConfig::default());
/// let mut dropped_recently = true;
/// let (dropped_at, now) = (Instant::from_nanos(1_000_000_000), Instant::from_nanos(3_000_000_000));
/// if rules.cool_off(now, dropped_recently, Some(dropped_at)) == CoolOff::Expired {
///     dropped_recently = false; // what the shedder does
/// }
/// assert!(!dropped_recently);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoolOff {
    /// No call was dropped recently, or the CPU was never over the threshold: not hot.
    Cold,
    /// A call was dropped recently and the CPU was over the threshold less than
    /// `cool_off` ago: hot, drops may continue.
    Hot,
    /// A call was dropped recently, but the last overload is `cool_off` or more ago:
    /// not hot, and the "dropped recently" flag is to be cleared (go-zero clears it
    /// here).
    Expired,
}

impl CoolOff {
    /// Whether drops may continue ([`CoolOff::Hot`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::CoolOff;
    /// assert!(CoolOff::Hot.is_hot());
    /// assert!(!CoolOff::Expired.is_hot());
    /// ```
    pub fn is_hot(self) -> bool {
        self == CoolOff::Hot
    }
}

/// go-zero's shedder rules as pure functions of what the shedder measured, with the
/// constants of an [`AdaptiveConfig`]; [`AdaptiveLimiter`] evaluates exactly these.
///
/// A call is dropped ([`should_drop`](Self::should_drop)) when the system is
/// overloaded (`cpu >= cpu_threshold`) or still hot ([`cool_off`](Self::cool_off)),
/// and both the average and the current calls in flight exceed
/// [`flight_limit`](Self::flight_limit)` = max_flight x overload_factor(cpu)`, with
/// `overload_factor = clamp((1000 - cpu) / (1000 - cpu_threshold), min_overload_factor, 1)`.
/// Every comparison is strict, as in go-zero.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules, ShedderWindow};
///
/// let rules = ShedderRules::new(&AdaptiveConfig::default());
/// assert_eq!(rules.overload_factor(950), 0.5);
/// let window = ShedderWindow { max_pass: 900, min_rt_ms: 6.0 };
/// let max_flight = rules.max_flight(&window); // 900 x 6 x 0.01 = 54
/// assert_eq!(max_flight, 54.0);
/// // CPU at 95%: limit 27; 30 calls in flight, 30 on average: drop.
/// assert!(rules.should_drop(950, false, 30.0, 30, max_flight));
/// // The same flight at 80% CPU (not overloaded, not hot): admit.
/// assert!(!rules.should_drop(800, false, 30.0, 30, max_flight));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShedderRules {
    cpu_threshold: u64,
    cool_off_ns: u64,
    window_scale: f64,
    default_min_rt_ms: f64,
    min_overload_factor: f64,
}

impl ShedderRules {
    /// The rules with the constants of `config` (assumed valid, as
    /// [`AdaptiveConfigBuilder::build`] makes them).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// assert_eq!(rules.window_scale(), 0.01);
    /// ```
    pub fn new(config: &AdaptiveConfig) -> Self {
        ShedderRules {
            cpu_threshold: config.cpu_threshold,
            cool_off_ns: nanos(config.cool_off),
            window_scale: config.window_scale(),
            default_min_rt_ms: config.default_min_rt.as_nanos() as f64 / 1e6,
            min_overload_factor: config.min_overload_factor,
        }
    }

    /// [`AdaptiveConfig::window_scale`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// use std::time::Duration;
    ///
    /// let config = AdaptiveConfig::builder().window(Duration::from_secs(1)).buckets(40).build()?;
    /// assert_eq!(ShedderRules::new(&config).window_scale(), 0.04); // 40 buckets per second
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn window_scale(&self) -> f64 {
        self.window_scale
    }

    /// The statistics of an empty window under these rules
    /// ([`ShedderWindow::new`] with the configured `default_min_rt`), to fold buckets
    /// into.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// assert_eq!(rules.window().min_rt_ms, 1000.0);
    /// ```
    pub fn window(&self) -> ShedderWindow {
        ShedderWindow::new(self.default_min_rt_ms)
    }

    /// [`ShedderWindow::max_flight`] with this window scale.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules, ShedderWindow};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// let w = ShedderWindow { max_pass: 300, min_rt_ms: 4.0 };
    /// assert_eq!(rules.max_flight(&w), 12.0); // 3000 calls/s x 4 ms
    /// ```
    pub fn max_flight(&self, window: &ShedderWindow) -> f64 {
        window.max_flight(self.window_scale)
    }

    /// Whether the system is overloaded: `cpu >= cpu_threshold` (go-zero's
    /// `systemOverloaded`; the shedder then records the time as the last overload).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// assert!(rules.is_overloaded(900) && !rules.is_overloaded(899));
    /// ```
    pub fn is_overloaded(&self, cpu: u64) -> bool {
        cpu >= self.cpu_threshold
    }

    /// `clamp((1000 - cpu) / (1000 - cpu_threshold), min_overload_factor, 1)`: the
    /// share of `max_flight` admitted at this CPU reading (millicores, at most 1000).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default()); // threshold 900
    /// assert_eq!(rules.overload_factor(900), 1.0);
    /// assert_eq!(rules.overload_factor(1000), 0.1, "the floor");
    /// ```
    pub fn overload_factor(&self, cpu: u64) -> f64 {
        let cpu = cpu.min(CPU_MAX);
        let factor = (CPU_MAX - cpu) as f64 / (CPU_MAX - self.cpu_threshold) as f64;
        factor.clamp(self.min_overload_factor, 1.0)
    }

    /// go-zero's `stillHot` at `now`: [`CoolOff::Hot`] iff a call was dropped
    /// recently and the last overload (`overload_time`, `None` if never) is less than
    /// `cool_off` before `now`; [`CoolOff::Expired`] when it was dropping but the
    /// cool-off is over (clear `dropped_recently`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, CoolOff, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default()); // cool-off 1 s
    /// # use resilience_runtime::Instant;
    /// # use std::time::Duration;
    /// let t = Instant::from_nanos(5_000_000_000);
    /// assert_eq!(rules.cool_off(t + Duration::from_nanos(999_999_999), true, Some(t)), CoolOff::Hot);
    /// assert_eq!(rules.cool_off(t + Duration::from_secs(1), true, Some(t)), CoolOff::Expired);
    /// assert_eq!(rules.cool_off(t, false, Some(t)), CoolOff::Cold);
    /// assert_eq!(rules.cool_off(t, true, None), CoolOff::Cold);
    /// ```
    pub fn cool_off(
        &self,
        now: Instant,
        dropped_recently: bool,
        overload_time: Option<Instant>,
    ) -> CoolOff {
        let now = now.as_nanos();
        match overload_time.map(Instant::as_nanos) {
            _ if !dropped_recently => CoolOff::Cold,
            None => CoolOff::Cold,
            Some(t) if now.saturating_sub(t) < self.cool_off_ns => CoolOff::Hot,
            Some(_) => CoolOff::Expired,
        }
    }

    /// `max_flight x overload_factor(cpu)`: the flight above which calls are dropped
    /// while overloaded or hot.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// assert_eq!(rules.flight_limit(54.0, 950), 27.0);
    /// ```
    pub fn flight_limit(&self, max_flight: f64, cpu: u64) -> f64 {
        max_flight * self.overload_factor(cpu)
    }

    /// go-zero's `highThru`: both the average and the current calls in flight exceed
    /// `limit` (strictly).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// assert!(rules.high_throughput(55.0, 55, 54.0));
    /// assert!(!rules.high_throughput(54.0, 80, 54.0), "the average is not above");
    /// ```
    pub fn high_throughput(&self, avg_in_flight: f64, in_flight: u64, limit: f64) -> bool {
        avg_in_flight > limit && in_flight as f64 > limit
    }

    /// The drop decision (go-zero's `shouldDrop`): `(overloaded(cpu) || still_hot) &&
    /// high_throughput(avg_in_flight, in_flight, flight_limit(max_flight, cpu))`, with
    /// `still_hot` from [`cool_off`](Self::cool_off).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::{AdaptiveConfig, ShedderRules};
    /// let rules = ShedderRules::new(&AdaptiveConfig::default());
    /// // Cool CPU but still hot from a recent overload: the flight rule decides.
    /// assert!(rules.should_drop(500, true, 60.0, 60, 54.0));
    /// assert!(!rules.should_drop(500, false, 60.0, 60, 54.0));
    /// ```
    pub fn should_drop(
        &self,
        cpu: u64,
        still_hot: bool,
        avg_in_flight: f64,
        in_flight: u64,
        max_flight: f64,
    ) -> bool {
        (self.is_overloaded(cpu) || still_hot)
            && self.high_throughput(avg_in_flight, in_flight, self.flight_limit(max_flight, cpu))
    }
}

/// What an [`AdaptiveLimiter`] currently sees; [`AdaptiveLimiter::stats`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct AdaptiveStats {
    /// Calls in flight (admitted by [`AdaptiveLimiter::try_acquire`] and not finished).
    pub in_flight: u64,
    /// The average of calls in flight, updated when a call ends.
    pub avg_in_flight: f64,
    /// The most calls completed in one bucket of the window (at least 1).
    pub max_pass: u64,
    /// The lowest bucket average latency in milliseconds (rounded), or the default.
    pub min_rt_ms: f64,
    /// `max_pass x min_rt x window_scale`, at least 1: the sustainable flight.
    pub max_flight: f64,
    /// The CPU reading, millicores of the quota.
    pub cpu: u64,
    /// The overload factor applied to `max_flight` at this CPU reading.
    pub overload_factor: f64,
    /// How many calls were dropped since the limiter was created.
    pub drops: u64,
}

/// go-zero's adaptive load shedder: drops calls only when the CPU is hot and more
/// calls are in flight than the service recently sustained.
///
/// The sustainable flight is Little's law over the window:
/// `max_flight = max(1, max_pass x min_rt x window_scale)`, where `max_pass` is the
/// most calls completed in one bucket, `min_rt` the lowest bucket average latency in
/// milliseconds (rounded half away from zero; `default_min_rt` when no bucket has
/// calls) and `window_scale` is [`AdaptiveConfig::window_scale`]. Both ignore the
/// current bucket. A call is dropped when the CPU reads at least `cpu_threshold` (or a
/// call was dropped and the CPU was over the threshold less than `cool_off` ago) and
/// both the average and the current calls in flight exceed `max_flight x factor`, with
/// `factor = clamp((1000 - cpu) / (1000 - cpu_threshold), min_overload_factor, 1)`.
///
/// Time is passed in: `now` is nanoseconds on the limiter's timeline
/// ([`now`](AdaptiveLimiter::now), the clock given at creation), so tests and
/// simulations are deterministic.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::{AdaptiveConfig, AdaptiveLimiter, FixedCpu};
/// use resilience_runtime::Clock;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let cpu = Arc::new(FixedCpu::new(100));
/// let limiter = AdaptiveLimiter::with_parts(AdaptiveConfig::default(), cpu.clone(), Clock::system())?;
/// let now = limiter.now();
/// let permit = limiter.try_acquire(now).expect("a cool CPU never drops");
/// permit.pass(now + Duration::from_millis(3)); // took 3 ms
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
pub struct AdaptiveLimiter {
    config: AdaptiveConfig,
    rules: ShedderRules,
    bucket_ns: u64,
    start: u64,
    /// Latencies of completed calls (ms); a bucket's count is its passes.
    rts: RollingWindow,
    flying: CachePadded<AtomicU64>,
    avg_flying: AtomicEwma,
    dropped_recently: AtomicBool,
    /// Last time the CPU was seen over the threshold; 0 = never.
    overload_time: AtomicU64,
    drops: AtomicU64,
    /// `max_flight` of the current bucket: the bucket number in the high 32 bits, the
    /// value as `f32` bits in the low 32 (NaN = not computed).
    cache: AtomicU64,
    cpu: Arc<dyn CpuSource>,
    timer: Timer,
}

impl fmt::Debug for AdaptiveLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimiter")
            .field("config", &self.config)
            .field("in_flight", &self.in_flight())
            .field("cpu", &self.cpu)
            .finish_non_exhaustive()
    }
}

const NO_CACHE: u64 = f32::NAN.to_bits() as u64;

impl AdaptiveLimiter {
    /// A limiter reading the process's CPU ([`SystemCpu`]) and the system clock.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field of `config`.
    pub fn new(config: AdaptiveConfig) -> Result<Self, FieldError> {
        Self::build(config, Arc::new(SystemCpu), Timer::system())
    }

    /// A limiter reading `cpu` and `clock` (which sets the timeline of `now`).
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field of `config`.
    pub fn with_parts(
        config: AdaptiveConfig,
        cpu: Arc<dyn CpuSource>,
        clock: Clock,
    ) -> Result<Self, FieldError> {
        Self::build(config, cpu, Timer::new(clock))
    }

    fn build(
        config: AdaptiveConfig,
        cpu: Arc<dyn CpuSource>,
        timer: Timer,
    ) -> Result<Self, FieldError> {
        config.validate()?;
        let start = timer.now();
        let width = config.bucket_width();
        let window = |now| {
            RollingWindow::new(config.buckets, width, Instant::from_nanos(now))
                .map(|w| w.with_ignore_current(true))
                .map_err(|e| FieldError::new("buckets", e.to_string()))
        };
        Ok(AdaptiveLimiter {
            rules: ShedderRules::new(&config),
            bucket_ns: nanos(width),
            start,
            rts: window(start)?,
            flying: CachePadded::new(AtomicU64::new(0)),
            avg_flying: AtomicEwma::new(0.0),
            dropped_recently: AtomicBool::new(false),
            overload_time: AtomicU64::new(0),
            drops: AtomicU64::new(0),
            cache: AtomicU64::new(NO_CACHE),
            config,
            cpu,
            timer,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    /// The current time on the limiter's timeline, in nanoseconds.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.timer.now())
    }

    /// Admits a call at `now`, or refuses it when the service is overloaded.
    ///
    /// Report the end of the call with [`LatencyPermit::pass`] (it completed: its
    /// latency is a sample) or [`LatencyPermit::fail`]; dropping the permit counts as
    /// a failure (go-zero's `Fail`: the call leaves the flight, no latency sample).
    ///
    /// # Errors
    ///
    /// [`LimitRefused`] when the call is dropped.
    #[inline]
    pub fn try_acquire(&self, now: Instant) -> Result<LatencyPermit<&Self>, LimitRefused> {
        let now = now.as_nanos();
        self.admit(now)?;
        Ok(LatencyPermit::new(self, now))
    }

    /// Like [`try_acquire`](AdaptiveLimiter::try_acquire), with a permit that owns a
    /// reference count of the limiter.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](AdaptiveLimiter::try_acquire).
    #[inline]
    pub fn try_acquire_owned(
        self: &Arc<Self>,
        now: Instant,
    ) -> Result<LatencyPermit<Arc<Self>>, LimitRefused> {
        let now = now.as_nanos();
        self.admit(now)?;
        Ok(LatencyPermit::new(Arc::clone(self), now))
    }

    /// [`try_acquire`](AdaptiveLimiter::try_acquire) for a call whose tier `priority`
    /// gives (asked only while the limiter sheds: overloaded or still hot). The
    /// flight limit is scaled by the tier
    /// ([`Priority::shedder_scale`](crate::priority::Priority::shedder_scale)): a
    /// sheddable call is dropped at half of it, a critical one only past twice it, a
    /// default one at the limit itself (go-zero's rule).
    ///
    /// # Errors
    ///
    /// [`LimitRefused`] when the call is dropped.
    #[inline]
    pub fn try_acquire_for(
        &self,
        now: Instant,
        priority: impl FnOnce() -> crate::priority::Priority,
    ) -> Result<LatencyPermit<&Self>, LimitRefused> {
        let now = now.as_nanos();
        self.check_scaled(now, self.flying.load(Ordering::Relaxed), || {
            priority().shedder_scale()
        })?;
        self.flying.fetch_add(1, Ordering::Relaxed);
        Ok(LatencyPermit::new(self, now))
    }

    #[inline]
    fn admit(&self, now: u64) -> Result<(), LimitRefused> {
        self.check_scaled(now, self.flying.load(Ordering::Relaxed), || 1.0)?;
        self.flying.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The drop decision alone, for callers that count calls in flight themselves:
    /// `Err` means drop this call (and marks a recent drop for the cool-off), `Ok`
    /// admit it. Pair it with [`record`](AdaptiveLimiter::record) and
    /// [`record_failure`](AdaptiveLimiter::record_failure) when calls end.
    ///
    /// # Errors
    ///
    /// [`LimitRefused`] when the call must be dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::adaptive::{AdaptiveConfig, AdaptiveLimiter, FixedCpu};
    /// use resilience_runtime::Clock;
    /// use std::sync::Arc;
    ///
    /// // A hot CPU, but nothing in flight: admitted.
    /// let limiter = AdaptiveLimiter::with_parts(
    ///     AdaptiveConfig::default(), Arc::new(FixedCpu::new(1000)), Clock::system())?;
    /// assert!(limiter.check(limiter.now(), 0).is_ok());
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn check(&self, now: Instant, in_flight: u64) -> Result<(), LimitRefused> {
        self.check_scaled(now.as_nanos(), in_flight, || 1.0)
    }

    /// [`check`](Self::check) with the flight limit scaled by `scale()`, asked only
    /// while the limiter sheds.
    fn check_scaled(
        &self,
        now: u64,
        in_flight: u64,
        scale: impl FnOnce() -> f64,
    ) -> Result<(), LimitRefused> {
        let cpu = self.cpu.usage().min(CPU_MAX);
        // go-zero's `systemOverloaded() || stillHot()`, the overload check first (it
        // records the overload time); neither: admit without reading the window.
        if self.rules.is_overloaded(cpu) {
            self.overload_time.store(now.max(1), Ordering::Relaxed);
        } else if !self.still_hot(now) {
            return Ok(());
        }
        let limit = self.rules.flight_limit(self.max_flight_cached(now), cpu) * scale();
        if self
            .rules
            .high_throughput(self.avg_flying.get(), in_flight, limit)
        {
            self.dropped_recently.store(true, Ordering::Relaxed);
            self.drops.fetch_add(1, Ordering::Relaxed);
            return Err(LimitRefused {
                in_flight,
                limit,
                cpu: Some(cpu),
            });
        }
        Ok(())
    }

    /// Records a completed call: its latency (a sample, in whole milliseconds rounded
    /// up, like go-zero) and one pass at `now`, and `in_flight`, the calls still in
    /// flight after it, into the flight average.
    pub fn record(&self, now: Instant, latency: Duration, in_flight: u64) {
        self.avg_flying
            .update(in_flight as f64, self.config.flying_beta);
        let ms = (latency.as_nanos() as f64 / 1e6).ceil();
        self.rts.add(now, ms);
    }

    /// Records a call that failed or was cancelled: only the flight average changes.
    pub fn record_failure(&self, in_flight: u64) {
        self.avg_flying
            .update(in_flight as f64, self.config.flying_beta);
    }

    fn still_hot(&self, now: u64) -> bool {
        let overload_time = match self.overload_time.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        };
        let dropped_recently = self.dropped_recently.load(Ordering::Relaxed);
        let at = Instant::from_nanos(now);
        match self
            .rules
            .cool_off(at, dropped_recently, overload_time.map(Instant::from_nanos))
        {
            CoolOff::Hot => true,
            CoolOff::Cold => false,
            CoolOff::Expired => {
                self.dropped_recently.store(false, Ordering::Relaxed);
                false
            }
        }
    }

    fn overload_factor(&self, cpu: u64) -> f64 {
        self.rules.overload_factor(cpu)
    }

    /// `max_flight` cached per bucket: the window ignores the current bucket, so its
    /// reading only changes when `now` enters a new bucket.
    fn max_flight_cached(&self, now: u64) -> f64 {
        let bucket = (now.saturating_sub(self.start) / self.bucket_ns) as u32;
        let cached = self.cache.load(Ordering::Relaxed);
        let value = f32::from_bits(cached as u32);
        if (cached >> 32) as u32 == bucket && !value.is_nan() {
            return f64::from(value);
        }
        let fresh = self.max_flight(now);
        let packed = (u64::from(bucket) << 32) | u64::from((fresh as f32).to_bits());
        self.cache.store(packed, Ordering::Relaxed);
        fresh
    }

    /// The window's statistics at `now` (one pass over the buckets).
    fn window(&self, now: u64) -> ShedderWindow {
        let mut w = self.rules.window();
        self.rts.reduce(Instant::from_nanos(now), |b| w.add(b));
        w
    }

    #[cfg(test)]
    fn max_pass(&self, now: u64) -> u64 {
        self.window(now).max_pass
    }

    #[cfg(test)]
    fn min_rt(&self, now: u64) -> f64 {
        self.window(now).min_rt_ms
    }

    fn max_flight(&self, now: u64) -> f64 {
        self.rules.max_flight(&self.window(now))
    }

    /// Calls in flight (admitted by this limiter and not finished).
    pub fn in_flight(&self) -> u64 {
        self.flying.load(Ordering::Relaxed)
    }

    /// What the limiter sees at `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::adaptive::{AdaptiveConfig, AdaptiveLimiter, FixedCpu};
    /// use resilience_runtime::{Clock, ManualClock};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let config = AdaptiveConfig::builder().window(Duration::from_secs(1)).buckets(10).build()?;
    /// let limiter = AdaptiveLimiter::with_parts(config, Arc::new(FixedCpu::new(0)), Clock::manual(&clock))?;
    /// for _ in 0..200 {
    ///     limiter.try_acquire(limiter.now())?.pass(limiter.now() + Duration::from_millis(5));
    /// }
    /// clock.advance(Duration::from_millis(100));
    /// let stats = limiter.stats(limiter.now());
    /// assert_eq!((stats.max_pass, stats.min_rt_ms), (200, 5.0));
    /// assert_eq!(stats.max_flight, 10.0); // 200 per 100 ms x 5 ms = 2000/s x 0.005 s
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self, now: Instant) -> AdaptiveStats {
        let now = now.as_nanos();
        let cpu = self.cpu.usage().min(CPU_MAX);
        let window = self.window(now);
        AdaptiveStats {
            in_flight: self.in_flight(),
            avg_in_flight: self.avg_flying.get(),
            max_pass: window.max_pass,
            min_rt_ms: window.min_rt_ms,
            max_flight: self.rules.max_flight(&window),
            cpu,
            overload_factor: self.overload_factor(cpu),
            drops: self.drops.load(Ordering::Relaxed),
        }
    }
}

impl LatencyLimiter for AdaptiveLimiter {
    fn now(&self) -> Instant {
        AdaptiveLimiter::now(self)
    }

    fn end_call(&self, start: u64, end: Option<u64>) {
        let in_flight = self.flying.fetch_sub(1, Ordering::Relaxed) - 1;
        match end {
            Some(now) => self.record(
                Instant::from_nanos(now),
                Duration::from_nanos(now.saturating_sub(start)),
                in_flight,
            ),
            None => self.record_failure(in_flight),
        }
    }
}

#[cfg(test)]
mod tests {
    //! go-zero's `adaptiveshedder_test.go` vectors, with time driven by hand: 10
    //! buckets of 100 ms (window scale 0.01).
    use super::*;

    /// The instant `ns` nanoseconds into the timeline.
    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }
    use crate::adaptive::FixedCpu;
    use crate::ManualClock;

    const BUCKET: u64 = 100_000_000;

    fn limiter(cpu: &Arc<FixedCpu>, threshold: u64) -> (AdaptiveLimiter, ManualClock) {
        let clock = ManualClock::new();
        let config = AdaptiveConfig {
            window: Duration::from_secs(1),
            buckets: 10,
            cpu_threshold: threshold,
            ..AdaptiveConfig::default()
        };
        let l = AdaptiveLimiter::with_parts(config, cpu.clone(), Clock::manual(&clock)).unwrap();
        (l, clock)
    }

    /// The fixture of go-zero's maxFlight/shouldDrop tests, through one window: bucket
    /// `i` gets `(i + 1) x 100` passes, bucket 0 averaging 6 ms (go-zero: latencies
    /// 1..=10, average 5.5, rounded to 6). Returns the time of the last add (its
    /// bucket is the current one, so it is ignored).
    fn fill(l: &AdaptiveLimiter) -> u64 {
        let t0 = l.start;
        for i in 0..10u64 {
            for _ in 0..(i + 1) * 100 {
                l.rts.add(at(t0 + i * BUCKET), (i + 6) as f64);
            }
        }
        t0 + 9 * BUCKET
    }

    #[test]
    fn max_pass() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 900);
        assert_eq!(l.max_pass(l.start), 1, "at least 1 when empty");
        // go-zero sleeps a bucket after each add, so the last one is no longer current.
        for i in 1..=10u64 {
            for _ in 0..i * 100 {
                l.rts.add(at(l.start + (i - 1) * BUCKET), 1.0);
            }
        }
        assert_eq!(l.max_pass(l.start + 10 * BUCKET), 1000);
    }

    #[test]
    fn min_rt() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 900);
        assert_eq!(
            l.min_rt(l.start),
            1000.0,
            "the default when no bucket has calls"
        );
        // go-zero: bucket i gets the latencies 10 i + 1 ..= 10 i + 10.
        for i in 0..10u64 {
            for j in i * 10 + 1..=i * 10 + 10 {
                l.rts.add(at(l.start + i * BUCKET), j as f64);
            }
        }
        // Bucket 0 averages 5.5 ms, rounded half away from zero.
        assert_eq!(l.min_rt(l.start + 9 * BUCKET), 6.0);
    }

    #[test]
    fn max_flight() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 900);
        assert_eq!(l.rules.window_scale(), 0.01);
        let now = fill(&l);
        assert_eq!(l.max_pass(now), 900, "the current bucket (1000) is ignored");
        assert_eq!(l.max_flight(now), 54.0);
        assert_eq!(l.stats(at(now)).max_flight, 54.0);
    }

    #[test]
    fn should_drop() {
        // CPU 500 against a threshold of 500: overloaded with an overload factor of
        // exactly 1, as in go-zero's test (its checker is stubbed, its factor is 1).
        let cpu = Arc::new(FixedCpu::new(500));
        let (l, _) = limiter(&cpu, 500);
        let now = fill(&l);
        l.avg_flying.set(50.0);
        assert!(l.check(at(now), 0).is_ok(), "average flight under 54");
        l.avg_flying.set(80.0);
        assert!(l.check(at(now), 50).is_ok(), "current flight under 54");
        let err = l.check(at(now), 80).unwrap_err();
        assert_eq!(
            err,
            LimitRefused {
                in_flight: 80,
                limit: 54.0,
                cpu: Some(500)
            }
        );
        // Not overloaded any more, but a call was dropped and the last overload was at
        // `now`: still hot during the 1 s cool-off (50 ms later, same bucket).
        cpu.set(499);
        assert!(
            l.check(at(now + 50_000_000), 80).is_err(),
            "still hot in the cool-off"
        );
        assert!(
            l.check(at(now + 1_000_000_000), 80).is_ok(),
            "cool-off over"
        );
        assert!(!l.dropped_recently.load(Ordering::Relaxed));
        // Back to overloaded: try_acquire refuses with 80 in flight.
        cpu.set(500);
        l.flying.store(80, Ordering::Relaxed);
        assert!(l.try_acquire(at(now)).is_err());
        assert_eq!(
            l.in_flight(),
            80,
            "a refused call does not enter the flight"
        );
        assert_eq!(l.stats(at(now)).drops, 3);
    }

    #[test]
    fn still_hot() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 900);
        let now = l.start + 5 * BUCKET;
        assert!(!l.still_hot(now));
        l.dropped_recently.store(true, Ordering::Relaxed);
        assert!(!l.still_hot(now), "never overloaded");
        l.overload_time.store(now, Ordering::Relaxed);
        assert!(l.still_hot(now));
        assert!(l.still_hot(now + 999_000_000));
        assert!(!l.still_hot(now + 1_010_000_000), "cool-off is 1 s");
        assert!(!l.dropped_recently.load(Ordering::Relaxed));
    }

    #[test]
    fn overload_factor_tightens_with_cpu() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 900);
        assert_eq!(l.overload_factor(900), 1.0);
        assert!((l.overload_factor(950) - 0.5).abs() < 1e-12);
        assert_eq!(l.overload_factor(1000), 0.1);
        let now = fill(&l);
        cpu.set(950);
        l.avg_flying.set(100.0);
        assert!(l.check(at(now), 28).is_err(), "limit 54 x 0.5 = 27");
        assert!(l.check(at(now), 27).is_ok());
    }

    #[test]
    fn permits_pass_fail_and_cancel() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, clock) = limiter(&cpu, 900);
        let t = l.now().as_nanos();
        let a = l.try_acquire(at(t)).unwrap();
        let b = l.try_acquire(at(t)).unwrap();
        let c = l.try_acquire(at(t)).unwrap();
        assert_eq!(l.in_flight(), 3);
        a.pass(at(t + 2_500_000)); // 2.5 ms -> 3 ms sample
        b.fail();
        drop(c);
        assert_eq!(l.in_flight(), 0);
        clock.advance(Duration::from_millis(100));
        let s = l.stats(l.now());
        assert_eq!(
            (s.max_pass, s.min_rt_ms),
            (1, 3.0),
            "one pass, only `a` sampled"
        );
        // avg: 0.9 * 0 + 0.1 * 2, then * 0.9 + 0.1 * 1, then * 0.9 + 0.
        assert!(
            (s.avg_in_flight - 0.252).abs() < 1e-12,
            "{}",
            s.avg_in_flight
        );
    }

    #[test]
    fn cache_follows_buckets() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 0);
        let t = l.start;
        assert_eq!(l.max_flight_cached(t), 10.0, "1 pass x 1000 ms x 0.01");
        for _ in 0..300 {
            l.record(at(t), Duration::from_millis(4), 0);
        }
        assert_eq!(l.max_flight_cached(t + 1), 10.0, "same bucket: cached");
        assert_eq!(l.max_flight_cached(t + BUCKET), 12.0, "300 x 4 ms x 0.01");
    }

    #[test]
    fn config_errors_name_fields() {
        let base = AdaptiveConfig::default();
        let cases = [
            (AdaptiveConfig { buckets: 0, ..base }, "buckets"),
            (
                AdaptiveConfig {
                    window: Duration::from_nanos(10),
                    ..base
                },
                "window",
            ),
            (
                AdaptiveConfig {
                    cpu_threshold: 1000,
                    ..base
                },
                "cpu_threshold",
            ),
            (
                AdaptiveConfig {
                    default_min_rt: Duration::ZERO,
                    ..base
                },
                "default_min_rt",
            ),
            (
                AdaptiveConfig {
                    flying_beta: 1.0,
                    ..base
                },
                "flying_beta",
            ),
            (
                AdaptiveConfig {
                    flying_beta: f64::NAN,
                    ..base
                },
                "flying_beta",
            ),
            (
                AdaptiveConfig {
                    min_overload_factor: 0.0,
                    ..base
                },
                "min_overload_factor",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(AdaptiveLimiter::new(config).unwrap_err().field, field);
        }
    }
}
