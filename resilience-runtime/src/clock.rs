//! Time sources: the system clock used in production and a [`ManualClock`] for tests.
//!
//! Every time-based decision in the runtime reads time through a [`Clock`]. Time is a
//! plain `u64` of nanoseconds on a monotonic timeline; the clock also knows the wall-clock
//! offset of that timeline so that statistics cycles can be aligned to wall-clock 10 s
//! boundaries like SDS does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    inner: Source,
}

#[derive(Clone, Debug)]
enum Source {
    System { wall_offset_ns: u64 },
    Manual(ManualClock),
}

impl Clock {
    /// The operating system's monotonic clock.
    pub fn system() -> Self {
        // The wall-clock reading of monotonic zero, so that `wall_nanos` can be derived
        // from one monotonic reading without a second clock call.
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mono = precise_monotonic();
        Clock {
            inner: Source::System {
                wall_offset_ns: wall.saturating_sub(mono),
            },
        }
    }

    /// A clock that reads the given [`ManualClock`] (clones share the reading).
    pub fn manual(clock: &ManualClock) -> Self {
        Clock {
            inner: Source::Manual(clock.clone()),
        }
    }

    /// Whether this clock is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self.inner, Source::Manual(_))
    }

    /// The precise current time in nanoseconds on this clock's monotonic timeline.
    #[inline]
    pub fn now(&self) -> u64 {
        match &self.inner {
            Source::System { .. } => precise_monotonic(),
            Source::Manual(m) => m.now_nanos(),
        }
    }

    /// A cheaper reading with coarser resolution (a few milliseconds on Linux).
    ///
    /// Good enough to pick a one-second bucket; not used to measure call durations.
    #[inline]
    pub fn coarse_now(&self) -> u64 {
        match &self.inner {
            Source::System { .. } => coarse_monotonic(),
            Source::Manual(m) => m.now_nanos(),
        }
    }

    /// Converts a reading of this clock into nanoseconds since the Unix epoch.
    #[inline]
    pub fn wall_nanos(&self, now: u64) -> u64 {
        match &self.inner {
            Source::System { wall_offset_ns } => now.saturating_add(*wall_offset_ns),
            Source::Manual(m) => now.saturating_add(m.wall_offset_ns),
        }
    }

    /// Converts a reading of this clock into a [`SystemTime`].
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
}

/// 2026-01-01T00:00:00Z minus the manual clock's initial reading of one second.
const MANUAL_WALL_ORIGIN_NS: u64 = 1_767_225_600_000_000_000 - 1_000_000_000;

impl ManualClock {
    /// A manual clock reading one second.
    pub fn new() -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(1_000_000_000)),
            wall_offset_ns: MANUAL_WALL_ORIGIN_NS,
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the reading, in nanoseconds. Moving backwards is ignored: clocks are monotonic.
    pub fn set(&self, nanos: u64) {
        self.nanos.fetch_max(nanos, Ordering::SeqCst);
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

#[cfg(target_os = "linux")]
#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is a constant the
    // kernel supports on every Linux since 2.6.32.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(target_os = "linux")]
#[inline]
fn precise_monotonic() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE` is served from the vDSO without reading the hardware
/// counter: about 4x cheaper than `CLOCK_MONOTONIC` on the machines we measured, at a
/// resolution of one scheduler tick (1-4 ms). It shares `CLOCK_MONOTONIC`'s timeline.
#[cfg(target_os = "linux")]
#[inline]
fn coarse_monotonic() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE)
}

#[cfg(not(target_os = "linux"))]
fn precise_monotonic() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    // Start at 1 s so that 0 keeps meaning "unset".
    (origin.elapsed().as_nanos() as u64).saturating_add(1_000_000_000)
}

#[cfg(not(target_os = "linux"))]
fn coarse_monotonic() -> u64 {
    precise_monotonic()
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
        assert_eq!(c.coarse_now(), c.now());
    }

    #[test]
    fn manual_wall_clock_is_cycle_aligned() {
        let m = ManualClock::new();
        let c = Clock::manual(&m);
        assert_eq!(c.wall_nanos(c.now()) % 10_000_000_000, 0);
    }

    #[test]
    fn system_clock_is_monotonic_and_coarse_is_close() {
        let c = Clock::system();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let coarse = c.coarse_now();
        // The coarse clock lags by at most a few scheduler ticks.
        assert!(coarse <= c.now());
        assert!(c.now() - coarse < 100_000_000);
        let wall = c.wall_nanos(c.now());
        let sys = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert!(wall.abs_diff(sys) < 1_000_000_000);
    }
}
