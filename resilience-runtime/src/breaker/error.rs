//! Errors of the breakers: an invalid configuration, a rejected call.

use super::ClassicState;
use std::fmt;

/// A [`ClassicBreaker`](super::ClassicBreaker) refused a call.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
///
/// let config = ClassicConfig { consecutive_failures: Some(1), ..ClassicConfig::default() };
/// let breaker = ClassicBreaker::new(config, 0)?;
/// breaker.allow(0).unwrap().failure(0);
/// let rejected = breaker.allow(1).unwrap_err();
/// assert_eq!(rejected.state, ClassicState::Open);
/// assert_eq!(rejected.retry_at, Some(5_000_000_000)); // the default 5 s wait
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicRejected {
    /// [`ClassicState::Open`], or [`ClassicState::HalfOpen`] when every probe slot is
    /// taken.
    pub state: ClassicState,
    /// When open, the time (same timeline as `now`) at which the breaker admits probes
    /// again; `None` when half-open.
    pub retry_at: Option<u64>,
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
