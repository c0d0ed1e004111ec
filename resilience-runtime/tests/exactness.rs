//! The concurrency matrix: every bound the engine states for a rule, checked exactly
//! under 1, 2, 4, 8, 16 and 64 threads (or tasks).
//!
//! Each case counts what it saw itself: its own in-flight counter, incremented right
//! after admission and decremented before the call finishes, with its maximum, its
//! own count of admitted calls, and its own count of refusals by reason. It then
//! checks the stated bound exactly:
//!
//! * visits: `max_visits(N)` in a single window admits exactly `min(N, calls)`, and
//!   `N = 0` (the kill switch) admits nothing, ever; also while another thread keeps
//!   swapping the policy between two forms that share the window;
//! * concurrency: `max_concurrency(n)` never has more than `n` calls in flight (the
//!   callers' own count and `peak_concurrency`): plain, while the policy is swapped, and
//!   with a delay rule whose probes arrive while the limit is still full;
//! * token bucket, on a manual clock: a frozen bucket admits exactly its capacity; a
//!   clock advanced by `T` while the calls run admits at most
//!   `capacity + floor(rate * T)`; refill is exact; a new, larger bucket admits the
//!   very next call;
//! * exceptions and timeouts: `max_exceptions(N)` / `timeouts(_, N)` with `T` threads
//!   doing one call at a time record at least `N` and at most `N - 1 + T`;
//! * classic breaker: half-open admits exactly `half_open_probes` of the calls racing
//!   for the probes.
//!
//! Call shapes: `Point::enter` / `Permit::finish` (and dropped permits) for every case;
//! a sync `#[downgrade]` fn and an `async fn` with `#[downgrade]` on a multi-thread
//! tokio runtime (some futures dropped mid-flight) for the visits and concurrency
//! cases. Every case also checks the books: every call is one visit, `visits ==
//! passes + downgrades`, the refusals the callers saw are the point's downgrades
//! reason by reason, every permit came back (`concurrency == 0`), and the calls the
//! callers saw admitted are the point's passes.
//!
//! Each test runs all its combinations and then fails with every failed check, each
//! naming its case, shape, thread count and swap mode and what was seen.

use resilience_runtime::breaker::{Backoff, ClassicConfig};
use resilience_runtime::{
    downgrade, registry, BreakerPolicy, Clock, Downgraded, ManualClock, Point, PointStats, Policy,
    Reason, Registry,
};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

/// The thread (or task) counts of every case.
const THREADS: [usize; 6] = [1, 2, 4, 8, 16, 64];
/// Calls per case, split among the threads.
const CALLS: u64 = 24_000;
/// The one bucket of the window of the visits, exceptions and timeouts cases.
const WINDOW: Duration = Duration::from_secs(600);
/// A case on the system clock starts in a fresh bucket of [`WINDOW`] if fewer than
/// this remain of the current one, so that it runs inside one window.
const SLACK: Duration = Duration::from_secs(10);
/// How long a caller holds a permit in the contended cases.
const BRIEF: Hold = Hold::Brief;
/// The probe interval of the concurrency + delay cases.
const RETRY: Duration = Duration::from_millis(10);
/// How long a caller holds a permit in the concurrency + delay cases: longer than the
/// probe interval, so that probes come while the limit is still full.
const DELAY_HOLD: Hold = Hold::Sleep(Duration::from_millis(12));
/// How long a concurrency + delay case runs.
const DELAY_RUN: Duration = Duration::from_millis(60);

// ---- what a case saw ------------------------------------------------------------------

/// What the callers of one case saw.
#[derive(Default)]
struct Seen {
    inflight: AtomicU64,
    max_inflight: AtomicU64,
    admitted: AtomicU64,
    calls: AtomicU64,
    refused: [AtomicU64; Reason::ALL.len()],
}

impl Seen {
    /// Counts an admission; the guard counts the call out of flight when dropped.
    fn inside(&self) -> Inside<'_> {
        self.admitted.fetch_add(1, Ordering::SeqCst);
        let now = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inflight.fetch_max(now, Ordering::SeqCst);
        Inside(self)
    }

    fn refused(&self, reason: Reason) {
        let i = Reason::ALL.iter().position(|r| *r == reason).unwrap();
        self.refused[i].fetch_add(1, Ordering::Relaxed);
    }

    fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::SeqCst)
    }

    fn max_inflight(&self) -> u64 {
        self.max_inflight.load(Ordering::SeqCst)
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn refused_for(&self, reason: Reason) -> u64 {
        let i = Reason::ALL.iter().position(|r| *r == reason).unwrap();
        self.refused[i].load(Ordering::Relaxed)
    }
}

/// One admitted call in flight, as its caller counts it.
struct Inside<'a>(&'a Seen);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long an admitted call keeps its permit.
#[derive(Clone, Copy, Debug)]
enum Hold {
    None,
    /// Sync: a short spin, and every 32nd call of a thread also yields its CPU (so
    /// that a holder is descheduled now and then, without making the uncontended
    /// cases slow on a busy machine). Async: three `yield_now`s, so that a future
    /// polled twice and dropped is dropped mid-flight.
    Brief,
    Sleep(Duration),
}

/// Holds the permit of the `i`-th call of a thread.
fn hold_sync(hold: Hold, i: u64) {
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

async fn hold_async(hold: Hold) {
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
struct Verdicts(Mutex<Vec<String>>);

impl Verdicts {
    fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.lock().unwrap().push(what());
        }
    }

    fn conclude(self) {
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
enum Shape {
    Enter,
    SyncMacro,
    AsyncMacro,
}

/// Names a case in failure messages.
struct Case {
    rule: String,
    shape: Shape,
    threads: usize,
    swap: bool,
}

impl Case {
    fn new(rule: impl Into<String>, shape: Shape, threads: usize, swap: bool) -> Case {
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
fn check_books(v: &Verdicts, case: &Case, s: &PointStats, seen: &Seen) {
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
fn check_reasons(v: &Verdicts, case: &Case, s: &PointStats, allowed: &[Reason]) {
    for (reason, n) in s.totals.downgrades_by_reason.iter() {
        v.check(n == 0 || allowed.contains(&reason), || {
            format!("{case}: {n} downgrades for {reason:?}, only {allowed:?} can refuse")
        });
    }
}

// ---- registries and windows -----------------------------------------------------------

fn system_registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

fn manual_registry() -> (&'static Registry, ManualClock) {
    let clock = ManualClock::new();
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    (reg, clock)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// Runs `run` inside one bucket of [`WINDOW`] on `clock`: first waits for the next
/// bucket if fewer than [`SLACK`] remain of this one, then checks that the case did
/// not outlast its bucket (a window that rolled would double the visits limit).
fn in_one_window<R>(v: &Verdicts, case: &Case, clock: &Clock, run: impl FnOnce() -> R) -> R {
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
enum MyErr {
    Down(Reason),
}

impl From<Downgraded> for MyErr {
    fn from(d: Downgraded) -> Self {
        MyErr::Down(d.reason())
    }
}

type SyncFn = fn(&Seen, Hold, u64) -> Result<u32, MyErr>;
type BoxFut = Pin<Box<dyn Future<Output = Result<u32, MyErr>> + Send>>;
type AsyncFn = fn(Arc<Seen>, Hold) -> BoxFut;

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

sync_points!(S_V0: s_v0_1 "fn.v0.1", s_v0_2 "fn.v0.2", s_v0_4 "fn.v0.4", s_v0_8 "fn.v0.8", s_v0_16 "fn.v0.16", s_v0_64 "fn.v0.64");
sync_points!(S_V1000: s_v1000_1 "fn.v1000.1", s_v1000_2 "fn.v1000.2", s_v1000_4 "fn.v1000.4", s_v1000_8 "fn.v1000.8", s_v1000_16 "fn.v1000.16", s_v1000_64 "fn.v1000.64");
sync_points!(S_VSWAP: s_vswap_1 "fn.vswap.1", s_vswap_2 "fn.vswap.2", s_vswap_4 "fn.vswap.4", s_vswap_8 "fn.vswap.8", s_vswap_16 "fn.vswap.16", s_vswap_64 "fn.vswap.64");
sync_points!(S_C1: s_c1_1 "fn.c1.1", s_c1_2 "fn.c1.2", s_c1_4 "fn.c1.4", s_c1_8 "fn.c1.8", s_c1_16 "fn.c1.16", s_c1_64 "fn.c1.64");
sync_points!(S_C3: s_c3_1 "fn.c3.1", s_c3_2 "fn.c3.2", s_c3_4 "fn.c3.4", s_c3_8 "fn.c3.8", s_c3_16 "fn.c3.16", s_c3_64 "fn.c3.64");
sync_points!(S_C1SWAP: s_c1swap_1 "fn.c1swap.1", s_c1swap_2 "fn.c1swap.2", s_c1swap_4 "fn.c1swap.4", s_c1swap_8 "fn.c1swap.8", s_c1swap_16 "fn.c1swap.16", s_c1swap_64 "fn.c1swap.64");
sync_points!(S_C3SWAP: s_c3swap_1 "fn.c3swap.1", s_c3swap_2 "fn.c3swap.2", s_c3swap_4 "fn.c3swap.4", s_c3swap_8 "fn.c3swap.8", s_c3swap_16 "fn.c3swap.16", s_c3swap_64 "fn.c3swap.64");
sync_points!(S_C1DELAY: s_c1delay_1 "fn.c1delay.1", s_c1delay_2 "fn.c1delay.2", s_c1delay_4 "fn.c1delay.4", s_c1delay_8 "fn.c1delay.8", s_c1delay_16 "fn.c1delay.16", s_c1delay_64 "fn.c1delay.64");
sync_points!(S_C3DELAY: s_c3delay_1 "fn.c3delay.1", s_c3delay_2 "fn.c3delay.2", s_c3delay_4 "fn.c3delay.4", s_c3delay_8 "fn.c3delay.8", s_c3delay_16 "fn.c3delay.16", s_c3delay_64 "fn.c3delay.64");
async_points!(A_V0: a_v0_1 "async.v0.1", a_v0_2 "async.v0.2", a_v0_4 "async.v0.4", a_v0_8 "async.v0.8", a_v0_16 "async.v0.16", a_v0_64 "async.v0.64");
async_points!(A_V1000: a_v1000_1 "async.v1000.1", a_v1000_2 "async.v1000.2", a_v1000_4 "async.v1000.4", a_v1000_8 "async.v1000.8", a_v1000_16 "async.v1000.16", a_v1000_64 "async.v1000.64");
async_points!(A_VSWAP: a_vswap_1 "async.vswap.1", a_vswap_2 "async.vswap.2", a_vswap_4 "async.vswap.4", a_vswap_8 "async.vswap.8", a_vswap_16 "async.vswap.16", a_vswap_64 "async.vswap.64");
async_points!(A_C1: a_c1_1 "async.c1.1", a_c1_2 "async.c1.2", a_c1_4 "async.c1.4", a_c1_8 "async.c1.8", a_c1_16 "async.c1.16", a_c1_64 "async.c1.64");
async_points!(A_C3: a_c3_1 "async.c3.1", a_c3_2 "async.c3.2", a_c3_4 "async.c3.4", a_c3_8 "async.c3.8", a_c3_16 "async.c3.16", a_c3_64 "async.c3.64");
async_points!(A_C1SWAP: a_c1swap_1 "async.c1swap.1", a_c1swap_2 "async.c1swap.2", a_c1swap_4 "async.c1swap.4", a_c1swap_8 "async.c1swap.8", a_c1swap_16 "async.c1swap.16", a_c1swap_64 "async.c1swap.64");
async_points!(A_C3SWAP: a_c3swap_1 "async.c3swap.1", a_c3swap_2 "async.c3swap.2", a_c3swap_4 "async.c3swap.4", a_c3swap_8 "async.c3swap.8", a_c3swap_16 "async.c3swap.16", a_c3swap_64 "async.c3swap.64");
async_points!(A_C1DELAY: a_c1delay_1 "async.c1delay.1", a_c1delay_2 "async.c1delay.2", a_c1delay_4 "async.c1delay.4", a_c1delay_8 "async.c1delay.8", a_c1delay_16 "async.c1delay.16", a_c1delay_64 "async.c1delay.64");
async_points!(A_C3DELAY: a_c3delay_1 "async.c3delay.1", a_c3delay_2 "async.c3delay.2", a_c3delay_4 "async.c3delay.4", a_c3delay_8 "async.c3delay.8", a_c3delay_16 "async.c3delay.16", a_c3delay_64 "async.c3delay.64");

/// How a case calls its point.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// `Point::enter` and `Permit::finish`, some permits dropped (cancelled calls).
    Enter(&'static Point),
    /// A sync `#[downgrade]` fn.
    Sync(SyncFn),
    /// A `#[downgrade]` `async fn`, one task per "thread", some futures dropped.
    Async(AsyncFn, &'a tokio::runtime::Runtime),
}

/// How many calls each thread makes.
#[derive(Clone, Copy)]
struct Load {
    per_thread: u64,
    /// Stop after this long even if calls are left.
    run_for: Option<Duration>,
    hold: Hold,
    /// Yield after a refused call (so that spinning callers leave the CPU to holders).
    pause: bool,
}

impl Load {
    fn calls(threads: usize, hold: Hold) -> Load {
        Load {
            per_thread: CALLS / threads as u64,
            run_for: None,
            hold,
            pause: false,
        }
    }

    fn timed(run_for: Duration, hold: Hold) -> Load {
        Load {
            per_thread: u64::MAX,
            run_for: Some(run_for),
            hold,
            pause: true,
        }
    }
}

/// One call through `Enter`: admitted calls finish, fail or are cancelled in turn.
fn enter_call(p: &'static Point, seen: &Seen, i: u64, load: Load) {
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

fn sync_call(f: SyncFn, seen: &Seen, i: u64, load: Load) {
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
async fn poll_then_drop<F: Future>(fut: F, polls: u32) -> Option<F::Output> {
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
fn drive(
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
            Target::Enter(_) | Target::Sync(_) => {
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
async fn drive_tasks(f: AsyncFn, seen: Arc<Seen>, tasks: usize, load: Load) {
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

// ---- visits -----------------------------------------------------------------------------

fn visits_policy(max: u64, with_concurrency: bool) -> Policy {
    let b = Policy::builder().max_visits(max);
    let b = if with_concurrency {
        b.max_concurrency(10_000)
    } else {
        b
    };
    b.window(1, WINDOW).build().unwrap()
}

/// Where a case runs: its registry, point, call shape and number of threads.
#[derive(Clone, Copy)]
struct At<'n> {
    reg: &'static Registry,
    name: &'n str,
    shape: Shape,
    threads: usize,
}

/// `max_visits(max)` in one window: exactly `min(max, calls)` admitted; with `swap`,
/// another thread keeps swapping the policy for one with the same visits rule and
/// window (plus a concurrency rule that never trips).
fn visits_case(
    v: &Verdicts,
    at: At<'_>,
    target: impl FnOnce(&'static Point) -> Target<'static>,
    max: u64,
    swap: bool,
) {
    let At {
        reg,
        name,
        shape,
        threads,
    } = at;
    let case = Case::new(format!("max_visits({max})"), shape, threads, swap);
    let (plain, other) = (visits_policy(max, false), visits_policy(max, true));
    in_one_window(v, &case, reg.clock(), || {
        reg.set_policy(name, plain.clone()).unwrap();
        let p = reg.point(name).unwrap();
        let swapper = || {
            reg.set_policy(name, other.clone()).unwrap();
            reg.set_policy(name, plain.clone()).unwrap();
        };
        let hold = if shape == Shape::AsyncMacro {
            Hold::Brief
        } else {
            Hold::None
        };
        let seen = drive(
            target(p),
            threads,
            Load::calls(threads, hold),
            swap.then_some(&swapper as &(dyn Fn() + Sync)),
        );
        let s = p.stats();
        check_books(v, &case, &s, &seen);
        check_reasons(v, &case, &s, &[Reason::Visits]);
        let want = max.min(seen.calls());
        v.check(seen.admitted() == want, || {
            format!(
                "{case}: {} of {} calls admitted, exactly {want} must be",
                seen.admitted(),
                seen.calls()
            )
        });
        if shape == Shape::AsyncMacro {
            v.check(s.totals.exceptions == 0, || {
                format!(
                    "{case}: {} exceptions, but no call failed (dropped futures are cancelled calls)",
                    s.totals.exceptions
                )
            });
        }
    });
}

#[test]
fn visits_admit_exactly_the_limit() {
    let v = Verdicts::default();
    for threads in THREADS {
        for max in [0, 1000] {
            let reg = system_registry();
            let name = format!("visits.{max}.{threads}");
            visits_case(
                &v,
                At {
                    reg,
                    name: &name,
                    shape: Shape::Enter,
                    threads,
                },
                Target::Enter,
                max,
                false,
            );
        }
    }
    v.conclude();
}

#[test]
fn visits_stay_exact_while_the_policy_is_swapped() {
    let v = Verdicts::default();
    for threads in THREADS {
        let reg = system_registry();
        let name = format!("visits.swap.{threads}");
        visits_case(
            &v,
            At {
                reg,
                name: &name,
                shape: Shape::Enter,
                threads,
            },
            Target::Enter,
            1000,
            true,
        );
    }
    v.conclude();
}

#[test]
fn downgrade_fn_visits_admit_exactly_the_limit() {
    let v = Verdicts::default();
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, max, swap) in [
            (&S_V0, 0, false),
            (&S_V1000, 1000, false),
            (&S_VSWAP, 1000, true),
        ] {
            let (f, name) = table[k];
            visits_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::SyncMacro,
                    threads,
                },
                |_| Target::Sync(f),
                max,
                swap,
            );
        }
    }
    v.conclude();
}

#[test]
fn async_downgrade_visits_admit_exactly_the_limit() {
    let v = Verdicts::default();
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, max, swap) in [
            (&A_V0, 0, false),
            (&A_V1000, 1000, false),
            (&A_VSWAP, 1000, true),
        ] {
            let (f, name) = table[k];
            visits_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::AsyncMacro,
                    threads,
                },
                |_| Target::Async(f, rt),
                max,
                swap,
            );
        }
    }
    v.conclude();
}

// ---- concurrency ------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConcMode {
    /// `max_concurrency(n)` alone.
    Plain,
    /// Swapped with `max_concurrency(n).max_visits(u64::MAX / 2)` in a loop.
    Swap,
    /// `max_concurrency(n).delay(1 s, Some(10 ms))`: a trip starts a delay whose probes
    /// come every 10 ms, while the callers that filled the limit still hold it.
    Delay,
}

/// `max_concurrency(n)`: at most `n` calls in flight, as the callers count them and as
/// the point's peak says.
fn concurrency_case(
    v: &Verdicts,
    at: At<'_>,
    target: impl FnOnce(&'static Point) -> Target<'static>,
    n: u32,
    mode: ConcMode,
) {
    let At {
        reg,
        name,
        shape,
        threads,
    } = at;
    let plain = Policy::builder().max_concurrency(n);
    let (policy, other, rule, load) = match mode {
        ConcMode::Plain | ConcMode::Swap => (
            plain.clone().build().unwrap(),
            plain.max_visits(u64::MAX / 2).build().unwrap(),
            format!("max_concurrency({n})"),
            Load::calls(threads, BRIEF),
        ),
        ConcMode::Delay => {
            let p = plain
                .delay(Duration::from_secs(1), Some(RETRY))
                .build()
                .unwrap();
            (
                p.clone(),
                p,
                format!("max_concurrency({n}).delay(1s, Some({RETRY:?}))"),
                Load::timed(DELAY_RUN, DELAY_HOLD),
            )
        }
    };
    let swap = mode == ConcMode::Swap;
    let case = Case::new(rule, shape, threads, swap);
    reg.set_policy(name, policy.clone()).unwrap();
    let p = reg.point(name).unwrap();
    let swapper = || {
        reg.set_policy(name, other.clone()).unwrap();
        reg.set_policy(name, policy.clone()).unwrap();
    };
    let seen = drive(
        target(p),
        threads,
        load,
        swap.then_some(&swapper as &(dyn Fn() + Sync)),
    );
    let s = p.stats();
    check_books(v, &case, &s, &seen);
    check_reasons(v, &case, &s, &[Reason::Concurrency, Reason::Delay]);
    v.check(seen.max_inflight() <= u64::from(n), || {
        format!(
            "{case}: the callers saw {} calls in flight at once, at most {n} may be",
            seen.max_inflight()
        )
    });
    v.check(s.peak_concurrency <= u64::from(n), || {
        format!(
            "{case}: peak_concurrency {}, at most {n} may be",
            s.peak_concurrency
        )
    });
    if shape == Shape::AsyncMacro {
        v.check(s.totals.exceptions == 0, || {
            format!(
                "{case}: {} exceptions, but no call failed (dropped futures are cancelled calls)",
                s.totals.exceptions
            )
        });
    }
}

fn concurrency_enter(mode: ConcMode) {
    let v = Verdicts::default();
    for threads in THREADS {
        for n in [1, 3] {
            let reg = system_registry();
            let name = format!("concurrency.{mode:?}.{n}.{threads}");
            concurrency_case(
                &v,
                At {
                    reg,
                    name: &name,
                    shape: Shape::Enter,
                    threads,
                },
                Target::Enter,
                n,
                mode,
            );
        }
    }
    v.conclude();
}

#[test]
fn concurrency_is_never_exceeded() {
    concurrency_enter(ConcMode::Plain);
}

#[test]
fn concurrency_is_never_exceeded_while_the_policy_is_swapped() {
    concurrency_enter(ConcMode::Swap);
}

#[test]
fn concurrency_is_never_exceeded_by_delay_probes() {
    concurrency_enter(ConcMode::Delay);
}

type MacroTable<F> = [(&'static [(F, &'static str); 6], u32, ConcMode); 6];

const SYNC_CONCURRENCY: MacroTable<SyncFn> = [
    (&S_C1, 1, ConcMode::Plain),
    (&S_C3, 3, ConcMode::Plain),
    (&S_C1SWAP, 1, ConcMode::Swap),
    (&S_C3SWAP, 3, ConcMode::Swap),
    (&S_C1DELAY, 1, ConcMode::Delay),
    (&S_C3DELAY, 3, ConcMode::Delay),
];

const ASYNC_CONCURRENCY: MacroTable<AsyncFn> = [
    (&A_C1, 1, ConcMode::Plain),
    (&A_C3, 3, ConcMode::Plain),
    (&A_C1SWAP, 1, ConcMode::Swap),
    (&A_C3SWAP, 3, ConcMode::Swap),
    (&A_C1DELAY, 1, ConcMode::Delay),
    (&A_C3DELAY, 3, ConcMode::Delay),
];

#[test]
fn downgrade_fn_concurrency_is_never_exceeded() {
    let v = Verdicts::default();
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, n, mode) in SYNC_CONCURRENCY {
            let (f, name) = table[k];
            concurrency_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::SyncMacro,
                    threads,
                },
                |_| Target::Sync(f),
                n,
                mode,
            );
        }
    }
    v.conclude();
}

#[test]
fn async_downgrade_concurrency_is_never_exceeded() {
    let v = Verdicts::default();
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, n, mode) in ASYNC_CONCURRENCY {
            let (f, name) = table[k];
            concurrency_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::AsyncMacro,
                    threads,
                },
                |_| Target::Async(f, rt),
                n,
                mode,
            );
        }
    }
    v.conclude();
}

// ---- token bucket -----------------------------------------------------------------------

fn take(p: &'static Point) -> bool {
    p.enter().map(|permit| permit.finish(false)).is_ok()
}

#[test]
fn a_frozen_token_bucket_admits_exactly_its_capacity() {
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let name = format!("tokens.frozen.{threads}");
        reg.set_policy(
            &name,
            Policy::builder().token_bucket(100.0, 50).build().unwrap(),
        )
        .unwrap();
        let p = reg.point(&name).unwrap();
        let case = Case::new(
            "token_bucket(100, 50), frozen clock",
            Shape::Enter,
            threads,
            false,
        );
        let seen = drive(Target::Enter(p), threads, Load::calls(threads, BRIEF), None);
        let s = p.stats();
        check_books(&v, &case, &s, &seen);
        check_reasons(&v, &case, &s, &[Reason::TokenBucket]);
        v.check(seen.admitted() == 50, || {
            format!(
                "{case}: {} of {} calls admitted, exactly 50 must be",
                seen.admitted(),
                seen.calls()
            )
        });
    }
    v.conclude();
}

#[test]
fn a_refilling_token_bucket_admits_at_most_capacity_plus_refill() {
    const STEP: Duration = Duration::from_millis(1);
    const STEPS: u64 = 200;
    const CALLS_PER_STEP: u64 = CALLS / STEPS;
    let (rate, capacity) = (100u64, 50u64);
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, clock) = manual_registry();
        let name = format!("tokens.refill.{threads}");
        reg.set_policy(
            &name,
            Policy::builder()
                .token_bucket(rate as f64, capacity)
                .build()
                .unwrap(),
        )
        .unwrap();
        let p = reg.point(&name).unwrap();
        let case = Case::new(
            format!("token_bucket({rate}, {capacity}), clock advancing by {STEP:?} steps"),
            Shape::Enter,
            threads,
            false,
        );
        let seen = Seen::default();
        let stop = AtomicBool::new(false);
        let made = AtomicU64::new(0);
        let start = Barrier::new(threads + 1);
        let load = Load::calls(threads, Hold::None);
        let advanced = std::thread::scope(|s| {
            for _ in 0..threads {
                let (seen, stop, made, start) = (&seen, &stop, &made, &start);
                s.spawn(move || {
                    start.wait();
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        made.fetch_add(1, Ordering::Relaxed);
                        enter_call(p, seen, i, load);
                        i += 1;
                    }
                    seen.calls.fetch_add(i, Ordering::SeqCst);
                });
            }
            // The clock moves one step per `CALLS_PER_STEP` calls, so that calls are
            // made all along.
            start.wait();
            let mut advanced = Duration::ZERO;
            for step in 1..=STEPS {
                while made.load(Ordering::Relaxed) < step * CALLS_PER_STEP {
                    std::thread::yield_now();
                }
                clock.advance(STEP);
                advanced += STEP;
            }
            stop.store(true, Ordering::Relaxed);
            advanced
        });
        let s = p.stats();
        check_books(&v, &case, &s, &seen);
        check_reasons(&v, &case, &s, &[Reason::TokenBucket]);
        let refill = u64::try_from(u128::from(rate) * advanced.as_nanos() / 1_000_000_000).unwrap();
        let bound = capacity + refill;
        v.check(seen.admitted() <= bound, || {
            format!(
                "{case}: {} of {} calls admitted over {advanced:?}, at most {capacity} + {refill} = {bound} may be",
                seen.admitted(),
                seen.calls()
            )
        });
        v.check(seen.admitted() >= capacity, || {
            format!(
                "{case}: only {} of {} calls admitted, the full bucket alone holds {capacity}",
                seen.admitted(),
                seen.calls()
            )
        });
    }
    v.conclude();
}

#[test]
fn token_refill_is_exact() {
    let (reg, clock) = manual_registry();
    reg.set_policy(
        "tokens.exact",
        Policy::builder().token_bucket(15.0, 3).build().unwrap(),
    )
    .unwrap();
    let p = reg.point("tokens.exact").unwrap();
    let first: Vec<bool> = (0..4).map(|_| take(p)).collect();
    clock.advance(Duration::from_millis(200));
    let second: Vec<bool> = (0..4).map(|_| take(p)).collect();
    assert_eq!(
        (first.as_slice(), second.as_slice()),
        (&[true, true, true, false][..], &[true, true, true, false][..]),
        "token_bucket(15, 3) [enter/finish, 1 thread]: 3 tokens, 4th refused; then exactly 200 ms refill 15/s x 0.2 s = 3 tokens, 4th refused"
    );
    let s = p.stats();
    assert_eq!(
        (
            s.totals.visits,
            s.totals.passes,
            s.totals.downgrades,
            s.concurrency
        ),
        (8, 6, 2, 0),
        "token_bucket(15, 3) [enter/finish, 1 thread]: books"
    );
}

#[test]
fn a_larger_token_bucket_admits_the_very_next_call() {
    let (reg, _clock) = manual_registry();
    let name = "tokens.rate_change";
    reg.set_policy(
        name,
        Policy::builder().token_bucket(1.0, 1).build().unwrap(),
    )
    .unwrap();
    let p = reg.point(name).unwrap();
    let drained = (take(p), take(p));
    assert_eq!(
        drained,
        (true, false),
        "token_bucket(1, 1) [enter/finish, 1 thread]: one token, then empty"
    );
    reg.set_policy(
        name,
        Policy::builder()
            .token_bucket(1e9, 1_000_000_000)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert!(
        take(p),
        "token_bucket(1, 1) exhausted, then token_bucket(1e9, 1e9) [enter/finish, 1 thread, clock not advanced]: the very next call was refused"
    );
    let s = p.stats();
    assert_eq!(
        (
            s.totals.visits,
            s.totals.passes + s.totals.downgrades,
            s.concurrency
        ),
        (3, 3, 0),
        "rate change [enter/finish, 1 thread]: books"
    );
}

// ---- exceptions and timeouts ----------------------------------------------------------------

/// `rule` with limit `n` in one window, every admitted call counted by the rule (an
/// exception or a timeout): with `threads` callers doing one call at a time, the
/// window ends with at least `n` and at most `n - 1 + threads` of them.
fn counted_rule_case(
    v: &Verdicts,
    rule: &str,
    policy: Policy,
    n: u64,
    reason: Reason,
    call: fn(&'static Point, &Seen),
    counted: fn(&PointStats) -> u64,
) {
    for threads in THREADS {
        let reg = system_registry();
        let name = format!("{rule}.{threads}");
        let case = Case::new(format!("{rule}({n})"), Shape::Enter, threads, false);
        in_one_window(v, &case, reg.clock(), || {
            reg.set_policy(&name, policy.clone()).unwrap();
            let p = reg.point(&name).unwrap();
            let seen = Arc::new(Seen::default());
            let start = Barrier::new(threads);
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let (seen, start) = (&*seen, &start);
                    s.spawn(move || {
                        start.wait();
                        let calls = CALLS / threads as u64;
                        for _ in 0..calls {
                            call(p, seen);
                        }
                        seen.calls.fetch_add(calls, Ordering::SeqCst);
                    });
                }
            });
            let s = p.stats();
            check_books(v, &case, &s, &seen);
            check_reasons(v, &case, &s, &[reason]);
            let got = counted(&s);
            let most = n - 1 + threads as u64;
            v.check((n..=most).contains(&got), || {
                format!(
                    "{case}: the window holds {got} {reason:?}, it must hold {n}..={most} (N - 1 + T)"
                )
            });
            v.check(got == seen.admitted(), || {
                format!(
                    "{case}: every one of the {} admitted calls is counted by the rule, but {got} are",
                    seen.admitted()
                )
            });
        });
    }
}

#[test]
fn exceptions_stop_at_the_limit_plus_calls_in_flight() {
    const N: u64 = 100;
    let v = Verdicts::default();
    counted_rule_case(
        &v,
        "max_exceptions",
        Policy::builder()
            .max_exceptions(N)
            .window(1, WINDOW)
            .build()
            .unwrap(),
        N,
        Reason::Exceptions,
        |p, seen| match p.enter() {
            Ok(permit) => {
                let inside = seen.inside();
                hold_sync(Hold::Brief, 0);
                drop(inside);
                permit.finish(true);
            }
            Err(d) => seen.refused(d.reason()),
        },
        |s| s.totals.exceptions,
    );
    v.conclude();
}

#[test]
fn timeouts_stop_at_the_limit_plus_calls_in_flight() {
    const N: u64 = 50;
    let v = Verdicts::default();
    counted_rule_case(
        &v,
        "timeouts(50us)",
        Policy::builder()
            .timeouts(Duration::from_micros(50), N)
            .window(1, WINDOW)
            .build()
            .unwrap(),
        N,
        Reason::Timeouts,
        |p, seen| match p.enter() {
            Ok(permit) => {
                let inside = seen.inside();
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
                drop(inside);
                permit.finish(false);
            }
            Err(d) => seen.refused(d.reason()),
        },
        |s| s.totals.timeouts,
    );
    v.conclude();
}

// ---- classic breaker ----------------------------------------------------------------------

#[test]
fn a_half_open_classic_breaker_admits_exactly_its_probes() {
    const PROBES: u32 = 5;
    const FAILURES: u32 = 3;
    const OPEN_WAIT: Duration = Duration::from_secs(5);
    let v = Verdicts::default();
    for threads in THREADS {
        for with_policy in [false, true] {
            let (reg, clock) = manual_registry();
            let name = format!("breaker.{threads}.{with_policy}");
            let rule = format!(
                "classic breaker, {FAILURES} failures open it, {PROBES} half-open probes{}",
                if with_policy { ", observe policy" } else { "" }
            );
            let case = Case::new(rule, Shape::Enter, threads, false);
            reg.set_breaker(
                &name,
                BreakerPolicy::Classic(ClassicConfig {
                    consecutive_failures: Some(FAILURES),
                    open_wait: Backoff::fixed(OPEN_WAIT),
                    half_open_probes: PROBES,
                    ..ClassicConfig::default()
                }),
            )
            .unwrap();
            if with_policy {
                reg.set_policy(&name, Policy::observe()).unwrap();
            }
            let p = reg.point(&name).unwrap();
            for _ in 0..FAILURES {
                match p.enter() {
                    Ok(permit) => permit.finish(true),
                    Err(d) => v.check(false, || {
                        format!("{case}: a closed breaker refused a call ({:?})", d.reason())
                    }),
                }
            }
            let open = p.enter().map(drop).map_err(|d| d.reason());
            v.check(open == Err(Reason::BreakerOpen), || {
                format!("{case}: after {FAILURES} failures the breaker must be open, the call got {open:?}")
            });
            clock.advance(OPEN_WAIT + Duration::from_millis(1));
            let before = p.stats();
            let seen = Seen::default();
            let (start, tried) = (Barrier::new(threads), Barrier::new(threads));
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let (seen, start, tried) = (&seen, &start, &tried);
                    s.spawn(move || {
                        start.wait();
                        let entered = p.enter();
                        let inside = match &entered {
                            Ok(_) => Some(seen.inside()),
                            Err(d) => {
                                seen.refused(d.reason());
                                None
                            }
                        };
                        seen.calls.fetch_add(1, Ordering::SeqCst);
                        // Every permit is held until every thread has tried.
                        tried.wait();
                        drop(inside);
                        if let Ok(permit) = entered {
                            permit.finish(false);
                        }
                    });
                }
            });
            let after = p.stats();
            let (b, a) = (&before.totals, &after.totals);
            let want = u64::from(PROBES).min(threads as u64);
            v.check(seen.admitted() == want, || {
                format!(
                    "{case}: {} of {threads} racing calls admitted half-open, exactly {want} must be",
                    seen.admitted()
                )
            });
            v.check(a.visits - b.visits == seen.calls(), || {
                format!(
                    "{case}: {} calls made, {} visits counted",
                    seen.calls(),
                    a.visits - b.visits
                )
            });
            v.check(a.visits == a.passes + a.downgrades, || {
                format!(
                    "{case}: visits {} != passes {} + downgrades {}",
                    a.visits, a.passes, a.downgrades
                )
            });
            v.check(a.passes - b.passes == seen.admitted(), || {
                format!(
                    "{case}: the callers saw {} admitted, the point counted {} passes",
                    seen.admitted(),
                    a.passes - b.passes
                )
            });
            let refused = seen.refused_for(Reason::BreakerOpen);
            v.check(a.downgrades - b.downgrades == refused, || {
                format!(
                    "{case}: the callers saw {refused} refusals (BreakerOpen), the point counted {} downgrades",
                    a.downgrades - b.downgrades
                )
            });
            v.check(after.concurrency == 0, || {
                format!("{case}: {} permits never came back", after.concurrency)
            });
        }
    }
    v.conclude();
}
