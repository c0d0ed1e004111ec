//! What every case of the matrix shares: the thread counts and constants, what the
//! callers saw ([`Seen`]), the failed checks ([`Verdicts`]) and the books every case
//! keeps, registries and the one-window guard; in [`shapes`] the call shapes (the
//! `macro_rules` that stamp out `#[downgrade]` fns, one point each) and [`drive`],
//! which runs the callers; in [`race`] the one-call-per-thread races at one instant.

mod race;
mod shapes;

pub(crate) use race::*;
pub(crate) use shapes::*;

use resilience_runtime::{Clock, ManualClock, PointStats, Reason, Registry};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The instant `ns` nanoseconds into the timeline (the tests drive time by hand).
pub(crate) fn instant(ns: u64) -> resilience_runtime::Instant {
    resilience_runtime::Instant::from_nanos(ns)
}

/// The thread (or task) counts of every case.
pub(crate) const THREADS: [usize; 6] = [1, 2, 4, 8, 16, 64];
/// Calls per case, split among the threads.
pub(crate) const CALLS: u64 = 24_000;
/// The one bucket of the window of the visits, exceptions and timeouts cases.
pub(crate) const WINDOW: Duration = Duration::from_secs(600);
/// A case on the system clock starts in a fresh bucket of [`WINDOW`] if fewer than
/// this remain of the current one, so that it runs inside one window.
pub(crate) const SLACK: Duration = Duration::from_secs(10);
/// How long a caller holds a permit in the contended cases.
pub(crate) const BRIEF: Hold = Hold::Brief;
/// The probe interval of the concurrency + delay cases.
pub(crate) const RETRY: Duration = Duration::from_millis(10);
/// How long a caller holds a permit in the concurrency + delay cases: longer than the
/// probe interval, so that probes come while the limit is still full.
pub(crate) const DELAY_HOLD: Hold = Hold::Sleep(Duration::from_millis(12));
/// How long a concurrency + delay case runs.
pub(crate) const DELAY_RUN: Duration = Duration::from_millis(60);

// ---- what a case saw ------------------------------------------------------------------

/// What the callers of one case saw.
#[derive(Default)]
pub(crate) struct Seen {
    inflight: AtomicU64,
    max_inflight: AtomicU64,
    admitted: AtomicU64,
    /// Admitted calls of a `#[downgrade]` fn whose caller got the body's own result
    /// (`Ok`, or the body's `Err`): an admitted future dropped mid-flight is admitted
    /// but not completed.
    completed: AtomicU64,
    pub(crate) calls: AtomicU64,
    refused: [AtomicU64; Reason::ALL.len()],
}

impl Seen {
    /// Counts an admission; the guard counts the call out of flight when dropped.
    pub(crate) fn inside(&self) -> Inside<'_> {
        self.admitted.fetch_add(1, Ordering::SeqCst);
        let now = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inflight.fetch_max(now, Ordering::SeqCst);
        Inside(self)
    }

    pub(crate) fn refused(&self, reason: Reason) {
        let i = Reason::ALL.iter().position(|r| *r == reason).unwrap();
        self.refused[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::SeqCst)
    }

    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::SeqCst)
    }

    pub(crate) fn max_inflight(&self) -> u64 {
        self.max_inflight.load(Ordering::SeqCst)
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    pub(crate) fn refused_for(&self, reason: Reason) -> u64 {
        let i = Reason::ALL.iter().position(|r| *r == reason).unwrap();
        self.refused[i].load(Ordering::Relaxed)
    }
}

/// One admitted call in flight, as its caller counts it.
pub(crate) struct Inside<'a>(&'a Seen);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long an admitted call keeps its permit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Hold {
    None,
    /// Sync: a short spin, and every 32nd call of a thread also yields its CPU (so
    /// that a holder is descheduled now and then, without making the uncontended
    /// cases slow on a busy machine). Async: three `yield_now`s, so that a future
    /// polled twice and dropped is dropped mid-flight.
    Brief,
    Sleep(Duration),
}

/// Holds the permit of the `i`-th call of a thread.
pub(crate) fn hold_sync(hold: Hold, i: u64) {
    match hold {
        Hold::None => {}
        Hold::Brief => {
            (0..32).for_each(|_| std::hint::spin_loop());
            if i.is_multiple_of(32) {
                std::thread::yield_now();
            }
        }
        Hold::Sleep(d) => std::thread::sleep(d),
    }
}

pub(crate) async fn hold_async(hold: Hold) {
    match hold {
        Hold::None => {}
        Hold::Brief => {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }
        Hold::Sleep(d) => tokio::time::sleep(d).await,
    }
}

// ---- failed checks --------------------------------------------------------------------

/// The failed checks of one test, reported together at its end.
#[derive(Default)]
pub(crate) struct Verdicts(Mutex<Vec<String>>);

impl Verdicts {
    pub(crate) fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.lock().unwrap().push(what());
        }
    }

    pub(crate) fn conclude(self) {
        let failed = self.0.into_inner().unwrap();
        assert!(
            failed.is_empty(),
            "{} failed check(s):\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Enter,
    SyncMacro,
    AsyncMacro,
    /// The type under test itself (a gate, a lease), without a point.
    Direct,
}

/// Names a case in failure messages.
pub(crate) struct Case {
    rule: String,
    shape: Shape,
    threads: usize,
    swap: bool,
}

impl Case {
    pub(crate) fn new(rule: impl Into<String>, shape: Shape, threads: usize, swap: bool) -> Case {
        Case {
            rule: rule.into(),
            shape,
            threads,
            swap,
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = match self.shape {
            Shape::Enter => "enter/finish",
            Shape::SyncMacro => "#[downgrade] fn",
            Shape::AsyncMacro => "#[downgrade] async fn",
            Shape::Direct => "direct calls",
        };
        let swap = if self.swap {
            "policy swapped"
        } else {
            "no swap"
        };
        let callers = if self.shape == Shape::AsyncMacro {
            "tasks"
        } else {
            "threads"
        };
        write!(
            f,
            "{} [{shape}, {} {callers}, {swap}]",
            self.rule, self.threads
        )
    }
}

/// The books every case keeps: one visit per call, `visits == passes + downgrades`,
/// the callers' refusals are the downgrades reason by reason, every permit came back,
/// and the admitted calls are the passes.
pub(crate) fn check_books(v: &Verdicts, case: &Case, s: &PointStats, seen: &Seen) {
    let t = &s.totals;
    v.check(t.visits == seen.calls(), || {
        format!(
            "{case}: {} calls made, {} visits counted",
            seen.calls(),
            t.visits
        )
    });
    v.check(t.visits == t.passes + t.downgrades, || {
        format!(
            "{case}: visits {} != passes {} + downgrades {}",
            t.visits, t.passes, t.downgrades
        )
    });
    for reason in Reason::ALL {
        let (saw, counted) = (seen.refused_for(reason), t.downgrades_by_reason.get(reason));
        v.check(saw == counted, || {
            format!("{case}: the callers saw {saw} refusals for {reason:?}, the point counted {counted}")
        });
    }
    v.check(s.concurrency == 0, || {
        format!("{case}: {} permits never came back", s.concurrency)
    });
    v.check(seen.admitted() == t.passes, || {
        format!(
            "{case}: the callers saw {} admitted, the point counted {} passes",
            seen.admitted(),
            t.passes
        )
    });
}

/// Only the `allowed` reasons refused calls.
pub(crate) fn check_reasons(v: &Verdicts, case: &Case, s: &PointStats, allowed: &[Reason]) {
    for (reason, n) in s.totals.downgrades_by_reason.iter() {
        v.check(n == 0 || allowed.contains(&reason), || {
            format!("{case}: {n} downgrades for {reason:?}, only {allowed:?} can refuse")
        });
    }
}

// ---- registries and windows -----------------------------------------------------------

pub(crate) fn system_registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

pub(crate) fn manual_registry() -> (&'static Registry, ManualClock) {
    let clock = ManualClock::new();
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    (reg, clock)
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// Runs `run` inside one bucket of [`WINDOW`] on `clock`: first waits for the next
/// bucket if fewer than [`SLACK`] remain of this one, then checks that the case did
/// not outlast its bucket (a window that rolled would double the visits limit).
pub(crate) fn in_one_window<R>(
    v: &Verdicts,
    case: &Case,
    clock: &Clock,
    run: impl FnOnce() -> R,
) -> R {
    let width = nanos(WINDOW);
    let left = width - clock.now().as_nanos() % width;
    if left < nanos(SLACK) {
        std::thread::sleep(Duration::from_nanos(left) + Duration::from_millis(5));
    }
    let bucket = clock.now().as_nanos() / width;
    let out = run();
    let after = clock.now().as_nanos() / width;
    v.check(after == bucket, || {
        format!("{case}: the case outlasted its window (took over {SLACK:?}); its counts are void")
    });
    out
}
