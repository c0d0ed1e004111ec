//! The point's slots: breakers, adaptive limiters, cluster limits and token buckets.
//!
//! # Slots and their lifetimes
//!
//! Every slot is leaked when it is made and kept in a list of its point, never moved
//! and freed only with the point: a call that read an older compiled policy may still
//! use the slot it names, however long ago it read it. A setting seen before gets its
//! slot back.

use crate::adaptive::{AdaptiveLimiter, GradientLimiter, LatencyLimiter};
use crate::breaker::{ClassicBreaker, ClassicState, SreBreaker};
#[cfg(feature = "redis")]
use crate::clock::nanos;
use crate::limit::{Gcra, GcraCell};
use crate::sync::AtomicU64;
use crate::window::Ring;
use crate::{AdaptiveLimit, BreakerState, Reason};
#[cfg(feature = "redis")]
use std::time::Duration;

/// A live breaker of a point. Slots are never freed while the point lives: a call in
/// flight may still report to a replaced one.
#[derive(Debug)]
pub(super) struct BreakerSlot {
    pub(super) imp: BreakerImpl,
    /// Calls slower than this many nanoseconds count as failures...
    pub(super) slow_ns: Option<u64>,
    /// ...which is this many ticks.
    pub(super) slow_ticks: Option<u64>,
    /// When the breaker last changed state, or was installed (the point's clock).
    pub(super) changed_at: AtomicU64,
    /// Whether a call cancelled in time counts as a failure (`cancellations_are_failures`).
    pub(super) cancel_fails: bool,
}

impl BreakerSlot {
    /// The slow-call threshold in ticks (`fine`) or timeline nanoseconds.
    #[inline]
    pub(super) fn slow(&self, fine: bool) -> Option<u64> {
        if fine {
            self.slow_ticks
        } else {
            self.slow_ns
        }
    }

    /// The slow-call threshold in ticks (`fine`) or nanoseconds; 0 for none.
    #[inline]
    pub(super) fn slow_or_zero(&self, fine: bool) -> u64 {
        self.slow(fine).unwrap_or(0)
    }
}

#[derive(Debug)]
pub(super) enum BreakerImpl {
    Sre(SreBreaker),
    Classic(ClassicBreaker),
}

/// A live adaptive limiter of a point (never freed while the point lives).
#[derive(Debug)]
pub(super) struct AdaptiveSlot {
    pub(super) config: AdaptiveLimit,
    pub(super) imp: AdaptiveImpl,
}

#[derive(Debug)]
pub(super) enum AdaptiveImpl {
    Gradient(GradientLimiter),
    Shedder(AdaptiveLimiter),
}

/// The adaptive limiter's side of a running call, in two words: the limiter and the
/// start its permit carried (the permit types are rebuilt at completion; a small
/// `Permit` keeps every call cheap to move).
#[derive(Clone, Copy)]
pub(super) struct AdaptiveCall {
    pub(super) slot: &'static AdaptiveSlot,
    pub(super) start: u64,
}

impl AdaptiveCall {
    /// Ends the call: a latency sample if it completed well, else it just leaves.
    pub(super) fn end(self, ok: bool) {
        let limiter: &dyn LatencyLimiter = match &self.slot.imp {
            AdaptiveImpl::Gradient(l) => l,
            AdaptiveImpl::Shedder(l) => l,
        };
        limiter.end_call(self.start, ok.then(|| limiter.now().as_nanos()));
    }
}

/// A live cluster-wide limit of a point.
#[derive(Debug)]
pub(super) struct ClusterSlot {
    #[cfg(feature = "redis")]
    pub(super) config: crate::policy::ClusterLimit,
    #[cfg(feature = "redis")]
    pub(super) lease: crate::redis::ClusterLease,
    pub(super) reason: Reason,
}

impl ClusterSlot {
    #[inline]
    pub(super) fn admits(&self) -> bool {
        #[cfg(feature = "redis")]
        {
            self.lease.try_acquire().is_admitted()
        }
        #[cfg(not(feature = "redis"))]
        {
            true
        }
    }
}

/// A token bucket of a point: its parameters in the point's duration unit and its
/// state (leaked like the other slots). A point keeps one per distinct setting and
/// carries the deficit from one to the next when the setting changes (see
/// [`Point::bucket_for`]).
#[derive(Debug)]
pub(super) struct BucketSlot {
    pub(super) gcra: Gcra,
    /// Whether the bucket's time is in ticks (else timeline nanoseconds).
    pub(super) fine: bool,
    pub(super) cell: GcraCell,
    /// The warm-up before the bucket, on the timeline (nanoseconds), if any.
    pub(super) warm: Option<(
        crate::limit::warmup::WarmUp,
        crate::limit::warmup::WarmUpCell,
    )>,
}

/// The token buckets of a point: the last one in use and every one it has had.
#[derive(Debug, Default)]
pub(super) struct Buckets {
    pub(super) last: Option<&'static BucketSlot>,
    pub(super) kept: Vec<&'static BucketSlot>,
}

// Slots are shared by every thread that reads the compiled policy: check here that
// every slot type may be.
const _: () = {
    pub(super) const fn shared<T: Send + Sync>() {}
    shared::<Ring>();
    shared::<BucketSlot>();
    shared::<BreakerSlot>();
    shared::<AdaptiveSlot>();
    shared::<ClusterSlot>();
};

/// Cluster limits of a point: the current one and every one it replaced. Slots are
/// leaked, never moved and freed only with the point, because a call that read an
/// older policy may still be asking its slot, however long ago it read it. A replaced
/// slot's lease keeps its refill thread for a grace period (such calls get real answers) and is then stopped
/// by a chore of the timing wheel (see `chores`), which a change of the point's cluster
/// limit also calls early for slots already past their grace. A stopped lease hands
/// out what it holds and then answers without Redis.
#[cfg(feature = "redis")]
#[derive(Debug, Default)]
pub(super) struct Clusters {
    pub(super) current: Option<&'static ClusterSlot>,
    /// Every slot replaced, with the timeline reading of its replacement.
    pub(super) replaced: Vec<(u64, &'static ClusterSlot)>,
}

#[cfg(feature = "redis")]
impl Clusters {
    /// The replaced slots past their grace at `now` whose lease still runs, and how
    /// long until the next of the others is past its grace, if any.
    pub(super) fn due(&self, now: u64) -> (Vec<&'static ClusterSlot>, Option<Duration>) {
        let grace = nanos(CLUSTER_GRACE);
        let mut due = Vec::new();
        let mut next: Option<u64> = None;
        for &(at, slot) in &self.replaced {
            let age = now.saturating_sub(at);
            if age < grace {
                next = Some(next.map_or(grace - age, |n| n.min(grace - age)));
            } else if !slot.lease.is_stopped() {
                due.push(slot);
            }
        }
        (due, next.map(Duration::from_nanos))
    }
}

/// How long a replaced cluster lease keeps its refill thread.
#[cfg(feature = "redis")]
pub(super) const CLUSTER_GRACE: Duration = Duration::from_secs(10);

/// The breaker's side of a running call, in two words: the breaker and either the
/// SRE breaker's slow-call threshold in the unit of the permit (0: none) or a classic
/// ticket taken apart (`epoch << 1 | probe`).
#[derive(Clone, Copy)]
pub(super) struct BreakerCall {
    pub(super) slot: &'static BreakerSlot,
    pub(super) word: u64,
}

/// What the SRE breaker records for a finished call.
#[inline]
pub(super) fn sre_outcome(failed: bool) -> crate::breaker::Outcome {
    if failed {
        crate::breaker::Outcome::Failure
    } else {
        crate::breaker::Outcome::Success
    }
}

pub(super) fn classic_state(s: ClassicState) -> BreakerState {
    match s {
        ClassicState::Closed => BreakerState::Closed,
        ClassicState::Open => BreakerState::Open,
        ClassicState::HalfOpen => BreakerState::HalfOpen,
    }
}
