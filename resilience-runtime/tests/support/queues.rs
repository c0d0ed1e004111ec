//! What the queue tests and the queue-order tests share: a point's queue counts,
//! waiting for waiters, the order four waiters are served in, and many threads through
//! a point with a queue while its policy changes, with the books every such run must
//! balance.

use resilience_runtime::{Point, PointStats, QueueStats, Reason};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

pub(crate) fn queue(point: &Point) -> QueueStats {
    point.stats().queue.unwrap_or_default()
}

/// Spins until `n` calls wait on `point`.
pub(crate) fn until_waiting(point: &Point, n: u64) {
    let t0 = std::time::Instant::now();
    while queue(point).waiting != n {
        assert!(t0.elapsed() < Duration::from_secs(10), "never {n} waiting");
        std::thread::yield_now();
    }
}

pub(crate) fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    std::pin::Pin::new(f).poll(&mut cx)
}

/// On `point` (one slot, a queue of at least 4, waits that do not run out), holds the
/// slot while calls 0 to 3 queue one after the other, frees it, and returns the order
/// the calls ran in, after checking that all four waited and ran and nothing is left.
pub(crate) fn four_waiters_served(point: &'static Point) -> Vec<u64> {
    let held = point.enter().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..4u64 {
        let order = order.clone();
        threads.push(std::thread::spawn(move || {
            let permit = point.enter().unwrap();
            order.lock().unwrap().push(i);
            permit.finish(false);
        }));
        // Each waiter is queued before the next arrives.
        until_waiting(point, i + 1);
    }
    held.finish(false);
    for t in threads {
        t.join().unwrap();
    }
    let q = queue(point);
    assert_eq!((q.admitted, q.waiting, q.peak_waiting), (4, 0, 4));
    let s = point.stats();
    assert_eq!(
        (s.totals.passes, s.totals.downgrades, s.concurrency),
        (5, 0, 0)
    );
    let order = order.lock().unwrap().clone();
    order
}

/// What the callers saw.
pub(crate) struct Seen {
    /// Calls that ran.
    pub(crate) ran: u64,
    /// Calls refused.
    pub(crate) refused: u64,
    /// The most calls in the body at once.
    pub(crate) most: u64,
}

/// `threads` threads make 100 calls each on `point` (an admitted call stays 50 µs in
/// its body) while another thread calls `swap(i)` for `i = 0, 1, ...` every 300 µs
/// until the callers are done.
pub(crate) fn drive(
    point: &'static Point,
    threads: u64,
    swap: impl Fn(usize) + Send + 'static,
) -> Seen {
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let ran = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                swap(i);
                i += 1;
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (inside, most, ran, refused) =
                (inside.clone(), most.clone(), ran.clone(), refused.clone());
            std::thread::spawn(move || {
                for _ in 0..100 {
                    match point.enter() {
                        Ok(p) => {
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_micros(50));
                            inside.fetch_sub(1, Ordering::SeqCst);
                            ran.fetch_add(1, Ordering::Relaxed);
                            p.finish(false);
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    Seen {
        ran: ran.load(Ordering::Relaxed),
        refused: refused.load(Ordering::Relaxed),
        most: most.load(Ordering::SeqCst),
    }
}

/// Checks what every run must show: never more than `limit` calls in the body, every
/// call ended one way, the point's counts equal the callers', nothing left waiting or
/// in flight, no waiter cancelled, waiters admitted from 8 threads on, and every
/// refusal one of the queue's or the concurrency rule's. Returns the point's stats and
/// its queue's, for the caller's own checks.
pub(crate) fn check_books(
    point: &Point,
    threads: u64,
    limit: u64,
    seen: &Seen,
) -> (PointStats, QueueStats) {
    assert!(seen.most <= limit, "{threads}: {} in the body", seen.most);
    let s = point.stats();
    let q = s.queue.unwrap_or_default();
    assert_eq!(seen.ran + seen.refused, threads * 100, "{threads}");
    assert_eq!(s.totals.passes, seen.ran, "{threads}");
    assert_eq!(s.totals.downgrades, seen.refused, "{threads}");
    assert_eq!((s.concurrency, q.waiting), (0, 0), "{threads}: {q:?}");
    assert!(s.peak_concurrency <= limit, "{threads}");
    assert_eq!(q.cancelled, 0);
    if threads >= 8 {
        assert!(
            q.admitted > 0,
            "{threads}: calls waited and got slots: {q:?}"
        );
    }
    let by_reason = s.totals.downgrades_by_reason;
    assert_eq!(
        by_reason.get(Reason::QueueFull)
            + by_reason.get(Reason::QueueTimeout)
            + by_reason.get(Reason::Concurrency),
        seen.refused,
        "{threads}"
    );
    assert_eq!(q.timed_out, by_reason.get(Reason::QueueTimeout));
    (s, q)
}
