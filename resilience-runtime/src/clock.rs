//! Time sources: the system clock used in production and a [`ManualClock`] for tests.
//!
//! The runtime reads two things from a [`Clock`]:
//!
//! - a **timeline** ([`Clock::now`]), an [`Instant`] (nanoseconds on `CLOCK_MONOTONIC`), cached
//!   process-wide and refreshed every millisecond by a background thread that only
//!   runs while the time is being read (reading it is one relaxed load). Windows,
//!   cycles, delays and breakers live on it, and so do durations and refill rates long
//!   enough for a millisecond not to matter (200 ms and more). The clock knows
//!   its wall-clock offset so cycles align to wall-clock 10 s like SDS.
//! - a **tick counter** (the CPU's time-stamp counter through `quanta`), used only to
//!   measure call durations and to refill token buckets where a millisecond is too
//!   coarse. Ticks are never mixed with the timeline.
//!
//! On the machines we measured, `Instant::now()` costs ~24 ns, the coarse vDSO clock
//! ~6 ns, a tick ~10 ns and the cached timeline ~0.7 ns, against ~8 ns for an atomic
//! increment.

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Arc;
use crate::sync::Recover;
use crate::ticker;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) use crate::util::nanos;

/// A point in time on a [`Clock`]'s timeline (or on the timeline of the component
/// that gave it, such as [`AdaptiveLimiter::now`](crate::adaptive::AdaptiveLimiter::now)):
/// the time the components that take a `now` are told.
///
/// It is a count of nanoseconds from the timeline's origin, so it is `Copy`, ordered
/// and hashable, and comparable only with instants of the same timeline. The
/// difference of two instants is a [`Duration`] (zero when the right one is later,
/// as time on these clocks never goes back); adding or subtracting a [`Duration`]
/// saturates at the ends of the timeline.
///
/// ```
/// use resilience_runtime::{Clock, Instant, ManualClock};
/// use std::time::Duration;
///
/// let manual = ManualClock::new();
/// let clock = Clock::manual(&manual);
/// let t0 = clock.now();
/// manual.advance(Duration::from_millis(20));
/// let t1 = clock.now();
/// assert_eq!(t1 - t0, Duration::from_millis(20));
/// assert_eq!(t0 - t1, Duration::ZERO);
/// assert_eq!(t0.checked_duration_since(t1), None);
/// assert_eq!(t0 + Duration::from_millis(20), t1);
/// // For tests and interop only: the nanoseconds on the timeline.
/// assert_eq!(Instant::from_nanos(t1.as_nanos()), t1);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Instant(u64);

impl Instant {
    /// The instant `nanos` nanoseconds after the timeline's origin. For tests and
    /// interop (a reading stored elsewhere); code that runs reads [`Clock::now`].
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds from the timeline's origin. For tests and interop, like
    /// [`from_nanos`](Self::from_nanos).
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or `None` when `earlier` is later.
    pub fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// The time from `earlier` to `self`, zero when `earlier` is later (the same as
    /// `self - earlier`).
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` past the end of the timeline.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|d| self.0.checked_add(d))
            .map(Instant)
    }

    /// `self - d`, or `None` before the timeline's origin.
    pub fn checked_sub(self, d: Duration) -> Option<Instant> {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|d| self.0.checked_sub(d))
            .map(Instant)
    }
}

impl std::ops::Sub for Instant {
    type Output = Duration;
    /// The time from `rhs` to `self`, saturating at zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the end of the timeline.
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl std::ops::AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl std::ops::Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the timeline's origin.
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}

impl std::ops::SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, d: Duration) {
        *self = *self - d;
    }
}

/// Thresholds (call timeouts, slow-call limits, a token bucket's burst span) of at
/// least this many nanoseconds are measured on the cached timeline, whose ~1 ms
/// resolution is then under 1% of them; shorter ones on the tick counter.
pub(crate) const COARSE_ENOUGH_NS: u64 = 200_000_000;

/// A source of time for a [`Registry`](crate::Registry).
///
/// Cloning is cheap. The system clock reads the OS monotonic clock; a manual clock is
/// advanced by hand and makes every time-based rule deterministic in tests.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let manual = ManualClock::new();
/// let clock = Clock::manual(&manual);
/// let t0 = clock.now();
/// manual.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now() - t0, Duration::from_millis(1500));
/// ```
#[derive(Clone, Debug)]
pub struct Clock {
    // Shared: every point holds a clone of its registry's clock, so a pointer, not
    // the 56 bytes of the source.
    inner: std::sync::Arc<Source>,
    // Whether `inner` is the system clock: the one the hot path reads, decided
    // without following the pointer (the other sources are for tests).
    system: bool,
}

#[derive(Clone, Debug)]
enum Source {
    System {
        wall_offset_ns: u64,
        ticks: quanta::Clock,
        ticks_per_ns: f64,
    },
    Manual(ManualClock),
    /// tokio's clock (`tokio::time::Instant`) of one runtime, read with its handle
    /// entered: paused and advanced by the runtime in tests.
    #[cfg(feature = "tokio")]
    Tokio {
        handle: tokio::runtime::Handle,
        /// The instant the timeline's reading [`TOKIO_ORIGIN_NS`] stands for.
        base: tokio::time::Instant,
        wall_offset_ns: u64,
    },
}

/// The first reading of a tokio-backed timeline: one second, as a manual clock's,
/// so that `0` keeps meaning "unset" in the engine.
#[cfg(feature = "tokio")]
const TOKIO_ORIGIN_NS: u64 = 1_000_000_000;

impl Clock {
    /// The operating system's clocks.
    pub fn system() -> Self {
        // The wall-clock reading of timeline zero, so that `wall_nanos` can be derived
        // from one timeline reading without a second clock call.
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(nanos)
            .unwrap_or(0);
        let mono = ticker::precise_monotonic();
        let ticks = quanta::Clock::new();
        // `delta_as_nanos` is linear; sample it over a long span for the ratio.
        let span = 1u64 << 40;
        let ns = ticks.delta_as_nanos(0, span).max(1);
        Clock {
            system: true,
            inner: std::sync::Arc::new(Source::System {
                wall_offset_ns: wall.saturating_sub(mono),
                ticks,
                ticks_per_ns: span as f64 / ns as f64,
            }),
        }
    }

    /// A clock that reads the given [`ManualClock`] (clones share the reading). Its
    /// ticks are nanoseconds of the same reading.
    pub fn manual(clock: &ManualClock) -> Self {
        Clock {
            system: false,
            inner: std::sync::Arc::new(Source::Manual(clock.clone())),
        }
    }

    /// tokio's clock of the runtime `handle` (feature `tokio`): every rule of a
    /// registry on this clock (windows, buckets, breakers, delays, queues) reads the
    /// same time as `tokio::time`, which `timeout = "..."`, hedging and async retry
    /// backoffs wait on. Under a paused runtime (`#[tokio::test(start_paused = true)]`,
    /// tokio's `test-util` feature) the whole scenario then runs in virtual time: an
    /// idle runtime jumps to its next timer, so a test of a breaker's 30 s open wait
    /// or a retry's backoff sleeps no real time at all. See
    /// [`testing`](crate::testing) for a registry of a test's own.
    ///
    /// Reading it enters `handle`, so any thread may read it (the engine's timers
    /// too) and sees the runtime's time. Sync code that waits on this clock (a queue
    /// or a token wait of a sync call, `Clock::sleep`) waits in real time instead:
    /// use a [`ManualClock`] for sync code.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::Clock;
    /// use std::time::Duration;
    ///
    /// let rt = tokio::runtime::Builder::new_current_thread()
    ///     .enable_time()
    ///     .start_paused(true)
    ///     .build()?;
    /// rt.block_on(async {
    ///     let clock = Clock::tokio(&tokio::runtime::Handle::current());
    ///     let t0 = clock.now();
    ///     tokio::time::sleep(Duration::from_secs(3600)).await; // no real hour
    ///     assert_eq!(clock.now() - t0, Duration::from_secs(3600));
    /// });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub fn tokio(handle: &tokio::runtime::Handle) -> Self {
        let base = {
            let _entered = handle.enter();
            tokio::time::Instant::now()
        };
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(nanos)
            .unwrap_or(0);
        Clock {
            system: false,
            inner: std::sync::Arc::new(Source::Tokio {
                handle: handle.clone(),
                base,
                wall_offset_ns: wall.saturating_sub(TOKIO_ORIGIN_NS),
            }),
        }
    }

    /// With a manual clock, registers `hook` to run just before it moves (with the
    /// timeline reading it moves to) and returns `true`; with the system clock, does
    /// nothing and returns `false`. A hook that returns `false` (its point is gone)
    /// is dropped.
    pub(crate) fn before_move(&self, hook: impl Fn(u64) -> bool + Send + Sync + 'static) -> bool {
        match &*self.inner {
            Source::Manual(m) => {
                m.before_move.0.lock().recover().push(Box::new(hook));
                true
            }
            _ => false,
        }
    }

    /// With a manual clock, how many hooks run before it moves (0 for other clocks).
    #[cfg(test)]
    pub(crate) fn hooks_before_move(&self) -> usize {
        match &*self.inner {
            Source::Manual(m) => m.before_move.0.lock().recover().len(),
            _ => 0,
        }
    }

    /// With a manual clock, registers `hook` to run just after it moved (with the new
    /// reading) and returns `true`; with the system clock, does nothing and returns
    /// `false`. Waiters with a deadline on the clock use it to look at the time again.
    /// A hook that returns `false` is dropped.
    pub(crate) fn after_move(&self, hook: impl Fn(u64) -> bool + Send + Sync + 'static) -> bool {
        match &*self.inner {
            Source::Manual(m) => {
                m.after_move.0.lock().recover().push(Box::new(hook));
                true
            }
            _ => false,
        }
    }

    /// Whether this clock is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(*self.inner, Source::Manual(_))
    }

    /// Waits `d`: the thread sleeps on the system clock (and on tokio's, in real
    /// time: see [`Clock::tokio`]); a manual clock is advanced by `d` instead, so that code that waits (retry backoffs) runs instantly and
    /// deterministically in tests.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// let manual = ManualClock::new();
    /// let clock = Clock::manual(&manual);
    /// let t0 = clock.now();
    /// clock.sleep(Duration::from_millis(250));
    /// assert_eq!(clock.now() - t0, Duration::from_millis(250));
    /// ```
    pub fn sleep(&self, d: Duration) {
        match &*self.inner {
            Source::Manual(m) => m.advance(d),
            _ => std::thread::sleep(d),
        }
    }

    /// Waits `d` without blocking the thread (`tokio` feature): `tokio::time::sleep` on
    /// the system clock and tokio's (so it needs a tokio runtime with its time
    /// driver); a manual
    /// clock is advanced by `d` at once instead, like [`sleep`](Self::sleep).
    #[cfg(feature = "tokio")]
    pub async fn sleep_async(&self, d: Duration) {
        match &*self.inner {
            Source::Manual(m) => m.advance(d),
            _ => tokio::time::sleep(d).await,
        }
    }

    /// The current time on the timeline (monotonic; a resolution of about a
    /// millisecond for the system clock). Give it to the components that take a
    /// `now` ([`SreBreaker`](crate::breaker::SreBreaker),
    /// [`RollingWindow`](crate::rolling::RollingWindow), ...).
    #[inline]
    pub fn now(&self) -> Instant {
        Instant(self.now_ns())
    }

    /// The engine's reading of the timeline: nanoseconds, the `u64` its atomics hold.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        if self.system {
            return ticker::now();
        }
        match &*self.inner {
            Source::System { .. } => ticker::now(),
            Source::Manual(m) => m.now_ns(),
            #[cfg(feature = "tokio")]
            Source::Tokio { handle, base, .. } => tokio_now(handle, *base),
        }
    }

    /// [`now_ns`](Self::now_ns) when it takes no call: the cached reading of the
    /// system clock, or a manual clock's; `None` when the cache is cleared and for
    /// tokio's clock. For a hot path that keeps its common case free of calls.
    #[inline]
    pub(crate) fn now_ns_without_call(&self) -> Option<u64> {
        if self.system {
            return ticker::cached();
        }
        match &*self.inner {
            Source::System { .. } => ticker::cached(),
            Source::Manual(m) => Some(m.now_ns()),
            #[cfg(feature = "tokio")]
            Source::Tokio { .. } => None,
        }
    }

    /// The timeline read from the OS now, never from the cache: no earlier than any
    /// reading [`now_ns`](Self::now_ns) gave before, and no later than one it gives
    /// after (the cache only holds past OS readings). What starts a token bucket or a
    /// warm-up, so that their refill counts only time that has passed: from a cached
    /// start up to a millisecond old they would credit time before they existed. What
    /// the per-second sampler reads too: it runs for a few seconds after a point's
    /// last call, and its reads of the cache would keep the cache's thread ticking.
    pub(crate) fn precise_now_ns(&self) -> u64 {
        match &*self.inner {
            Source::System { .. } => ticker::precise_monotonic(),
            _ => self.now_ns(),
        }
    }

    /// The high-resolution tick counter (for durations and refill rates only).
    #[inline]
    pub(crate) fn ticks(&self) -> u64 {
        match &*self.inner {
            Source::System { ticks, .. } => ticks.raw(),
            Source::Manual(m) => m.now_ns(),
            #[cfg(feature = "tokio")]
            Source::Tokio { handle, base, .. } => tokio_now(handle, *base),
        }
    }

    /// Converts nanoseconds into ticks of [`ticks`](Clock::ticks), saturating.
    pub(crate) fn ns_to_ticks(&self, ns: u64) -> u64 {
        match &*self.inner {
            Source::System { ticks_per_ns, .. } => {
                let t = ns as f64 * ticks_per_ns;
                if t >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    t as u64
                }
            }
            _ => ns,
        }
    }

    /// Converts ticks of [`ticks`](Clock::ticks) into nanoseconds.
    pub(crate) fn ticks_to_ns(&self, ticks: u64) -> u64 {
        match &*self.inner {
            Source::System { ticks_per_ns, .. } => {
                let ns = ticks as f64 / ticks_per_ns;
                if ns >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    ns as u64
                }
            }
            _ => ticks,
        }
    }

    /// The wall-clock time of a timeline reading, as the time since the Unix epoch.
    ///
    /// ```
    /// use resilience_runtime::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = Clock::manual(&ManualClock::new());
    /// // A manual clock starts at 2026-01-01T00:00:00Z.
    /// assert_eq!(clock.unix_time(clock.now()), Duration::from_secs(1_767_225_600));
    /// ```
    pub fn unix_time(&self, at: Instant) -> Duration {
        Duration::from_nanos(self.wall_nanos(at.0))
    }

    /// Converts a timeline reading into nanoseconds since the Unix epoch.
    #[inline]
    pub(crate) fn wall_nanos(&self, now: u64) -> u64 {
        match &*self.inner {
            Source::System { wall_offset_ns, .. } => now.saturating_add(*wall_offset_ns),
            Source::Manual(m) => now.saturating_add(m.wall_offset_ns),
            #[cfg(feature = "tokio")]
            Source::Tokio { wall_offset_ns, .. } => now.saturating_add(*wall_offset_ns),
        }
    }

    /// The timeline reading at which the wall clock reads `wall_ns` (the inverse of
    /// [`wall_nanos`](Clock::wall_nanos)).
    pub(crate) fn timeline_at_wall(&self, wall_ns: u64) -> u64 {
        match &*self.inner {
            Source::System { wall_offset_ns, .. } => wall_ns.saturating_sub(*wall_offset_ns),
            Source::Manual(m) => wall_ns.saturating_sub(m.wall_offset_ns),
            #[cfg(feature = "tokio")]
            Source::Tokio { wall_offset_ns, .. } => wall_ns.saturating_sub(*wall_offset_ns),
        }
    }

    /// Converts a timeline reading into a [`SystemTime`].
    pub fn system_time(&self, at: Instant) -> SystemTime {
        UNIX_EPOCH + self.unix_time(at)
    }
}

/// The reading of a tokio-backed timeline: the runtime's clock (paused or not) since
/// `base`, past the timeline's origin.
#[cfg(feature = "tokio")]
fn tokio_now(handle: &tokio::runtime::Handle, base: tokio::time::Instant) -> u64 {
    let _entered = handle.enter();
    let since = tokio::time::Instant::now().saturating_duration_since(base);
    TOKIO_ORIGIN_NS.saturating_add(nanos(since))
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

/// A clock for tests: it only moves when [`advance`](ManualClock::advance) or
/// [`set`](ManualClock::set) is called. Clones share the same reading.
///
/// Its timeline starts at 1 s (so that `0` can keep meaning "unset" in the runtime) and
/// its wall-clock origin is 2026-01-01T00:00:00Z, a multiple of 10 s, so statistics
/// cycles start aligned.
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
    wall_offset_ns: u64,
    before_move: BeforeMove,
    /// What runs just after it moved: the queues' waiters look at their deadlines.
    after_move: BeforeMove,
}

/// Called with the reading the clock is about to move to.
/// A hook of a manual clock's moves; `false`: drop it (what it served is gone).
type Hook = Box<dyn Fn(u64) -> bool + Send + Sync>;

/// What runs just before a manual clock moves: the per-second samplers of the points
/// that use it, which a system clock runs on the timing wheel instead.
#[derive(Clone, Default)]
struct BeforeMove(Arc<crate::sync::Mutex<Vec<Hook>>>);

impl std::fmt::Debug for BeforeMove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeMove")
    }
}

impl BeforeMove {
    fn run(&self, to: u64) {
        self.0.lock().recover().retain(|hook| hook(to));
    }
}

/// 2026-01-01T00:00:00Z minus the manual clock's initial reading of one second.
const MANUAL_WALL_ORIGIN_NS: u64 = 1_767_225_600_000_000_000 - 1_000_000_000;

impl ManualClock {
    /// A manual clock reading one second.
    pub fn new() -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(1_000_000_000)),
            wall_offset_ns: MANUAL_WALL_ORIGIN_NS,
            before_move: BeforeMove::default(),
            after_move: BeforeMove::default(),
        }
    }

    /// Moves the clock forward. The per-second statistics of the points that use it
    /// are sampled first, so the traffic before the move is counted in the second it
    /// happened.
    pub fn advance(&self, by: Duration) {
        let by = nanos(by);
        self.before_move.run(self.now_ns().saturating_add(by));
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
        self.after_move.run(self.now_ns());
    }

    /// Sets the reading. Moving backwards is ignored: clocks are monotonic.
    pub fn set(&self, at: Instant) {
        self.set_ns(at.0);
    }

    /// [`set`](Self::set) in nanoseconds (the engine's and the simulation's form).
    pub(crate) fn set_ns(&self, nanos: u64) {
        self.before_move.run(nanos.max(self.now_ns()));
        self.nanos.fetch_max(nanos, Ordering::SeqCst);
        self.after_move.run(self.now_ns());
    }

    /// The current reading (the same as [`Clock::now`] of a clock reading it).
    pub fn now(&self) -> Instant {
        Instant(self.now_ns())
    }

    /// The current reading in nanoseconds.
    pub(crate) fn now_ns(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward() {
        let m = ManualClock::new();
        let c = Clock::manual(&m);
        let t0 = c.now();
        m.advance(Duration::from_secs(2));
        assert_eq!(c.now(), t0 + Duration::from_secs(2));
        m.set(Instant::from_nanos(0));
        assert_eq!(c.now(), t0 + Duration::from_secs(2));
        assert_eq!(m.now(), c.now());
        assert_eq!(c.ticks(), c.now_ns());
        assert_eq!(c.ns_to_ticks(5), 5);
    }

    #[test]
    fn manual_wall_clock_is_cycle_aligned() {
        let m = ManualClock::new();
        let c = Clock::manual(&m);
        assert_eq!(c.wall_nanos(c.now_ns()) % 10_000_000_000, 0);
        assert_eq!(c.timeline_at_wall(c.wall_nanos(c.now_ns())), c.now_ns());
    }

    #[test]
    fn system_clock_is_monotonic_and_close_to_the_wall_clock() {
        let c = Clock::system();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let wall = c.wall_nanos(c.now_ns());
        let sys = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(wall.abs_diff(sys) < 1_000_000_000);
    }

    #[test]
    fn ticks_measure_real_durations() {
        let c = Clock::system();
        let t0 = c.ticks();
        std::thread::sleep(Duration::from_millis(50));
        let elapsed = c.ticks() - t0;
        let lo = c.ns_to_ticks(45_000_000);
        let hi = c.ns_to_ticks(2_000_000_000);
        assert!(
            elapsed > lo && elapsed < hi,
            "{elapsed} ticks, expected {lo}..{hi}"
        );
        assert_eq!(c.ns_to_ticks(u64::MAX), u64::MAX);
    }
}
