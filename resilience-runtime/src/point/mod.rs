//! Points: the per-name state of the registry and the guard API around a call.
//!
//! A [`Point`] owns the cumulative counters, the sliding window, the concurrency count,
//! the token bucket, the delay state and the current policy of one point name. A policy
//! is compiled into an immutable form behind one pointer, so reading it costs one load
//! and a policy change never resets any of the state next to it.
//!
//! # Folders
//!
//! - [`state`]: the atomic words and the pure decisions beside them, each a small
//!   protocol with its guarantee stated: `flow` (passes and calls in flight in one
//!   word: the visits and concurrency limits), `delay` (the delay's end and its
//!   probe), `hang` (hung-call slots), `arming`, `chunks`, `durations`, `cell` (a
//!   compiled form's publication) and `tally` (per-thread counts). `resilience-loom`
//!   model-checks these files; the token bucket is in [`crate::limit`], the window in
//!   `crate::window`.
//! - [`form`]: a policy compiled for the hot path and the slots it names (`compiled`,
//!   `slots`, `configure`), the `keys` section's forms (`keys`) and the limits shared
//!   beyond the process (`shared`, `key_leases`), plugged in through a trait the
//!   engine owns.
//! - [`admit`]: admission and completion. `enter` runs the stages a policy on the flow
//!   word has, `lean` those of a policy without it; both answer with an
//!   `attempt::Entry` (admitted, refused, or wait for a token or in the `queue`), and
//!   `taken` gives back what a call took when a later stage stops it. `health` decides
//!   the health rules, `permit` and `pending` complete a call (a permit boxes the
//!   records of the stages only some policies use in `extras`, from `spares`), `report`
//!   counts and tells refusals and breaker changes; `call`, `key_entry` and `breaker_wait` are the
//!   manual entries, `force` the states forced by tests.
//! - [`observe`]: the 10 s cycle and the hung-call sweep (`cycle`), the per-second
//!   series (`seconds`), statistics and memory (`snapshot`), the background timers
//!   (`chores`) and the freeing of idle histories (`expiry`). A point's background work
//!   stops once it has nothing left to do: an idle point holds no timer.
//! - [`retry`]: the point's retry section (`retry_settings`), `Point::call_retrying`
//!   (`retrying`, `retrying_async`) and hedged attempts (`hedging`).
//!
//! No file is part of an import circle, and none names a feature folder (`redis`,
//! `tower`, `heartbeat`, `config`, `metrics`, `testing`): the workspace's `checks`
//! crate tests both.
//!
//! # Slots and their lifetimes
//!
//! A point lives in an `Arc` its registry holds: it is freed when the registry is
//! dropped (or the point [retired](crate::Registry::retire)) and no handle of it is
//! left. Every borrow the engine hands out is bound to the point: a [`Permit`] and an
//! async call's wait borrow it, so no call outlives it. Background work holds it
//! weakly: the timers of its chores and the hooks of a manual clock upgrade a `Weak`
//! before they touch it, and skip a point that is gone; dropping a point removes its
//! timers.
//!
//! Every slot a compiled form names (window ring, token bucket, breaker, adaptive
//! limiter, cluster lease) and every compiled form is leaked when made and kept by the
//! point until the point is dropped: a call that read an older form may still use it,
//! however long ago it read it. Forms and slots are reused for an equal setting, so a
//! point holds one per distinct setting it has had, not one per change. Inside the
//! point they are `&'static` references, valid while the point lives, never stored
//! anywhere that outlives a borrow of it; the point's settings list each once and
//! free them (`util::reclaim`) when it is dropped. Besides that, the only `unsafe` in
//! the engine is the pointer load of [`cell`] and the per-thread cells of [`tally`],
//! each with its SAFETY comment.

pub(crate) mod admit;
pub(crate) mod form;
pub(crate) mod observe;
pub(crate) mod retry;
pub(crate) mod state;

#[cfg(feature = "testing")]
pub use admit::force::ForceError;
#[cfg(test)]
mod tests;

use crate::sync::Recover;
use form::compiled::{Compiled, EMPTY};
#[cfg(feature = "redis")]
use form::slots::Clusters;
use form::slots::{AdaptiveSlot, BreakerSlot, Buckets};
use state::cell::PolicyCell;
use state::delay::Delay;

use crate::clock::Clock;
use crate::error::Reason;
use crate::listener::Dispatcher;
use crate::policy::{BreakerPolicy, Policy};
use crate::stats::ReasonCounts;
use crate::sync::{Arc, Mutex};
use crate::sync::{AtomicU64, Ordering};
use crate::window::{self, Ring, TRACKED};
#[cfg(feature = "tokio")]
pub(crate) use retry::hedging::run_hedged;
use state::flow::Flow;
use state::hang::HangTable;
use std::fmt;

const REASONS: usize = Reason::ALL.len();

/// Length of a statistics cycle ([`crate::CYCLE`]), in nanoseconds.
pub(crate) const CYCLE_NS: u64 = crate::CYCLE.as_nanos() as u64;

#[derive(Debug)]
struct Counters {
    downgrades: AtomicU64,
    exceptions: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
    /// Downgrades and shadow downgrades per reason and the retry counters, made by
    /// the first downgrade or retrying call: a point that has neither does not hold
    /// them.
    by_reason: crate::sync::OnceLock<Box<ReasonCells>>,
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
        t[window::CANCELLED] = self.cancelled.load(Ordering::Relaxed);
        t
    }

    fn reasons(&self) -> ReasonCounts {
        self.by_reason
            .get()
            .map_or_else(ReasonCounts::default, |c| load_all(&c.downgrades))
    }

    /// Shadow (dry-run) policies: calls that would have been downgraded, per reason.
    fn shadow_reasons(&self) -> ReasonCounts {
        self.by_reason
            .get()
            .map_or_else(ReasonCounts::default, |c| load_all(&c.shadow))
    }

    /// The per-reason cells, made on first use.
    #[inline]
    fn reason_cells(&self) -> &ReasonCells {
        self.by_reason.get_or_init(|| {
            Box::new(ReasonCells {
                downgrades: std::array::from_fn(|_| AtomicU64::new(0)),
                shadow: std::array::from_fn(|_| AtomicU64::new(0)),
                retry: std::array::from_fn(|_| AtomicU64::new(0)),
            })
        })
    }
}

/// Downgrades per reason, real and shadow, and the retry counters.
#[derive(Debug)]
struct ReasonCells {
    downgrades: [AtomicU64; REASONS],
    shadow: [AtomicU64; REASONS],
    /// `retry::RetryStats` fields, in their order (see `call`).
    retry: [AtomicU64; 7],
}

fn load_all(cells: &[AtomicU64; REASONS]) -> ReasonCounts {
    ReasonCounts(cells.each_ref().map(|a| a.load(Ordering::Relaxed)))
}

/// What a point is configured with: the writer side of its [`PolicyCell`], and every
/// slot its settings have made (kept here, under the same lock: only configuration
/// touches them, so a point never configured holds none of it).
#[derive(Debug, Default)]
struct Settings {
    policy: Option<Policy>,
    /// Boxed: most points have none, and it is half the size of a policy.
    breaker: Option<Box<BreakerPolicy>>,
    /// The token buckets (see [`Buckets`]).
    buckets: Buckets,
    /// Every breaker this point has had, leaked (never moved, freed with the point: a
    /// call may still hold a replaced one); the current one is in `cfg`.
    breakers: Vec<&'static BreakerSlot>,
    /// Every adaptive limiter this point has had, leaked like the breakers; the
    /// current one is in `cfg`.
    adaptives: Vec<&'static AdaptiveSlot>,
    #[cfg(feature = "redis")]
    clusters: Clusters,
    /// Every window ring this point has had, the one in use last. Rings are leaked,
    /// never moved, freed with the point (and reused for an equal geometry), because a concurrent
    /// reader may still hold a replaced one.
    rings: Vec<&'static Ring>,
    /// The retry sections this point has had (see `retry_settings`).
    retry_forms: retry::retry_settings::RetryForms,
    /// The `keys` sections this point has had, their tables and override cells.
    keys: form::keys::KeyForms,
    /// Every compiled form `cfg` has published.
    forms: state::cell::Kept<Compiled>,
    /// A refusal forced on every call (the `testing` module's), over the policy.
    forced: Option<Reason>,
}

impl Drop for Settings {
    /// Frees every slot the point's settings made: the point is being dropped, so no
    /// call, permit or chore of it is left (see "Slots and their lifetimes").
    fn drop(&mut self) {
        let Settings {
            buckets,
            breakers,
            adaptives,
            #[cfg(feature = "redis")]
            clusters,
            rings,
            ..
        } = self;
        // SAFETY: every slot below came from `Box::leak` in `configure`, is listed
        // once (the last bucket is also in `kept`, so only `kept` is walked), and the
        // point that could reach it is being dropped.
        unsafe {
            buckets.kept.drain(..).for_each(|s| crate::util::reclaim(s));
            breakers.drain(..).for_each(|s| crate::util::reclaim(s));
            adaptives.drain(..).for_each(|s| crate::util::reclaim(s));
            rings.drain(..).for_each(|s| crate::util::reclaim(s));
            #[cfg(feature = "redis")]
            {
                clusters
                    .current
                    .take()
                    .into_iter()
                    .for_each(|s| crate::util::reclaim(s));
                clusters
                    .replaced
                    .drain(..)
                    .for_each(|(_, s)| crate::util::reclaim(s));
            }
        }
    }
}

#[derive(Debug, Default)]
struct CycleState {
    /// The last closed cycle's id and the most calls in flight during it.
    last_peak: (u64, u64),
}

/// The per-name state of the registry and the handle the macros call into.
///
/// Get one with [`Registry::point`](crate::Registry::point), a borrow as long-lived as
/// its registry (`&'static` from [`registry()`](crate::registry)), or as a shared
/// handle with [`Registry::point_handle`](crate::Registry::point_handle). Points are
/// created on first use and freed with their registry (or when retired, see
/// [`Registry::retire`](crate::Registry::retire)) once no handle is left.
// The fields are in declared order (`repr(C)`), so that the word every call writes
// (`flow`'s) shares its cache line only with fields no successful call touches:
// `counters` before it, the locks after it. The point is not aligned to a line (see
// `Flow`), so its neighbours on either side take at least 56 bytes.
#[repr(C)]
pub struct Point {
    // Read by every call.
    name: &'static str,
    clock: Clock,
    events: Arc<Dispatcher>,
    cfg: PolicyCell<Compiled>,
    /// Calls without a policy are counted per thread under this key (`state::tally::key`).
    id: u32,
    /// Whether a call ever entered the point (set by the first, with the sampler).
    entered: crate::sync::atomic::AtomicBool,
    /// Whether a breaker setting exists (possibly `Disabled`).
    breaker_set: crate::sync::atomic::AtomicBool,
    /// The state of the hung-call sweep.
    sweeping: state::arming::Arming,
    /// The state of the per-second sampler.
    sampling: state::arming::Arming,
    peak: AtomicU64,
    cycle_peak: AtomicU64,
    cycle_id: AtomicU64,
    /// Timeline reading at which the next second begins (saves a division per call):
    /// the first call past it closes the second, and at a cycle's end the cycle.
    next_second_at: AtomicU64,
    /// The delay rule's state.
    delay: Delay,
    /// The retry section in force (see `retry_settings`).
    retry: retry::retry_settings::RetryCell,
    /// In-flight timed calls, created by the first timed call.
    hang: state::chunks::OnceBox<HangTable>,
    /// Durations of the calls, created by the first measured one that ends.
    durations: crate::sync::OnceLock<state::durations::Durations>,
    // Written by failed calls only: ahead of the flow word.
    counters: Counters,
    /// Visits and calls in flight of calls under a policy.
    flow: Flow,
    // Touched by writers of the settings and once a second: after the flow word.
    /// The policy and breaker as given, the slots they made, and the writer lock of
    /// `cfg`.
    settings: Mutex<Option<Box<Settings>>>,
    cycle: Mutex<Option<Box<CycleState>>>,
    /// The per-second series, made by the first sample.
    seconds: Mutex<Option<Box<observe::seconds::Series>>>,
    /// The concurrency rule's waiters, made by the first call that waits.
    queue: crate::sync::OnceLock<Box<admit::queue::WaitQueue>>,
    /// The point itself, for the chores it arms (they hold it weakly).
    me: crate::sync::Weak<Point>,
    /// Whether the registry handed out a borrow of the point (`Registry::point`):
    /// such a point is never retired. Written under its map entry's lock.
    pub(crate) pinned: crate::sync::atomic::AtomicBool,
    /// Whether the sampler's hook is registered with a manual clock (it leaves when
    /// the sampler stops).
    sampler_hooked: crate::sync::atomic::AtomicBool,
}

impl Drop for Point {
    /// Removes the point's timers from the wheel and its entry from the `expiry`
    /// queue at once (they would skip a dropped point anyway, but keep its memory
    /// until then); its settings then free its slots.
    fn drop(&mut self) {
        self.leave_expiry();
        observe::chores::cancel(
            self,
            &[
                observe::chores::Chore::SweepHungCalls,
                observe::chores::Chore::SampleSeconds,
                #[cfg(feature = "redis")]
                observe::chores::Chore::StopRetiredLeases,
            ],
        );
    }
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
    /// A point that `me` (from [`Arc::new_cyclic`]) will hold.
    pub(crate) fn new(
        name: &'static str,
        clock: Clock,
        events: Arc<Dispatcher>,
        me: crate::sync::Weak<Point>,
    ) -> Point {
        Point {
            name,
            me,
            pinned: crate::sync::atomic::AtomicBool::new(false),
            clock,
            events,
            cfg: PolicyCell::new(),
            flow: Flow::new(),
            id: {
                static NEXT_ID: crate::sync::atomic::AtomicU32 =
                    crate::sync::atomic::AtomicU32::new(0);
                state::tally::key(NEXT_ID.fetch_add(1, Ordering::Relaxed))
            },
            counters: Counters {
                downgrades: AtomicU64::new(0),
                exceptions: AtomicU64::new(0),
                timeouts: AtomicU64::new(0),
                cancelled: AtomicU64::new(0),
                by_reason: crate::sync::OnceLock::new(),
                dropped_events: AtomicU64::new(0),
                breaker_transitions: AtomicU64::new(0),
            },
            peak: AtomicU64::new(0),
            cycle_peak: AtomicU64::new(0),
            cycle_id: AtomicU64::new(0),
            next_second_at: AtomicU64::new(0),
            cycle: Mutex::new(None),
            delay: Delay::new(),
            settings: Mutex::new(None),
            breaker_set: crate::sync::atomic::AtomicBool::new(false),
            sweeping: state::arming::Arming::new(),
            sampling: state::arming::Arming::new(),
            entered: crate::sync::atomic::AtomicBool::new(false),
            sampler_hooked: crate::sync::atomic::AtomicBool::new(false),
            seconds: Mutex::new(None),
            retry: retry::retry_settings::RetryCell::new(std::ptr::null_mut()),
            queue: crate::sync::OnceLock::new(),
            hang: state::chunks::OnceBox::new(),
            durations: crate::sync::OnceLock::new(),
        }
    }

    /// The point as the owner of a chore: chores hold it weakly.
    fn owner(&self) -> observe::chores::Owner {
        self.me.clone()
    }

    /// The compiled form in force ([`EMPTY`] for a point without rules and breaker).
    #[inline]
    fn compiled(&self) -> &'static Compiled {
        self.cfg.get().unwrap_or(&EMPTY)
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
        self.settings().breaker.as_deref().copied()
    }

    /// The deadline the policy in force sets for calls of an `async fn` with
    /// `timeout = "..."` ([`PolicyBuilder::call_timeout`](crate::PolicyBuilder::call_timeout)),
    /// if any: such a call uses it instead of the attribute's duration. Read from the
    /// compiled policy, one load and no lock, so every call can ask.
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    /// use std::time::Duration;
    ///
    /// let point = registry().point("docs.call_timeout")?;
    /// assert_eq!(point.call_timeout(), None);
    /// let policy = Policy::builder().call_timeout(Duration::from_millis(150)).build()?;
    /// registry().set_policy("docs.call_timeout", policy)?;
    /// assert_eq!(point.call_timeout(), Some(Duration::from_millis(150)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn call_timeout(&self) -> Option<std::time::Duration> {
        match self.compiled().call_timeout_ns {
            0 => None,
            ns => Some(std::time::Duration::from_nanos(ns)),
        }
    }

    /// [`call_timeout`](Self::call_timeout) in nanoseconds, 0 without one.
    #[cfg(feature = "tower")]
    #[inline]
    pub(crate) fn call_timeout_ns(&self) -> u64 {
        self.compiled().call_timeout_ns
    }

    fn settings(&self) -> SettingsGuard<'_> {
        SettingsGuard(self.settings.lock().recover())
    }
}

/// The settings of a point, locked: read as empty until the first write makes them
/// (a point that is never configured does not hold them).
struct SettingsGuard<'a>(crate::sync::MutexGuard<'a, Option<Box<Settings>>>);

static NO_SETTINGS: Settings = Settings {
    policy: None,
    breaker: None,
    buckets: Buckets {
        last: None,
        kept: Vec::new(),
    },
    breakers: Vec::new(),
    adaptives: Vec::new(),
    #[cfg(feature = "redis")]
    clusters: Clusters {
        current: None,
        replaced: Vec::new(),
    },
    rings: Vec::new(),
    retry_forms: retry::retry_settings::RetryForms::EMPTY,
    keys: form::keys::KeyForms::EMPTY,
    forms: state::cell::Kept::new(),
    forced: None,
};

impl std::ops::Deref for SettingsGuard<'_> {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        self.0.as_deref().unwrap_or(&NO_SETTINGS)
    }
}

impl std::ops::DerefMut for SettingsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Settings {
        self.0.get_or_insert_with(Box::default)
    }
}
