//! Validation errors of policies.

use crate::error::FieldError;
use std::fmt;

/// A policy was rejected; lists every invalid field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub(crate) errors: Vec<FieldError>,
}

impl PolicyError {
    /// Every invalid field, in declaration order.
    pub fn errors(&self) -> &[FieldError] {
        &self.errors
    }

    /// The names of the invalid fields.
    pub fn fields(&self) -> Vec<&'static str> {
        self.errors.iter().map(|e| e.field).collect()
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid policy: ")?;
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "`{}`: {}", e.field, e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}
