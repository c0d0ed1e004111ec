//! Forced states (feature `testing`): a refusal forced on every call of a point, and
//! its breaker moved by hand. What [`crate::testing`] calls; cold, and compiled only
//! with the feature.

use crate::breaker::{ClassicState, TransitionReason};
use crate::clock::Instant;
use crate::error::PointNameError;
use crate::point::form::slots::{BreakerImpl, BreakerSlot};
use crate::point::Point;
use crate::{BreakerChange, BreakerPolicy, BreakerState, Reason};
use std::fmt;

/// How many failures an SRE breaker forced open records: it then drops all but about
/// one call in ten thousand (and its forced passes) until they leave its window.
const SRE_FORCED_FAILURES: u64 = 10_000;

impl Point {
    /// Refuses every call for `reason` from now on, over the policy (or stops, with
    /// `None`). The reason's counters, listeners and statistics see each refusal as
    /// one of that rule's.
    pub(crate) fn force_refusal(&self, reason: Option<Reason>) -> Result<(), ForceError> {
        if reason == Some(Reason::Deadline) {
            return Err(ForceError::NotARefusal);
        }
        let mut settings = self.settings();
        settings.forced = reason;
        self.recompile(&mut settings);
        drop(settings);
        // Waiting calls are refused too.
        self.wake_all_waiters();
        Ok(())
    }

    /// Moves the point's breaker to `to` now (see [`crate::testing::force_breaker`]).
    pub(crate) fn force_breaker(&self, to: BreakerState) -> Result<(), ForceError> {
        let settings = self.settings();
        let slot: &'static BreakerSlot = match settings.breaker.as_deref() {
            Some(BreakerPolicy::Sre { .. } | BreakerPolicy::Classic(_)) => {
                settings.breakers.last().copied()
            }
            _ => None,
        }
        .ok_or(ForceError::NoBreaker)?;
        let now = self.clock.now_ns();
        match &slot.imp {
            BreakerImpl::Classic(b) => {
                let to = match to {
                    BreakerState::Closed => ClassicState::Closed,
                    BreakerState::Open => ClassicState::Open,
                    BreakerState::HalfOpen => ClassicState::HalfOpen,
                };
                let t = b.force(to, Instant::from_nanos(now));
                drop(settings);
                self.classic_changed(t);
            }
            BreakerImpl::Sre(b) => {
                let (changed, from) = match to {
                    BreakerState::Open => {
                        (b.force_drop(now, SRE_FORCED_FAILURES), BreakerState::Closed)
                    }
                    BreakerState::Closed => (b.reset(now), BreakerState::Open),
                    BreakerState::HalfOpen => return Err(ForceError::NoHalfOpen),
                };
                drop(settings);
                if changed {
                    self.breaker_changed(
                        now,
                        BreakerChange {
                            from,
                            to,
                            cause: Some(TransitionReason::Forced),
                        },
                    );
                }
            }
        }
        Ok(())
    }
}

/// Why a state could not be forced.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceError {
    /// The point name is invalid.
    Name(PointNameError),
    /// The point has no breaker (none set, or `Disabled`): set one first
    /// ([`Registry::set_breaker`](crate::Registry::set_breaker), or call a `#[breaker]` function once).
    NoBreaker,
    /// The SRE breaker has no half-open state: it drops a share of the calls, and
    /// lets one through now and then, by its formula. Force it open or closed.
    NoHalfOpen,
    /// [`Reason::Deadline`] is no refusal: a call cut at its deadline was admitted.
    NotARefusal,
}

impl fmt::Display for ForceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Transparent: the name error's own text (its source is this one's).
            ForceError::Name(e) => e.fmt(f),
            ForceError::NoBreaker => f.write_str(
                "the point has no breaker to force: set one (`Registry::set_breaker`) first",
            ),
            ForceError::NoHalfOpen => {
                f.write_str("the SRE breaker has no half-open state: force it open or closed")
            }
            ForceError::NotARefusal => f.write_str(
                "`Reason::Deadline` is not a refusal (a call cut at its deadline was admitted)",
            ),
        }
    }
}

impl std::error::Error for ForceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ForceError::Name(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

impl From<PointNameError> for ForceError {
    fn from(e: PointNameError) -> Self {
        ForceError::Name(e)
    }
}
