//! What a layer holds, and what composing layers gives.

use super::{Section, Sections, Source};
use crate::retry::RetryPolicy;
use crate::{BreakerPolicy, Policy};

/// The settings of one point from one source: a policy (of which only the sections in
/// [`sections`](PointConfig::sections) count) and, optionally, a breaker and a retry
/// section.
///
/// # Examples
///
/// ```
/// use resilience_runtime::sources::{PointConfig, Section};
/// use resilience_runtime::{BreakerPolicy, Policy};
///
/// let config = PointConfig::builder()
///     .policy(Policy::observe())
///     .breaker(BreakerPolicy::default())
///     .build();
/// assert_eq!(config.breaker, Some(BreakerPolicy::default()));
/// assert!(config.sets(Section::Rules) && config.sets(Section::Breaker));
/// // A default window, no shadow, no adaptive limit: left to other sources.
/// assert!(!config.sets(Section::Window) && !config.sets(Section::Adaptive));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PointConfig {
    /// The point's downgrade policy.
    pub policy: Policy,
    /// Which sections of [`policy`](PointConfig::policy) this setting sets; the
    /// others are left to lower layers (or their defaults).
    pub sections: Sections,
    /// The point's breaker, or `None` to leave the breaker to other sources.
    pub breaker: Option<BreakerPolicy>,
    /// How the point's retrying calls retry, or `None` to leave it to other sources
    /// (and, without any, to the code's `#[retry]` arguments).
    pub retry: Option<RetryPolicy>,
}

impl PointConfig {
    /// A builder of settings; without [`policy`](PointConfigBuilder::policy) they set
    /// no section of a policy.
    pub fn builder() -> PointConfigBuilder {
        PointConfigBuilder::default()
    }

    /// Whether these settings set `section`.
    pub fn sets(&self, section: Section) -> bool {
        match section {
            Section::Breaker => self.breaker.is_some(),
            Section::Retry => self.retry.is_some(),
            s => self.sections.contains(s),
        }
    }

    /// Whether these settings set nothing at all.
    pub fn is_empty(&self) -> bool {
        self.sections.is_empty() && self.breaker.is_none() && self.retry.is_none()
    }
}

/// One source's settings of one point, with the source's version when they were set.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SourceLayer {
    /// Who set them.
    pub source: Source,
    /// The source's version: for a file, how many times it was applied; for the
    /// console, the console's policy version; for code, a counter of code changes.
    pub version: u64,
    /// The settings.
    pub settings: PointConfig,
}

/// Where a section of an effective policy came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The source whose layer won.
    pub source: Source,
    /// That layer's version.
    pub version: u64,
}

/// The effective settings of a point, with the origin of each section.
#[derive(Clone, Debug, PartialEq, Default)]
#[non_exhaustive]
pub struct EffectivePolicy {
    /// The policy enforced, or `None` if no layer sets any policy section.
    pub policy: Option<Policy>,
    /// The breaker setting enforced, if any layer sets one.
    pub breaker: Option<BreakerPolicy>,
    /// The retry section enforced, if any layer sets one.
    pub retry: Option<RetryPolicy>,
    origins: [Option<Origin>; Section::ALL.len()],
}

impl EffectivePolicy {
    pub(crate) fn new(
        policy: Option<Policy>,
        breaker: Option<BreakerPolicy>,
        retry: Option<RetryPolicy>,
        origins: [Option<Origin>; Section::ALL.len()],
    ) -> EffectivePolicy {
        EffectivePolicy {
            policy,
            breaker,
            retry,
            origins,
        }
    }

    /// The layer a section came from; `None` if no layer sets it (its default
    /// applies).
    pub fn origin(&self, section: Section) -> Option<&Origin> {
        self.origins[section as usize].as_ref()
    }

    /// Every section some layer sets, with its origin, in [`Section::ALL`] order.
    pub fn origins(&self) -> impl Iterator<Item = (Section, &Origin)> {
        Section::ALL
            .into_iter()
            .filter_map(|s| self.origin(s).map(|o| (s, o)))
    }

    /// The sections set by some layer, as a setting ([`PointConfig`]) a policy file
    /// can hold: writing it to a file and loading that file as the only source
    /// enforces the same.
    pub fn to_config(&self) -> Option<PointConfig> {
        let mut sections = Sections::NONE;
        for (s, _) in self.origins() {
            sections = sections.with(s);
        }
        let config = PointConfig {
            policy: self.policy.clone().unwrap_or_else(Policy::observe),
            sections,
            breaker: self.breaker,
            retry: self.retry,
        };
        (!config.is_empty()).then_some(config)
    }
}

/// The effective settings of a point changed because a layer changed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PolicyChange {
    /// The point.
    pub point: &'static str,
    /// The source whose layer changed ([`Source::Code`] for a change of
    /// [`Precedence`](super::Precedence), made by the program).
    pub source: Source,
    /// What was enforced before.
    pub before: EffectivePolicy,
    /// What is enforced now.
    pub after: EffectivePolicy,
    /// When it changed (wall clock of the registry's clock).
    pub time: std::time::SystemTime,
}

/// Builds a [`PointConfig`]: see [`PointConfig::builder`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct PointConfigBuilder {
    policy: Option<Policy>,
    sections: Option<Sections>,
    breaker: Option<BreakerPolicy>,
    retry: Option<RetryPolicy>,
}

impl PointConfigBuilder {
    /// The policy. Unless [`sections`](Self::sections) says otherwise, the settings
    /// set its rules and every other section whose value is not the default (a
    /// window other than 10 x 1 s, shadow on, an adaptive or cluster limit, a keys
    /// section).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Exactly these sections of the policy (the others are left to other sources).
    pub fn sections(mut self, sections: Sections) -> Self {
        self.sections = Some(sections);
        self
    }

    /// The breaker (without one, the breaker is left to other sources).
    pub fn breaker(mut self, breaker: BreakerPolicy) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// The retry section (without one, it is left to other sources and, without
    /// any, to the code's `#[retry]` arguments).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// The settings. Nothing to check here: the policy, breaker and retry section
    /// were checked when they were built, and are again where they are applied.
    pub fn build(self) -> PointConfig {
        let sections = match (&self.policy, self.sections) {
            (_, Some(sections)) => sections,
            (Some(policy), None) => default_sections(policy),
            (None, None) => Sections::NONE,
        };
        PointConfig {
            policy: self.policy.unwrap_or_else(Policy::observe),
            sections,
            breaker: self.breaker,
            retry: self.retry,
        }
    }
}

/// The sections settings of `policy` set by default: its rules, and every other
/// section whose value is not the default.
fn default_sections(policy: &Policy) -> Sections {
    let mut sections = Sections::NONE.with(Section::Rules);
    if policy.window() != crate::WindowConfig::default() {
        sections = sections.with(Section::Window);
    }
    if policy.is_shadow() {
        sections = sections.with(Section::Shadow);
    }
    if policy.adaptive().is_some() {
        sections = sections.with(Section::Adaptive);
    }
    if policy.has_cluster() {
        sections = sections.with(Section::Cluster);
    }
    if policy.keys().is_some() {
        sections = sections.with(Section::Keys);
    }
    sections
}
