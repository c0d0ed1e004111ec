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

use super::cpu::{CpuSource, SystemCpu, CPU_MAX};
use super::error::{ConfigError, Overloaded};
use super::ewma::AtomicEwma;
use super::permit::{LatencyLimiter, LatencyPermit};
use super::{nanos, Timer};
use crate::clock::Clock;
use crate::rolling::{RollingWindow, MAX_BUCKETS};
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
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::AdaptiveConfig;
/// use std::time::Duration;
///
/// let config = AdaptiveConfig { window: Duration::from_secs(1), buckets: 10, ..AdaptiveConfig::default() };
/// assert!(config.validate().is_ok());
/// assert_eq!(config.window_scale(), 0.01);
///
/// let bad = AdaptiveConfig { cpu_threshold: 1000, ..AdaptiveConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().field, "cpu_threshold");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveConfig {
    /// Length of the statistics window (at least one nanosecond per bucket).
    pub window: Duration,
    /// Number of buckets of the window (1 ..= [`MAX_BUCKETS`]).
    pub buckets: u32,
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
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.buckets == 0 || self.buckets as usize > MAX_BUCKETS {
            return Err(ConfigError::new(
                "buckets",
                format!("must be in 1..={MAX_BUCKETS}, got {}", self.buckets),
            ));
        }
        if nanos(self.window) < u64::from(self.buckets) {
            return Err(ConfigError::new(
                "window",
                format!(
                    "must be at least one nanosecond per bucket ({} buckets), got {:?}",
                    self.buckets, self.window
                ),
            ));
        }
        if self.cpu_threshold >= CPU_MAX {
            return Err(ConfigError::new(
                "cpu_threshold",
                format!("must be in 0..=999 millicores, got {}", self.cpu_threshold),
            ));
        }
        if self.default_min_rt.is_zero() {
            return Err(ConfigError::new("default_min_rt", "must be non-zero"));
        }
        if !(0.0..1.0).contains(&self.flying_beta) {
            return Err(ConfigError::new(
                "flying_beta",
                format!("must be in 0..1, got {}", self.flying_beta),
            ));
        }
        if !(self.min_overload_factor > 0.0 && self.min_overload_factor <= 1.0) {
            return Err(ConfigError::new(
                "min_overload_factor",
                format!("must be in (0, 1], got {}", self.min_overload_factor),
            ));
        }
        Ok(())
    }

    /// The width of one bucket.
    pub fn bucket_width(&self) -> Duration {
        Duration::from_nanos(nanos(self.window) / u64::from(self.buckets.max(1)))
    }

    /// Buckets per second divided by 1000: turns "passes per bucket x milliseconds"
    /// into "calls per second x seconds".
    pub fn window_scale(&self) -> f64 {
        1e9 / nanos(self.bucket_width()).max(1) as f64 / 1000.0
    }
}

/// What an [`AdaptiveLimiter`] currently sees; [`AdaptiveLimiter::stats`].
#[derive(Clone, Copy, Debug, PartialEq)]
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
/// permit.pass(now + 3_000_000); // took 3 ms
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok::<(), resilience_runtime::adaptive::ConfigError>(())
/// ```
pub struct AdaptiveLimiter {
    config: AdaptiveConfig,
    window_scale: f64,
    bucket_ns: u64,
    start: u64,
    cool_off_ns: u64,
    default_min_rt_ms: f64,
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
    /// A [`ConfigError`] naming the first invalid field of `config`.
    pub fn new(config: AdaptiveConfig) -> Result<Self, ConfigError> {
        Self::build(config, Arc::new(SystemCpu), Timer::system())
    }

    /// A limiter reading `cpu` and `clock` (which sets the timeline of `now`).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid field of `config`.
    pub fn with_parts(
        config: AdaptiveConfig,
        cpu: Arc<dyn CpuSource>,
        clock: Clock,
    ) -> Result<Self, ConfigError> {
        Self::build(config, cpu, Timer::new(clock))
    }

    fn build(
        config: AdaptiveConfig,
        cpu: Arc<dyn CpuSource>,
        timer: Timer,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let start = timer.now();
        let width = config.bucket_width();
        let window = |now| {
            RollingWindow::new(config.buckets as usize, width, now)
                .map(|w| w.with_ignore_current(true))
                .map_err(|e| ConfigError::new("buckets", e.to_string()))
        };
        Ok(AdaptiveLimiter {
            window_scale: config.window_scale(),
            bucket_ns: nanos(width),
            start,
            cool_off_ns: nanos(config.cool_off),
            default_min_rt_ms: config.default_min_rt.as_nanos() as f64 / 1e6,
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
    pub fn now(&self) -> u64 {
        self.timer.now()
    }

    /// Admits a call at `now`, or refuses it when the service is overloaded.
    ///
    /// Report the end of the call with [`AdaptivePermit::pass`] (it completed: its
    /// latency is a sample) or [`AdaptivePermit::fail`]; dropping the permit counts as
    /// a failure (go-zero's `Fail`: the call leaves the flight, no latency sample).
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when the call is dropped.
    #[inline]
    pub fn try_acquire(&self, now: u64) -> Result<AdaptivePermit<&Self>, Overloaded> {
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
        now: u64,
    ) -> Result<AdaptivePermit<Arc<Self>>, Overloaded> {
        self.admit(now)?;
        Ok(LatencyPermit::new(Arc::clone(self), now))
    }

    #[inline]
    fn admit(&self, now: u64) -> Result<(), Overloaded> {
        self.check(now, self.flying.load(Ordering::Relaxed))?;
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
    /// [`Overloaded`] when the call must be dropped.
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
    /// # Ok::<(), resilience_runtime::adaptive::ConfigError>(())
    /// ```
    pub fn check(&self, now: u64, in_flight: u64) -> Result<(), Overloaded> {
        let cpu = self.cpu.usage().min(CPU_MAX);
        if cpu >= self.config.cpu_threshold {
            self.overload_time.store(now.max(1), Ordering::Relaxed);
        } else if !self.still_hot(now) {
            return Ok(());
        }
        let limit = self.max_flight_cached(now) * self.overload_factor(cpu);
        if self.avg_flying.get() > limit && in_flight as f64 > limit {
            self.dropped_recently.store(true, Ordering::Relaxed);
            self.drops.fetch_add(1, Ordering::Relaxed);
            return Err(Overloaded {
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
    pub fn record(&self, now: u64, latency: Duration, in_flight: u64) {
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
        if !self.dropped_recently.load(Ordering::Relaxed) {
            return false;
        }
        let overload_time = self.overload_time.load(Ordering::Relaxed);
        if overload_time == 0 {
            return false;
        }
        if now.saturating_sub(overload_time) < self.cool_off_ns {
            return true;
        }
        self.dropped_recently.store(false, Ordering::Relaxed);
        false
    }

    fn overload_factor(&self, cpu: u64) -> f64 {
        let factor = (CPU_MAX - cpu) as f64 / (CPU_MAX - self.config.cpu_threshold) as f64;
        factor.clamp(self.config.min_overload_factor, 1.0)
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

    fn max_pass(&self, now: u64) -> u64 {
        let mut result = 1;
        self.rts.reduce(now, |b| result = result.max(b.count));
        result
    }

    fn min_rt(&self, now: u64) -> f64 {
        let mut result = self.default_min_rt_ms;
        self.rts.reduce(now, |b| {
            if b.count > 0 {
                result = result.min((b.sum / b.count as f64).round());
            }
        });
        result
    }

    fn max_flight(&self, now: u64) -> f64 {
        (self.max_pass(now) as f64 * self.min_rt(now) * self.window_scale).max(1.0)
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
    /// let config = AdaptiveConfig { window: Duration::from_secs(1), buckets: 10, ..AdaptiveConfig::default() };
    /// let limiter = AdaptiveLimiter::with_parts(config, Arc::new(FixedCpu::new(0)), Clock::manual(&clock))?;
    /// for _ in 0..200 {
    ///     limiter.try_acquire(limiter.now())?.pass(limiter.now() + 5_000_000);
    /// }
    /// clock.advance(Duration::from_millis(100));
    /// let stats = limiter.stats(limiter.now());
    /// assert_eq!((stats.max_pass, stats.min_rt_ms), (200, 5.0));
    /// assert_eq!(stats.max_flight, 10.0); // 200 per 100 ms x 5 ms = 2000/s x 0.005 s
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self, now: u64) -> AdaptiveStats {
        let cpu = self.cpu.usage().min(CPU_MAX);
        AdaptiveStats {
            in_flight: self.in_flight(),
            avg_in_flight: self.avg_flying.get(),
            max_pass: self.max_pass(now),
            min_rt_ms: self.min_rt(now),
            max_flight: self.max_flight(now),
            cpu,
            overload_factor: self.overload_factor(cpu),
            drops: self.drops.load(Ordering::Relaxed),
        }
    }
}

/// A call admitted by an [`AdaptiveLimiter`]; dropping it without
/// [`pass`](LatencyPermit::pass) counts as a failure.
pub type AdaptivePermit<L> = LatencyPermit<L>;

impl LatencyLimiter for AdaptiveLimiter {
    fn now(&self) -> u64 {
        AdaptiveLimiter::now(self)
    }

    fn end_call(&self, start: u64, end: Option<u64>) {
        let in_flight = self.flying.fetch_sub(1, Ordering::Relaxed) - 1;
        match end {
            Some(now) => self.record(
                now,
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
                l.rts.add(t0 + i * BUCKET, (i + 6) as f64);
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
                l.rts.add(l.start + (i - 1) * BUCKET, 1.0);
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
                l.rts.add(l.start + i * BUCKET, j as f64);
            }
        }
        // Bucket 0 averages 5.5 ms, rounded half away from zero.
        assert_eq!(l.min_rt(l.start + 9 * BUCKET), 6.0);
    }

    #[test]
    fn max_flight() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, _) = limiter(&cpu, 900);
        assert_eq!(l.window_scale, 0.01);
        let now = fill(&l);
        assert_eq!(l.max_pass(now), 900, "the current bucket (1000) is ignored");
        assert_eq!(l.max_flight(now), 54.0);
        assert_eq!(l.stats(now).max_flight, 54.0);
    }

    #[test]
    fn should_drop() {
        // CPU 500 against a threshold of 500: overloaded with an overload factor of
        // exactly 1, as in go-zero's test (its checker is stubbed, its factor is 1).
        let cpu = Arc::new(FixedCpu::new(500));
        let (l, _) = limiter(&cpu, 500);
        let now = fill(&l);
        l.avg_flying.set(50.0);
        assert!(l.check(now, 0).is_ok(), "average flight under 54");
        l.avg_flying.set(80.0);
        assert!(l.check(now, 50).is_ok(), "current flight under 54");
        let err = l.check(now, 80).unwrap_err();
        assert_eq!(
            err,
            Overloaded {
                in_flight: 80,
                limit: 54.0,
                cpu: Some(500)
            }
        );
        // Not overloaded any more, but a call was dropped and the last overload was at
        // `now`: still hot during the 1 s cool-off (50 ms later, same bucket).
        cpu.set(499);
        assert!(
            l.check(now + 50_000_000, 80).is_err(),
            "still hot in the cool-off"
        );
        assert!(l.check(now + 1_000_000_000, 80).is_ok(), "cool-off over");
        assert!(!l.dropped_recently.load(Ordering::Relaxed));
        // Back to overloaded: try_acquire refuses with 80 in flight.
        cpu.set(500);
        l.flying.store(80, Ordering::Relaxed);
        assert!(l.try_acquire(now).is_err());
        assert_eq!(
            l.in_flight(),
            80,
            "a refused call does not enter the flight"
        );
        assert_eq!(l.stats(now).drops, 3);
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
        assert!(l.check(now, 28).is_err(), "limit 54 x 0.5 = 27");
        assert!(l.check(now, 27).is_ok());
    }

    #[test]
    fn permits_pass_fail_and_cancel() {
        let cpu = Arc::new(FixedCpu::new(0));
        let (l, clock) = limiter(&cpu, 900);
        let t = l.now();
        let a = l.try_acquire(t).unwrap();
        let b = l.try_acquire(t).unwrap();
        let c = l.try_acquire(t).unwrap();
        assert_eq!(l.in_flight(), 3);
        a.pass(t + 2_500_000); // 2.5 ms -> 3 ms sample
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
            l.record(t, Duration::from_millis(4), 0);
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
