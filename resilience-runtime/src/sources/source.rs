//! Where settings come from, and which source wins.

use super::Section;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A source of policies. Each source owns one layer per point; applying a source
/// replaces only its own layer.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The program itself: [`Registry::set_policy`](crate::Registry::set_policy) and
    /// [`Registry::set_breaker`](crate::Registry::set_breaker).
    Code,
    /// A policy file, by name (its path, or `inline` for text loaded with
    /// `load_policies_str`).
    File(Arc<str>),
    /// The admin console, through the heartbeat client's pulls.
    Console,
}

impl Source {
    /// A file source named `name`.
    pub fn file(name: impl Into<Arc<str>>) -> Source {
        Source::File(name.into())
    }

    /// The kind of the source.
    pub fn kind(&self) -> SourceKind {
        match self {
            Source::Code => SourceKind::Code,
            Source::File(_) => SourceKind::File,
            Source::Console => SourceKind::Console,
        }
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Code => f.write_str("code"),
            Source::File(name) => write!(f, "file:{name}"),
            Source::Console => f.write_str("console"),
        }
    }
}

/// The kinds of [`Source`], the unit of [`Precedence`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    /// [`Source::Code`].
    Code,
    /// Every [`Source::File`].
    File,
    /// [`Source::Console`].
    Console,
}

/// Which source wins, per section: an order of the three kinds, highest first.
/// Between two files, the one whose name sorts last wins (the `conf.d` rule: name
/// them `10-base.toml`, `20-incident.toml`). Names are compared as given: a file
/// loaded by path is named by that path, and text loaded with `load_policies_str`
/// is the file `inline` (which sorts after every absolute path).
///
/// The default, for every section, is console over file over code: what an operator
/// changes in an incident wins over what was deployed, which wins over what the
/// program set at start.
///
/// # Examples
///
/// ```
/// use resilience_runtime::sources::{Precedence, Section, SourceKind};
///
/// // Breakers are owned by the code; everything else as by default.
/// let p = Precedence::builder()
///     .section(Section::Breaker, [SourceKind::Code, SourceKind::Console, SourceKind::File])
///     .build()?;
/// assert_eq!(p.order(Section::Breaker)[0], SourceKind::Code);
/// assert_eq!(p.order(Section::Rules)[0], SourceKind::Console);
/// # Ok::<(), resilience_runtime::sources::PrecedenceError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Precedence {
    orders: [[SourceKind; 3]; Section::ALL.len()],
}

/// A precedence order that is not an order of the three source kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrecedenceError {
    /// The section whose order is wrong.
    pub section: Section,
    /// The order given.
    pub order: [SourceKind; 3],
}

impl fmt::Display for PrecedenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "precedence of `{}`: {:?} must name code, file and console once each",
            self.section, self.order
        )
    }
}

impl std::error::Error for PrecedenceError {}

const DEFAULT_ORDER: [SourceKind; 3] = [SourceKind::Console, SourceKind::File, SourceKind::Code];

impl Default for Precedence {
    fn default() -> Precedence {
        Precedence {
            orders: [DEFAULT_ORDER; Section::ALL.len()],
        }
    }
}

impl Precedence {
    /// A builder of a precedence, starting from the default order (console over
    /// file over code) for every section.
    pub fn builder() -> PrecedenceBuilder {
        PrecedenceBuilder {
            orders: Precedence::default().orders,
            error: None,
        }
    }

    /// The order of a section, highest first.
    pub fn order(&self, section: Section) -> [SourceKind; 3] {
        self.orders[section as usize]
    }

    /// Compares two sources for a section: `Greater` if `a` wins over `b`.
    pub fn compare(&self, section: Section, a: &Source, b: &Source) -> Ordering {
        let rank = |s: &Source| {
            let order = self.order(section);
            3 - order.iter().position(|k| *k == s.kind()).unwrap_or(3)
        };
        rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
            (Source::File(x), Source::File(y)) => x.cmp(y),
            _ => Ordering::Equal,
        })
    }
}

/// Builds a [`Precedence`]: see [`Precedence::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct PrecedenceBuilder {
    orders: [[SourceKind; 3]; Section::ALL.len()],
    error: Option<PrecedenceError>,
}

impl PrecedenceBuilder {
    /// The same order for every section (sections set after this keep theirs).
    pub fn all(mut self, order: [SourceKind; 3]) -> Self {
        for section in Section::ALL {
            self = self.section(section, order);
        }
        self
    }

    /// The order of one section, highest first.
    pub fn section(mut self, section: Section, order: [SourceKind; 3]) -> Self {
        let distinct = order[0] != order[1] && order[1] != order[2] && order[0] != order[2];
        if !distinct {
            self.error.get_or_insert(PrecedenceError { section, order });
        }
        self.orders[section as usize] = order;
        self
    }

    /// The precedence.
    ///
    /// # Errors
    ///
    /// [`PrecedenceError`] for the first order given that does not name each kind
    /// once.
    pub fn build(self) -> Result<Precedence, PrecedenceError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(Precedence {
                orders: self.orders,
            }),
        }
    }
}
