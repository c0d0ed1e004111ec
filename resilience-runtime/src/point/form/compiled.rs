//! A policy compiled for the hot path: the rule bits, the thresholds in the point's
//! duration unit and typed handles of the point's slots, immutable once published.
//! Equality is derived, so an equal form is reused and no field can be left out of the
//! comparison.

use crate::clock::{nanos, COARSE_ENOUGH_NS};
use crate::point::form::keys::KeyForm;
use crate::point::form::slots::{AdaptiveSlot, BreakerSlot, BucketSlot, ClusterSlot};
use crate::point::state::flow::NO_LIMIT;
use crate::window::Ring;
use crate::{Clock, Policy};

// Rule bits of a compiled policy. `ACTIVE` is set whenever a policy is present, so a
// word of zero means "no policy" and selects the fast path.
pub(in crate::point) const ACTIVE: u64 = 1 << 0;

pub(in crate::point) const R_VISITS: u64 = 1 << 1;

pub(in crate::point) const R_TOKENS: u64 = 1 << 2;

pub(in crate::point) const R_CONCURRENCY: u64 = 1 << 3;

pub(in crate::point) const R_TIMEOUTS: u64 = 1 << 4;

pub(in crate::point) const R_EXCEPTIONS: u64 = 1 << 5;

pub(in crate::point) const R_RATE: u64 = 1 << 6;

pub(in crate::point) const R_DELAY: u64 = 1 << 7;

/// The point has a breaker (with or without a policy).
pub(in crate::point) const R_BREAKER: u64 = 1 << 8;

/// The breaker needs call durations.
pub(in crate::point) const R_BREAKER_TIMED: u64 = 1 << 9;

/// Dry run: rules are evaluated and counted, calls are never downgraded.
pub(in crate::point) const R_SHADOW: u64 = 1 << 10;

/// An adaptive concurrency limit.
pub(in crate::point) const R_ADAPTIVE: u64 = 1 << 11;

/// A cluster-wide limit through Redis.
pub(in crate::point) const R_CLUSTER: u64 = 1 << 12;

/// Durations and refills use the tick counter: some threshold is too short for the
/// timeline's millisecond resolution. Without it they use the timeline (nanoseconds).
pub(in crate::point) const R_FINE: u64 = 1 << 13;

/// The token bucket has a warm-up (its slot holds the cell): one test of the rule
/// bits keeps the others from reading the slot for it.
pub(in crate::point) const R_WARM: u64 = 1 << 15;

/// The concurrency rule has a queue: a call finding every slot taken waits (see
/// `queue`). A plain rule: its check is one test of the rule bits on the pass path.
pub(in crate::point) const R_QUEUE: u64 = 1 << 14;

/// Every call is refused with [`Compiled::forced`] (the `testing` module's forced
/// refusal): checked first, by the instance with the rules outside the plain ones.
pub(in crate::point) const R_FORCED: u64 = 1 << 16;

/// Where the rule bits keep a forced refusal's reason (its index, a byte).
const FORCED_SHIFT: u32 = 56;

/// The call uses the flow word (passes in the window and calls in flight, see
/// `flow`), the window ring and the cycle's peak: some rule needs them (visits,
/// concurrency and its queue, the health rules, the delay). A policy without them
/// (a token bucket, a breaker, an adaptive or cluster limit, per-key limits alone)
/// enters through the lean path: its passes are counted per thread as a point
/// without a policy counts them, and nothing tracks its calls in flight.
pub(in crate::point) const R_FLOW: u64 = 1 << 17;

/// The rules that need [`R_FLOW`].
const NEEDS_FLOW: u64 =
    R_VISITS | R_CONCURRENCY | R_QUEUE | R_TIMEOUTS | R_EXCEPTIONS | R_RATE | R_DELAY;

/// The rule bits of a policy whose whole decision is the flow word's commit (the
/// visits and concurrency rules alone): such a call, when untimed, takes
/// [`Point::enter_counted`].
pub(in crate::point) const COUNTED: u64 = ACTIVE | R_FLOW | R_VISITS | R_CONCURRENCY;

/// Rule bits outside the plain rules (SDS's, with fixed thresholds on the timeline):
/// a point without any of them takes the leaner [`Point::enter_policy`] instance.
pub(in crate::point) const NOT_PLAIN: u64 =
    R_DELAY | R_SHADOW | R_BREAKER | R_ADAPTIVE | R_CLUSTER | R_FINE | R_FORCED;

const _: () = assert!(NOT_PLAIN & (R_VISITS | R_TOKENS | R_CONCURRENCY | R_RATE) == 0);

/// The rule bits an instance of [`Point::enter_policy`] may meet (its `MAY`): every
/// one. An instance for fewer rules is the same code with the stages of the others
/// known absent, so compiled out.
pub(in crate::point) const MAY_ALL: u64 = u64::MAX;

/// The plain rules' instance: none of [`NOT_PLAIN`].
pub(in crate::point) const MAY_PLAIN: u64 = !NOT_PLAIN;

/// The basic rules' instance: the plain rules without a warm-up, a queue or the
/// exception-rate rule (the visits, concurrency, token bucket, exceptions and
/// timeouts rules, SDS's five, in any mix).
pub(in crate::point) const MAY_BASIC: u64 = MAY_PLAIN & !(R_WARM | R_QUEUE | R_RATE);

/// The queue word's wait field (see [`Compiled::queue`]).
const QUEUE_WAIT_BITS: u32 = 42;
const QUEUE_WAIT_MASK: u64 = (1 << QUEUE_WAIT_BITS) - 1;
/// The queue word's order bit (see [`Compiled::queue`]).
const QUEUE_NEWEST_BIT: u32 = 63;

/// A slot leaked when made and freed only with its point (never moved: a call that
/// read an older policy may still use it), compared by address: two compiled forms are equal
/// only if they name the very same slots.
#[derive(Debug)]
pub(in crate::point) struct Leaked<T: 'static>(pub(in crate::point) &'static T);

impl<T> Clone for Leaked<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Leaked<T> {}

impl<T> PartialEq for Leaked<T> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl<T> std::ops::Deref for Leaked<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        self.0
    }
}

/// A policy compiled for the hot path: rule bits, thresholds in the point's units and
/// its slots. Immutable once published (see [`PolicyCell`]). Equality is field by
/// field (derived, so no field can be forgotten): an equal form is reused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::point) struct Compiled {
    pub(in crate::point) rules: u64,
    /// The visits rule's threshold; without the rule, `NO_LIMIT` (so that a check
    /// against it needs no test of the rule bits).
    pub(in crate::point) max_visits: u64,
    /// The concurrency rule's threshold; without the rule, `NO_LIMIT`.
    pub(in crate::point) max_concurrency: u64,
    /// The exceptions rule's threshold; without the rule, `NO_LIMIT`.
    pub(in crate::point) max_exceptions: u64,
    pub(in crate::point) rate: f64,
    pub(in crate::point) rate_floor: u64,
    /// The thresholds below are in ticks with `R_FINE`, else timeline nanoseconds.
    pub(in crate::point) timeout: u64,
    pub(in crate::point) timeout_count: u64,
    pub(in crate::point) percentage: u64,
    pub(in crate::point) delay_ns: u64,
    pub(in crate::point) retry_ns: u64,
    /// The policy's `call_timeout` in nanoseconds (never ticks), 0 for none: the
    /// deadline of a call of an `async fn` with `timeout = "..."`. No rule bit: it
    /// changes nothing in admission, only what `Point::call_timeout` answers.
    pub(in crate::point) call_timeout_ns: u64,
    /// The queue (with `R_QUEUE`): newest first (bit 63), calls that may wait (bits
    /// 42-62) and the longest wait in timeline nanoseconds (the low 42 bits, up to 73
    /// minutes).
    pub(in crate::point) queue: u64,
    /// How long a call may wait for its token (with `R_TOKENS`; 0: it may not), in
    /// the unit of the other thresholds.
    pub(in crate::point) token_wait: u64,
    /// The window ring (with `ACTIVE`).
    pub(in crate::point) ring: Option<Leaked<Ring>>,
    /// The token bucket (with `R_TOKENS`).
    pub(in crate::point) bucket: Option<Leaked<BucketSlot>>,
    pub(in crate::point) breaker: Option<Leaked<BreakerSlot>>,
    pub(in crate::point) adaptive: Option<Leaked<AdaptiveSlot>>,
    pub(in crate::point) cluster: Option<Leaked<ClusterSlot>>,
    /// The `keys` section, for calls that name a key.
    pub(in crate::point) keys: Option<Leaked<KeyForm>>,
}

/// The compiled form without any rule or breaker (a point that has none), and the
/// default every compiled policy starts from.
pub(in crate::point) const EMPTY: Compiled = Compiled {
    rules: 0,
    max_visits: NO_LIMIT,
    max_concurrency: NO_LIMIT,
    max_exceptions: NO_LIMIT,
    rate: 0.0,
    rate_floor: 0,
    timeout: 0,
    timeout_count: NO_LIMIT,
    percentage: 0,
    delay_ns: 0,
    retry_ns: 0,
    call_timeout_ns: 0,
    queue: 0,
    token_wait: 0,
    ring: None,
    bucket: None,
    breaker: None,
    adaptive: None,
    cluster: None,
    keys: None,
};

impl Default for Compiled {
    fn default() -> Compiled {
        EMPTY
    }
}

/// What a compiled form is made of, besides the policy's own numbers.
#[derive(Clone, Copy, Default)]
pub(in crate::point) struct Parts {
    pub(in crate::point) ring: Option<&'static Ring>,
    pub(in crate::point) bucket: Option<&'static BucketSlot>,
    pub(in crate::point) breaker: Option<&'static BreakerSlot>,
    pub(in crate::point) adaptive: Option<&'static AdaptiveSlot>,
    pub(in crate::point) cluster: Option<&'static ClusterSlot>,
    pub(in crate::point) keys: Option<&'static KeyForm>,
}

impl Compiled {
    /// Compiles `policy` (with its ring and bucket in `parts`) and the point's slots;
    /// `fine` says whether durations are in ticks (see [`Compiled::needs_ticks`]).
    pub(in crate::point) fn new(
        policy: Option<&Policy>,
        parts: Parts,
        fine: bool,
        clock: &Clock,
    ) -> Compiled {
        let mut c = match (policy, parts.ring) {
            (Some(p), Some(ring)) => Compiled::from_policy_in(p, ring, parts.bucket, clock, fine),
            _ => Compiled::default(),
        };
        if let (Some(a), true) = (parts.adaptive, c.rules & ACTIVE != 0) {
            c.rules |= R_ADAPTIVE;
            c.adaptive = Some(Leaked(a));
        }
        if let (Some(k), true) = (parts.keys, c.rules & ACTIVE != 0) {
            c.keys = Some(Leaked(k));
        }
        if let (Some(cl), true) = (parts.cluster, c.rules & ACTIVE != 0) {
            c.rules |= R_CLUSTER;
            c.cluster = Some(Leaked(cl));
        }
        if let Some(b) = parts.breaker {
            c.rules |= R_BREAKER;
            if b.slow_ns.is_some() {
                c.rules |= R_BREAKER_TIMED;
            }
            if fine {
                c.rules |= R_FINE;
            }
            c.breaker = Some(Leaked(b));
        }
        c
    }

    /// This form with every call refused for `reason` (see [`R_FORCED`]).
    pub(in crate::point) fn forcing(mut self, reason: crate::Reason) -> Compiled {
        self.rules |= ACTIVE | R_FORCED | (reason.index() as u64) << FORCED_SHIFT;
        self
    }

    /// With [`R_FORCED`], the reason every call is refused for.
    #[inline]
    pub(in crate::point) fn forced(&self) -> Option<crate::Reason> {
        if self.rules & R_FORCED == 0 {
            return None;
        }
        crate::Reason::from_index((self.rules >> FORCED_SHIFT) as u8)
    }

    /// Whether a policy or breaker has a threshold too short for the timeline.
    pub(in crate::point) fn needs_ticks(
        policy: Option<&Policy>,
        breaker: Option<&BreakerSlot>,
    ) -> bool {
        policy.is_some_and(|p| {
            let short_timeout = p
                .timeouts
                .is_some_and(|t| nanos(t.threshold) < COARSE_ENOUGH_NS);
            let short_burst = p.token_bucket.is_some_and(|tb| {
                tb.rate > 0.0 && (tb.capacity as f64 / tb.rate) * 1e9 < COARSE_ENOUGH_NS as f64
            });
            short_timeout || short_burst
        }) || breaker.is_some_and(|b| b.slow_ns.is_some_and(|ns| ns < COARSE_ENOUGH_NS))
    }

    /// Compiles a policy with durations in ticks (`fine`) or timeline nanoseconds.
    pub(in crate::point) fn from_policy_in(
        p: &Policy,
        ring: &'static Ring,
        bucket: Option<&'static BucketSlot>,
        clock: &Clock,
        fine: bool,
    ) -> Compiled {
        let unit = |ns: u64| if fine { clock.ns_to_ticks(ns) } else { ns };
        let mut c = Compiled {
            rules: ACTIVE | if fine { R_FINE } else { 0 },
            percentage: u64::from(p.downgrade_percentage),
            ring: Some(Leaked(ring)),
            ..Compiled::default()
        };
        if let Some(v) = p.max_visits {
            c.rules |= R_VISITS;
            c.max_visits = v;
        }
        if let Some(v) = p.max_concurrency {
            c.rules |= R_CONCURRENCY;
            c.max_concurrency = v;
        }
        // The queue holds calls waiting for room under the concurrency rule or the
        // adaptive limit (without either, as policies composed from layers may be,
        // there is nothing to wait for). A dry run never makes a call wait: that would
        // change what it observes.
        let limited = p.max_concurrency.is_some() || p.adaptive.is_some();
        if let (Some(q), false, true) = (p.queue, p.shadow, limited) {
            c.rules |= R_QUEUE;
            // Validated: at most 10^6 waiting (20 bits) and an hour (42 bits).
            let newest = u64::from(q.order == crate::policy::QueueOrder::NewestFirst);
            c.queue = newest << QUEUE_NEWEST_BIT
                | q.max_waiting << QUEUE_WAIT_BITS
                | nanos(q.max_wait).clamp(1, QUEUE_WAIT_MASK);
        }
        if let Some(v) = p.max_exceptions {
            c.rules |= R_EXCEPTIONS;
            c.max_exceptions = v;
        }
        if let Some(r) = p.exception_rate {
            c.rules |= R_RATE;
            c.rate = r.rate;
            c.rate_floor = r.min_visits;
        }
        if let Some(t) = p.timeouts {
            c.rules |= R_TIMEOUTS;
            c.timeout = unit(nanos(t.threshold)).max(1);
            c.timeout_count = t.max_count;
        }
        if let Some(d) = p.call_timeout {
            // Validated: 1 ns..=one day, so never 0 (which means none) and it fits.
            c.call_timeout_ns = nanos(d).max(1);
        }
        if let (Some(_), Some(b)) = (p.token_bucket, bucket) {
            c.rules |= R_TOKENS;
            if b.warm.is_some() {
                c.rules |= R_WARM;
            }
            c.bucket = Some(Leaked(b));
            if let Some(d) = p.token_wait {
                c.token_wait = unit(nanos(d)).max(1);
            }
        }
        if p.shadow {
            c.rules |= R_SHADOW;
        }
        if let Some(d) = p.delay {
            c.rules |= R_DELAY;
            c.delay_ns = nanos(d.duration);
            c.retry_ns = d.retry_interval.map_or(0, nanos);
        }
        if c.rules & NEEDS_FLOW != 0 {
            c.rules |= R_FLOW;
        }
        c
    }

    /// Calls that may wait in the queue (with `R_QUEUE`).
    pub(in crate::point) fn queue_max(&self) -> u64 {
        (self.queue & !(1 << QUEUE_NEWEST_BIT)) >> QUEUE_WAIT_BITS
    }

    /// Whether the queue serves its newest waiter first (with `R_QUEUE`).
    pub(in crate::point) fn queue_newest_first(&self) -> bool {
        self.queue >> QUEUE_NEWEST_BIT == 1
    }

    /// The longest wait in the queue, in timeline nanoseconds (with `R_QUEUE`).
    pub(in crate::point) fn queue_wait_ns(&self) -> u64 {
        self.queue & QUEUE_WAIT_MASK
    }

    /// The window ring of a form with a policy.
    #[inline(always)]
    pub(in crate::point) fn ring(&self) -> &'static Ring {
        match self.ring {
            Some(r) => r.0,
            None => unreachable!("a compiled policy has a ring"),
        }
    }
}
