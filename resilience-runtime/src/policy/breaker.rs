//! The breaker of a point, chosen and tuned at run time.

use crate::breaker::{ClassicConfig, SreConfig};
use crate::error::FieldError;
use crate::error::PointNameError;
use std::fmt;
use std::time::Duration;

/// Which breaker guards a point, set with
/// [`Registry::set_breaker`](crate::Registry::set_breaker).
///
/// A point annotated with `#[breaker]` gets [`BreakerPolicy::default`] (the SRE adaptive
/// breaker with go-zero's constants) on its first call unless one was set; any point,
/// `#[downgrade]` ones included, can be given a breaker. The breaker is checked after
/// every rule of the point's [`Policy`](crate::Policy); a rejection is a downgrade with
/// [`Reason::BreakerOpen`](crate::Reason::BreakerOpen). Changing the breaker starts it
/// with an empty window.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{ClassicConfig, SreConfig};
/// use resilience_runtime::{registry, BreakerPolicy};
/// use std::time::Duration;
///
/// // go-zero's breaker with a more tolerant k and latency awareness
/// let sre = BreakerPolicy::Sre {
///     config: SreConfig::builder().k(2.0).build()?,
///     slow_call: Some(Duration::from_millis(500)),
/// };
/// registry().set_breaker("docs.breaker.sre", sre)?;
/// // a three-state breaker
/// registry().set_breaker("docs.breaker.classic", BreakerPolicy::Classic(ClassicConfig::default()))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum BreakerPolicy {
    /// go-zero's Google-SRE adaptive breaker.
    Sre {
        /// Its constants.
        config: SreConfig,
        /// A call slower than this counts as a failure (latency awareness), or `None`.
        slow_call: Option<Duration>,
    },
    /// The classic closed / open / half-open breaker.
    Classic(ClassicConfig),
    /// No breaker, even on a `#[breaker]` point (go-zero's `NoBreakerFor`).
    Disabled,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy::Sre {
            config: SreConfig::default(),
            slow_call: None,
        }
    }
}

impl BreakerPolicy {
    /// Checks every setting (the configurations' fields are public, so they may have
    /// changed since they were built): a [`FieldError`] naming the invalid field.
    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        match self {
            BreakerPolicy::Sre { config, slow_call } => {
                config.validate()?;
                if slow_call.is_some_and(|d| d.is_zero()) {
                    return Err(FieldError::new(
                        "slow_call",
                        "must be greater than zero (use None to ignore durations)",
                    ));
                }
                Ok(())
            }
            BreakerPolicy::Classic(config) => config.validate(),
            BreakerPolicy::Disabled => Ok(()),
        }
    }
}

/// [`Registry::set_breaker`](crate::Registry::set_breaker) was refused.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BreakerError {
    /// The point name is invalid.
    Name(PointNameError),
    /// A breaker setting is invalid.
    Config(FieldError),
    /// A retry section is invalid ([`Registry::set_layer`](crate::Registry::set_layer)).
    Retry(FieldError),
}

impl fmt::Display for BreakerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Transparent: the name error's own text (and its source below is its
            // source), so an error chain never prints it twice.
            BreakerError::Name(e) => e.fmt(f),
            BreakerError::Config(_) => f.write_str("invalid breaker"),
            BreakerError::Retry(_) => f.write_str("invalid retry section"),
        }
    }
}

impl std::error::Error for BreakerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BreakerError::Name(e) => std::error::Error::source(e),
            BreakerError::Config(e) | BreakerError::Retry(e) => Some(e),
        }
    }
}

impl From<PointNameError> for BreakerError {
    fn from(e: PointNameError) -> Self {
        BreakerError::Name(e)
    }
}

impl From<FieldError> for BreakerError {
    fn from(e: FieldError) -> Self {
        BreakerError::Config(e)
    }
}
