//! The error of the registry's retry settings.

use crate::error::{FieldError, PointNameError};
use std::fmt;

/// Why [`Registry::set_retry`](crate::Registry::set_retry) refused a retry section.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryError {
    /// The point name is invalid.
    Name(PointNameError),
    /// A field of the section is invalid.
    Config(FieldError),
}

impl fmt::Display for RetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Transparent (see `source`): the name error's own text.
            RetryError::Name(e) => e.fmt(f),
            RetryError::Config(_) => f.write_str("invalid retry section"),
        }
    }
}

impl std::error::Error for RetryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RetryError::Name(e) => std::error::Error::source(e),
            RetryError::Config(e) => Some(e),
        }
    }
}

impl From<PointNameError> for RetryError {
    fn from(e: PointNameError) -> Self {
        RetryError::Name(e)
    }
}
