//! Testing your own code (feature `testing`): a registry of each test's own, states
//! forced by hand, and one clock for every time-based rule.
//!
//! Turn the feature on for tests only:
//!
//! ```toml
//! [dependencies]
//! resilience-runtime = "0.1"
//!
//! [dev-dependencies]
//! resilience-runtime = { version = "0.1", features = ["testing"] }
//! ```
//!
//! Cargo then builds the tests with it and the program without it: the guarded calls
//! of a release build are exactly as they would be without this module.
//!
//! - **Isolation.** [`TestRegistry`] is a registry of one test's own. Put it in scope
//!   ([`TestRegistry::enter`], [`TestRegistry::scope`]) and every guarded call and
//!   every [`registry()`](crate::registry) of that thread (or future) uses it, so tests
//!   running in parallel never see each other's policies, counts or breaker states,
//!   even on the same point names.
//! - **Forced states.** [`force_breaker`] moves a point's breaker to open, half-open
//!   or closed now; [`reset_breaker`] empties it; [`force_refusal`] makes every call
//!   of a point refused for a reason of your choice, to test the fallbacks.
//! - **One clock.** A [`TestRegistry`] on [`Clock::tokio`](crate::Clock::tokio) reads
//!   tokio's clock, the one `timeout = "..."`, hedging and async retry backoffs wait
//!   on: under a paused runtime, windows, buckets, breakers, delays, deadlines,
//!   backoffs and hedges all run in virtual time, and a test of a 30-second open wait
//!   takes no real time. For sync code, a [`ManualClock`](crate::ManualClock) moves
//!   every rule of the registry and its retries' backoffs.
//!
//! The guide's chapter on testing
//! ([`guide::testing`](crate::guide::testing)) walks through each with examples.
//!
//! # Examples
//!
//! A fallback tested by forcing the refusal it handles:
//!
//! ```
//! use resilience_runtime::testing::{force_refusal, TestRegistry};
//! use resilience_runtime::{downgrade, Downgraded, Reason};
//!
//! #[downgrade(point = "docs.testing.quote", fallback_with_reason = cached)]
//! fn quote() -> String {
//!     "live".to_owned()
//! }
//!
//! fn cached(d: Downgraded) -> String {
//!     format!("cached ({})", d.reason())
//! }
//!
//! let registry = TestRegistry::new();
//! let _scope = registry.enter();
//! assert_eq!(quote(), "live");
//! force_refusal(&registry, "docs.testing.quote", Some(Reason::BreakerOpen))?;
//! assert_eq!(quote(), "cached (breaker_open)");
//! force_refusal(&registry, "docs.testing.quote", None)?;
//! assert_eq!(quote(), "live");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod scope;

pub use scope::{ScopeGuard, Scoped, TestRegistry};

pub use crate::point::ForceError;

use crate::{BreakerState, Reason, Registry};

/// Moves the breaker of `point` (in `registry`) to `to` now, from whatever state it is
/// in, and reports the change to its listeners and statistics
/// ([`TransitionReason::Forced`](crate::breaker::TransitionReason::Forced)). The
/// breaker then follows its own rules:
///
/// - [`BreakerState::Open`]: as if it just tripped. A classic breaker refuses calls
///   for its first open wait, then lets probes through; an SRE breaker records a
///   window's worth of failures, so it drops nearly every call until they leave its
///   window.
/// - [`BreakerState::HalfOpen`] (classic breaker only): its probe slots are free, so
///   the next calls are probes that close or reopen it.
/// - [`BreakerState::Closed`]: closed with an empty window, as [`reset_breaker`].
///
/// To hold a point refused for as long as a test needs, whatever its breaker's rules,
/// use [`force_refusal`] with [`Reason::BreakerOpen`].
///
/// # Errors
///
/// [`ForceError::NoBreaker`] if the point has no breaker; [`ForceError::NoHalfOpen`]
/// for an SRE breaker asked to half-open; [`ForceError::Name`] for an invalid name.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::ClassicConfig;
/// use resilience_runtime::testing::{force_breaker, TestRegistry};
/// use resilience_runtime::{BreakerPolicy, BreakerState, Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let registry = TestRegistry::with_clock(Clock::manual(&clock));
/// registry.set_breaker("docs.force.db", BreakerPolicy::Classic(ClassicConfig::default()))?;
/// let point = registry.point("docs.force.db")?;
///
/// force_breaker(&registry, "docs.force.db", BreakerState::Open)?;
/// assert!(point.enter().is_err(), "open: refused");
/// clock.advance(Duration::from_secs(5)); // the default open wait
/// for _ in 0..3 {
///     // The default three probes, each a success.
///     point.enter().expect("the wait is over: a probe").finish(false);
/// }
/// assert_eq!(registry.stats("docs.force.db").unwrap().breaker.unwrap().state, BreakerState::Closed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn force_breaker(registry: &Registry, point: &str, to: BreakerState) -> Result<(), ForceError> {
    registry.point(point)?.force_breaker(to)
}

/// Empties the breaker of `point` and closes it: [`force_breaker`] to
/// [`BreakerState::Closed`].
///
/// # Errors
///
/// As [`force_breaker`].
pub fn reset_breaker(registry: &Registry, point: &str) -> Result<(), ForceError> {
    force_breaker(registry, point, BreakerState::Closed)
}

/// Refuses every call of `point` (in `registry`) for `reason` from now on, before
/// any of its rules, or (with `None`) stops. Each refusal is counted, reported and
/// handed to the fallback as a refusal by that rule would be, so a test reaches the
/// code that handles it without building the conditions. The policy, breaker and
/// counts stay as they are.
///
/// # Errors
///
/// [`ForceError::NotARefusal`] for [`Reason::Deadline`]; [`ForceError::Name`] for an
/// invalid name.
pub fn force_refusal(
    registry: &Registry,
    point: &str,
    reason: Option<Reason>,
) -> Result<(), ForceError> {
    registry.point(point)?.force_refusal(reason)
}
