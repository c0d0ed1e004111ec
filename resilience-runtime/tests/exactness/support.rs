//! What every case of the matrix shares: the thread counts and constants, what the
//! callers saw ([`Seen`]), the failed checks ([`Verdicts`]) and the books every case
//! keeps, registries and the one-window guard, the call shapes (the `macro_rules` that
//! stamp out `#[downgrade]` fns, one point each), and [`drive`], which runs the callers.

use resilience_runtime::{Clock, Downgraded, ManualClock, Point, PointStats, Reason, Registry};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

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
    let left = width - clock.now() % width;
    if left < nanos(SLACK) {
        std::thread::sleep(Duration::from_nanos(left) + Duration::from_millis(5));
    }
    let bucket = clock.now() / width;
    let out = run();
    let after = clock.now() / width;
    v.check(after == bucket, || {
        format!("{case}: the case outlasted its window (took over {SLACK:?}); its counts are void")
    });
    out
}

// ---- the call shapes ------------------------------------------------------------------

#[derive(Debug)]
pub(crate) enum MyErr {
    Down(Reason),
}

impl From<Downgraded> for MyErr {
    fn from(d: Downgraded) -> Self {
        MyErr::Down(d.reason())
    }
}

pub(crate) type SyncFn = fn(&Seen, Hold, u64) -> Result<u32, MyErr>;
pub(crate) type BoxFut = Pin<Box<dyn Future<Output = Result<u32, MyErr>> + Send>>;
pub(crate) type AsyncFn = fn(Arc<Seen>, Hold) -> BoxFut;

/// Stamps out one sync `#[downgrade]` fn per point name, and a table of them in
/// [`THREADS`] order.
macro_rules! sync_points {
    ($table:ident: $($f:ident $name:tt),+ $(,)?) => {
        $(
            #[downgrade(point = $name)]
            fn $f(seen: &Seen, hold: Hold, i: u64) -> Result<u32, MyErr> {
                let _inside = seen.inside();
                hold_sync(hold, i);
                Ok(1)
            }
        )+
        const $table: [(SyncFn, &str); 6] = [$(($f as SyncFn, $name)),+];
    };
}

/// Stamps out one `#[downgrade]` `async fn` per point name (each in its own module,
/// with a boxing wrapper), and a table of them in [`THREADS`] order.
macro_rules! async_points {
    ($table:ident: $($f:ident $name:tt),+ $(,)?) => {
        $(
            mod $f {
                use super::*;

                #[downgrade(point = $name)]
                pub(super) async fn call(seen: Arc<Seen>, hold: Hold) -> Result<u32, MyErr> {
                    let _inside = seen.inside();
                    hold_async(hold).await;
                    Ok(1)
                }

                pub(super) fn boxed(seen: Arc<Seen>, hold: Hold) -> BoxFut {
                    Box::pin(call(seen, hold))
                }
            }
        )+
        const $table: [(AsyncFn, &str); 6] = [$(($f::boxed as AsyncFn, $name)),+];
    };
}

pub(crate) use {async_points, sync_points};

/// How a case calls its point.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// `Point::enter` and `Permit::finish`, some permits dropped (cancelled calls).
    Enter(&'static Point),
    /// A sync `#[downgrade]` fn.
    Sync(SyncFn),
    /// A `#[downgrade]` `async fn`, one task per "thread", some futures dropped.
    Async(AsyncFn, &'a tokio::runtime::Runtime),
    /// Anything else, one call per invocation: `(what the callers saw, the thread's
    /// call number, the load)`; the callee counts admissions ([`Seen::inside`]).
    Call(&'a (dyn Fn(&Seen, u64, Load) + Sync)),
}

/// How many calls each thread makes.
#[derive(Clone, Copy)]
pub(crate) struct Load {
    per_thread: u64,
    /// Stop after this long even if calls are left.
    run_for: Option<Duration>,
    pub(crate) hold: Hold,
    /// Yield after a refused call (so that spinning callers leave the CPU to holders).
    pause: bool,
}

impl Load {
    pub(crate) fn calls(threads: usize, hold: Hold) -> Load {
        Load {
            per_thread: CALLS / threads as u64,
            run_for: None,
            hold,
            pause: false,
        }
    }

    pub(crate) fn timed(run_for: Duration, hold: Hold) -> Load {
        Load {
            per_thread: u64::MAX,
            run_for: Some(run_for),
            hold,
            pause: true,
        }
    }
}

/// One call through `Enter`: admitted calls finish, fail or are cancelled in turn.
pub(crate) fn enter_call(p: &'static Point, seen: &Seen, i: u64, load: Load) {
    match p.enter() {
        Ok(permit) => {
            let inside = seen.inside();
            hold_sync(load.hold, i);
            drop(inside);
            match i % 3 {
                0 => permit.finish(false),
                1 => permit.finish(true),
                _ => drop(permit),
            }
        }
        Err(d) => {
            seen.refused(d.reason());
            if load.pause {
                std::thread::yield_now();
            }
        }
    }
}

pub(crate) fn sync_call(f: SyncFn, seen: &Seen, i: u64, load: Load) {
    match f(seen, load.hold, i) {
        Ok(_) => {}
        Err(MyErr::Down(reason)) => {
            seen.refused(reason);
            if load.pause {
                std::thread::yield_now();
            }
        }
    }
}

/// Polls `fut` at most `polls` times, then drops it (mid-flight if it is still
/// pending).
pub(crate) async fn poll_then_drop<F: Future>(fut: F, polls: u32) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut left = polls;
    std::future::poll_fn(move |cx| match fut.as_mut().poll(cx) {
        Poll::Ready(out) => Poll::Ready(Some(out)),
        Poll::Pending if left <= 1 => Poll::Ready(None),
        Poll::Pending => {
            left -= 1;
            Poll::Pending
        }
    })
    .await
}

/// Runs `threads` callers of `target` under `load`, with `swap` called in a loop on
/// another thread from before the first call until the last one returned.
pub(crate) fn drive(
    target: Target<'_>,
    threads: usize,
    load: Load,
    swap: Option<&(dyn Fn() + Sync)>,
) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let done = AtomicBool::new(false);
    let parties = if matches!(target, Target::Async(..)) {
        1
    } else {
        threads
    };
    let start = Barrier::new(parties + usize::from(swap.is_some()));
    std::thread::scope(|s| {
        if let Some(swap) = swap {
            let (start, done) = (&start, &done);
            s.spawn(move || {
                swap();
                start.wait();
                while !done.load(Ordering::Relaxed) {
                    swap();
                    // Leave the callers a share of the CPUs: a swap takes locks.
                    std::thread::yield_now();
                }
            });
        }
        match target {
            Target::Enter(_) | Target::Sync(_) | Target::Call(_) => {
                let workers: Vec<_> = (0..threads)
                    .map(|_| {
                        let (seen, start) = (&*seen, &start);
                        s.spawn(move || {
                            start.wait();
                            let end = load.run_for.map(|d| Instant::now() + d);
                            let mut i = 0;
                            while i < load.per_thread && end.is_none_or(|e| Instant::now() < e) {
                                match target {
                                    Target::Enter(p) => enter_call(p, seen, i, load),
                                    Target::Sync(f) => sync_call(f, seen, i, load),
                                    Target::Call(f) => f(seen, i, load),
                                    Target::Async(..) => unreachable!(),
                                }
                                i += 1;
                            }
                            seen.calls.fetch_add(i, Ordering::SeqCst);
                        })
                    })
                    .collect();
                for w in workers {
                    w.join().unwrap();
                }
            }
            Target::Async(f, rt) => {
                start.wait();
                rt.block_on(drive_tasks(f, Arc::clone(&seen), threads, load));
            }
        }
        done.store(true, Ordering::Relaxed);
    });
    seen
}

/// `tasks` tasks calling `f` one call at a time: every 5th future is dropped after
/// two polls (mid-flight when admitted), every 7th raced against a 1 µs timeout.
pub(crate) async fn drive_tasks(f: AsyncFn, seen: Arc<Seen>, tasks: usize, load: Load) {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let end = load.run_for.map(|d| Instant::now() + d);
                let mut i = 0;
                while i < load.per_thread && end.is_none_or(|e| Instant::now() < e) {
                    let fut = f(Arc::clone(&seen), load.hold);
                    let out = if i % 5 == 4 {
                        poll_then_drop(fut, 2).await
                    } else if i % 7 == 6 {
                        tokio::time::timeout(Duration::from_micros(1), fut)
                            .await
                            .ok()
                    } else {
                        Some(fut.await)
                    };
                    if let Some(Err(MyErr::Down(reason))) = out {
                        seen.refused(reason);
                        if load.pause {
                            tokio::task::yield_now().await;
                        }
                    }
                    i += 1;
                }
                seen.calls.fetch_add(i, Ordering::SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// Where a case runs: its registry, point, call shape and number of threads.
#[derive(Clone, Copy)]
pub(crate) struct At<'n> {
    pub(crate) reg: &'static Registry,
    pub(crate) name: &'n str,
    pub(crate) shape: Shape,
    pub(crate) threads: usize,
}
