//! Errors of policy files: every problem of a file, each with its point and field.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What kind of mistake a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The text is not valid TOML or JSON.
    Syntax,
    /// A key the format does not define (a misspelt field, a section not supported yet).
    UnknownField,
    /// A value of the wrong type (a string where a number belongs, a duration without unit).
    WrongType,
    /// A value of the right type outside its range (from the policy's own validation).
    OutOfRange,
    /// A required field of a section is missing (`timeouts` without `threshold`).
    MissingField,
    /// `strict = true` and the point is neither declared by an annotated function nor
    /// created in the registry.
    UnknownPoint,
    /// The same point is configured twice.
    DuplicatePoint,
    /// The same field is given twice within one table.
    DuplicateField,
    /// The point name is not a valid name (empty, whitespace only, control characters).
    InvalidPointName,
}

impl ProblemKind {
    /// A stable snake-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProblemKind::Syntax => "syntax",
            ProblemKind::UnknownField => "unknown_field",
            ProblemKind::WrongType => "wrong_type",
            ProblemKind::OutOfRange => "out_of_range",
            ProblemKind::MissingField => "missing_field",
            ProblemKind::UnknownPoint => "unknown_point",
            ProblemKind::DuplicatePoint => "duplicate_point",
            ProblemKind::DuplicateField => "duplicate_field",
            ProblemKind::InvalidPointName => "invalid_point_name",
        }
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One mistake in a policy file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The point it concerns, if any (`None` for a top-level or syntax problem).
    pub point: Option<String>,
    /// The field's path within the point (`timeouts.threshold`), or a top-level key
    /// (`strict`); `None` when the whole point or file is at fault.
    pub field: Option<String>,
    /// The kind of mistake.
    pub kind: ProblemKind,
    /// What is wrong, for a person.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(
        point: Option<&str>,
        field: Option<&str>,
        kind: ProblemKind,
        message: impl Into<String>,
    ) -> Problem {
        Problem {
            point: point.map(str::to_owned),
            field: field.map(str::to_owned),
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.point, &self.field) {
            (Some(p), Some(field)) => write!(f, "point `{}`, field `{field}`: ", shown(p))?,
            (Some(p), None) => write!(f, "point `{}`: ", shown(p))?,
            (None, Some(field)) => write!(f, "field `{field}`: ")?,
            (None, None) => {}
        }
        write!(f, "{} ({})", self.message, self.kind)
    }
}

/// A point name as a message shows it: control characters escaped (`\t`, `\u{7}`),
/// so that a name read from a file cannot break or forge lines of a log or terminal.
pub(crate) fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().any(char::is_control) {
        name.chars()
            .map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect::<String>()
            .into()
    } else {
        name.into()
    }
}

/// A policy file could not be read, was rejected, or could not be watched. When a file
/// is rejected nothing of it has been applied.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The file's extension says neither TOML nor JSON.
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The file was read but has problems; every one is listed.
    Invalid {
        /// The file, if the text came from one.
        path: Option<PathBuf>,
        /// Every problem found, in file order as far as the parser allows.
        problems: Vec<Problem>,
    },
    /// The file system watcher could not be started.
    Watch {
        /// The file.
        path: PathBuf,
        /// Why.
        error: notify::Error,
    },
}

impl ConfigError {
    /// Every problem of an [`Invalid`](ConfigError::Invalid) file (empty otherwise).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The I/O and watch errors are the sources, not repeated here.
            ConfigError::Io { path, .. } => {
                write!(f, "cannot read policy file {}", path.display())
            }
            ConfigError::UnknownFormat { path } => write!(
                f,
                "cannot tell the format of policy file {}: expected a `.toml` or `.json` extension",
                path.display()
            ),
            ConfigError::Invalid { path, problems } => {
                match path {
                    Some(path) => write!(f, "policy file {} rejected", path.display())?,
                    None => f.write_str("policies rejected")?,
                }
                write!(
                    f,
                    ", nothing applied ({} problem{}):",
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" }
                )?;
                for problem in problems {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
            ConfigError::Watch { path, .. } => {
                write!(f, "cannot watch policy file {}", path.display())
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { error, .. } => Some(error),
            ConfigError::Watch { error, .. } => Some(error),
            ConfigError::UnknownFormat { .. } | ConfigError::Invalid { .. } => None,
        }
    }
}
