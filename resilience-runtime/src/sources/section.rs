//! The sections a policy is composed of, and sets of them.

use std::fmt;

/// One independently layered part of a point's settings. The effective policy takes
/// each section from the highest-ranked layer that sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    /// SDS's rules together: visits, concurrency, exceptions, exception rate,
    /// timeouts, token bucket, delay and the downgrade percentage.
    Rules,
    /// The sliding window's geometry.
    Window,
    /// The shadow (dry-run) flag.
    Shadow,
    /// The adaptive concurrency limit.
    Adaptive,
    /// The cluster-wide limit (`redis` feature).
    Cluster,
    /// The breaker.
    Breaker,
    /// How retrying calls retry ([`RetryPolicy`](crate::retry::RetryPolicy)).
    Retry,
    /// The per-key limits ([`KeyPolicy`](crate::keys::KeyPolicy)).
    Keys,
}

impl Section {
    /// Every section, in this order.
    pub const ALL: [Section; 8] = [
        Section::Rules,
        Section::Window,
        Section::Shadow,
        Section::Adaptive,
        Section::Cluster,
        Section::Breaker,
        Section::Retry,
        Section::Keys,
    ];

    /// The section's name as written in policy files and wire messages.
    pub fn name(self) -> &'static str {
        match self {
            Section::Rules => "rules",
            Section::Window => "window",
            Section::Shadow => "shadow",
            Section::Adaptive => "adaptive",
            Section::Cluster => "cluster",
            Section::Breaker => "breaker",
            Section::Retry => "retry",
            Section::Keys => "keys",
        }
    }

    /// The section named `name` ([`Section::name`]).
    pub fn from_name(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.name() == name)
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of the [`Policy`](crate::Policy) sections (every section but
/// [`Section::Breaker`] and [`Section::Retry`], which a setting carries as `Option`s).
///
/// # Examples
///
/// ```
/// use resilience_runtime::sources::{Section, Sections};
///
/// let s = Sections::NONE.with(Section::Rules).with(Section::Adaptive);
/// assert!(s.contains(Section::Rules) && !s.contains(Section::Window));
/// assert_eq!(s.iter().collect::<Vec<_>>(), [Section::Rules, Section::Adaptive]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sections(u8);

impl Sections {
    /// No section.
    pub const NONE: Sections = Sections(0);
    /// Every policy section: rules, window, shadow, adaptive, cluster and keys.
    pub const POLICY: Sections = Sections(
        Section::Rules.bit()
            | Section::Window.bit()
            | Section::Shadow.bit()
            | Section::Adaptive.bit()
            | Section::Cluster.bit()
            | Section::Keys.bit(),
    );

    /// The same set with `section` added ([`Section::Breaker`] and [`Section::Retry`]
    /// are ignored).
    #[must_use]
    pub fn with(self, section: Section) -> Sections {
        Sections((self.0 | section.bit()) & Sections::POLICY.0)
    }

    /// The same set without `section`.
    #[must_use]
    pub fn without(self, section: Section) -> Sections {
        Sections(self.0 & !section.bit())
    }

    /// Whether `section` is in the set.
    pub fn contains(self, section: Section) -> bool {
        self.0 & section.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The sections in the set, in [`Section::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Section> {
        Section::ALL.into_iter().filter(move |s| self.contains(*s))
    }
}

impl fmt::Debug for Sections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}
