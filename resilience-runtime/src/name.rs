//! The one point-name rule of the product, and its limit: the runtime (`point()`,
//! policy files), the macros (at compile time, for a literal name) and the admin
//! console (every name it stores) all decide with [`NameProblem::of`].
//!
//! This file depends on nothing but `core`: the macros crate, which cannot depend on
//! the runtime, keeps a copy (`resilience-macros/src/name.rs`), and the workspace's
//! `checks` crate tests that the two are equal.

/// The longest point name accepted, in bytes (the admin console's limit for every
/// name it stores, so a name the runtime takes is never refused by the console).
pub const MAX_POINT_NAME_LEN: usize = 256;

/// What is wrong with a name under the point-name rule: names are non-empty, at most
/// [`MAX_POINT_NAME_LEN`] bytes, free of control characters, and neither begin nor
/// end with whitespace. (Its example is the runtime's `check_point_name`'s: this
/// file is also compiled into the macros, where a doc test could not name the
/// runtime.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name is only whitespace.
    Blank,
    /// The name begins or ends with whitespace.
    EdgeWhitespace,
    /// The name contains a control character.
    Control,
    /// The name is longer than [`MAX_POINT_NAME_LEN`] bytes.
    TooLong,
}

impl NameProblem {
    /// What is wrong with `name`, if anything.
    pub fn of(name: &str) -> Option<NameProblem> {
        if name.is_empty() {
            Some(NameProblem::Empty)
        } else if name.trim().is_empty() {
            Some(NameProblem::Blank)
        } else if name.trim() != name {
            Some(NameProblem::EdgeWhitespace)
        } else if name.chars().any(char::is_control) {
            Some(NameProblem::Control)
        } else if name.len() > MAX_POINT_NAME_LEN {
            Some(NameProblem::TooLong)
        } else {
            None
        }
    }

    /// The problem as a predicate of the name: `"must not be empty"`, ...
    pub const fn text(self) -> &'static str {
        match self {
            NameProblem::Empty => "must not be empty",
            NameProblem::Blank => "must not be only whitespace",
            NameProblem::EdgeWhitespace => "must not begin or end with whitespace",
            NameProblem::Control => "must not contain control characters",
            NameProblem::TooLong => "must be at most 256 bytes long (MAX_POINT_NAME_LEN)",
        }
    }
}

const _: () = assert!(
    MAX_POINT_NAME_LEN == 256,
    "NameProblem::text names the limit"
);
