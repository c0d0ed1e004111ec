//! Configuration of the breakers and its validation.

use super::nanos;
use crate::error::FieldError;
use crate::rolling::MAX_BUCKETS;
use std::time::Duration;

/// The smallest `k` of the SRE breaker (go-zero's `minK`): the weight of the accepts
/// falls from `k` towards this value while whole buckets fail.
pub const MIN_K: f64 = 1.1;

/// The largest number of half-open probes of a [`ClassicBreaker`](super::ClassicBreaker).
pub const MAX_HALF_OPEN_PROBES: u64 = (1 << 16) - 1;

/// The constants of the [`SreBreaker`](super::SreBreaker); [`Default`] is go-zero's.
///
/// | field | go-zero | meaning |
/// |---|---|---|
/// | `window` | 10 s | length of the statistics window |
/// | `buckets` | 40 | buckets of the window (250 ms each) |
/// | `k` | 1.5 | how many calls per success are tolerated |
/// | `protection` | 5 | calls in the window that never trip |
/// | `force_pass_interval` | 1 s | while dropping, at least one call per interval passes |
///
/// go-zero writes the bucket count as the constant 40 in the two formulas of
/// [`drop_ratio`](super::drop_ratio); here they use `buckets`, which is the same thing
/// with the default configuration.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::SreConfig;
/// use std::time::Duration;
///
/// let config = SreConfig { k: 2.0, ..SreConfig::default() };
/// assert!(config.validate().is_ok());
///
/// let bad = SreConfig { k: 1.0, ..SreConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().field, "k");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SreConfig {
    /// Length of the statistics window (> 0, at least one nanosecond per bucket).
    pub window: Duration,
    /// Number of buckets of the window (1 ..= [`MAX_BUCKETS`]).
    pub buckets: u64,
    /// Tolerance: rejection starts when the calls exceed `k` times the successes
    /// (finite, at least [`MIN_K`]).
    pub k: f64,
    /// Calls in the window that are always tolerated on top of `k * successes`.
    pub protection: u64,
    /// While dropping, a call is forced through when the last admitted one is older
    /// than this (> 0; use a very large value to disable forced probes).
    pub force_pass_interval: Duration,
    /// Whether a call cancelled before any threshold (its future or permit dropped
    /// by the caller) counts as a failure. Default `false`: a caller that gave up says
    /// nothing about the dependency, and counting it would let impatient callers open
    /// the breaker on a healthy one. Turn it on when callers bound their calls
    /// themselves (`tokio::time::timeout` around the call) and a cut call means the
    /// dependency was too slow. Calls cancelled past the timeout rule's or the
    /// slow-call threshold count as failures either way.
    pub cancellations_are_failures: bool,
}

impl Default for SreConfig {
    fn default() -> Self {
        SreConfig {
            window: Duration::from_secs(10),
            buckets: 40,
            k: 1.5,
            protection: 5,
            force_pass_interval: Duration::from_secs(1),
            cancellations_are_failures: false,
        }
    }
}

impl SreConfig {
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::SreConfig;
    /// use std::time::Duration;
    ///
    /// let zero = SreConfig { window: Duration::ZERO, ..SreConfig::default() };
    /// assert_eq!(zero.validate().unwrap_err().field, "window");
    /// let nan = SreConfig { k: f64::NAN, ..SreConfig::default() };
    /// assert_eq!(nan.validate().unwrap_err().field, "k");
    /// ```
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_window(self.window, self.buckets, "window", "buckets")?;
        if !self.k.is_finite() || self.k < MIN_K {
            return Err(FieldError::new(
                "k",
                format!("must be a finite number >= {MIN_K}, got {}", self.k),
            ));
        }
        if self.force_pass_interval.is_zero() {
            return Err(FieldError::new("force_pass_interval", "must be non-zero"));
        }
        Ok(())
    }

    /// The width of one bucket.
    pub(crate) fn bucket_width(&self) -> Duration {
        Duration::from_nanos(nanos(self.window) / self.buckets)
    }
}

/// How long a [`ClassicBreaker`](super::ClassicBreaker) stays open: `base`, multiplied
/// by `multiplier` for each half-open attempt that failed since the breaker last
/// closed, capped at `max`, then shortened by a random fraction of at most `jitter`.
///
/// The `n`-th consecutive opening (`n = 0` when tripped from closed) waits
/// `min(base * multiplier^n, max) * (1 - jitter * u)` with `u` uniform in `[0, 1)`:
/// the jitter only shortens the wait, so `max` is a true cap.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::Backoff;
/// use std::time::Duration;
///
/// let b = Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(5));
/// assert_eq!(b.wait(0, 0.0), Duration::from_secs(1));
/// assert_eq!(b.wait(2, 0.0), Duration::from_secs(4));
/// assert_eq!(b.wait(3, 0.0), Duration::from_secs(5));
/// let jittered = b.with_jitter(0.5);
/// assert_eq!(jittered.wait(1, 0.5), Duration::from_millis(1500));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// The first wait (> 0).
    pub base: Duration,
    /// Growth per failed half-open attempt (finite, >= 1; 1 is a fixed wait).
    pub multiplier: f64,
    /// The longest wait (>= `base`).
    pub max: Duration,
    /// The largest fraction removed at random from a wait (0 ..= 1).
    pub jitter: f64,
}

impl Backoff {
    /// Always the same wait.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::breaker::Backoff;
    /// # use std::time::Duration;
    /// let b = Backoff::fixed(Duration::from_secs(5));
    /// assert_eq!(b.wait(7, 0.3), Duration::from_secs(5));
    /// ```
    pub fn fixed(wait: Duration) -> Self {
        Backoff {
            base: wait,
            multiplier: 1.0,
            max: wait,
            jitter: 0.0,
        }
    }

    /// `base`, multiplied by `multiplier` after each failed half-open attempt, at most
    /// `max`, without jitter.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::breaker::Backoff;
    /// # use std::time::Duration;
    /// let b = Backoff::exponential(Duration::from_millis(100), 3.0, Duration::from_secs(1));
    /// assert_eq!(b.wait(1, 0.0), Duration::from_millis(300));
    /// ```
    pub fn exponential(base: Duration, multiplier: f64, max: Duration) -> Self {
        Backoff {
            base,
            multiplier,
            max,
            jitter: 0.0,
        }
    }

    /// The same backoff with `jitter` (0 ..= 1).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::breaker::Backoff;
    /// # use std::time::Duration;
    /// let b = Backoff::fixed(Duration::from_secs(10)).with_jitter(0.2);
    /// assert_eq!(b.wait(0, 0.5), Duration::from_secs(9));
    /// ```
    #[must_use]
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The wait of the `attempt`-th consecutive opening (0 = tripped from closed),
    /// given `roll` uniform in `[0, 1)`. Pure; assumes a valid backoff.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::breaker::Backoff;
    /// # use std::time::Duration;
    /// let b = Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(60));
    /// assert_eq!(b.wait(1, 0.0), Duration::from_secs(2));
    /// assert_eq!(b.wait(1_000, 0.0), Duration::from_secs(60));
    /// ```
    pub fn wait(&self, attempt: u64, roll: f64) -> Duration {
        let base = nanos(self.base) as f64;
        let max = nanos(self.max) as f64;
        let exponent = i32::try_from(attempt).unwrap_or(i32::MAX);
        let grown = (base * self.multiplier.powi(exponent)).min(max);
        let factor = 1.0 - self.jitter * roll.clamp(0.0, 1.0);
        // `as` saturates; a NaN (invalid backoff) becomes 0.
        Duration::from_nanos((grown * factor) as u64)
    }

    fn validate(&self) -> Result<(), FieldError> {
        self.check_as(OPEN_WAIT_FIELDS)
    }

    /// Checks every field, naming them `fields` (`base`, `multiplier`, `max`,
    /// `jitter`, in this order) in errors.
    pub(crate) fn check_as(&self, fields: [&'static str; 4]) -> Result<(), FieldError> {
        let [base, multiplier, max, jitter] = fields;
        if self.base.is_zero() {
            return Err(FieldError::new(base, "must be non-zero"));
        }
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(FieldError::new(
                multiplier,
                format!("must be a finite number >= 1, got {}", self.multiplier),
            ));
        }
        if self.max < self.base {
            return Err(FieldError::new(
                max,
                format!(
                    "must be at least `base` ({:?}), got {:?}",
                    self.base, self.max
                ),
            ));
        }
        check_fraction(jitter, self.jitter)
    }
}

/// The field names of a breaker's open wait.
const OPEN_WAIT_FIELDS: [&str; 4] = [
    "open_wait.base",
    "open_wait.multiplier",
    "open_wait.max",
    "open_wait.jitter",
];

/// The policy of a [`ClassicBreaker`](super::ClassicBreaker).
///
/// The breaker trips (closed → open) when, in the window,
///
/// * at least `minimum_calls` calls completed and the failures are at least
///   `failure_rate` of them (and there is at least one failure), or
/// * `slow_call_rate` is set, at least `minimum_calls` calls completed and the calls
///   that took `slow_call_duration` or longer are at least that fraction of them (and
///   there is at least one), or
/// * `consecutive_failures` is set and that many calls failed in a row.
///
/// It then stays open for [`open_wait`](Self::open_wait), admits
/// `half_open_probes` probe calls, and closes when all of them succeed (a slow probe
/// counts as a failed one when slow calls are tracked).
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{Backoff, ClassicConfig};
/// use std::time::Duration;
///
/// let config = ClassicConfig {
///     failure_rate: 0.5,
///     minimum_calls: 20,
///     consecutive_failures: Some(5),
///     open_wait: Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(30))
///         .with_jitter(0.1),
///     ..ClassicConfig::default()
/// };
/// assert!(config.validate().is_ok());
///
/// let bad = ClassicConfig { failure_rate: 1.5, ..ClassicConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().field, "failure_rate");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassicConfig {
    /// Failure rate that trips the breaker (0 ..= 1). Default 0.5.
    pub failure_rate: f64,
    /// Slow-call rate that trips the breaker (0 ..= 1), or `None` to ignore durations.
    /// Default `None`.
    pub slow_call_rate: Option<f64>,
    /// A call taking this long or longer is slow (> 0 when `slow_call_rate` is set).
    /// Default 1 s.
    pub slow_call_duration: Duration,
    /// Calls needed in the window before the rates are considered (>= 1). Default 10.
    pub minimum_calls: u64,
    /// Failures in a row that trip the breaker whatever the rate (>= 1), or `None`.
    /// Default `None`.
    pub consecutive_failures: Option<u64>,
    /// Length of the statistics window (> 0). Default 10 s.
    pub window: Duration,
    /// Buckets of the window (1 ..= [`MAX_BUCKETS`]). Default 10.
    pub buckets: u64,
    /// How long the breaker stays open. Default a fixed 5 s.
    pub open_wait: Backoff,
    /// Probe calls admitted while half-open (1 ..= [`MAX_HALF_OPEN_PROBES`]).
    /// Default 3.
    pub half_open_probes: u64,
    /// Whether a call cancelled before any threshold (its future or permit dropped
    /// by the caller) counts as a failure. Default `false`: a caller that gave up says
    /// nothing about the dependency, and counting it would let impatient callers open
    /// the breaker on a healthy one. Turn it on when callers bound their calls
    /// themselves (`tokio::time::timeout` around the call) and a cut call means the
    /// dependency was too slow. Calls cancelled past the timeout rule's or the
    /// slow-call threshold count as failures either way.
    pub cancellations_are_failures: bool,
}

impl Default for ClassicConfig {
    fn default() -> Self {
        ClassicConfig {
            failure_rate: 0.5,
            slow_call_rate: None,
            slow_call_duration: Duration::from_secs(1),
            minimum_calls: 10,
            consecutive_failures: None,
            window: Duration::from_secs(10),
            buckets: 10,
            open_wait: Backoff::fixed(Duration::from_secs(5)),
            half_open_probes: 3,
            cancellations_are_failures: false,
        }
    }
}

impl ClassicConfig {
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field (`open_wait.base` and so on for
    /// the backoff).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::ClassicConfig;
    ///
    /// let bad = ClassicConfig { half_open_probes: 0, ..ClassicConfig::default() };
    /// assert_eq!(bad.validate().unwrap_err().field, "half_open_probes");
    /// let bad = ClassicConfig { slow_call_rate: Some(f64::NAN), ..ClassicConfig::default() };
    /// assert_eq!(bad.validate().unwrap_err().field, "slow_call_rate");
    /// ```
    pub fn validate(&self) -> Result<(), FieldError> {
        check_fraction("failure_rate", self.failure_rate)?;
        if let Some(rate) = self.slow_call_rate {
            check_fraction("slow_call_rate", rate)?;
            if self.slow_call_duration.is_zero() {
                return Err(FieldError::new(
                    "slow_call_duration",
                    "must be non-zero when `slow_call_rate` is set",
                ));
            }
        }
        if self.minimum_calls == 0 {
            return Err(FieldError::new("minimum_calls", "must be at least 1"));
        }
        if self.consecutive_failures == Some(0) {
            return Err(FieldError::new(
                "consecutive_failures",
                "must be at least 1 (use `None` to disable)",
            ));
        }
        validate_window(self.window, self.buckets, "window", "buckets")?;
        self.open_wait.validate()?;
        if self.half_open_probes == 0 || self.half_open_probes > MAX_HALF_OPEN_PROBES {
            return Err(FieldError::new(
                "half_open_probes",
                format!(
                    "must be in 1..={MAX_HALF_OPEN_PROBES}, got {}",
                    self.half_open_probes
                ),
            ));
        }
        Ok(())
    }

    /// The width of one bucket.
    pub(crate) fn bucket_width(&self) -> Duration {
        Duration::from_nanos(nanos(self.window) / self.buckets)
    }
}

fn check_fraction(field: &'static str, value: f64) -> Result<(), FieldError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("must be a number in 0..=1, got {value}"),
        ))
    }
}

fn validate_window(
    window: Duration,
    buckets: u64,
    window_field: &'static str,
    buckets_field: &'static str,
) -> Result<(), FieldError> {
    if buckets == 0 || buckets > MAX_BUCKETS {
        return Err(FieldError::new(
            buckets_field,
            format!("must be in 1..={MAX_BUCKETS}, got {buckets}"),
        ));
    }
    if window.is_zero() {
        return Err(FieldError::new(window_field, "must be non-zero"));
    }
    if nanos(window) < buckets {
        return Err(FieldError::new(
            window_field,
            format!("must be at least one nanosecond per bucket ({buckets} ns), got {window:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<T>(r: Result<T, FieldError>) -> &'static str {
        match r {
            Ok(_) => "ok",
            Err(e) => e.field,
        }
    }

    #[test]
    fn sre_defaults_are_go_zero() {
        let c = SreConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.bucket_width(), Duration::from_millis(250));
        assert_eq!((c.buckets, c.k, c.protection), (40, 1.5, 5));
    }

    #[test]
    fn sre_validation_names_the_field() {
        let d = SreConfig::default;
        assert_eq!(field(SreConfig { k: 1.09, ..d() }.validate()), "k");
        assert_eq!(field(SreConfig { k: MIN_K, ..d() }.validate()), "ok");
        assert_eq!(
            field(
                SreConfig {
                    k: f64::INFINITY,
                    ..d()
                }
                .validate()
            ),
            "k"
        );
        assert_eq!(field(SreConfig { k: f64::NAN, ..d() }.validate()), "k");
        assert_eq!(field(SreConfig { buckets: 0, ..d() }.validate()), "buckets");
        assert_eq!(
            field(
                SreConfig {
                    buckets: 1 << 20,
                    ..d()
                }
                .validate()
            ),
            "buckets"
        );
        assert_eq!(
            field(
                SreConfig {
                    window: Duration::ZERO,
                    ..d()
                }
                .validate()
            ),
            "window"
        );
        assert_eq!(
            field(
                SreConfig {
                    window: Duration::from_nanos(39),
                    ..d()
                }
                .validate()
            ),
            "window"
        );
        assert_eq!(
            field(
                SreConfig {
                    window: Duration::from_nanos(40),
                    ..d()
                }
                .validate()
            ),
            "ok"
        );
        assert_eq!(
            field(
                SreConfig {
                    force_pass_interval: Duration::ZERO,
                    ..d()
                }
                .validate()
            ),
            "force_pass_interval"
        );
        assert_eq!(
            field(
                SreConfig {
                    protection: 0,
                    ..d()
                }
                .validate()
            ),
            "ok"
        );
    }

    #[test]
    fn classic_validation_names_the_field() {
        let d = ClassicConfig::default;
        assert_eq!(field(d().validate()), "ok");
        for rate in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(
                field(
                    ClassicConfig {
                        failure_rate: rate,
                        ..d()
                    }
                    .validate()
                ),
                "failure_rate"
            );
            assert_eq!(
                field(
                    ClassicConfig {
                        slow_call_rate: Some(rate),
                        ..d()
                    }
                    .validate()
                ),
                "slow_call_rate"
            );
        }
        for rate in [0.0, 1.0] {
            assert_eq!(
                field(
                    ClassicConfig {
                        failure_rate: rate,
                        ..d()
                    }
                    .validate()
                ),
                "ok"
            );
        }
        assert_eq!(
            field(
                ClassicConfig {
                    slow_call_rate: Some(0.5),
                    slow_call_duration: Duration::ZERO,
                    ..d()
                }
                .validate()
            ),
            "slow_call_duration"
        );
        // The duration only matters when slow calls are tracked.
        assert_eq!(
            field(
                ClassicConfig {
                    slow_call_duration: Duration::ZERO,
                    ..d()
                }
                .validate()
            ),
            "ok"
        );
        assert_eq!(
            field(
                ClassicConfig {
                    minimum_calls: 0,
                    ..d()
                }
                .validate()
            ),
            "minimum_calls"
        );
        assert_eq!(
            field(
                ClassicConfig {
                    consecutive_failures: Some(0),
                    ..d()
                }
                .validate()
            ),
            "consecutive_failures"
        );
        assert_eq!(
            field(
                ClassicConfig {
                    window: Duration::ZERO,
                    ..d()
                }
                .validate()
            ),
            "window"
        );
        assert_eq!(
            field(ClassicConfig { buckets: 0, ..d() }.validate()),
            "buckets"
        );
        assert_eq!(
            field(
                ClassicConfig {
                    half_open_probes: 0,
                    ..d()
                }
                .validate()
            ),
            "half_open_probes"
        );
        assert_eq!(
            field(
                ClassicConfig {
                    half_open_probes: MAX_HALF_OPEN_PROBES + 1,
                    ..d()
                }
                .validate()
            ),
            "half_open_probes"
        );
        let wait = |open_wait| field(ClassicConfig { open_wait, ..d() }.validate());
        let s = Duration::from_secs;
        assert_eq!(wait(Backoff::fixed(Duration::ZERO)), "open_wait.base");
        assert_eq!(
            wait(Backoff::exponential(s(1), 0.5, s(2))),
            "open_wait.multiplier"
        );
        assert_eq!(
            wait(Backoff::exponential(s(1), f64::NAN, s(2))),
            "open_wait.multiplier"
        );
        assert_eq!(wait(Backoff::exponential(s(2), 2.0, s(1))), "open_wait.max");
        assert_eq!(
            wait(Backoff::fixed(s(1)).with_jitter(1.5)),
            "open_wait.jitter"
        );
        assert_eq!(
            wait(Backoff::fixed(s(1)).with_jitter(f64::NAN)),
            "open_wait.jitter"
        );
        assert_eq!(wait(Backoff::fixed(s(1)).with_jitter(1.0)), "ok");
    }

    #[test]
    fn backoff_grows_caps_and_jitters_down() {
        let b = Backoff::exponential(Duration::from_millis(100), 2.0, Duration::from_secs(1));
        let waits: Vec<_> = (0..6).map(|n| b.wait(n, 0.0).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.wait(u64::MAX, 0.0), Duration::from_secs(1));
        let j = b.with_jitter(1.0);
        assert_eq!(j.wait(0, 0.25), Duration::from_millis(75));
        assert!(j.wait(10, 0.999_999) <= Duration::from_secs(1));
        assert_eq!(
            Backoff::fixed(Duration::MAX).wait(3, 0.0),
            Duration::from_nanos(u64::MAX)
        );
    }
}
