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
use crate::sync::{AtomicU64, Ordering};
use crate::window::Ring;
use crate::{AdaptiveLimit, BreakerState, Reason};
#[cfg(feature = "redis")]
use std::time::Duration;

/// A live breaker of a point. Slots are never freed while the point lives: a call in
/// flight may still report to a replaced one.
#[derive(Debug)]
pub(in crate::point) struct BreakerSlot {
    pub(in crate::point) imp: BreakerImpl,
    /// Calls slower than this many nanoseconds count as failures...
    pub(in crate::point) slow_ns: Option<u64>,
    /// ...which is this many ticks.
    pub(in crate::point) slow_ticks: Option<u64>,
    /// When the breaker last changed state, or was installed (the point's clock).
    pub(in crate::point) changed_at: AtomicU64,
    /// Whether a call cancelled in time counts as a failure (`cancellations_are_failures`).
    pub(in crate::point) cancel_fails: bool,
}

impl BreakerSlot {
    /// The slow-call threshold in ticks (`fine`) or timeline nanoseconds.
    #[inline]
    pub(in crate::point) fn slow(&self, fine: bool) -> Option<u64> {
        if fine {
            self.slow_ticks
        } else {
            self.slow_ns
        }
    }

    /// The slow-call threshold in ticks (`fine`) or nanoseconds; 0 for none.
    #[inline]
    pub(in crate::point) fn slow_or_zero(&self, fine: bool) -> u64 {
        self.slow(fine).unwrap_or(0)
    }
}

#[derive(Debug)]
pub(in crate::point) enum BreakerImpl {
    Sre(SreBreaker),
    Classic(ClassicBreaker),
}

/// A live adaptive limiter of a point (never freed while the point lives).
#[derive(Debug)]
pub(in crate::point) struct AdaptiveSlot {
    pub(in crate::point) config: AdaptiveLimit,
    pub(in crate::point) imp: AdaptiveImpl,
}

#[derive(Debug)]
pub(in crate::point) enum AdaptiveImpl {
    Gradient(GradientLimiter),
    Shedder(AdaptiveLimiter),
}

/// The adaptive limiter's side of a running call, in two words: the limiter and the
/// start its permit carried (the permit types are rebuilt at completion; a small
/// `Permit` keeps every call cheap to move).
#[derive(Clone, Copy)]
pub(in crate::point) struct AdaptiveCall {
    pub(in crate::point) slot: &'static AdaptiveSlot,
    pub(in crate::point) start: u64,
}

impl AdaptiveCall {
    /// Ends the call: a latency sample if it completed well, else it just leaves.
    pub(in crate::point) fn end(self, ok: bool) {
        let limiter: &dyn LatencyLimiter = match &self.slot.imp {
            AdaptiveImpl::Gradient(l) => l,
            AdaptiveImpl::Shedder(l) => l,
        };
        limiter.end_call(self.start, ok.then(|| limiter.now().as_nanos()));
    }
}

/// A live cluster-wide limit of a point.
#[derive(Debug)]
pub(in crate::point) struct ClusterSlot {
    #[cfg(feature = "redis")]
    pub(in crate::point) config: crate::policy::ClusterLimit,
    #[cfg(feature = "redis")]
    pub(in crate::point) lease: Box<dyn crate::point::form::shared::SharedLimit>,
    pub(in crate::point) reason: Reason,
}

impl ClusterSlot {
    #[inline]
    pub(in crate::point) fn admits(&self) -> bool {
        #[cfg(feature = "redis")]
        {
            self.lease.try_admit()
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
pub(in crate::point) struct BucketSlot {
    pub(in crate::point) gcra: Gcra,
    /// Whether the bucket's time is in ticks (else timeline nanoseconds).
    pub(in crate::point) fine: bool,
    pub(in crate::point) cell: GcraCell,
    /// When the bucket was made (scaled for `gcra`), read from the OS: a call whose
    /// cached reading is older is taken to come at this time, so a new bucket is full
    /// for every call and credits no time before it existed.
    pub(in crate::point) born: AtomicU64,
    /// The warm-up before the bucket, on the timeline (nanoseconds), if any.
    pub(in crate::point) warm: Option<(
        crate::limit::warmup::WarmUp,
        crate::limit::warmup::WarmUpCell,
    )>,
}

impl BucketSlot {
    /// The bucket's time of a call at `stamp` (its unit): the stamp scaled, or the
    /// bucket's start if the stamp is older; and by how much it was older (scaled).
    #[inline(always)]
    pub(in crate::point) fn at(&self, stamp: u64) -> (u64, u64) {
        let now = self.gcra.scaled(stamp);
        let born = self.born.load(Ordering::Relaxed);
        // Wrapping time: `born` is ahead when the difference is positive as signed.
        let early = born.wrapping_sub(now);
        if (early as i64) > 0 {
            (born, early)
        } else {
            (now, 0)
        }
    }

    /// Takes one token for a call at `stamp` (the bucket's unit), if there is one.
    #[inline(always)]
    pub(in crate::point) fn take(&self, stamp: u64) -> bool {
        self.cell.try_take(&self.gcra, self.at(stamp).0, 1)
    }
}

/// The token buckets of a point: the last one in use and every one it has had.
#[derive(Debug, Default)]
pub(in crate::point) struct Buckets {
    pub(in crate::point) last: Option<&'static BucketSlot>,
    pub(in crate::point) kept: Vec<&'static BucketSlot>,
}

// Slots are shared by every thread that reads the compiled policy: check here that
// every slot type may be.
const _: () = {
    pub(in crate::point) const fn shared<T: Send + Sync>() {}
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
pub(in crate::point) struct Clusters {
    pub(in crate::point) current: Option<&'static ClusterSlot>,
    /// Every slot replaced, with the timeline reading of its replacement.
    pub(in crate::point) replaced: Vec<(u64, &'static ClusterSlot)>,
}

#[cfg(feature = "redis")]
impl Clusters {
    /// The replaced slots past their grace at `now` whose lease still runs, and how
    /// long until the next of the others is past its grace, if any.
    pub(in crate::point) fn due(&self, now: u64) -> (Vec<&'static ClusterSlot>, Option<Duration>) {
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
pub(in crate::point) const CLUSTER_GRACE: Duration = Duration::from_secs(10);

/// The breaker's side of a running call, in two words: the breaker and either the
/// SRE breaker's slow-call threshold in the unit of the permit (0: none) or a classic
/// ticket taken apart (`epoch << 1 | probe`).
#[derive(Clone, Copy)]
pub(in crate::point) struct BreakerCall {
    pub(in crate::point) slot: &'static BreakerSlot,
    pub(in crate::point) word: u64,
}

/// What the SRE breaker records for a finished call.
#[inline]
pub(in crate::point) fn sre_outcome(failed: bool) -> crate::breaker::Outcome {
    if failed {
        crate::breaker::Outcome::Failure
    } else {
        crate::breaker::Outcome::Success
    }
}

pub(in crate::point) fn classic_state(s: ClassicState) -> BreakerState {
    match s {
        ClassicState::Closed => BreakerState::Closed,
        ClassicState::Open => BreakerState::Open,
        ClassicState::HalfOpen => BreakerState::HalfOpen,
    }
}
