//! Errors of the breakers: an invalid configuration, a rejected call.

use super::ClassicState;
use std::fmt;

/// A [`ClassicBreaker`](super::ClassicBreaker) refused a call.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
/// use resilience_runtime::Instant;
/// use std::time::Duration;
///
/// let t0 = Instant::from_nanos(0);
/// let config = ClassicConfig { consecutive_failures: Some(1), ..ClassicConfig::default() };
/// let breaker = ClassicBreaker::new(config, t0)?;
/// breaker.allow(t0).unwrap().failure(t0);
/// let rejected = breaker.allow(t0 + Duration::from_nanos(1)).unwrap_err();
/// assert_eq!(rejected.state, ClassicState::Open);
/// assert_eq!(rejected.retry_at, Some(t0 + Duration::from_secs(5))); // the default 5 s wait
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicRejected {
    /// [`ClassicState::Open`], or [`ClassicState::HalfOpen`] when every probe slot is
    /// taken.
    pub state: ClassicState,
    /// When open, the time (same timeline as `now`) at which the breaker admits probes
    /// again; `None` when half-open.
    pub retry_at: Option<crate::Instant>,
}

impl fmt::Display for ClassicRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state {
            ClassicState::HalfOpen => {
                f.write_str("circuit breaker is half-open and its probe slots are taken")
            }
            _ => f.write_str("circuit breaker is open"),
        }
    }
}

impl std::error::Error for ClassicRejected {}
