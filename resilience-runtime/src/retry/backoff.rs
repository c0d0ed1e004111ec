//! [`Backoff`]: the growing wait of retries and of a classic breaker's open state.

use crate::error::FieldError;
use crate::util::nanos;
use std::time::Duration;

/// A growing wait: between the attempts of a retried call ([`Retry`](super::Retry)),
/// and how long a [`ClassicBreaker`](crate::breaker::ClassicBreaker) stays open
/// (`open_wait`). The wait is `base`, multiplied by `multiplier` for each attempt
/// before it (for a breaker: each half-open attempt that failed since it last
/// closed), capped at `max`, then shortened by a random fraction of at most `jitter`.
///
/// The `n`-th consecutive opening (`n = 0` when tripped from closed) waits
/// `min(base * multiplier^n, max) * (1 - jitter * u)` with `u` uniform in `[0, 1)`:
/// the jitter only shortens the wait, so `max` is a true cap.
///
/// A value made by [`fixed`](Self::fixed) or [`exponential`](Self::exponential) and
/// [`with_jitter`](Self::with_jitter); it is checked by the builder of the
/// configuration that holds it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::Backoff;
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
#[non_exhaustive]
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
    /// # use resilience_runtime::retry::Backoff;
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
    /// # use resilience_runtime::retry::Backoff;
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
    /// # use resilience_runtime::retry::Backoff;
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
    /// # use resilience_runtime::retry::Backoff;
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
