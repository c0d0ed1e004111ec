//! Time sources: the system clock used in production and a [`ManualClock`] for tests.
//!
//! The runtime reads two things from a [`Clock`]:
//!
//! - a **timeline** ([`Clock::now`]), `u64` nanoseconds on `CLOCK_MONOTONIC`, cached
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

/// Nanoseconds of a duration, saturated to `u64`: the crate's one conversion of a
/// `Duration` to timeline nanoseconds.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
/// assert_eq!(clock.now() - t0, 1_500_000_000);
/// ```
#[derive(Clone, Debug)]
pub struct Clock {
    // Shared: every point holds a clone of its registry's clock, so a pointer, not
    // the 56 bytes of the source.
    inner: std::sync::Arc<Source>,
}

#[derive(Clone, Debug)]
enum Source {
    System {
        wall_offset_ns: u64,
        ticks: quanta::Clock,
        ticks_per_ns: f64,
    },
    Manual(ManualClock),
}

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
            inner: std::sync::Arc::new(Source::Manual(clock.clone())),
        }
    }

    /// With a manual clock, registers `hook` to run just before it moves (with the
    /// timeline reading it moves to) and returns `true`; with the system clock, does
    /// nothing and returns `false`.
    pub(crate) fn before_move(&self, hook: impl Fn(u64) + Send + Sync + 'static) -> bool {
        match &*self.inner {
            Source::Manual(m) => {
                m.before_move.0.lock().recover().push(Box::new(hook));
                true
            }
            Source::System { .. } => false,
        }
    }

    /// With a manual clock, registers `hook` to run just after it moved (with the new
    /// reading) and returns `true`; with the system clock, does nothing and returns
    /// `false`. Waiters with a deadline on the clock use it to look at the time again.
    pub(crate) fn after_move(&self, hook: impl Fn(u64) + Send + Sync + 'static) -> bool {
        match &*self.inner {
            Source::Manual(m) => {
                m.after_move.0.lock().recover().push(Box::new(hook));
                true
            }
            Source::System { .. } => false,
        }
    }

    /// Whether this clock is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(*self.inner, Source::Manual(_))
    }

    /// Waits `d`: the thread sleeps on the system clock; a manual clock is advanced by
    /// `d` instead, so that code that waits (retry backoffs) runs instantly and
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
    /// assert_eq!(clock.now() - t0, 250_000_000);
    /// ```
    pub fn sleep(&self, d: Duration) {
        match &*self.inner {
            Source::System { .. } => std::thread::sleep(d),
            Source::Manual(m) => m.advance(d),
        }
    }

    /// Waits `d` without blocking the thread (`tokio` feature): `tokio::time::sleep` on
    /// the system clock (so it needs a tokio runtime with its time driver); a manual
    /// clock is advanced by `d` at once instead, like [`sleep`](Self::sleep).
    #[cfg(feature = "tokio")]
    pub async fn sleep_async(&self, d: Duration) {
        match &*self.inner {
            Source::System { .. } => tokio::time::sleep(d).await,
            Source::Manual(m) => m.advance(d),
        }
    }

    /// The current time on the timeline, in nanoseconds (monotonic; a resolution of
    /// about a millisecond for the system clock).
    #[inline]
    pub fn now(&self) -> u64 {
        match &*self.inner {
            Source::System { .. } => ticker::now(),
            Source::Manual(m) => m.now_nanos(),
        }
    }

    /// The high-resolution tick counter (for durations and refill rates only).
    #[inline]
    pub(crate) fn ticks(&self) -> u64 {
        match &*self.inner {
            Source::System { ticks, .. } => ticks.raw(),
            Source::Manual(m) => m.now_nanos(),
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
            Source::Manual(_) => ns,
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
            Source::Manual(_) => ticks,
        }
    }

    /// Converts a timeline reading into nanoseconds since the Unix epoch.
    #[inline]
    pub fn wall_nanos(&self, now: u64) -> u64 {
        match &*self.inner {
            Source::System { wall_offset_ns, .. } => now.saturating_add(*wall_offset_ns),
            Source::Manual(m) => now.saturating_add(m.wall_offset_ns),
        }
    }

    /// The timeline reading at which the wall clock reads `wall_ns` (the inverse of
    /// [`wall_nanos`](Clock::wall_nanos)).
    pub(crate) fn timeline_at_wall(&self, wall_ns: u64) -> u64 {
        match &*self.inner {
            Source::System { wall_offset_ns, .. } => wall_ns.saturating_sub(*wall_offset_ns),
            Source::Manual(m) => wall_ns.saturating_sub(m.wall_offset_ns),
        }
    }

    /// Converts a timeline reading into a [`SystemTime`].
    pub fn system_time(&self, now: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.wall_nanos(now))
    }
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
type Hook = Box<dyn Fn(u64) + Send + Sync>;

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
        let hooks = self.0.lock().recover();
        for hook in hooks.iter() {
            hook(to);
        }
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
        self.before_move.run(self.now_nanos().saturating_add(by));
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
        self.after_move.run(self.now_nanos());
    }

    /// Sets the reading, in nanoseconds. Moving backwards is ignored: clocks are monotonic.
    pub fn set(&self, nanos: u64) {
        self.before_move.run(nanos.max(self.now_nanos()));
        self.nanos.fetch_max(nanos, Ordering::SeqCst);
        self.after_move.run(self.now_nanos());
    }

    /// The current reading in nanoseconds.
    pub fn now_nanos(&self) -> u64 {
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
        assert_eq!(c.now(), t0 + 2_000_000_000);
        m.set(0);
        assert_eq!(c.now(), t0 + 2_000_000_000);
        assert_eq!(c.ticks(), c.now());
        assert_eq!(c.ns_to_ticks(5), 5);
    }

    #[test]
    fn manual_wall_clock_is_cycle_aligned() {
        let m = ManualClock::new();
        let c = Clock::manual(&m);
        assert_eq!(c.wall_nanos(c.now()) % 10_000_000_000, 0);
        assert_eq!(c.timeline_at_wall(c.wall_nanos(c.now())), c.now());
    }

    #[test]
    fn system_clock_is_monotonic_and_close_to_the_wall_clock() {
        let c = Clock::system();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let wall = c.wall_nanos(c.now());
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
