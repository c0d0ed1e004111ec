//! The cached timeline: one process-wide `CLOCK_MONOTONIC` reading refreshed every
//! millisecond by a background thread, so that reading the time on a guarded call is a
//! single relaxed load instead of a clock call (~1 ns against ~6 ns for the coarse vDSO
//! clock and ~24 ns for `Instant::now()` on the machines we measured).
//!
//! The thread only runs while the cache is read. About once a second it clears the
//! cache for one period ("probe"): a reader that finds it cleared reads the OS clock
//! itself and raises a demand flag. If nobody came during the probe the thread goes
//! idle, leaving the cache cleared, and parks: an idle process pays no wake-up for it.
//! The reader that raises the demand while it is parked unparks it (one futex wake,
//! once per idle spell); readers pay one OS clock read until the thread ticks again.
//! Readers never block, make no system call but the clock read and that one wake-up,
//! and never see time go backwards: every cached value was read before it was
//! published, and a reader that finds the cache cleared reads a fresh one. A child of
//! `fork()`, which has no such thread, forgets the cached reading and starts its own
//! thread on its first read. If no thread can be spawned, every read asks the OS.

use crate::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// The cached reading in nanoseconds, or 0 while the thread is not ticking.
static NOW: AtomicU64 = AtomicU64::new(0);
/// Raised by a reader that found the cache cleared.
static DEMAND: AtomicBool = AtomicBool::new(false);
/// Whether the thread was started (or failed to start): `NOT_STARTED`, `STARTING`, or
/// `SPAWNED`. A forked child has no such thread: it starts over.
static STARTED: AtomicU8 = AtomicU8::new(NOT_STARTED);
const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const SPAWNED: u8 = 2;
/// What the thread is doing, for tests and diagnostics.
static STATE: AtomicU8 = AtomicU8::new(STOPPED);

const STOPPED: u8 = 0;
const TICKING: u8 = 1;
const IDLE: u8 = 2;

/// Refresh period of the cache (its resolution).
pub(crate) const PERIOD: Duration = Duration::from_millis(1);
/// Ticks between two probes.
const PROBE_EVERY: u32 = 1000;
/// The clock thread, for the reader that wakes it (null until it is spawned, and in a
/// child of `fork()` until its own is). Leaked: one per process, plus one per fork.
static THREAD: AtomicPtr<std::thread::Thread> = AtomicPtr::new(std::ptr::null_mut());

/// The current time on the `CLOCK_MONOTONIC` timeline, in nanoseconds, at most about
/// one [`PERIOD`] old.
#[inline]
pub(crate) fn now() -> u64 {
    cached().unwrap_or_else(uncached)
}

/// [`now`] when the cache holds a reading: one load, no call (a caller on a hot path
/// goes its slower way on `None`, which [`now`] would answer with a clock call).
#[inline]
pub(crate) fn cached() -> Option<u64> {
    match NOW.load(Ordering::Relaxed) {
        0 => None,
        t => Some(t),
    }
}

#[cold]
#[inline(never)]
fn uncached() -> u64 {
    let t = precise_monotonic();
    if !DEMAND.load(Ordering::Relaxed) {
        // Sequentially consistent with the thread's `STATE` store and `DEMAND` swap
        // before it parks: either it sees the demand, or this sees it idle and wakes
        // it.
        DEMAND.store(true, Ordering::SeqCst);
        if STATE.load(Ordering::SeqCst) == IDLE {
            wake();
        }
    }
    if STARTED.load(Ordering::Acquire) == NOT_STARTED {
        start();
    }
    t
}

#[cold]
fn start() {
    // Registered before anything can cache a reading, so that no child of `fork()`
    // inherits a cached reading without the handler that clears it.
    #[cfg(unix)]
    {
        static AT_FORK: crate::sync::Once = crate::sync::Once::new();
        // SAFETY: registers a plain function that only stores to atomics, which is
        // async-signal-safe as a fork child handler must be.
        AT_FORK.call_once(|| unsafe {
            libc::pthread_atfork(None, None, Some(forked_child));
        });
    }
    if STARTED
        .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // If the thread cannot be spawned, stay `STARTING`: every read then asks the OS.
    if let Ok(handle) = std::thread::Builder::new()
        .name("resilience-clock".into())
        .spawn(run)
    {
        let thread = Box::into_raw(Box::new(handle.thread().clone()));
        THREAD.store(thread, Ordering::Release);
        // A reader that found the thread idle before its handle was stored could not
        // wake it: do it now (parked or not, it then looks at `DEMAND` again).
        wake();
        STARTED.store(SPAWNED, Ordering::Release);
    }
}

/// Unparks the clock thread, if it was spawned.
fn wake() {
    let thread = THREAD.load(Ordering::Acquire);
    if !thread.is_null() {
        // SAFETY: a non-null pointer came from `Box::into_raw` in `start` and is
        // never freed.
        unsafe { &*thread }.unpark();
    }
}

/// In a child of `fork()` the clock thread does not exist: forget the cached reading
/// (it would never move again) and let the next read start a new thread.
#[cfg(unix)]
extern "C" fn forked_child() {
    // The parent's thread is not in the child (its handle is leaked, never freed).
    THREAD.store(std::ptr::null_mut(), Ordering::Relaxed);
    NOW.store(0, Ordering::Relaxed);
    DEMAND.store(false, Ordering::Relaxed);
    STATE.store(STOPPED, Ordering::Relaxed);
    STARTED.store(NOT_STARTED, Ordering::Release);
}

fn run() {
    loop {
        // Idle: wait for a reader to ask (see `uncached`).
        STATE.store(IDLE, Ordering::SeqCst);
        while !DEMAND.swap(false, Ordering::SeqCst) {
            std::thread::park();
        }
        STATE.store(TICKING, Ordering::Relaxed);
        'ticking: loop {
            for _ in 0..PROBE_EVERY {
                NOW.store(precise_monotonic(), Ordering::Relaxed);
                std::thread::sleep(PERIOD);
            }
            // Probe: clear the cache for one period and see whether anyone read it.
            DEMAND.store(false, Ordering::Relaxed);
            NOW.store(0, Ordering::Relaxed);
            std::thread::sleep(PERIOD);
            if !DEMAND.swap(false, Ordering::Relaxed) {
                break 'ticking;
            }
        }
    }
}

/// Whether the background thread is currently refreshing the cache.
#[cfg(test)]
pub(crate) fn is_ticking() -> bool {
    STATE.load(Ordering::Relaxed) == TICKING
}

/// `CLOCK_MONOTONIC` in nanoseconds (never 0).
#[cfg(target_os = "linux")]
pub(crate) fn precise_monotonic() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is a constant every
    // Linux kernel supports.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .max(1)
}

/// A monotonic reading in nanoseconds from a process-wide origin, starting at 1 s so
/// that 0 keeps meaning "unset".
#[cfg(not(target_os = "linux"))]
pub(crate) fn precise_monotonic() -> u64 {
    use crate::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    crate::util::nanos(origin.elapsed()).saturating_add(1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_are_monotonic_and_close_to_the_os_clock() {
        let mut last = now();
        let deadline = precise_monotonic() + 300_000_000;
        let mut cached = 0;
        while precise_monotonic() < deadline {
            let t = now();
            assert!(t >= last, "went back from {last} to {t}");
            let os = precise_monotonic();
            assert!(t <= os, "cache {t} ahead of the clock {os}");
            // Stale by at most a few periods, even on a loaded machine.
            assert!(os - t < 50_000_000, "cache {} ms old", (os - t) / 1_000_000);
            if NOW.load(Ordering::Relaxed) != 0 {
                cached += 1;
            }
            last = t;
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(cached > 0, "the thread never refreshed the cache");
        assert!(is_ticking());
    }

    /// The guide (how it works): the thread goes idle after a second without readers and comes back on
    /// the next read. Checked in a forked child, where no other test reads the clock.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_thread_idles_without_readers_and_wakes_on_demand() {
        // SAFETY: the child only reads the clock, sleeps and exits with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let _ = now();
            std::thread::sleep(Duration::from_millis(100));
            let ticking = is_ticking() && NOW.load(Ordering::Relaxed) != 0;
            // Watching the state is not reading the clock. Without reads the next
            // probe (after ~1 s of ticks) finds no demand: idle, cache cleared.
            let wait_for = |want: fn() -> bool, limit_ms: u64| {
                (0..limit_ms / 10).any(|_| {
                    std::thread::sleep(Duration::from_millis(10));
                    want()
                })
            };
            let idle = wait_for(|| !is_ticking() && NOW.load(Ordering::Relaxed) == 0, 5_000);
            let _ = now();
            // The read wakes the parked thread.
            let back = wait_for(|| is_ticking() && NOW.load(Ordering::Relaxed) != 0, 2_000);
            let code = i32::from(!ticking) | i32::from(!idle) << 1 | i32::from(!back) << 2;
            // SAFETY: ends the child without running the parent's test harness.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child did not exit: {status}");
        // Bits: 1 = not ticking after a read, 2 = not idle without readers, 4 = no wake-up.
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_forked_child_gets_a_live_clock() {
        // Make sure the parent's thread runs and the cache is warm.
        let _ = now();
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: the child only reads the clock, sleeps and exits with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let a = now();
            // Long enough for the child's new clock thread to be scheduled and tick
            // on a loaded machine (a whole test suite runs beside this test).
            std::thread::sleep(Duration::from_millis(200));
            let b = now();
            // Exit status 0 when the child's clock moved (~200 ms).
            let moved = b.saturating_sub(a) >= 20_000_000;
            // SAFETY: ends the child without running the parent's test harness.
            unsafe { libc::_exit(if moved { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child did not exit: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the child's clock was frozen");
    }
}
