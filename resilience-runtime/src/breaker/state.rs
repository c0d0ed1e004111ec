//! The classic breaker's vocabulary: its states, why it moves between them, the
//! transition a call reports, its statistics and its refusal. Read by the breaker
//! (`classic.rs`) and by whoever reports on it.

use crate::clock::Instant;
use std::fmt;

/// The state of a [`ClassicBreaker`](super::ClassicBreaker).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClassicState {
    /// Calls run; their outcomes are counted.
    Closed,
    /// Calls are rejected until the open wait has elapsed.
    Open,
    /// A limited number of probe calls run; the others are rejected.
    HalfOpen,
}

/// Why a [`ClassicBreaker`](super::ClassicBreaker) changed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransitionReason {
    /// Closed → open: the failure rate reached the threshold.
    FailureRate,
    /// Closed → open: the slow-call rate reached the threshold.
    SlowCallRate,
    /// Closed → open: too many failures in a row.
    ConsecutiveFailures,
    /// Half-open → open: a probe failed.
    ProbeFailed,
    /// Half-open → open: a probe succeeded too slowly.
    ProbeSlow,
    /// Open → half-open: the open wait elapsed (reported by the call that became the
    /// first probe).
    WaitElapsed,
    /// Half-open → closed: every probe succeeded.
    ProbesSucceeded,
    /// Any state → any state: moved by hand (the `testing` module's
    /// `force_breaker`).
    Forced,
    /// Closed → open or half-open: enough instances of the fleet had the point's
    /// breaker open ([`Quorum`](super::Quorum)).
    Quorum,
}

/// A state change of a [`ClassicBreaker`](super::ClassicBreaker), returned by the call that caused it so the
/// integrator can emit an event.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState, TransitionReason};
///
/// let config = ClassicConfig::builder().consecutive_failures(2).build()?;
/// let breaker = ClassicBreaker::new(config, Instant::from_nanos(0))?;
/// assert_eq!(breaker.allow(Instant::from_nanos(0)).unwrap().failure(Instant::from_nanos(1)), None);
/// let t = breaker.allow(Instant::from_nanos(2)).unwrap().failure(Instant::from_nanos(3)).expect("tripped");
/// assert_eq!((t.from, t.to), (ClassicState::Closed, ClassicState::Open));
/// assert_eq!(t.reason, TransitionReason::ConsecutiveFailures);
/// assert_eq!(t.at, Instant::from_nanos(3));
/// assert_eq!(t.open_until, Some(t.at + std::time::Duration::from_secs(5)));
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transition {
    /// The state left.
    pub from: ClassicState,
    /// The state entered.
    pub to: ClassicState,
    /// Why.
    pub reason: TransitionReason,
    /// The `now` of the call that caused it.
    pub at: Instant,
    /// When entering [`ClassicState::Open`]: when probes will be admitted.
    pub open_until: Option<Instant>,
}

/// A snapshot of a [`ClassicBreaker`](super::ClassicBreaker) for statistics.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
///
/// let breaker = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
/// breaker.allow(Instant::from_nanos(0)).unwrap().success(Instant::from_nanos(1));
/// breaker.allow(Instant::from_nanos(2)).unwrap().failure(Instant::from_nanos(3));
/// let s = breaker.stats(Instant::from_nanos(4));
/// assert_eq!(s.state, ClassicState::Closed);
/// assert_eq!((s.calls, s.failures, s.consecutive_failures), (2, 1, 1));
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClassicStats {
    /// The current state (an open breaker whose wait elapsed stays
    /// [`Open`](ClassicState::Open) until a call arrives).
    pub state: ClassicState,
    /// Calls completed in the window (closed state only; cleared when closing).
    pub calls: u64,
    /// Failed calls in the window.
    pub failures: u64,
    /// Slow calls in the window (0 unless slow calls are tracked).
    pub slow_calls: u64,
    /// Failures in a row while closed.
    pub consecutive_failures: u64,
    /// When open: when probes will be admitted.
    pub open_until: Option<Instant>,
    /// When half-open: probe slots taken (running or succeeded probes).
    pub probes_admitted: u64,
    /// When half-open: probes that succeeded.
    pub probes_succeeded: u64,
    /// State changes since creation.
    pub transitions: u64,
}

// ---- the packed state -------------------------------------------------------------
//
// bits 0..2    kind: closed, open, half-open
// bits 2..18   half-open: probe slots taken (running + succeeded probes)
// bits 18..34  half-open: probes that succeeded
// bits 34..64  epoch: incremented by every transition, so that a ticket of an earlier
//              closed or half-open period cannot touch the current one

/// A [`ClassicBreaker`](super::ClassicBreaker) refused a call.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
/// use resilience_runtime::Instant;
/// use std::time::Duration;
///
/// let t0 = Instant::from_nanos(0);
/// let config = ClassicConfig::builder().consecutive_failures(1).build()?;
/// let breaker = ClassicBreaker::new(config, t0)?;
/// breaker.allow(t0).unwrap().failure(t0);
/// let rejected = breaker.allow(t0 + Duration::from_nanos(1)).unwrap_err();
/// assert_eq!(rejected.state, ClassicState::Open);
/// assert_eq!(rejected.retry_at, Some(t0 + Duration::from_secs(5))); // the default 5 s wait
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicRefused {
    /// [`ClassicState::Open`], or [`ClassicState::HalfOpen`] when every probe slot is
    /// taken.
    pub state: ClassicState,
    /// When open, the time (same timeline as `now`) at which the breaker admits probes
    /// again; `None` when half-open.
    pub retry_at: Option<crate::Instant>,
}

impl fmt::Display for ClassicRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state {
            ClassicState::HalfOpen => {
                f.write_str("circuit breaker is half-open and its probe slots are taken")
            }
            _ => f.write_str("circuit breaker is open"),
        }
    }
}

impl std::error::Error for ClassicRefused {}
