//! Points: the per-name state of the registry and the guard API around a call.
//!
//! A [`Point`] owns the cumulative counters, the sliding window, the concurrency count,
//! the token bucket, the delay state and the current policy of one point name. A policy
//! is compiled into an immutable form behind one pointer, so reading it costs one load
//! and a policy change never resets any of the state next to it.

use crate::adaptive::{AdaptiveLimiter, GradientLimiter, LatencyLimiter, LatencyPermit, SystemCpu};
use crate::breaker::{ClassicBreaker, ClassicState, DroppingTransition, SreBreaker, Transition};
use crate::chores::{self, Chore};
use crate::clock::{Clock, COARSE_ENOUGH_NS};
use crate::error::{Downgraded, Reason};
use crate::flow::{Flow, Limits, Refused, Slot, NO_LIMIT};
use crate::hang::{self, HangTable};
use crate::limit::{Gcra, GcraCell};
use crate::listener::{BreakerChange, Dispatcher, DowngradeEvent};
use crate::policy::{AdaptiveLimit, BreakerPolicy, Policy, WindowConfig};
use crate::stats::{
    BreakerState, BreakerStats, CycleStats, PointStats, ReasonCounts, Totals, WindowCounts,
};
use crate::sync::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

/// The delay rule's decisions, pure: the point keeps the delay's end and the next
/// probe time in two atomics and asks these.
mod delay {
    /// The next probe time while a probe is out (or the delay has none).
    pub(super) const PROBE_TAKEN: u64 = u64::MAX;
    /// The delay's end while the thread starting it sets the first probe time.
    pub(super) const STARTING: u64 = u64::MAX - 1;

    /// Whether a delay ending at `until` runs at `now`.
    #[inline(always)]
    pub(super) fn in_delay(now: u64, until: u64) -> bool {
        now < until
    }

    /// Whether a call at `now`, inside the delay ending at `until`, may claim the
    /// probe whose time is `next`: one probe at a time, none before its time, none
    /// while the delay is being started.
    #[inline]
    pub(super) fn may_probe(now: u64, until: u64, next: u64) -> bool {
        until != STARTING && next != PROBE_TAKEN && now >= next
    }
}

/// The exception-rate rule: `exceptions / passes >= rate` once the window has more
/// than `floor` visits, counting the asking call's own visit and pass (SDS's
/// `visits - downgrades`).
#[inline]
fn rate_trips(exceptions: u64, passes: u64, downgrades: u64, rate: f64, floor: u64) -> bool {
    let visits = passes.saturating_add(downgrades).saturating_add(1);
    visits > floor && exceptions as f64 >= rate * passes.saturating_add(1) as f64
}
use crate::window::{self, Ring, TRACKED};
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const REASONS: usize = Reason::ALL.len();
/// Length of a statistics cycle: 10 s, aligned to wall-clock boundaries like SDS.
pub(crate) const CYCLE_NS: u64 = 10_000_000_000;
use delay::PROBE_TAKEN;
const NO_CAUSE: u8 = u8::MAX;

// Rule bits of a compiled policy. `ACTIVE` is set whenever a policy is present, so a
// word of zero means "no policy" and selects the fast path.
const ACTIVE: u64 = 1 << 0;
const R_VISITS: u64 = 1 << 1;
const R_TOKENS: u64 = 1 << 2;
const R_CONCURRENCY: u64 = 1 << 3;
const R_TIMEOUTS: u64 = 1 << 4;
const R_EXCEPTIONS: u64 = 1 << 5;
const R_RATE: u64 = 1 << 6;
const R_DELAY: u64 = 1 << 7;
/// The point has a breaker (with or without a policy).
const R_BREAKER: u64 = 1 << 8;
/// The breaker needs call durations.
const R_BREAKER_TIMED: u64 = 1 << 9;
/// Dry run: rules are evaluated and counted, calls are never downgraded.
const R_SHADOW: u64 = 1 << 10;
/// An adaptive concurrency limit.
const R_ADAPTIVE: u64 = 1 << 11;
/// A cluster-wide limit through Redis.
const R_CLUSTER: u64 = 1 << 12;
/// Durations and refills use the tick counter: some threshold is too short for the
/// timeline's millisecond resolution. Without it they use the timeline (nanoseconds).
const R_FINE: u64 = 1 << 13;

/// Rule bits outside the plain rules (SDS's, with fixed thresholds on the timeline):
/// a point without any of them takes the leaner [`Point::enter_policy`] instance.
const NOT_PLAIN: u64 = R_DELAY | R_SHADOW | R_BREAKER | R_ADAPTIVE | R_CLUSTER | R_FINE;
const _: () = assert!(NOT_PLAIN & (R_VISITS | R_TOKENS | R_CONCURRENCY | R_RATE) == 0);

/// A slot leaked for the rest of the process (never freed nor moved: a call that read
/// an older policy may still use it), compared by address: two compiled forms are equal
/// only if they name the very same slots.
#[derive(Debug)]
struct Leaked<T: 'static>(&'static T);

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
struct Compiled {
    rules: u64,
    max_visits: u64,
    max_concurrency: u64,
    max_exceptions: u64,
    rate: f64,
    rate_floor: u64,
    /// The thresholds below are in ticks with `R_FINE`, else timeline nanoseconds.
    timeout: u64,
    timeout_count: u64,
    percentage: u64,
    delay_ns: u64,
    retry_ns: u64,
    /// The window ring (with `ACTIVE`).
    ring: Option<Leaked<Ring>>,
    /// The token bucket (with `R_TOKENS`).
    bucket: Option<Leaked<BucketSlot>>,
    breaker: Option<Leaked<BreakerSlot>>,
    adaptive: Option<Leaked<AdaptiveSlot>>,
    cluster: Option<Leaked<ClusterSlot>>,
}

/// The compiled form without any rule or breaker (a point that has none), and the
/// default every compiled policy starts from.
const EMPTY: Compiled = Compiled {
    rules: 0,
    max_visits: 0,
    max_concurrency: 0,
    max_exceptions: 0,
    rate: 0.0,
    rate_floor: 0,
    timeout: 0,
    timeout_count: 0,
    percentage: 0,
    delay_ns: 0,
    retry_ns: 0,
    ring: None,
    bucket: None,
    breaker: None,
    adaptive: None,
    cluster: None,
};

impl Default for Compiled {
    fn default() -> Compiled {
        EMPTY
    }
}

/// What a compiled form is made of, besides the policy's own numbers.
#[derive(Clone, Copy, Default)]
struct Parts {
    ring: Option<&'static Ring>,
    bucket: Option<&'static BucketSlot>,
    breaker: Option<&'static BreakerSlot>,
    adaptive: Option<&'static AdaptiveSlot>,
    cluster: Option<&'static ClusterSlot>,
}

impl Compiled {
    /// Compiles `policy` (with its ring and bucket in `parts`) and the point's slots;
    /// `fine` says whether durations are in ticks (see [`Compiled::needs_ticks`]).
    fn new(policy: Option<&Policy>, parts: Parts, fine: bool, clock: &Clock) -> Compiled {
        let mut c = match (policy, parts.ring) {
            (Some(p), Some(ring)) => Compiled::from_policy_in(p, ring, parts.bucket, clock, fine),
            _ => Compiled::default(),
        };
        if let (Some(a), true) = (parts.adaptive, c.rules & ACTIVE != 0) {
            c.rules |= R_ADAPTIVE;
            c.adaptive = Some(Leaked(a));
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

    /// Whether a policy or breaker has a threshold too short for the timeline.
    fn needs_ticks(policy: Option<&Policy>, breaker: Option<&BreakerSlot>) -> bool {
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
    fn from_policy_in(
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
            c.max_concurrency = u64::from(v);
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
        if let (Some(_), Some(b)) = (p.token_bucket, bucket) {
            c.rules |= R_TOKENS;
            c.bucket = Some(Leaked(b));
        }
        if p.shadow {
            c.rules |= R_SHADOW;
        }
        if let Some(d) = p.delay {
            c.rules |= R_DELAY;
            c.delay_ns = nanos(d.duration);
            c.retry_ns = d.retry_interval.map_or(0, nanos);
        }
        c
    }

    /// The window ring of a form with a policy.
    #[inline(always)]
    fn ring(&self) -> &'static Ring {
        match self.ring {
            Some(r) => r.0,
            None => unreachable!("a compiled policy has a ring"),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A point's compiled policy behind one pointer: a reader loads it (acquire) and reads
/// an immutable [`Compiled`] in place, one load and nothing copied, never a torn policy.
///
/// A published form is never freed nor moved, because a call that loaded it may still
/// be reading it. Forms are kept per point and an equal one is reused, so a point keeps
/// one form (`size_of::<Compiled>()` bytes plus a pointer) per distinct setting it has
/// had: a policy toggled between two values keeps two.
#[derive(Debug)]
struct PolicyCell {
    /// The current form, or null for a point without rules and breaker.
    current: AtomicPtr<Compiled>,
    /// Every form published (settings change rarely: searched in order).
    kept: Mutex<Vec<&'static Compiled>>,
}

impl PolicyCell {
    fn new() -> PolicyCell {
        PolicyCell {
            current: AtomicPtr::new(std::ptr::null_mut()),
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The current form, or `None` for a point without rules and breaker.
    #[inline(always)]
    fn get(&self) -> Option<&'static Compiled> {
        let c = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a form leaked by `store`, never freed.
        unsafe { c.cast_const().as_ref() }
    }

    /// The current form ([`EMPTY`] for a point without rules and breaker).
    #[inline]
    fn load(&self) -> &'static Compiled {
        self.get().unwrap_or(&EMPTY)
    }

    /// Publishes `c` for the next call on every thread. Callers serialise writes (the
    /// point's policy mutex).
    fn store(&self, c: Compiled) {
        let ptr = if c.rules == 0 {
            std::ptr::null_mut()
        } else {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            let form: &'static Compiled = match kept.iter().find(|k| ***k == c) {
                Some(k) => k,
                None => {
                    let form = Box::leak(Box::new(c));
                    kept.push(form);
                    form
                }
            };
            std::ptr::from_ref(form).cast_mut()
        };
        self.current.store(ptr, Ordering::Release);
    }

    /// Bytes of the kept forms and their list.
    fn heap_bytes(&self) -> usize {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.capacity() * std::mem::size_of::<&Compiled>()
            + kept.len() * std::mem::size_of::<Compiled>()
    }
}

#[derive(Debug)]
struct Counters {
    downgrades: AtomicU64,
    exceptions: AtomicU64,
    timeouts: AtomicU64,
    by_reason: [AtomicU64; REASONS],
    /// Shadow (dry-run) policies: calls that would have been downgraded, per reason.
    shadow_by_reason: [AtomicU64; REASONS],
    dropped_events: AtomicU64,
    breaker_transitions: AtomicU64,
}

impl Counters {
    fn tracked(&self, flow: &Flow) -> [u64; TRACKED] {
        let mut t = [0; TRACKED];
        t[window::PASSES] = flow.passes();
        t[window::DOWNGRADES] = self.downgrades.load(Ordering::Relaxed);
        t[window::EXCEPTIONS] = self.exceptions.load(Ordering::Relaxed);
        t[window::TIMEOUTS] = self.timeouts.load(Ordering::Relaxed);
        t
    }

    fn reasons(&self) -> ReasonCounts {
        ReasonCounts(self.by_reason.each_ref().map(|a| a.load(Ordering::Relaxed)))
    }
}

/// What a point is configured with: the writer side of its [`PolicyCell`].
#[derive(Debug, Default)]
struct Settings {
    policy: Option<Policy>,
    breaker: Option<BreakerPolicy>,
}

/// A live breaker of a point. Slots are never freed while the point lives: a call in
/// flight may still report to a replaced one.
#[derive(Debug)]
struct BreakerSlot {
    imp: BreakerImpl,
    /// Calls slower than this many nanoseconds count as failures...
    slow_ns: Option<u64>,
    /// ...which is this many ticks.
    slow_ticks: Option<u64>,
}

impl BreakerSlot {
    /// The slow-call threshold in ticks (`fine`) or timeline nanoseconds.
    #[inline]
    fn slow(&self, fine: bool) -> Option<u64> {
        if fine {
            self.slow_ticks
        } else {
            self.slow_ns
        }
    }

    /// The slow-call threshold in the unit of a compiled policy (0: none).
    #[inline]
    fn slow_in(&self, rules: u64) -> u64 {
        self.slow(rules & R_FINE != 0).unwrap_or(0)
    }
}

#[derive(Debug)]
enum BreakerImpl {
    Sre(SreBreaker),
    Classic(ClassicBreaker),
}

/// A live adaptive limiter of a point (never freed while the point lives).
#[derive(Debug)]
struct AdaptiveSlot {
    config: AdaptiveLimit,
    imp: AdaptiveImpl,
}

#[derive(Debug)]
enum AdaptiveImpl {
    Gradient(GradientLimiter),
    Shedder(AdaptiveLimiter),
}

/// The adaptive limiter's side of a running call, in two words: the limiter and the
/// start its permit carried (the permit types are rebuilt at completion; a small
/// `Permit` keeps every call cheap to move).
#[derive(Clone, Copy)]
struct AdaptiveCall {
    slot: &'static AdaptiveSlot,
    start: u64,
}

impl AdaptiveCall {
    /// Ends the call: a latency sample if it completed well, else it just leaves.
    fn end(self, ok: bool) {
        let limiter: &dyn LatencyLimiter = match &self.slot.imp {
            AdaptiveImpl::Gradient(l) => l,
            AdaptiveImpl::Shedder(l) => l,
        };
        limiter.end_call(self.start, ok.then(|| limiter.now()));
    }
}

/// A live cluster-wide limit of a point.
#[derive(Debug)]
struct ClusterSlot {
    #[cfg(feature = "redis")]
    config: crate::policy::ClusterLimit,
    #[cfg(feature = "redis")]
    lease: crate::redis::ClusterLease,
    reason: Reason,
}

impl ClusterSlot {
    #[inline]
    fn admits(&self) -> bool {
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
struct BucketSlot {
    gcra: Gcra,
    /// Whether the bucket's time is in ticks (else timeline nanoseconds).
    fine: bool,
    cell: GcraCell,
}

/// The token buckets of a point: the last one in use and every one it has had.
#[derive(Debug, Default)]
struct Buckets {
    last: Option<&'static BucketSlot>,
    kept: Vec<&'static BucketSlot>,
}

// Slots are shared by every thread that reads the compiled policy: check here that
// every slot type may be.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Ring>();
    shared::<BucketSlot>();
    shared::<BreakerSlot>();
    shared::<AdaptiveSlot>();
    shared::<ClusterSlot>();
};

/// Cluster limits of a point: the current one and every one it replaced. Slots are
/// leaked, never freed nor moved, because a call that read an older policy may still
/// be asking its slot, however long ago it read it. A replaced slot's lease keeps its
/// refill thread for a grace period (such calls get real answers) and is then stopped
/// by a chore of the timing wheel (see `chores`), which a change of the point's cluster
/// limit also calls early for slots already past their grace. A stopped lease hands
/// out what it holds and then answers without Redis.
#[cfg(feature = "redis")]
#[derive(Debug, Default)]
struct Clusters {
    current: Option<&'static ClusterSlot>,
    /// Every slot replaced, with the timeline reading of its replacement.
    replaced: Vec<(u64, &'static ClusterSlot)>,
}

#[cfg(feature = "redis")]
impl Clusters {
    /// The replaced slots past their grace at `now` whose lease still runs, and how
    /// long until the next of the others is past its grace, if any.
    fn due(&self, now: u64) -> (Vec<&'static ClusterSlot>, Option<Duration>) {
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
const CLUSTER_GRACE: Duration = Duration::from_secs(10);

/// The breaker's side of a running call, in two words: the breaker and either the
/// SRE breaker's slow-call threshold in the unit of the permit (0: none) or a classic
/// ticket taken apart (`epoch << 1 | probe`).
#[derive(Clone, Copy)]
struct BreakerCall {
    slot: &'static BreakerSlot,
    word: u64,
}

/// What the SRE breaker records for a finished call.
#[inline]
fn sre_outcome(failed: bool) -> crate::breaker::Outcome {
    if failed {
        crate::breaker::Outcome::Failure
    } else {
        crate::breaker::Outcome::Success
    }
}

fn classic_state(s: ClassicState) -> BreakerState {
    match s {
        ClassicState::Closed => BreakerState::Closed,
        ClassicState::Open => BreakerState::Open,
        ClassicState::HalfOpen => BreakerState::HalfOpen,
    }
}

#[derive(Debug, Default)]
struct CycleState {
    /// Cumulative counters at the start of the current cycle.
    start: [u64; TRACKED],
    start_reasons: [u64; REASONS],
    last: Option<CycleStats>,
}

/// The per-name state of the registry and the handle the macros call into.
///
/// Get one with [`Registry::point`](crate::Registry::point). Points are created on first
/// use and live as long as the process, so the handle is `&'static`.
pub struct Point {
    name: &'static str,
    clock: Clock,
    events: Arc<Dispatcher>,
    cfg: PolicyCell,
    /// Visits and calls in flight of calls under a policy...
    flow: Flow,
    /// ...while calls without one are counted per thread under this key (`tally::key`).
    id: u32,
    counters: Counters,
    peak: AtomicU64,
    cycle_peak: AtomicU64,
    cycle_id: AtomicU64,
    /// Timeline reading at which the next cycle begins (saves a division per call).
    next_cycle_at: AtomicU64,
    cycle: Mutex<CycleState>,
    /// The token buckets (see [`Buckets`]).
    buckets: Mutex<Buckets>,
    delay_until: AtomicU64,
    next_probe: AtomicU64,
    delay_cause: AtomicU8,
    /// The policy and breaker as given, and the writer lock of `cfg`.
    settings: Mutex<Settings>,
    /// Every breaker this point has had, leaked (never freed nor moved: a call may
    /// still hold a replaced one); the current one is in `cfg`.
    breakers: Mutex<Vec<&'static BreakerSlot>>,
    /// Whether a breaker setting exists (possibly `Disabled`).
    breaker_set: std::sync::atomic::AtomicBool,
    /// Every adaptive limiter this point has had, leaked like the breakers; the
    /// current one is in `cfg`.
    adaptives: Mutex<Vec<&'static AdaptiveSlot>>,
    #[cfg(feature = "redis")]
    clusters: Mutex<Clusters>,
    /// In-flight timed calls, created with the first timeout rule.
    hang: std::sync::OnceLock<HangTable>,
    /// Every window ring this point has had, the one in use last. Rings are leaked,
    /// never freed nor moved (and reused for an equal geometry), because a concurrent
    /// reader may still hold a replaced one.
    rings: Mutex<Vec<&'static Ring>>,
}

impl fmt::Debug for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Point")
            .field("name", &self.name)
            .field("policy", &self.policy())
            .finish_non_exhaustive()
    }
}

impl Point {
    pub(crate) fn new(name: &'static str, clock: Clock, events: Arc<Dispatcher>) -> Point {
        Point {
            name,
            clock,
            events,
            cfg: PolicyCell::new(),
            flow: Flow::new(),
            id: {
                static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                crate::tally::key(NEXT_ID.fetch_add(1, Ordering::Relaxed))
            },
            counters: Counters {
                downgrades: AtomicU64::new(0),
                exceptions: AtomicU64::new(0),
                timeouts: AtomicU64::new(0),
                by_reason: std::array::from_fn(|_| AtomicU64::new(0)),
                shadow_by_reason: std::array::from_fn(|_| AtomicU64::new(0)),
                dropped_events: AtomicU64::new(0),
                breaker_transitions: AtomicU64::new(0),
            },
            peak: AtomicU64::new(0),
            cycle_peak: AtomicU64::new(0),
            cycle_id: AtomicU64::new(0),
            next_cycle_at: AtomicU64::new(0),
            cycle: Mutex::new(CycleState::default()),
            buckets: Mutex::new(Buckets::default()),
            delay_until: AtomicU64::new(0),
            next_probe: AtomicU64::new(0),
            delay_cause: AtomicU8::new(NO_CAUSE),
            settings: Mutex::new(Settings::default()),
            breaker_set: std::sync::atomic::AtomicBool::new(false),
            adaptives: Mutex::new(Vec::new()),
            #[cfg(feature = "redis")]
            clusters: Mutex::new(Clusters::default()),
            hang: std::sync::OnceLock::new(),
            breakers: Mutex::new(Vec::new()),
            rings: Mutex::new(Vec::new()),
        }
    }

    /// The point's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The current policy, if any.
    pub fn policy(&self) -> Option<Policy> {
        self.settings().policy.clone()
    }

    /// The current breaker setting, if any.
    pub fn breaker(&self) -> Option<BreakerPolicy> {
        self.settings().breaker
    }

    fn settings(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn apply(&'static self, policy: Option<Policy>) {
        if let Some(t) = policy.as_ref().and_then(Policy::timeouts) {
            self.hang.get_or_init(HangTable::new);
            chores::schedule(self, Chore::SweepHungCalls, hang::period(t.threshold));
        }
        let mut settings = self.settings();
        if policy.is_some() && settings.policy.is_none() {
            // Calls admitted without a policy are not tracked in flight; start the
            // cycle from now so its numbers cover only tracked calls.
            self.observe_cycle(self.clock.now());
        }
        settings.policy = policy;
        self.recompile(&settings);
    }

    /// Sets (or, with `None`, removes) the breaker. A new breaker starts empty.
    pub(crate) fn apply_breaker(&'static self, breaker: Option<BreakerPolicy>) {
        let mut settings = self.settings();
        self.install_breaker(&mut settings, breaker);
    }

    fn install_breaker(&'static self, settings: &mut Settings, breaker: Option<BreakerPolicy>) {
        let slot = match breaker {
            Some(BreakerPolicy::Sre { config, slow_call }) => {
                SreBreaker::new(config, self.clock.now())
                    .ok()
                    .map(|b| (BreakerImpl::Sre(b), slow_call))
            }
            Some(BreakerPolicy::Classic(config)) => {
                let slow = config
                    .slow_call_rate
                    .is_some()
                    .then_some(config.slow_call_duration);
                ClassicBreaker::new(config, self.clock.now())
                    .ok()
                    .map(|b| (BreakerImpl::Classic(b), slow))
            }
            Some(BreakerPolicy::Disabled) | None => None,
        };
        if let Some((imp, slow)) = slot {
            let slot: &'static BreakerSlot = Box::leak(Box::new(BreakerSlot {
                imp,
                slow_ns: slow.map(nanos),
                slow_ticks: slow.map(|d| self.clock.ns_to_ticks(nanos(d))),
            }));
            self.breakers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(slot);
        }
        self.breaker_set.store(breaker.is_some(), Ordering::Release);
        settings.breaker = breaker;
        self.recompile(settings);
    }

    /// The entry of `#[breaker]`: installs the default breaker unless one was set
    /// (even `Disabled`), then enters like any call (see [`enter_in`](Self::enter_in)).
    #[inline]
    pub(crate) fn enter_breaker_in(
        &'static self,
        slot: &mut Option<Permit>,
    ) -> Result<(), Downgraded> {
        let c = self.cfg.load();
        if c.rules & (ACTIVE | R_BREAKER) == R_BREAKER {
            // The common case: a breaker and no policy.
            return place(self.enter_breaker_only(c), slot);
        }
        // A live breaker shows in the rule bits; only without one can the setting be
        // missing (or `Disabled`).
        if c.rules & R_BREAKER == 0 && !self.breaker_set.load(Ordering::Acquire) {
            self.ensure_breaker();
        }
        self.enter_in(slot)
    }

    #[cold]
    fn ensure_breaker(&'static self) {
        let mut settings = self.settings();
        if settings.breaker.is_none() {
            self.install_breaker(&mut settings, Some(BreakerPolicy::default()));
        }
    }

    fn recompile(&'static self, settings: &Settings) {
        let policy = settings.policy.as_ref();
        let ring = policy.map(|p| self.ring_for(p.window));
        let slots = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        let breaker = match settings.breaker {
            Some(BreakerPolicy::Sre { .. } | BreakerPolicy::Classic(_)) => slots.last(),
            _ => None,
        };
        let mut adaptives = self.adaptives.lock().unwrap_or_else(|e| e.into_inner());
        let adaptive = match settings.policy.as_ref().and_then(Policy::adaptive) {
            // An unchanged configuration keeps its limiter and what it learned.
            Some(a) if adaptives.last().is_some_and(|s| s.config == a) => adaptives.last(),
            Some(a) => {
                let clock = self.clock.clone();
                let imp = match a {
                    AdaptiveLimit::Gradient(c) => {
                        GradientLimiter::with_clock(c, clock).map(AdaptiveImpl::Gradient)
                    }
                    AdaptiveLimit::Shedder(c) => {
                        AdaptiveLimiter::with_parts(c, Arc::new(SystemCpu), clock)
                            .map(AdaptiveImpl::Shedder)
                    }
                };
                // `build()` validated the configuration, so this cannot fail.
                match imp {
                    Ok(imp) => {
                        adaptives.push(Box::leak(Box::new(AdaptiveSlot { config: a, imp })));
                        adaptives.last()
                    }
                    Err(_) => None,
                }
            }
            None => None,
        };
        let cluster = self.cluster_for(policy);
        // One unit for every duration of the point: ticks if any threshold is too
        // short for the timeline's resolution.
        let breaker = breaker.copied();
        let fine = Compiled::needs_ticks(policy, breaker);
        let parts = Parts {
            ring,
            bucket: self.bucket_for(policy, fine),
            breaker,
            adaptive: adaptive.copied(),
            cluster,
        };
        self.cfg
            .store(Compiled::new(policy, parts, fine, &self.clock));
    }

    /// The bucket slot for a policy's token bucket in the unit `fine` says. A setting
    /// the point has had before gets its slot back; when the bucket in use changes, the
    /// new one takes over the deficit of the last (tokens taken and not yet refilled,
    /// at most its capacity), so a raised capacity is there at once, a lowered one
    /// clamps and a changed rate applies from the next call. A call that read the
    /// replaced policy just before the change may still take a token from the old
    /// bucket: at most one per thread calling at that instant.
    fn bucket_for(&self, policy: Option<&Policy>, fine: bool) -> Option<&'static BucketSlot> {
        let tb = policy?.token_bucket?;
        // The tick counter has no exact ratio to nanoseconds: its interval is rounded
        // up. A manual clock's ticks are nanoseconds.
        let gcra = if fine && !self.clock.is_manual() {
            let ns = (1e9 / tb.rate).ceil();
            let ticks = if tb.rate > 0.0 && ns < u64::MAX as f64 {
                self.clock.ns_to_ticks(ns as u64).saturating_add(1) as f64
            } else {
                0.0
            };
            Gcra::with_interval(ticks, tb.capacity)
        } else {
            Gcra::per_second(tb.rate, tb.capacity)
        };
        let time = |fine: bool| {
            if fine {
                self.clock.ticks()
            } else {
                self.clock.now()
            }
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let slot = match buckets
            .kept
            .iter()
            .find(|b| b.gcra == gcra && b.fine == fine)
        {
            Some(b) => *b,
            None => {
                let slot: &'static BucketSlot = Box::leak(Box::new(BucketSlot {
                    gcra,
                    fine,
                    cell: GcraCell::new(&gcra, gcra.scaled(time(fine))),
                }));
                buckets.kept.push(slot);
                slot
            }
        };
        if let Some(last) = buckets.last.filter(|l| !std::ptr::eq(*l, slot)) {
            let then = last.gcra.scaled(time(last.fine));
            let now = slot.gcra.scaled(time(slot.fine));
            slot.cell
                .set(slot.gcra.carry(&last.gcra, last.cell.tat(), then, now));
        }
        buckets.last = Some(slot);
        Some(slot)
    }

    /// The cluster slot for a policy, building a lease when the setting changed.
    #[cfg(feature = "redis")]
    fn cluster_for(&'static self, policy: Option<&Policy>) -> Option<&'static ClusterSlot> {
        let mut guard = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        let clusters = &mut *guard;
        let now = self.clock.now();
        let wanted = policy.and_then(|p| p.cluster.clone());
        let same = match (&wanted, clusters.current) {
            (Some(w), Some(c)) => *w == c.config,
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let Some(old) = clusters.current.take() {
                clusters.replaced.push((now, old));
            }
            clusters.current = wanted.and_then(|w| self.build_cluster(w));
        }
        // Leases are stopped by the chore, on its thread: stopping one waits for a
        // Redis call, too long to hold the point's locks for.
        match clusters.due(now) {
            (due, _) if !due.is_empty() => {
                chores::schedule(self, Chore::StopRetiredLeases, Duration::ZERO)
            }
            (_, Some(next)) => chores::schedule(self, Chore::StopRetiredLeases, next),
            _ => {}
        }
        clusters.current
    }

    /// Stops the leases of cluster limits replaced more than [`CLUSTER_GRACE`] ago
    /// (a chore, see `chores`), holding none of the point's locks while it waits for
    /// them; returns when to look again, if some are still young.
    #[cfg(feature = "redis")]
    pub(crate) fn stop_retired_leases(&self) -> Option<Duration> {
        let clusters = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
        let (due, next) = clusters.due(self.clock.now());
        drop(clusters);
        for slot in due {
            slot.lease.stop();
        }
        next
    }

    /// Without the `redis` feature, policies have no cluster limit.
    #[cfg(not(feature = "redis"))]
    fn cluster_for(&self, _policy: Option<&Policy>) -> Option<&'static ClusterSlot> {
        None
    }

    #[cfg(feature = "redis")]
    fn build_cluster(&self, config: crate::policy::ClusterLimit) -> Option<&'static ClusterSlot> {
        use crate::policy::ClusterLimit;
        use crate::redis::ClusterLease;
        let (builder, reason, batch) = match &config {
            ClusterLimit::Visits {
                url,
                key,
                period,
                quota,
                batch,
            } => (
                ClusterLease::visits(url, key, *period, *quota),
                Reason::ClusterVisits,
                *batch,
            ),
            ClusterLimit::TokenBucket {
                url,
                key,
                rate,
                burst,
                batch,
            } => (
                ClusterLease::token_bucket(url, key, *rate, *burst),
                Reason::ClusterTokenBucket,
                *batch,
            ),
        };
        // `Policy::build` validated every field, so only a failed thread spawn can end
        // here; the point then runs without its cluster limit, and says so.
        match builder.batch(batch).build() {
            // Leaked: see `Clusters`.
            Ok(lease) => Some(Box::leak(Box::new(ClusterSlot {
                config,
                lease,
                reason,
            }))),
            Err(_e) => {
                #[cfg(feature = "tracing")]
                tracing::warn!(point = self.name, error = %_e, "resilience: cluster limit not started");
                None
            }
        }
    }

    fn ring_for(&self, w: WindowConfig) -> &'static Ring {
        let width = nanos(w.bucket_width);
        let buckets = u64::from(w.buckets);
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = rings
            .last()
            .filter(|r| r.width_ns == width && r.buckets == buckets)
        {
            return r;
        }
        let now = self.clock.now();
        let ring: &'static Ring = match rings
            .iter()
            .position(|r| r.width_ns == width && r.buckets == buckets)
        {
            Some(i) => {
                // A new geometry restarts the window; totals are kept.
                let r = rings.remove(i);
                r.reset(now, self.counters.tracked(&self.flow));
                r
            }
            None => Box::leak(Box::new(Ring::new(
                w.buckets,
                width,
                now,
                self.counters.tracked(&self.flow),
            ))),
        };
        // The last ring is the one in use.
        rings.push(ring);
        ring
    }

    /// Asks whether a call may run.
    ///
    /// On `Ok`, run the call and report its outcome through the [`Permit`] (dropping it
    /// counts as a cancelled call: no exception, slot released). On `Err`, do not run it.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let point = registry().point("docs.enter").unwrap();
    /// registry().set_policy("docs.enter", Policy::builder().max_concurrency(1).build().unwrap()).unwrap();
    /// let first = point.enter().expect("one slot is free");
    /// assert!(point.enter().is_err(), "the only slot is taken");
    /// first.finish(false);
    /// assert!(point.enter().is_ok());
    /// ```
    #[inline]
    pub fn enter(&'static self) -> Result<Permit, Downgraded> {
        let mut slot = None;
        self.enter_in(&mut slot)?;
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// [`enter`](Self::enter) for the generated code: an admitted call's permit is
    /// written into `slot`, where it stays until [`Permit::finish_in`]. A permit moved
    /// around by value is copied through the stack in wide loads that stall on the
    /// narrower stores that built it; written in place, it is not moved at all. A call
    /// on a point without policy or breaker, which has nothing to complete but an
    /// exception, is admitted with the slot left empty: nothing is written at all.
    #[inline(always)]
    pub(crate) fn enter_in(&'static self, slot: &mut Option<Permit>) -> Result<(), Downgraded> {
        let Some(c) = self.cfg.get() else {
            self.pass_untracked();
            return Ok(());
        };
        // The entries out of line answer with the reason alone, a byte in a
        // register: the refusal is built here.
        let entered = if c.rules & ACTIVE == 0 {
            self.enter_unpoliced(c, slot)
        } else {
            self.enter_governed(c, slot)
        };
        entered.map_err(|reason| Downgraded {
            point: self.name,
            reason,
        })
    }

    /// A point with a policy: the plain rules alone take a leaner instance of the
    /// same code, without the words and branches of the others.
    #[inline(never)]
    fn enter_governed(
        &'static self,
        c: &'static Compiled,
        slot: &mut Option<Permit>,
    ) -> Result<(), Reason> {
        let entered = if c.rules & NOT_PLAIN == 0 {
            self.enter_policy::<true>(c, slot)
        } else {
            self.enter_policy::<false>(c, slot)
        };
        entered.map_err(|d| d.reason)
    }

    /// Enters under the policy `c` (with [`ACTIVE`]). With `PLAIN`, it has none of the
    /// [`NOT_PLAIN`] rules.
    ///
    /// The rules are asked in SDS order on what the call sees (the visits and the
    /// calls in flight read once, before any token is taken); the call is then
    /// admitted by one compare-and-swap of the flow word that checks the visits and
    /// concurrency limits again on the word it replaces ([`Flow::admit`]), so those two
    /// bounds hold exactly under any number of threads. Only an admitted call counts a
    /// pass and holds a slot: nothing is taken and given back.
    #[inline(always)]
    fn enter_policy<const PLAIN: bool>(
        &'static self,
        c: &'static Compiled,
        slot: &mut Option<Permit>,
    ) -> Result<(), Downgraded> {
        debug_assert!(c.rules & ACTIVE != 0 && (!PLAIN || c.rules & NOT_PLAIN == 0));
        // One timeline reading per call; the tick counter only when some threshold is
        // too short for the timeline.
        let now = self.clock.now();
        let fine = !PLAIN && c.rules & R_FINE != 0;
        let stamp = self.stamp(fine, now);
        self.observe_cycle(now);
        let base = c.ring().base(now, || self.counters.tracked(&self.flow));
        let limits = Limits {
            passes: if c.rules & R_VISITS != 0 {
                base[window::PASSES].saturating_add(c.max_visits)
            } else {
                NO_LIMIT
            },
            inflight: if c.rules & R_CONCURRENCY != 0 {
                c.max_concurrency
            } else {
                NO_LIMIT
            },
        };
        let timed = c.rules & (R_TIMEOUTS | R_BREAKER_TIMED) != 0;
        let start = if timed { stamp } else { 0 };

        // Inside a delay, only the probe may go on to the rules (shadow policies never
        // start a real delay: that state would outlive the dry run).
        let mut probe = None;
        if !PLAIN && c.rules & (R_DELAY | R_SHADOW) == R_DELAY {
            let until = self.delay_until.load(Ordering::Acquire);
            if delay::in_delay(now, until) {
                match self.claim_probe(c, now, until) {
                    Some(claimed) => probe = Some((until, claimed)),
                    None => return place(self.trip(c, Reason::Delay, start, fine, now), slot),
                }
            }
        }

        let mut adaptive = None;
        let (passes, inflight) = self.flow.peek();
        let tripped = 'chain: {
            if c.rules & R_VISITS != 0 && passes >= limits.passes {
                break 'chain Some(Reason::Visits);
            }
            if c.rules & R_TOKENS != 0 && !self.take_token(c, stamp) {
                break 'chain Some(Reason::TokenBucket);
            }
            if c.rules & R_CONCURRENCY != 0 && inflight >= limits.inflight {
                break 'chain Some(Reason::Concurrency);
            }
            // A probe asks whether the dependency recovered: it obeys every limit
            // but not the health rules whose trip the delay stands for.
            if c.rules & (R_TIMEOUTS | R_EXCEPTIONS | R_RATE) != 0 && (PLAIN || probe.is_none()) {
                if c.rules & R_TIMEOUTS != 0 {
                    let t = self
                        .counters
                        .timeouts
                        .load(Ordering::Relaxed)
                        .saturating_sub(base[window::TIMEOUTS]);
                    if t >= c.timeout_count {
                        break 'chain Some(Reason::Timeouts);
                    }
                }
                let e = self
                    .counters
                    .exceptions
                    .load(Ordering::Relaxed)
                    .saturating_sub(base[window::EXCEPTIONS]);
                if c.rules & R_EXCEPTIONS != 0 && e >= c.max_exceptions {
                    break 'chain Some(Reason::Exceptions);
                }
                if c.rules & R_RATE != 0 {
                    // This call's visit included, as SDS counts it.
                    let p = passes.saturating_sub(base[window::PASSES]);
                    let d = self
                        .counters
                        .downgrades
                        .load(Ordering::Relaxed)
                        .saturating_sub(base[window::DOWNGRADES]);
                    if rate_trips(e, p, d, c.rate, c.rate_floor) {
                        break 'chain Some(Reason::ExceptionRate);
                    }
                }
            }
            if let (false, Some(cluster)) = (PLAIN, c.cluster) {
                if !cluster.admits() {
                    break 'chain Some(cluster.reason);
                }
            }
            if !PLAIN && c.rules & R_ADAPTIVE != 0 {
                match self.adaptive_admit(c) {
                    Some(call) => adaptive = Some(call),
                    None => break 'chain Some(Reason::Overloaded),
                }
            }
            None
        };
        if let Some(reason) = tripped {
            return place(self.refuse(c, reason, probe, start, fine, now), slot);
        }
        // The breaker comes last: calls downgraded by a rule never reach it.
        let mut breaker = None;
        if let (false, Some(b)) = (PLAIN, c.breaker) {
            match self.breaker_admit(c.rules, b, now) {
                Some(call) => breaker = Some(call),
                None => {
                    // Leave the adaptive limiter's flight and give the probe back.
                    if let Some(a) = adaptive {
                        a.end(false);
                    }
                    if let Some((_, claimed)) = probe {
                        self.unclaim_probe(claimed);
                    }
                    return Err(self.downgrade(Reason::BreakerOpen, now, false));
                }
            }
        }
        // The commit: the visits and concurrency limits checked again, exactly.
        let entry = match self.flow.admit(limits) {
            Ok(entry) => entry,
            Err(refused) => {
                // Another call took the last pass or slot since the look above.
                if let Some(a) = adaptive {
                    a.end(false);
                }
                if let Some(b) = breaker {
                    self.breaker_outcome(b, Outcome::Cancelled, false, 0, fine);
                }
                let reason = match refused {
                    Refused::Visits => Reason::Visits,
                    Refused::Concurrency => Reason::Concurrency,
                };
                return place(self.refuse(c, reason, probe, start, fine, now), slot);
            }
        };
        // Nothing below until the caller's slot is filled may unwind: the in-flight
        // slot taken above is only given back by a permit. Written with every field
        // known, in the caller's slot: never moved, and after the locked instructions.
        self.note_peak(entry.inflight);
        let hang = self.hang_slot(c.timeout, now);
        let permit = fill(
            slot,
            Permit::governed(self, c, start, fine, entry.slot, hang, adaptive, breaker),
        );
        if let Some((until, _)) = probe {
            permit.attach_probe(until);
        }
        Ok(())
    }

    /// A rule refused a call: a probe it claimed goes back for the next call, the delay
    /// starts (if the policy has one), and the call is downgraded or spared.
    #[inline(never)]
    fn refuse(
        &'static self,
        c: &Compiled,
        reason: Reason,
        probe: Option<(u64, u64)>,
        start: u64,
        fine: bool,
        now: u64,
    ) -> Result<Permit, Downgraded> {
        if let Some((_, claimed)) = probe {
            self.unclaim_probe(claimed);
        }
        if c.rules & (R_DELAY | R_SHADOW) == R_DELAY {
            self.start_delay(now, c, reason);
        }
        self.trip(c, reason, start, fine, now)
    }

    /// A point without policy but with a breaker, entered through
    /// [`enter_in`](Self::enter_in) (out of line, so that `enter_in` stays small enough
    /// to inline at every call site).
    #[inline(never)]
    fn enter_unpoliced(
        &'static self,
        c: &'static Compiled,
        slot: &mut Option<Permit>,
    ) -> Result<(), Reason> {
        place(self.enter_breaker_only(c), slot).map_err(|d| d.reason)
    }

    /// A point without policy but with a breaker. The closed path of an untimed SRE
    /// breaker stays in this small function; everything else is out of line.
    #[inline]
    fn enter_breaker_only(&'static self, c: &'static Compiled) -> Result<Permit, Downgraded> {
        if let (R_BREAKER, Some(slot)) = (c.rules & (R_BREAKER | R_BREAKER_TIMED), c.breaker) {
            if let BreakerImpl::Sre(b) = &slot.imp {
                if b.accepts_surely(self.clock.now()) {
                    self.pass_untracked();
                    let mut permit = Permit::untracked(self);
                    permit.attach_breaker(BreakerCall {
                        slot: slot.0,
                        word: 0,
                    });
                    return Ok(permit);
                }
            }
        }
        self.enter_breaker_slow(c)
    }

    /// The rest of [`enter_breaker_only`](Self::enter_breaker_only).
    #[inline(never)]
    fn enter_breaker_slow(&'static self, c: &'static Compiled) -> Result<Permit, Downgraded> {
        let mut permit = Permit::untracked(self);
        if let Some(breaker) = c.breaker {
            let now = self.clock.now();
            if c.rules & R_BREAKER_TIMED != 0 {
                let fine = c.rules & R_FINE != 0;
                permit.meta = permit.meta.with_fine(fine);
                permit.start = self.stamp(fine, now);
            }
            match self.breaker_admit(c.rules, breaker, now) {
                Some(call) => permit.attach_breaker(call),
                None => {
                    std::mem::forget(permit);
                    return Err(self.downgrade(Reason::BreakerOpen, now, false));
                }
            }
        }
        self.pass_untracked();
        Ok(permit)
    }

    /// Counts an exception of a call without policy or breaker.
    #[inline]
    fn count_exception(&self) {
        self.counters.exceptions.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the pass of a call without a policy: in this thread's own cell, without
    /// a read-modify-write (see `tally`).
    #[inline]
    fn pass_untracked(&self) {
        if !crate::tally::add_one(self.id) {
            self.flow.pass();
        }
    }

    /// The start of a timed call in the unit its thresholds were compiled in: the
    /// timeline reading it already has, or the tick counter (never 0).
    #[inline]
    fn stamp(&self, fine: bool, now: u64) -> u64 {
        if fine {
            self.clock.ticks().max(1)
        } else {
            now
        }
    }

    /// Registers an admitted call with a timeout in the hung-call table: its slot there,
    /// or [`NO_HANG`].
    #[inline]
    fn hang_slot(&self, timeout: u64, now: u64) -> u32 {
        if timeout != 0 {
            if let Some(table) = self.hang.get() {
                // The table is on the timeline: sweeps are coarser than its resolution.
                return table.register(now).map_or(NO_HANG, |s| s);
            }
        }
        NO_HANG
    }

    /// Counts the calls that outlived the timeout threshold while still running.
    /// Returns when to sweep again, or `None` once the point has no timeout rule.
    pub(crate) fn sweep_hung_calls(&self) -> Option<Duration> {
        let c = self.cfg.load();
        if c.rules & R_TIMEOUTS == 0 {
            return None;
        }
        let threshold_ns = if c.rules & R_FINE != 0 {
            self.clock.ticks_to_ns(c.timeout)
        } else {
            c.timeout
        };
        if let Some(table) = self.hang.get() {
            let hung = table.sweep(self.clock.now(), threshold_ns);
            if hung > 0 {
                self.counters.timeouts.fetch_add(hung, Ordering::Relaxed);
            }
        }
        let threshold = Duration::from_nanos(threshold_ns);
        Some(hang::period(threshold))
    }

    /// Asks the point's adaptive limiter; `None` means over the limit.
    fn adaptive_admit(&self, c: &Compiled) -> Option<AdaptiveCall> {
        let slot = c.adaptive?.0;
        let start = match &slot.imp {
            AdaptiveImpl::Gradient(l) => l.try_acquire(l.now()).ok().map(LatencyPermit::into_start),
            AdaptiveImpl::Shedder(l) => l.try_acquire(l.now()).ok().map(LatencyPermit::into_start),
        };
        start.map(|start| AdaptiveCall { slot, start })
    }

    /// Asks the point's breaker; `None` means rejected (a drop is recorded).
    fn breaker_admit(
        &self,
        rules: u64,
        breaker: Leaked<BreakerSlot>,
        now: u64,
    ) -> Option<BreakerCall> {
        let slot = breaker.0;
        match &slot.imp {
            BreakerImpl::Sre(b) if b.accepts_surely(now) => Some(BreakerCall {
                slot,
                word: slot.slow_in(rules),
            }),
            BreakerImpl::Sre(b) => {
                let d = b.allow(now);
                if let Some(t) = d.transition {
                    let (from, to) = match t {
                        DroppingTransition::Started => (BreakerState::Closed, BreakerState::Open),
                        DroppingTransition::Stopped => (BreakerState::Open, BreakerState::Closed),
                    };
                    self.breaker_changed(
                        now,
                        BreakerChange {
                            from,
                            to,
                            cause: None,
                        },
                    );
                }
                d.is_admitted().then_some(BreakerCall {
                    slot,
                    word: slot.slow_in(rules),
                })
            }
            BreakerImpl::Classic(b) => match b.allow(now) {
                Ok(ticket) => {
                    if let Some(t) = ticket.transition() {
                        self.classic_changed(t);
                    }
                    let (epoch, _started, probe) = ticket.into_raw();
                    Some(BreakerCall {
                        slot,
                        word: epoch << 1 | u64::from(probe),
                    })
                }
                Err(_) => None,
            },
        }
    }

    /// Reports a finished call to the breaker that admitted it. A cancelled call is
    /// not an outcome: the SRE breaker records nothing and a classic ticket is dropped,
    /// which frees its half-open probe slot.
    fn breaker_outcome(
        &self,
        call: BreakerCall,
        outcome: Outcome,
        failed: bool,
        elapsed: u64,
        fine: bool,
    ) {
        match &call.slot.imp {
            BreakerImpl::Sre(b) => {
                if outcome == Outcome::Cancelled {
                    return;
                }
                // Into the bucket the window reached when the call was admitted (or
                // later): no clock read on the way out.
                let slow = call.word;
                let failed = failed || (slow != 0 && elapsed > slow);
                b.record_admitted(sre_outcome(failed));
            }
            BreakerImpl::Classic(b) => {
                // The start is not needed: the duration comes from the permit.
                let ticket = b.ticket_from_raw(call.word >> 1, 0, call.word & 1 == 1);
                if outcome == Outcome::Cancelled {
                    // Dropping the rebuilt ticket frees a half-open probe slot.
                    drop(ticket);
                    return;
                }
                let now = self.clock.now();
                let elapsed = match call.slot.slow(fine) {
                    None => Duration::ZERO,
                    Some(_) if fine => Duration::from_nanos(self.clock.ticks_to_ns(elapsed)),
                    Some(_) => Duration::from_nanos(elapsed),
                };
                if let Some(t) = ticket.finish(now, failed, elapsed) {
                    self.classic_changed(t);
                }
            }
        }
    }

    fn classic_changed(&self, t: Transition) {
        self.breaker_changed(
            t.at,
            BreakerChange {
                from: classic_state(t.from),
                to: classic_state(t.to),
                cause: Some(t.reason),
            },
        );
    }

    fn breaker_changed(&self, now: u64, change: BreakerChange) {
        self.counters
            .breaker_transitions
            .fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        tracing::info!(
            point = self.name,
            from = change.from.as_str(),
            to = change.to.as_str(),
            cause = ?change.cause,
            "resilience: breaker state changed"
        );
        if self.events.has_listeners() {
            self.send(DowngradeEvent {
                point: self.name,
                reason: Reason::BreakerOpen,
                delay_cause: None,
                time: self.clock.system_time(now),
                breaker: Some(change),
                shadow: false,
            });
        }
    }

    fn send(&self, event: DowngradeEvent) {
        if !self.events.emit(event) {
            self.counters.dropped_events.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A rule tripped: roll the downgrade percentage and either downgrade or let the
    /// call run anyway. A call that runs counts its pass and holds a slot like any
    /// admitted call, under the concurrency limit: a concurrency refusal is never
    /// spared (the limit holds whatever the percentage), and a spared call that finds
    /// no free slot is downgraded for concurrency. A shadow policy runs every call.
    fn trip(
        &'static self,
        c: &Compiled,
        reason: Reason,
        start: u64,
        fine: bool,
        now: u64,
    ) -> Result<Permit, Downgraded> {
        let shadow = c.rules & R_SHADOW != 0;
        let spared = c.percentage < 100
            && (c.percentage == 0 || crate::rand::below(100) >= c.percentage)
            && (shadow || reason != Reason::Concurrency);
        let mut reason = reason;
        if spared || shadow {
            if !spared {
                // Dry run: count and report what would have happened, then run it.
                self.counters.shadow_by_reason[reason.index()].fetch_add(1, Ordering::Relaxed);
                self.event(reason, now, true);
            }
            let limits = if !shadow && c.rules & R_CONCURRENCY != 0 {
                Limits {
                    passes: NO_LIMIT,
                    inflight: c.max_concurrency,
                }
            } else {
                Limits::NONE
            };
            match self.flow.admit(limits) {
                Ok(entry) => {
                    self.note_peak(entry.inflight);
                    let hang = self.hang_slot(c.timeout, now);
                    return Ok(Permit::governed(
                        self, c, start, fine, entry.slot, hang, None, None,
                    ));
                }
                Err(_) => reason = Reason::Concurrency,
            }
        }
        Err(self.downgrade(reason, now, false))
    }

    /// Counts a downgrade and reports it to the listeners.
    fn downgrade(&self, reason: Reason, now: u64, shadow: bool) -> Downgraded {
        self.counters.downgrades.fetch_add(1, Ordering::Relaxed);
        self.counters.by_reason[reason.index()].fetch_add(1, Ordering::Relaxed);
        self.event(reason, now, shadow);
        Downgraded {
            point: self.name,
            reason,
        }
    }

    #[inline]
    fn event(&self, reason: Reason, now: u64, shadow: bool) {
        // Downgrades can come by the thousand per second: debug level.
        #[cfg(feature = "tracing")]
        tracing::debug!(
            point = self.name,
            reason = reason.as_str(),
            shadow,
            "resilience: call downgraded"
        );
        if self.events.has_listeners() {
            let delay_cause = if reason == Reason::Delay {
                Reason::from_index(self.delay_cause.load(Ordering::Relaxed))
            } else {
                None
            };
            self.send(DowngradeEvent {
                point: self.name,
                reason,
                delay_cause,
                time: self.clock.system_time(now),
                breaker: None,
                shadow,
            });
        }
    }

    /// Takes a token from the policy's bucket at `stamp` (in the bucket's unit).
    #[inline]
    fn take_token(&self, c: &Compiled, stamp: u64) -> bool {
        match c.bucket {
            Some(b) => b.cell.try_take(&b.gcra, b.gcra.scaled(stamp), 1),
            None => false,
        }
    }

    #[inline]
    fn note_peak(&self, inflight: u64) {
        if inflight > self.cycle_peak.load(Ordering::Relaxed) {
            self.cycle_peak.fetch_max(inflight, Ordering::Relaxed);
            self.peak.fetch_max(inflight, Ordering::Relaxed);
        }
    }

    /// Claims the delay's probe at `now`; returns the probe time it replaced, to put
    /// back if the probe is refused after all (see [`unclaim_probe`](Self::unclaim_probe)).
    fn claim_probe(&self, c: &Compiled, now: u64, until: u64) -> Option<u64> {
        if c.retry_ns == 0 {
            return None;
        }
        let next = self.next_probe.load(Ordering::Acquire);
        (delay::may_probe(now, until, next)
            && self
                .next_probe
                .compare_exchange(next, PROBE_TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok())
        .then_some(next)
    }

    /// Gives back a probe that a rule refused: the next call may probe at once.
    fn unclaim_probe(&self, claimed: u64) {
        let _ = self.next_probe.compare_exchange(
            PROBE_TAKEN,
            claimed,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Starts the delay after a trip at `now`, unless one runs. The thread that wins
    /// the start marks the delay [`delay::STARTING`] (no probe while it is) until it
    /// has set the first probe time, so no call probes before a retry interval.
    fn start_delay(&self, now: u64, c: &Compiled, reason: Reason) {
        let until = self.delay_until.load(Ordering::Acquire);
        if delay::in_delay(now, until)
            || self
                .delay_until
                .compare_exchange(until, delay::STARTING, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.delay_cause
            .store(reason.index() as u8, Ordering::Relaxed);
        let next = if c.retry_ns == 0 {
            PROBE_TAKEN
        } else {
            now.saturating_add(c.retry_ns)
        };
        self.next_probe.store(next, Ordering::Release);
        self.delay_until.store(
            now.saturating_add(c.delay_ns).min(delay::STARTING - 1),
            Ordering::Release,
        );
    }

    /// Rolls the statistics cycle if `now` is in a later one. Never blocks: if another
    /// thread is rolling, this call leaves it to that thread.
    #[inline]
    fn observe_cycle(&self, now: u64) {
        if now >= self.next_cycle_at.load(Ordering::Relaxed) {
            self.roll_cycle(self.clock.wall_nanos(now) / CYCLE_NS);
        }
    }

    #[cold]
    fn roll_cycle(&self, id: u64) {
        let Ok(mut st) = self.cycle.try_lock() else {
            return;
        };
        let prev = self.cycle_id.load(Ordering::Relaxed);
        if id <= prev {
            // Another thread rolled it between our check and the lock.
            return;
        }
        let now_counts = self.counters.tracked(&self.flow);
        let now_reasons = self.counters.reasons().0;
        let inflight = self.flow.inflight();
        let peak = self.cycle_peak.swap(inflight, Ordering::Relaxed);
        st.last = Some(if prev != 0 && prev + 1 == id {
            let diff = |i: usize| now_counts[i].saturating_sub(st.start[i]);
            let passes = diff(window::PASSES);
            let downgrades = diff(window::DOWNGRADES);
            CycleStats {
                start: self.clock_cycle_start(prev),
                visits: passes + downgrades,
                passes,
                downgrades,
                exceptions: diff(window::EXCEPTIONS),
                timeouts: diff(window::TIMEOUTS),
                peak_concurrency: peak,
                downgrades_by_reason: ReasonCounts(std::array::from_fn(|i| {
                    now_reasons[i].saturating_sub(st.start_reasons[i])
                })),
            }
        } else {
            // The previous cycle saw no call at all (or the point is new).
            CycleStats {
                start: self.clock_cycle_start(id - 1),
                peak_concurrency: inflight,
                ..CycleStats::default()
            }
        });
        st.start = now_counts;
        st.start_reasons = now_reasons;
        self.cycle_id.store(id, Ordering::Relaxed);
        self.next_cycle_at.store(
            self.clock
                .timeline_at_wall((id + 1).saturating_mul(CYCLE_NS)),
            Ordering::Relaxed,
        );
    }

    fn clock_cycle_start(&self, id: u64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_nanos(id.saturating_mul(CYCLE_NS))
    }

    /// A snapshot of the point's statistics.
    ///
    /// Totals are exact. The window and the last cycle are present while the point has
    /// a policy (a point without policy only counts totals: that is its fast path).
    pub fn stats(&self) -> PointStats {
        let c = self.cfg.load();
        let now = self.clock.now();
        let tracked = self.counters.tracked(&self.flow);
        // Passes under a policy are in the flow word, the others in per-thread cells;
        // every visit is a pass or a downgrade.
        let passes = tracked[window::PASSES] + crate::tally::total(self.id);
        let visits = passes + tracked[window::DOWNGRADES];
        let window = (c.rules & ACTIVE != 0).then(|| {
            let base = c.ring().base(now, || self.counters.tracked(&self.flow));
            let d = |i: usize| tracked[i].saturating_sub(base[i]);
            WindowCounts {
                visits: d(window::PASSES) + d(window::DOWNGRADES),
                passes: d(window::PASSES),
                downgrades: d(window::DOWNGRADES),
                exceptions: d(window::EXCEPTIONS),
                timeouts: d(window::TIMEOUTS),
            }
        });
        let last_cycle = if c.rules & ACTIVE != 0 {
            self.observe_cycle(now);
            self.cycle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .last
                .clone()
        } else {
            None
        };
        PointStats {
            name: self.name,
            totals: Totals {
                visits,
                passes,
                downgrades: tracked[window::DOWNGRADES],
                exceptions: tracked[window::EXCEPTIONS],
                timeouts: tracked[window::TIMEOUTS],
                downgrades_by_reason: self.counters.reasons(),
            },
            window,
            last_cycle,
            concurrency: self.flow.inflight(),
            peak_concurrency: self.peak.load(Ordering::Relaxed),
            in_delay: c.rules & R_DELAY != 0 && now < self.delay_until.load(Ordering::Relaxed),
            dropped_events: self.counters.dropped_events.load(Ordering::Relaxed),
            shadow_downgrades_by_reason: ReasonCounts(
                self.counters
                    .shadow_by_reason
                    .each_ref()
                    .map(|a| a.load(Ordering::Relaxed)),
            ),
            breaker: self.breaker_stats(c, now),
        }
    }

    fn breaker_stats(&self, c: &Compiled, now: u64) -> Option<BreakerStats> {
        let slot = c.breaker?.0;
        let transitions = self.counters.breaker_transitions.load(Ordering::Relaxed);
        Some(match &slot.imp {
            BreakerImpl::Sre(b) => {
                let h = b.history(now);
                BreakerStats {
                    kind: "sre",
                    state: if b.is_dropping() {
                        BreakerState::Open
                    } else {
                        BreakerState::Closed
                    },
                    window_successes: h.accepts,
                    window_failures: h.failures,
                    window_drops: Some(h.drops),
                    transitions,
                }
            }
            BreakerImpl::Classic(b) => {
                let st = b.stats(now);
                BreakerStats {
                    kind: "classic",
                    state: classic_state(st.state),
                    window_successes: st.calls.saturating_sub(st.failures),
                    window_failures: st.failures,
                    window_drops: None,
                    transitions,
                }
            }
        })
    }

    /// Approximate memory held by this point, in bytes: the point itself, its window
    /// rings, breakers, adaptive limiters, cluster-limit slots and hung-call table
    /// (not the heap of a limiter's own state, nor a cluster lease's thread).
    pub fn memory_bytes(&self) -> usize {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::size_of::<Point>()
            + rings
                .iter()
                .map(|r| std::mem::size_of::<Ring>() + r.heap_bytes())
                .sum::<usize>()
            + rings.capacity() * std::mem::size_of::<usize>()
            + self
                .breakers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|b| {
                    std::mem::size_of::<BreakerSlot>()
                        + match &b.imp {
                            BreakerImpl::Sre(s) => s.heap_bytes(),
                            BreakerImpl::Classic(_) => 0,
                        }
                })
                .sum::<usize>()
            + self
                .adaptives
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len()
                * std::mem::size_of::<AdaptiveSlot>()
            + self.cluster_slots() * std::mem::size_of::<ClusterSlot>()
            + self.hang.get().map_or(0, HangTable::heap_bytes)
            + self.cfg.heap_bytes()
            + self.name.len()
    }

    /// Cluster-limit slots this point has had.
    fn cluster_slots(&self) -> usize {
        #[cfg(feature = "redis")]
        {
            let c = self.clusters.lock().unwrap_or_else(|e| e.into_inner());
            usize::from(c.current.is_some()) + c.replaced.len()
        }
        #[cfg(not(feature = "redis"))]
        0
    }

    /// Runs `f` under this point: if the point is downgraded, `fallback` gets the
    /// [`Downgraded`] decision instead. An `Err` from `f` counts as an exception and is
    /// returned unchanged; a panic counts as an exception and keeps unwinding.
    ///
    /// The fallback runs only for downgrades, never for business errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let point = registry().point("docs.call").unwrap();
    /// registry().set_policy("docs.call", Policy::builder().max_visits(1).build().unwrap()).unwrap();
    /// let price = || Ok::<u32, String>(42);
    /// assert_eq!(point.call(price, |_| Ok(0)), Ok(42));
    /// assert_eq!(point.call(price, |_| Ok(0)), Ok(0), "second visit is downgraded");
    /// ```
    pub fn call<T, E>(
        &'static self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: impl FnOnce(Downgraded) -> Result<T, E>,
    ) -> Result<T, E> {
        // The permit stays in place, as in the code `#[downgrade]` generates.
        let mut permit = None;
        if let Err(d) = self.enter_in(&mut permit) {
            return fallback(d);
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(out) => {
                Permit::finish_in(self, &mut permit, out.is_err());
                out
            }
            Err(panic) => {
                Permit::finish_in(self, &mut permit, true);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Like [`call`](Point::call) with a fallback value instead of a closure (SDS's
    /// `invokerMethod(point, downgradeValue, biz)`).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let point = registry().point("docs.call_or").unwrap();
    /// registry().set_policy("docs.call_or", Policy::builder().max_visits(0).build().unwrap()).unwrap();
    /// assert_eq!(point.call_or(|| Ok::<_, ()>(5), 0), Ok(0));
    /// ```
    pub fn call_or<T, E>(
        &'static self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: T,
    ) -> Result<T, E> {
        self.call(f, |_| Ok(fallback))
    }

    /// The async form of [`call`](Point::call): `f` and `fallback` produce futures.
    /// If the returned future is dropped mid-flight the call counts as cancelled: its
    /// concurrency slot is released and no exception is recorded.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::registry;
    ///
    /// let point = registry().point("docs.call_async").unwrap();
    /// let out = futures_executor::block_on(point.call_async(
    ///     || async { Ok::<_, ()>(1) },
    ///     |_| async { Ok(0) },
    /// ));
    /// assert_eq!(out, Ok(1));
    /// ```
    pub async fn call_async<T, E, F, G>(
        &'static self,
        f: impl FnOnce() -> F,
        fallback: impl FnOnce(Downgraded) -> G,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
        G: std::future::Future<Output = Result<T, E>>,
    {
        let mut permit = None;
        if let Err(d) = self.enter_in(&mut permit) {
            return fallback(d).await;
        }
        match crate::private::CatchUnwind::new(f()).await {
            Ok(out) => {
                Permit::finish_in(self, &mut permit, out.is_err());
                out
            }
            Err(panic) => {
                Permit::finish_in(self, &mut permit, true);
                std::panic::resume_unwind(panic)
            }
        }
    }
}

/// Permission to run one call, returned by [`Point::enter`].
///
/// Report the outcome with [`finish`](Permit::finish) or [`panicked`](Permit::panicked).
/// Dropping it without either means the call was cancelled (an async future dropped
/// mid-flight): its concurrency slot is released and nothing else is recorded. Either
/// way the slot can never leak, which SDS's `downgradeFinally` could.
#[must_use = "dropping a permit records the call as cancelled; call `finish`"]
pub struct Permit {
    point: &'static Point,
    /// Start of a timed call (ticks or timeline, see `meta`), else 0.
    start: u64,
    /// The timeout rule's threshold in the unit of `start`, or 0 without one.
    timeout: u64,
    /// `delay_until` of the delay period this call probes, else 0.
    probe_of: u64,
    /// The in-flight slot, the unit of `start` and the hung-call slot, in one word.
    meta: Meta,
    /// The breaker's record of this call, if the point has a breaker.
    breaker: Option<BreakerCall>,
    /// The adaptive limiter's record of this call.
    adaptive: Option<AdaptiveCall>,
}

const NO_HANG: u32 = u32::MAX;

/// Writes `permit` into the caller's empty slot and returns it there, to be
/// completed in place.
#[inline(always)]
fn fill(slot: &mut Option<Permit>, permit: Permit) -> &mut Permit {
    debug_assert!(slot.is_none(), "a permit slot is filled once");
    // The old value is `None`: forgetting it skips the check a drop would make.
    std::mem::forget(slot.replace(permit));
    match slot {
        Some(permit) => permit,
        None => unreachable!("just filled"),
    }
}

/// Writes the permit of an entry that returns one into the caller's empty slot (see
/// [`Point::enter_in`]).
#[inline(always)]
fn place(entered: Result<Permit, Downgraded>, slot: &mut Option<Permit>) -> Result<(), Downgraded> {
    fill(slot, entered?);
    Ok(())
}

/// The small fields of a [`Permit`] packed in one word, so that a permit is always
/// written and read in whole words (a byte written next to a word that is then read
/// whole stalls the CPU's store forwarding): the hung-call slot in the low 32 bits, the
/// in-flight slot in bits 32-33, the unit of `start` in bit 34, whether the permit has
/// a breaker call, an adaptive flight or a probe in bit 35 (so that completion tells
/// the common calls from one word), and bit 63 always set.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Meta(std::num::NonZeroU64);

impl Meta {
    const SET: u64 = 1 << 63;
    const SLOT_SHIFT: u32 = 32;
    const SLOT_MASK: u64 = 0b11 << Self::SLOT_SHIFT;
    const FINE: u64 = 1 << 34;
    const EXTRA: u64 = 1 << 35;

    #[inline]
    fn extra(self) -> bool {
        self.bits() & Self::EXTRA != 0
    }

    #[inline]
    fn with_extra(self, extra: bool) -> Meta {
        Meta::from_bits(self.bits() & !Self::EXTRA | if extra { Self::EXTRA } else { 0 })
    }

    #[inline]
    fn from_bits(bits: u64) -> Meta {
        match std::num::NonZeroU64::new(bits | Self::SET) {
            Some(n) => Meta(n),
            None => unreachable!("bit 63 is set"),
        }
    }

    #[inline]
    fn new(slot: Slot, fine: bool) -> Meta {
        Meta::from_bits(u64::from(NO_HANG))
            .with_slot(slot)
            .with_fine(fine)
    }

    #[inline]
    fn bits(self) -> u64 {
        self.0.get()
    }

    #[inline]
    fn hang(self) -> u32 {
        self.bits() as u32
    }

    #[inline]
    fn with_hang(self, hang: u32) -> Meta {
        Meta::from_bits(self.bits() & !u64::from(u32::MAX) | u64::from(hang))
    }

    #[inline]
    fn slot(self) -> Slot {
        match (self.bits() & Self::SLOT_MASK) >> Self::SLOT_SHIFT {
            0 => Slot::None,
            1 => Slot::Word,
            _ => Slot::Spill,
        }
    }

    #[inline]
    fn with_slot(self, slot: Slot) -> Meta {
        let code: u64 = match slot {
            Slot::None => 0,
            Slot::Word => 1,
            Slot::Spill => 2,
        };
        Meta::from_bits(self.bits() & !Self::SLOT_MASK | code << Self::SLOT_SHIFT)
    }

    #[inline]
    fn fine(self) -> bool {
        self.bits() & Self::FINE != 0
    }

    #[inline]
    fn with_fine(self, fine: bool) -> Meta {
        Meta::from_bits(if fine {
            self.bits() | Self::FINE
        } else {
            self.bits() & !Self::FINE
        })
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("point", &self.point.name)
            .field("probe", &(self.probe_of != 0))
            .field("breaker", &self.breaker.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Exception,
    Cancelled,
}

impl Outcome {
    #[inline(always)]
    fn of(exception: bool) -> Outcome {
        if exception {
            Outcome::Exception
        } else {
            Outcome::Ok
        }
    }
}

impl Permit {
    /// The permit of a call admitted under the policy `c`, holding `slot`, with
    /// every field known (written once, in the caller's slot).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn governed(
        point: &'static Point,
        c: &Compiled,
        start: u64,
        fine: bool,
        slot: Slot,
        hang: u32,
        adaptive: Option<AdaptiveCall>,
        breaker: Option<BreakerCall>,
    ) -> Permit {
        Permit {
            point,
            start,
            timeout: c.timeout,
            probe_of: 0,
            meta: Meta::new(slot, fine)
                .with_hang(hang)
                .with_extra(adaptive.is_some() || breaker.is_some()),
            breaker,
            adaptive,
        }
    }

    /// Gives the permit its breaker call. With [`attach_probe`](Self::attach_probe)
    /// and the governed entry's constructor, the only writers of the fields that
    /// [`Meta::EXTRA`] stands for, so the bit always follows them.
    #[inline]
    fn attach_breaker(&mut self, call: BreakerCall) {
        self.breaker = Some(call);
        self.meta = self.meta.with_extra(true);
    }

    /// Makes the permit the probe of the delay period ending at `until`.
    #[inline]
    fn attach_probe(&mut self, until: u64) {
        self.probe_of = until;
        self.meta = self.meta.with_extra(true);
    }

    #[inline]
    fn untracked(point: &'static Point) -> Permit {
        Permit {
            point,
            start: 0,
            timeout: 0,
            probe_of: 0,
            meta: Meta::new(Slot::None, false),
            breaker: None,
            adaptive: None,
        }
    }

    /// The point this permit belongs to.
    pub fn point(&self) -> &'static Point {
        self.point
    }

    /// Records that the call finished; `exception` says whether it failed.
    #[inline(always)]
    pub fn finish(self, exception: bool) {
        let mut this = ManuallyDrop::new(self);
        this.complete(Outcome::of(exception));
    }

    /// Records that the call panicked (counted as an exception).
    pub fn panicked(self) {
        self.finish(true);
    }

    /// [`finish`](Self::finish) for a call that [`Point::enter_in`] admitted on `point`,
    /// its permit completed where it is; the slot is left empty. An empty slot is an
    /// untracked call: only an exception is counted.
    #[inline(always)]
    pub(crate) fn finish_in(point: &'static Point, slot: &mut Option<Permit>, exception: bool) {
        match slot {
            Some(permit) => permit.complete(Outcome::of(exception)),
            None if exception => point.count_exception(),
            None => {}
        }
        std::mem::forget(slot.take());
    }

    /// Records the outcome. Calls without policy or breaker, and calls under a policy
    /// alone (no breaker, adaptive limit or delay probe), are settled here, in line at
    /// every call site; the others in [`complete_tracked`](Self::complete_tracked).
    #[inline(always)]
    fn complete(&mut self, outcome: Outcome) {
        debug_assert_eq!(
            self.meta.extra(),
            self.breaker.is_some() || self.adaptive.is_some() || self.probe_of != 0,
            "the extra bit follows the permit's fields"
        );
        let meta = self.meta.bits();
        if meta & (Meta::SLOT_MASK | Meta::EXTRA) == 0 {
            // Without policy or breaker only an exception is counted.
            if outcome == Outcome::Exception {
                self.point.count_exception();
            }
            return;
        }
        if meta & Meta::EXTRA == 0 {
            let _ = self.settle(outcome);
            self.point.flow.release(self.meta.slot());
            return;
        }
        self.complete_tracked(outcome);
    }

    /// The rest of [`complete`](Self::complete), out of line.
    #[inline(never)]
    fn complete_tracked(&mut self, outcome: Outcome) {
        if self.meta.slot() != Slot::None {
            return self.complete_slow(outcome);
        }
        match self.breaker {
            None => {}
            // An untimed call of a breaker-only point: one counter of the breaker.
            Some(BreakerCall { slot, word: 0 }) if outcome != Outcome::Cancelled => {
                match &slot.imp {
                    BreakerImpl::Sre(b) => {
                        b.record_admitted(sre_outcome(outcome == Outcome::Exception))
                    }
                    BreakerImpl::Classic(_) => return self.complete_slow(outcome),
                }
            }
            Some(_) => return self.complete_slow(outcome),
        }
        if outcome == Outcome::Exception {
            self.point
                .counters
                .exceptions
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts the exception, measures the call, frees its hung-call slot and counts a
    /// timeout; returns whether the call failed (exception or timeout) and how long it
    /// took (in the unit of `start`; 0 when not measured).
    #[inline]
    fn settle(&self, outcome: Outcome) -> (bool, u64) {
        let p = self.point;
        let mut failed = outcome == Outcome::Exception;
        if failed {
            p.counters.exceptions.fetch_add(1, Ordering::Relaxed);
        }
        let elapsed = if self.start != 0 && outcome != Outcome::Cancelled {
            let end = if self.meta.fine() {
                p.clock.ticks()
            } else {
                p.clock.now()
            };
            end.saturating_sub(self.start)
        } else {
            0
        };
        let late = self.timeout != 0 && elapsed > self.timeout;
        let hang = self.meta.hang();
        let swept = hang != NO_HANG
            && p.hang
                .get()
                .is_some_and(|t| t.unregister(hang, late || outcome == Outcome::Cancelled));
        if swept {
            // A sweep saw it hang and counted the timeout already.
            failed = true;
        } else if late {
            p.counters.timeouts.fetch_add(1, Ordering::Relaxed);
            failed = true;
        }
        (failed, elapsed)
    }

    fn complete_slow(&mut self, outcome: Outcome) {
        let p = self.point;
        let (failed, elapsed) = self.settle(outcome);
        if let Some(call) = self.breaker.take() {
            p.breaker_outcome(call, outcome, failed, elapsed, self.meta.fine());
        }
        // A latency sample only from calls that completed well; failures and
        // cancellations just leave the flight.
        if let Some(a) = self.adaptive.take() {
            a.end(outcome == Outcome::Ok && !failed);
        }
        if self.meta.slot() == Slot::None {
            return;
        }
        if self.probe_of != 0 {
            let now = p.clock.now();
            // Only act on the delay period this probe belongs to.
            if p.delay_until.load(Ordering::Acquire) == self.probe_of {
                match outcome {
                    Outcome::Ok if !failed => {
                        // A succeeding probe ends the delay early (SDS never does).
                        let _ = p.delay_until.compare_exchange(
                            self.probe_of,
                            0,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                    }
                    Outcome::Cancelled => p.next_probe.store(now, Ordering::Release),
                    _ => {
                        let retry_ns = p.cfg.load().retry_ns;
                        p.next_probe
                            .store(now.saturating_add(retry_ns), Ordering::Release)
                    }
                }
            }
        }
        p.flow.release(self.meta.slot());
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // Dropped without `finish`: a cancelled call.
        self.complete(Outcome::Cancelled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `check` on `cases` random settings; it returns `None` when the policy
    /// refuses the setting, else whether the point took it up. Fails on the first
    /// setting accepted but not taken up, and unless both kinds make a tenth of cases.
    fn for_accepted<S>(cases: u32, settings: S, check: impl Fn(S::Value) -> Option<bool>)
    where
        S: proptest::strategy::Strategy,
        S::Value: Clone,
    {
        use proptest::test_runner::{Config, TestCaseError, TestRunner};
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let accepted = std::cell::Cell::new(0);
        runner
            .run(&settings, |setting| match check(setting.clone()) {
                None => Ok(()),
                Some(true) => {
                    accepted.set(accepted.get() + 1);
                    Ok(())
                }
                Some(false) => Err(TestCaseError::fail(format!(
                    "accepted, but not taken up: {setting:?}"
                ))),
            })
            .unwrap();
        let accepted = accepted.get();
        assert!(
            accepted >= cases / 10 && cases - accepted >= cases / 10,
            "{accepted} of {cases} accepted"
        );
    }

    /// The in-place protocol of the generated code: an admitted call's permit is in
    /// its slot until it is finished there (slot empty, slot of the limit back); a
    /// downgraded call leaves the slot empty; a filled slot dropped is a cancelled call.
    #[test]
    fn permits_written_in_place_are_completed_in_place() {
        let (_manual, registry) = manual_registry();
        let point = registry.point("in_place").unwrap();
        registry
            .set_policy(
                "in_place",
                Policy::builder()
                    .max_concurrency(1)
                    .timeouts(Duration::from_secs(60), 100)
                    .build()
                    .unwrap(),
            )
            .unwrap();

        let mut first = None;
        assert!(point.enter_in(&mut first).is_ok());
        assert!(first.is_some(), "an admitted call's permit is in its slot");
        assert_eq!(point.stats().concurrency, 1);

        let mut second = None;
        let refused = point.enter_in(&mut second).unwrap_err();
        assert_eq!(refused.reason(), Reason::Concurrency);
        assert!(second.is_none(), "a downgraded call leaves its slot empty");

        Permit::finish_in(point, &mut first, true);
        assert!(first.is_none(), "a finished permit leaves its slot");
        let stats = point.stats();
        assert_eq!(stats.concurrency, 0, "the slot of the limit is back");
        assert_eq!(stats.totals.exceptions, 1);
        assert_eq!(stats.totals.passes, 1);
        assert_eq!(stats.totals.downgrades, 1);

        // Dropped while filled (a future dropped mid-flight): cancelled, nothing counted.
        let mut third = None;
        assert!(point.enter_in(&mut third).is_ok());
        drop(third);
        let stats = point.stats();
        assert_eq!(stats.concurrency, 0);
        assert_eq!(
            stats.totals.exceptions, 1,
            "a cancelled call is no exception"
        );

        // Without a policy the call is untracked: admitted with its slot left empty,
        // and finishing it counts exceptions only.
        registry.clear_policy("in_place").unwrap();
        let mut fourth = None;
        assert!(point.enter_in(&mut fourth).is_ok());
        assert!(fourth.is_none(), "nothing to complete, nothing written");
        Permit::finish_in(point, &mut fourth, true);
        assert!(fourth.is_none());
        let mut fifth = None;
        assert!(point.enter_in(&mut fifth).is_ok());
        Permit::finish_in(point, &mut fifth, false);
        let stats = point.stats();
        assert_eq!(
            stats.totals.exceptions, 2,
            "the untracked exception, and only it"
        );
        assert_eq!(
            stats.totals.passes, 4,
            "first, third (cancelled), fourth and fifth"
        );
        assert_eq!(stats.concurrency, 0);
        // The public API still hands out a permit, which counts the same way.
        point.enter().unwrap().finish(true);
        assert_eq!(point.stats().totals.exceptions, 3);
    }

    /// A registry of its own on a manual clock.
    fn manual_registry() -> (crate::ManualClock, &'static crate::Registry) {
        let manual = crate::ManualClock::new();
        let registry = Box::leak(Box::new(crate::Registry::with_clock(Clock::manual(
            &manual,
        ))));
        (manual, registry)
    }

    /// Every adaptive limit that `Policy::build` accepts starts its limiter: the point
    /// never runs without a limit its policy names.
    #[test]
    fn every_adaptive_limit_a_policy_accepts_starts_its_limiter() {
        use crate::adaptive::{AdaptiveConfig, GradientConfig};
        use proptest::prelude::*;
        let (_manual, registry) = manual_registry();
        let point = registry.point("adaptive.accepted").unwrap();
        // Mostly plausible values, sometimes edges and nonsense.
        let real = || {
            prop_oneof![
                6 => 0.01..0.99f64,
                2 => 1.0..100.0f64,
                1 => prop_oneof![
                    Just(f64::NAN),
                    Just(f64::INFINITY),
                    Just(-1.0),
                    Just(0.0),
                    Just(1.0),
                ],
            ]
        };
        let span = || {
            prop_oneof![
                4 => (1u64..10_000).prop_map(Duration::from_millis),
                1 => (0u32..45).prop_map(|shift| Duration::from_nanos((1u64 << shift) - 1)),
            ]
        };
        let limits = (0u32..2_000, 0u32..2_000, 0u32..2_000, any::<bool>()).prop_map(
            |(a, b, c, ordered)| {
                let mut v = [a, b, c];
                if ordered {
                    v.sort_unstable();
                }
                v
            },
        );
        let gradient = (
            (limits, real(), real(), real()),
            (0u32..2_000, span(), 0u32..100),
        )
            .prop_map(
                |(([min, initial, max], smoothing, tolerance, queue), (long, sample, samples))| {
                    AdaptiveLimit::Gradient(GradientConfig {
                        initial_limit: initial,
                        min_limit: min,
                        max_limit: max,
                        smoothing,
                        rtt_tolerance: tolerance,
                        queue_size: queue,
                        long_window: long,
                        sample_window: sample,
                        min_samples: samples,
                    })
                },
            );
        let shedder = (
            (span(), 0u32..2_000, 0u64..1_100),
            (span(), span(), real(), real()),
        )
            .prop_map(
                |((window, buckets, cpu), (cool_off, min_rt, beta, factor))| {
                    AdaptiveLimit::Shedder(AdaptiveConfig {
                        window,
                        buckets,
                        cpu_threshold: cpu,
                        cool_off,
                        default_min_rt: min_rt,
                        flying_beta: beta,
                        min_overload_factor: factor,
                    })
                },
            );
        for_accepted(500, prop_oneof![gradient, shedder], |limit| {
            let policy = Policy::builder().adaptive(limit).build().ok()?;
            registry.set_policy("adaptive.accepted", policy).unwrap();
            Some(point.cfg.load().adaptive.is_some())
        });
    }

    /// Every cluster limit that `Policy::build` accepts starts its lease: the point
    /// never runs without a limit its policy names (as it did when the policy let
    /// through a batch larger than the burst, or a period under a millisecond).
    #[cfg(feature = "redis")]
    #[test]
    fn every_cluster_limit_a_policy_accepts_starts_its_lease() {
        use crate::ClusterLimit;
        use proptest::prelude::*;
        let (manual, registry) = manual_registry();
        let point = registry.point("cluster.accepted").unwrap();
        // Nothing listens there: a lease starts all the same (in fallback).
        let url = "redis://127.0.0.1:1/";
        // Durations around both ends of the range: sub-millisecond up to 20 years.
        let period = (0u32..64, 0u64..4).prop_map(|(shift, extra)| {
            Duration::from_nanos(
                (1u64 << shift)
                    .saturating_add(extra)
                    .min(20 * 365 * 86_400 * 1_000_000_000),
            )
        });
        let rate = prop_oneof![
            Just(f64::NAN),
            Just(0.0),
            Just(1e-9),
            0.001..1e9f64,
            Just(f64::INFINITY)
        ];
        let limit = prop_oneof![
            (period, 0u64..4, 0u64..6).prop_map(move |(period, quota, batch)| {
                ClusterLimit::Visits {
                    url: url.into(),
                    key: "k".into(),
                    period,
                    quota,
                    batch,
                }
            }),
            (rate, 0u64..6, 0u64..8).prop_map(move |(rate, burst, batch)| {
                ClusterLimit::TokenBucket {
                    url: url.into(),
                    key: "k".into(),
                    rate,
                    burst,
                    batch,
                }
            }),
        ];
        for_accepted(200, limit, |limit| {
            let policy = Policy::builder().cluster(limit).build().ok()?;
            registry.set_policy("cluster.accepted", policy).unwrap();
            let started = point.cfg.load().cluster.is_some();
            // Stop the lease before the next case.
            registry.clear_policy("cluster.accepted").unwrap();
            manual.advance(CLUSTER_GRACE);
            point.stop_retired_leases();
            Some(started)
        });
    }

    #[cfg(feature = "redis")]
    #[test]
    fn replaced_cluster_slots_stay_allocated_and_their_leases_stop_after_the_grace() {
        use crate::ClusterLimit;
        let (manual, registry) = manual_registry();
        // Nothing listens there: the leases fall back to local limits, which is enough
        // for the bookkeeping under test.
        let policy = |key: &str| {
            Policy::builder()
                .cluster(ClusterLimit::Visits {
                    url: "redis://127.0.0.1:1/".into(),
                    key: key.into(),
                    period: Duration::from_secs(60),
                    quota: 5,
                    batch: 1,
                })
                .build()
                .unwrap()
        };
        registry.set_policy("cluster.slots", policy("a")).unwrap();
        let point = registry.point("cluster.slots").unwrap();
        let first = point.cfg.load().cluster.expect("started");

        registry.set_policy("cluster.slots", policy("b")).unwrap();
        let second = point.cfg.load().cluster.expect("started");
        assert!(second != first);
        {
            let c = point.clusters.lock().unwrap();
            assert_eq!(c.replaced.len(), 1);
            assert!(!c.replaced[0].1.lease.is_stopped(), "still in its grace");
        }

        // The chore that stops replaced leases looks again when the grace is over...
        assert_eq!(point.stop_retired_leases(), Some(CLUSTER_GRACE));
        manual.advance(CLUSTER_GRACE / 4);
        assert_eq!(point.stop_retired_leases(), Some(CLUSTER_GRACE * 3 / 4));
        assert!(!point.clusters.lock().unwrap().replaced[0]
            .1
            .lease
            .is_stopped());
        // ...and then stops them, without any change of the point.
        manual.advance(CLUSTER_GRACE * 3 / 4);
        assert_eq!(point.stop_retired_leases(), None);
        {
            let c = point.clusters.lock().unwrap();
            assert_eq!(c.replaced.len(), 1);
            assert!(c.replaced[0].1.lease.is_stopped());
            assert!(Leaked(c.replaced[0].1) == first);
        }
        // The same limit again changes nothing.
        registry.set_policy("cluster.slots", policy("b")).unwrap();
        assert!(point.cfg.load().cluster == Some(second));
        // A call that read the first policy long ago can still ask its slot.
        let _ = first.admits();

        // Every slot is counted in the point's memory.
        assert_eq!(point.cluster_slots(), 2);
        let bytes = point.memory_bytes();
        // Removing the limit retires the current slot in turn. A change after its
        // grace hands it to the chore (which the wheel may be running right now).
        registry.clear_policy("cluster.slots").unwrap();
        assert_eq!(point.memory_bytes(), bytes, "slots are kept, not freed");
        {
            let c = point.clusters.lock().unwrap();
            assert!(c.current.is_none());
            let stopped: Vec<bool> = c
                .replaced
                .iter()
                .map(|(_, s)| s.lease.is_stopped())
                .collect();
            assert_eq!(stopped, [true, false], "the second is in its grace");
        }
        manual.advance(CLUSTER_GRACE);
        registry.clear_policy("cluster.slots").unwrap();
        assert_eq!(point.stop_retired_leases(), None);
        let c = point.clusters.lock().unwrap();
        assert_eq!(c.replaced.len(), 2);
        assert!(c.replaced.iter().all(|(_, s)| s.lease.is_stopped()));
    }

    #[test]
    fn the_policy_cell_publishes_kept_forms_and_reuses_equal_ones() {
        let cell = PolicyCell::new();
        assert!(cell.get().is_none(), "a new point has no rules");
        assert_eq!(*cell.load(), EMPTY);
        let ring: &'static Ring = Box::leak(Box::new(Ring::new(1, 1, 0, [0; TRACKED])));
        let form = |visits: u64| Compiled {
            rules: ACTIVE | R_VISITS,
            max_visits: visits,
            ring: Some(Leaked(ring)),
            ..Compiled::default()
        };
        cell.store(form(5));
        let five = cell.get().expect("published");
        assert_eq!((five.rules, five.max_visits), (ACTIVE | R_VISITS, 5));
        assert!(std::ptr::eq(five.ring(), ring));
        // Another ring is another form, whatever the thresholds.
        let other: &'static Ring = Box::leak(Box::new(Ring::new(1, 1, 0, [0; TRACKED])));
        assert!(
            form(5)
                != Compiled {
                    ring: Some(Leaked(other)),
                    ..form(5)
                }
        );
        let bytes = cell.heap_bytes();
        assert!(bytes >= std::mem::size_of::<Compiled>(), "{bytes}");
        cell.store(form(6));
        let six = cell.get().unwrap();
        assert_eq!(six.max_visits, 6);
        // A reader that loaded the first form still reads it, unchanged.
        assert_eq!(five.max_visits, 5);
        // Toggling back reuses the kept form instead of keeping another.
        cell.store(form(5));
        assert!(std::ptr::eq(cell.get().unwrap(), five));
        assert_eq!(cell.kept.lock().unwrap().len(), 2);
        // Without rules the cell reads empty, and nothing more is kept.
        cell.store(Compiled::default());
        assert!(cell.get().is_none());
        assert_eq!(cell.kept.lock().unwrap().len(), 2);
        assert!(
            std::mem::size_of::<Compiled>() <= 144,
            "README: a kept form is about 140 bytes"
        );
    }

    #[test]
    fn permit_meta_round_trips_every_field() {
        for slot in [Slot::None, Slot::Word, Slot::Spill] {
            for fine in [false, true] {
                for hang in [0, 7, 511, NO_HANG] {
                    let m = Meta::new(slot, fine).with_hang(hang);
                    assert_eq!((m.slot(), m.fine(), m.hang()), (slot, fine, hang));
                    let m = m.with_slot(Slot::Word).with_fine(!fine);
                    assert_eq!((m.slot(), m.fine(), m.hang()), (Slot::Word, !fine, hang));
                }
            }
        }
        assert_eq!(Meta::new(Slot::None, false).hang(), NO_HANG);
    }

    /// README: thresholds of 200 ms and more are measured on the timeline, shorter
    /// ones (or a short burst span, or a short slow-call limit) on the tick counter.
    #[test]
    fn the_duration_unit_follows_the_shortest_threshold() {
        let clock = Clock::system();
        let fine = |p: Policy, slow: Option<Duration>| {
            let slot = slow.map(|d| BreakerSlot {
                imp: BreakerImpl::Sre(SreBreaker::new(Default::default(), 1).unwrap()),
                slow_ns: Some(nanos(d)),
                slow_ticks: Some(clock.ns_to_ticks(nanos(d))),
            });
            Compiled::needs_ticks(Some(&p), slot.as_ref())
        };
        let ms = Duration::from_millis;
        let timeouts = |t| Policy::builder().timeouts(t, 1).build().unwrap();
        let tokens = |rate, capacity| {
            Policy::builder()
                .token_bucket(rate, capacity)
                .build()
                .unwrap()
        };
        assert!(!fine(timeouts(ms(200)), None));
        assert!(fine(timeouts(ms(199)), None));
        assert!(!fine(tokens(1000.0, 200), None), "a 200 ms burst span");
        assert!(fine(tokens(1000.0, 199), None));
        assert!(!fine(timeouts(ms(500)), Some(ms(300))));
        assert!(
            fine(timeouts(ms(500)), Some(ms(50))),
            "a short slow-call limit"
        );
        // The thresholds are compiled in the chosen unit.
        let p = timeouts(ms(300));
        let ring: &'static Ring = Box::leak(Box::new(Ring::new(1, 1, 0, [0; TRACKED])));
        let compile = |p: &Policy| {
            let parts = Parts {
                ring: Some(ring),
                ..Parts::default()
            };
            Compiled::new(Some(p), parts, Compiled::needs_ticks(Some(p), None), &clock)
        };
        let c = compile(&p);
        assert_eq!(c.timeout, 300_000_000);
        let p = timeouts(ms(30));
        let c = compile(&p);
        assert_eq!(c.timeout, clock.ns_to_ticks(30_000_000));
    }

    #[test]
    fn a_permit_is_nine_words_and_its_result_no_larger() {
        assert_eq!(std::mem::size_of::<Permit>(), 72);
        assert_eq!(std::mem::size_of::<Result<Permit, Downgraded>>(), 72);
    }
}
