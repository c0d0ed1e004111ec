//! Configuration of the breakers and its validation.

use super::{nanos, Quorum};
use crate::builder::builder;
use crate::error::FieldError;
use crate::retry::Backoff;
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
/// Build one with [`SreConfig::builder`]; the fields are public for reading.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::SreConfig;
///
/// let config = SreConfig::builder().k(2.0).build()?;
/// assert_eq!(config.k, 2.0);
///
/// let bad = SreConfig::builder().k(1.0).build();
/// assert_eq!(bad.unwrap_err().field, "k");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
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
    /// Starts a configuration with go-zero's constants (the [`Default`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::SreConfig;
    /// use std::time::Duration;
    ///
    /// let config = SreConfig::builder()
    ///     .window(Duration::from_secs(5))
    ///     .buckets(20)
    ///     .protection(10)
    ///     .build()?;
    /// assert_eq!(config.k, 1.5);
    ///
    /// let zero = SreConfig::builder().window(Duration::ZERO).build();
    /// assert_eq!(zero.unwrap_err().field, "window");
    /// let nan = SreConfig::builder().k(f64::NAN).build();
    /// assert_eq!(nan.unwrap_err().field, "k");
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn builder() -> SreConfigBuilder {
        SreConfigBuilder {
            config: SreConfig::default(),
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one.
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
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

builder! {
    /// Builds an [`SreConfig`]; start from [`SreConfig::builder`]. Each setter is
    /// named after the field it sets; [`build`](Self::build) checks them all.
    pub struct SreConfigBuilder => SreConfig;

    /// Checks every setting and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field.
    build -> Result<FieldError> = SreConfig::validate;

    /// Length of the statistics window (> 0, at least one nanosecond per bucket;
    /// default 10 s).
    window: Duration,
    /// Number of buckets of the window (1 ..= [`MAX_BUCKETS`]; default 40).
    buckets: u64,
    /// Tolerance: rejection starts when the calls exceed `k` times the successes
    /// (finite, at least [`MIN_K`]; default 1.5).
    k: f64,
    /// Calls in the window that are always tolerated on top of `k * successes`
    /// (default 5).
    protection: u64,
    /// While dropping, a call is forced through when the last admitted one is older
    /// than this (> 0; default 1 s).
    force_pass_interval: Duration,
    /// Whether a call cancelled before any threshold counts as a failure (default
    /// `false`; see [`SreConfig::cancellations_are_failures`]).
    cancellations_are_failures: bool,
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
/// Build one with [`ClassicConfig::builder`]; the fields are public for reading.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::ClassicConfig;
/// use resilience_runtime::retry::Backoff;
/// use std::time::Duration;
///
/// let config = ClassicConfig::builder()
///     .failure_rate(0.5)
///     .minimum_calls(20)
///     .consecutive_failures(5)
///     .open_wait(
///         Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(30))
///             .with_jitter(0.1),
///     )
///     .build()?;
/// assert_eq!(config.consecutive_failures, Some(5));
///
/// let bad = ClassicConfig::builder().failure_rate(1.5).build();
/// assert_eq!(bad.unwrap_err().field, "failure_rate");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
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
    /// The fleet quorum: when that many live instances of the app have this point's
    /// breaker open, a closed breaker opens or goes half-open at the next pull of the
    /// heartbeat client (see [`Quorum`]). Default `None`: the breaker knows only its
    /// own calls.
    pub quorum: Option<Quorum>,
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
            quorum: None,
        }
    }
}

impl ClassicConfig {
    /// Starts a configuration with the defaults (the [`Default`]): trips at a 50%
    /// failure rate over at least 10 calls of a 10-s window, stays open 5 s, then
    /// admits 3 probes.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::ClassicConfig;
    ///
    /// let bad = ClassicConfig::builder().half_open_probes(0).build();
    /// assert_eq!(bad.unwrap_err().field, "half_open_probes");
    /// let bad = ClassicConfig::builder().slow_call_rate(f64::NAN).build();
    /// assert_eq!(bad.unwrap_err().field, "slow_call_rate");
    /// ```
    pub fn builder() -> ClassicConfigBuilder {
        ClassicConfigBuilder {
            config: ClassicConfig::default(),
        }
    }

    /// Checks every field: a [`FieldError`] naming the first invalid one
    /// (`open_wait.base` and so on for the backoff).
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
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
        self.open_wait.check_as(OPEN_WAIT_FIELDS)?;
        if self.half_open_probes == 0 || self.half_open_probes > MAX_HALF_OPEN_PROBES {
            return Err(FieldError::new(
                "half_open_probes",
                format!(
                    "must be in 1..={MAX_HALF_OPEN_PROBES}, got {}",
                    self.half_open_probes
                ),
            ));
        }
        if let Some(q) = &self.quorum {
            q.validate()?;
        }
        Ok(())
    }

    /// The width of one bucket.
    pub(crate) fn bucket_width(&self) -> Duration {
        Duration::from_nanos(nanos(self.window) / self.buckets)
    }
}

builder! {
    /// Builds a [`ClassicConfig`]; start from [`ClassicConfig::builder`]. Each setter
    /// is named after the field it sets; [`build`](Self::build) checks them all.
    pub struct ClassicConfigBuilder => ClassicConfig;

    /// Checks every setting and returns the configuration.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming the first invalid field (`open_wait.base` and so on
    /// for the backoff).
    build -> Result<FieldError> = ClassicConfig::validate;

    /// Failure rate that trips the breaker (0 ..= 1; default 0.5).
    failure_rate: f64,
    /// Slow-call rate that trips the breaker (0 ..= 1); unset, durations are ignored.
    slow_call_rate: Option<f64>,
    /// A call taking this long or longer is slow (> 0 when `slow_call_rate` is set;
    /// default 1 s).
    slow_call_duration: Duration,
    /// Calls needed in the window before the rates are considered (>= 1; default 10).
    minimum_calls: u64,
    /// Failures in a row that trip the breaker whatever the rate (>= 1); unset, only
    /// the rates trip it.
    consecutive_failures: Option<u64>,
    /// Length of the statistics window (> 0; default 10 s).
    window: Duration,
    /// Buckets of the window (1 ..= [`MAX_BUCKETS`]; default 10).
    buckets: u64,
    /// How long the breaker stays open (default a fixed 5 s).
    open_wait: Backoff,
    /// Probe calls admitted while half-open (1 ..= [`MAX_HALF_OPEN_PROBES`];
    /// default 3).
    half_open_probes: u64,
    /// Whether a call cancelled before any threshold counts as a failure (default
    /// `false`; see [`ClassicConfig::cancellations_are_failures`]).
    cancellations_are_failures: bool,
    /// The fleet quorum (see [`ClassicConfig::quorum`]); unset, the breaker knows
    /// only its own calls.
    quorum: Option<Quorum>,
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
    fn builders_set_each_field_and_run_the_checks() {
        let s = Duration::from_secs;
        let c = ClassicConfig::builder()
            .failure_rate(0.3)
            .slow_call_rate(0.4)
            .slow_call_duration(s(2))
            .minimum_calls(7)
            .consecutive_failures(3)
            .window(s(20))
            .buckets(20)
            .open_wait(Backoff::fixed(s(9)))
            .half_open_probes(2)
            .cancellations_are_failures(true)
            .quorum(Quorum::new(3, crate::breaker::QuorumAction::HalfOpen).unwrap())
            .build();
        let want = ClassicConfig {
            failure_rate: 0.3,
            slow_call_rate: Some(0.4),
            slow_call_duration: s(2),
            minimum_calls: 7,
            consecutive_failures: Some(3),
            window: s(20),
            buckets: 20,
            open_wait: Backoff::fixed(s(9)),
            half_open_probes: 2,
            cancellations_are_failures: true,
            quorum: Some(Quorum {
                open_at: 3,
                action: crate::breaker::QuorumAction::HalfOpen,
            }),
        };
        assert_eq!(c, Ok(want));
        // A quorum whose public field was changed after it was built is still checked.
        let mut lonely = Quorum::new(2, crate::breaker::QuorumAction::Open).unwrap();
        lonely.open_at = 1;
        let lonely = ClassicConfig::builder().quorum(lonely).build();
        assert_eq!(field(lonely), "quorum.open_at");
        assert_eq!(
            ClassicConfig::builder().build(),
            Ok(ClassicConfig::default())
        );
        assert_eq!(SreConfig::builder().build(), Ok(SreConfig::default()));
        let zero = ClassicConfig::builder().consecutive_failures(0).build();
        assert_eq!(field(zero), "consecutive_failures");
        let jitter = ClassicConfig::builder().open_wait(Backoff::fixed(s(1)).with_jitter(2.0));
        assert_eq!(field(jitter.build()), "open_wait.jitter");
        assert_eq!(field(SreConfig::builder().protection(0).build()), "ok");
        assert_eq!(field(SreConfig::builder().buckets(0).build()), "buckets");
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
