//! The call shapes: the `macro_rules` that stamp out `#[downgrade]` fns (one point
//! each), how a case calls its point ([`Target`], [`Load`]), and [`drive`], which runs
//! the callers.

use super::{hold_sync, Hold, Registry, Seen, Shape, CALLS};
use resilience_runtime::{Downgraded, Point, Reason};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::task::Poll;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) enum MyErr {
    Down(Reason),
    /// The body's own error (an exception), from the `failing` fns.
    Failed,
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
/// [`THREADS`](super::THREADS) order. The body counts its admission ([`Seen::inside`]),
/// holds, and returns `Ok(1)`; with `failing`, it returns `Err(MyErr::Failed)` (an
/// exception) instead.
macro_rules! sync_points {
    (failing $table:ident: $($f:ident $name:tt),+ $(,)?) => {
        sync_points!(@stamp Err(MyErr::Failed), $table: $($f $name),+);
    };
    (@stamp $out:expr, $table:ident: $($f:ident $name:tt),+) => {
        $(
            #[downgrade(point = $name)]
            fn $f(seen: &Seen, hold: Hold, i: u64) -> Result<u32, MyErr> {
                let _inside = seen.inside();
                hold_sync(hold, i);
                $out
            }
        )+
        const $table: [(SyncFn, &str); 6] = [$(($f as SyncFn, $name)),+];
    };
    ($table:ident: $($f:ident $name:tt),+ $(,)?) => {
        sync_points!(@stamp Ok(1), $table: $($f $name),+);
    };
}

/// Stamps out one `#[downgrade]` `async fn` per point name (each in its own module,
/// with a boxing wrapper), and a table of them in [`THREADS`](super::THREADS) order;
/// the body as in [`sync_points`], with `failing` too.
macro_rules! async_points {
    (failing $table:ident: $($f:ident $name:tt),+ $(,)?) => {
        async_points!(@stamp Err(MyErr::Failed), $table: $($f $name),+);
    };
    (@stamp $out:expr, $table:ident: $($f:ident $name:tt),+) => {
        $(
            mod $f {
                use super::*;

                #[downgrade(point = $name)]
                pub(super) async fn call(seen: Arc<Seen>, hold: Hold) -> Result<u32, MyErr> {
                    let _inside = seen.inside();
                    hold_async(hold).await;
                    $out
                }

                pub(super) fn boxed(seen: Arc<Seen>, hold: Hold) -> BoxFut {
                    Box::pin(call(seen, hold))
                }
            }
        )+
        const $table: [(AsyncFn, &str); 6] = [$(($f::boxed as AsyncFn, $name)),+];
    };
    ($table:ident: $($f:ident $name:tt),+ $(,)?) => {
        async_points!(@stamp Ok(1), $table: $($f $name),+);
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
        Ok(_) | Err(MyErr::Failed) => {
            seen.completed.fetch_add(1, Ordering::SeqCst);
        }
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
                    match out {
                        Some(Ok(_) | Err(MyErr::Failed)) => {
                            seen.completed.fetch_add(1, Ordering::SeqCst);
                        }
                        Some(Err(MyErr::Down(reason))) => {
                            seen.refused(reason);
                            if load.pause {
                                tokio::task::yield_now().await;
                            }
                        }
                        None => {}
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
