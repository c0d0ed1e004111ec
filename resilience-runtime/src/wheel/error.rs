//! The timing wheel's error type.

use std::fmt;

/// Why a timing wheel could not be built or a call on it was refused.
///
/// # Examples
///
/// ```
/// use resilience_runtime::wheel::{TimingWheel, WheelError};
/// use std::time::Duration;
///
/// let err = TimingWheel::<u32, ()>::new(Duration::ZERO, 8, |_, _| {}).unwrap_err();
/// assert_eq!(err, WheelError::ZeroInterval);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WheelError {
    /// `interval` was zero.
    ZeroInterval,
    /// `slots` was zero.
    ZeroSlots,
    /// `slots` was too large to allocate.
    TooManySlots,
    /// The wheel was stopped; no call succeeds afterwards.
    Closed,
    /// The ticker or worker thread could not be spawned.
    Spawn {
        /// The kind of the I/O error the OS returned.
        kind: std::io::ErrorKind,
        /// Its message.
        message: String,
    },
}

impl WheelError {
    pub(crate) fn spawn(err: &std::io::Error) -> Self {
        WheelError::Spawn {
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}

impl fmt::Display for WheelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WheelError::ZeroInterval => f.write_str("`interval` must be greater than zero"),
            WheelError::ZeroSlots => f.write_str("`slots` must be at least 1"),
            WheelError::TooManySlots => f.write_str("`slots` is too large to allocate"),
            WheelError::Closed => f.write_str("the timing wheel is stopped"),
            WheelError::Spawn { message, .. } => {
                write!(f, "could not spawn a timing wheel thread: {message}")
            }
        }
    }
}

impl std::error::Error for WheelError {}
