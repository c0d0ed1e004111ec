//! Circuit breakers: the pure algorithms, without registry, clock or macro.
//!
//! This module owns the decision logic of the two breakers of the toolkit. Both are
//! plain data structures that take `now` (an [`Instant`](crate::Instant) of a clock) as an
//! argument and never read a clock, so they are deterministic under test; the registry
//! and the `#[breaker]` attribute supply the time, the point name and the events.
//!
//! * [`SreBreaker`]: go-zero's adaptive breaker (`core/breaker/googlebreaker.go`), the
//!   client-side throttling of the Google SRE book. It has no states: each call is
//!   rejected with a probability computed from the successes and the total of the last
//!   10 seconds ([`drop_ratio`]). [`SreConfig`] holds its constants.
//! * [`ClassicBreaker`]: the three-state breaker (closed, open, half-open) of
//!   Hystrix/Resilience4j/Sentinel, tripped by a failure rate, a slow-call rate or
//!   consecutive failures, with a fixed or exponential open time ([`Backoff`](crate::retry::Backoff)) and a
//!   fixed number of half-open probes. [`ClassicConfig`] holds its policy. A call is
//!   represented by a [`ClassicPermit`], which releases its probe slot if dropped.
//!
//! The classic breaker keeps its statistics in a
//! [`RollingWindow`](crate::rolling::RollingWindow). The SRE breaker keeps cumulative
//! success/failure/drop counters with one snapshot per bucket (the point window's
//! scheme), so its closed path reads two numbers instead of every bucket.
//! [`OutcomeCells`] is the same success/failure/drop bucket for a `RollingWindow` of
//! your own.
//!
//! Files: `sre.rs` and `classic.rs` hold the breakers, `config.rs` their configuration
//! and validation, `state.rs` the classic breaker's states, transitions, statistics and refusal,
//! `quorum.rs` the fleet quorum of a classic breaker and its pure decision.

mod classic;
mod config;
mod quorum;
mod sre;
mod state;

pub use classic::{ClassicBreaker, ClassicPermit};
pub use config::{
    ClassicConfig, ClassicConfigBuilder, SreConfig, SreConfigBuilder, MAX_HALF_OPEN_PROBES, MIN_K,
};
pub use quorum::{quorum_step, FleetCount, Quorum, QuorumAction};
pub use sre::{
    drop_ratio, DroppingTransition, SreBreaker, SreDecision, SreHistory, SrePermit, SreRefused,
    SreStats, SreVerdict,
};
pub use state::{ClassicRefused, ClassicState, ClassicStats, Transition, TransitionReason};

use crate::rolling::BucketCells;
use crate::sync::atomic::{AtomicU64, Ordering};

/// The outcome of one call, as the SRE breaker records it (go-zero's `success`, `fail`
/// and `drop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The call ran and its result was acceptable.
    Success,
    /// The call ran and failed (or panicked).
    Failure,
    /// The breaker rejected the call before it ran.
    Drop,
}

/// One bucket of [`OutcomeCells`]: how many calls ended in each [`Outcome`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::OutcomeCounts;
///
/// let b = OutcomeCounts { success: 3, failure: 1, drop: 2 };
/// assert_eq!(b.total(), 6);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OutcomeCounts {
    /// Calls that succeeded.
    pub success: u64,
    /// Calls that failed.
    pub failure: u64,
    /// Calls that were rejected.
    pub drop: u64,
}

impl OutcomeCounts {
    /// All calls of the bucket (go-zero's `Sum`): successes, failures and drops.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::breaker::OutcomeCounts;
    /// assert_eq!(OutcomeCounts { success: 1, failure: 0, drop: 0 }.total(), 1);
    /// ```
    pub fn total(&self) -> u64 {
        self.success + self.failure + self.drop
    }
}

/// Atomic storage for one [`OutcomeCounts`] bucket of a
/// [`RollingWindow`](crate::rolling::RollingWindow) (go-zero's breaker `bucket`).
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{Outcome, OutcomeCells, OutcomeCounts};
/// use resilience_runtime::rolling::BucketCells;
///
/// let cells = OutcomeCells::default();
/// cells.add(Outcome::Success);
/// cells.add(Outcome::Failure);
/// assert_eq!(cells.snapshot(), OutcomeCounts { success: 1, failure: 1, drop: 0 });
/// ```
#[derive(Debug, Default)]
pub struct OutcomeCells {
    success: AtomicU64,
    failure: AtomicU64,
    drop: AtomicU64,
}

impl BucketCells for OutcomeCells {
    type Input = Outcome;
    type Snapshot = OutcomeCounts;

    #[inline]
    fn add(&self, outcome: Outcome) {
        let cell = match outcome {
            Outcome::Success => &self.success,
            Outcome::Failure => &self.failure,
            Outcome::Drop => &self.drop,
        };
        cell.fetch_add(1, Ordering::Relaxed);
    }

    fn reset(&self) {
        self.success.store(0, Ordering::Relaxed);
        self.failure.store(0, Ordering::Relaxed);
        self.drop.store(0, Ordering::Relaxed);
    }

    fn snapshot(&self) -> OutcomeCounts {
        OutcomeCounts {
            success: self.success.load(Ordering::Relaxed),
            failure: self.failure.load(Ordering::Relaxed),
            drop: self.drop.load(Ordering::Relaxed),
        }
    }
}

/// A uniform `f64` in `[0, 1)`.
pub(crate) fn roll() -> f64 {
    const SCALE: u64 = 1 << 53;
    crate::rand::below(SCALE) as f64 / SCALE as f64
}

use crate::clock::nanos;
