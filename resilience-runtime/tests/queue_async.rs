//! The queue under `#[downgrade]` async fns on a multi-thread tokio runtime (feature
//! `tokio`): real timers, random cancellations, policy swaps; the bound is exact, no
//! waiter is lost and no slot leaks.
#![cfg(feature = "tokio")]

use resilience_runtime::priority::{self, Priority};
use resilience_runtime::{downgrade, registry, Downgraded, Policy, Reason};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[derive(Debug, PartialEq)]
struct Refused(Reason);

impl From<Downgraded> for Refused {
    fn from(d: Downgraded) -> Self {
        Refused(d.reason())
    }
}

static INSIDE: AtomicU64 = AtomicU64::new(0);
static MOST: AtomicU64 = AtomicU64::new(0);

/// In the body: counted in, counted out when the body ends or is dropped.
struct Inside;

impl Inside {
    fn enter() -> Inside {
        let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
        MOST.fetch_max(now, Ordering::SeqCst);
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

#[downgrade(point = "qa.stress")]
async fn work(us: u64) -> Result<u64, Refused> {
    let _inside = Inside::enter();
    tokio::time::sleep(Duration::from_micros(us)).await;
    Ok(us)
}

fn bulkhead(n: u64) -> Policy {
    Policy::builder()
        .max_concurrency(n)
        .queue(32, Duration::from_millis(5))
        .build()
        .unwrap()
}

#[test]
fn sixty_four_tasks_with_random_cancellations_keep_every_count() {
    let name = "qa.stress";
    registry().set_policy(name, bulkhead(4)).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let [ran, refused, dropped] = runtime.block_on(async move {
        let swapper = tokio::spawn(async move {
            for i in 0..60u32 {
                registry()
                    .set_policy(name, bulkhead(if i.is_multiple_of(2) { 2 } else { 4 }))
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        let tasks: Vec<_> = (0..64u64)
            .map(|t| {
                tokio::spawn(async move {
                    let mut seen = [0u64; 3];
                    let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    for _ in 0..20 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let (us, patience) = (200 + x % 1500, 300 + (x >> 16) % 4000);
                        match tokio::time::timeout(Duration::from_micros(patience), work(us)).await
                        {
                            Ok(Ok(_)) => seen[0] += 1,
                            Ok(Err(_)) => seen[1] += 1,
                            Err(_) => seen[2] += 1,
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut all = [0u64; 3];
        for t in tasks {
            let seen = t.await.unwrap();
            for (a, s) in all.iter_mut().zip(seen) {
                *a += s;
            }
        }
        swapper.await.unwrap();
        all
    });
    drop(runtime);
    assert!(
        MOST.load(Ordering::SeqCst) <= 4,
        "{MOST:?} in the body at once"
    );
    assert_eq!(INSIDE.load(Ordering::SeqCst), 0);
    let s = registry().stats(name).unwrap();
    let q = s.queue.expect("calls waited");
    let t = s.totals;
    assert_eq!(ran + refused + dropped, 64 * 20);
    assert_eq!(t.visits, t.passes + t.downgrades);
    assert_eq!(t.downgrades, refused, "{q:?}");
    // A call dropped while it ran is a cancelled pass; one dropped while it waited
    // never began.
    assert_eq!(t.passes, ran + t.cancelled, "{q:?} {t:?}");
    assert_eq!(dropped, t.cancelled + q.cancelled, "{q:?} {t:?}");
    assert_eq!(
        (s.concurrency, q.waiting),
        (0, 0),
        "no slot leaked, no waiter left"
    );
    assert!(s.peak_concurrency <= 4);
    assert!(
        q.admitted > 0 && q.cancelled > 0,
        "the run waited and cancelled: {q:?}"
    );
}

static ORDER: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

#[downgrade(point = "qa.order")]
async fn ordered(i: u32, hold: u64) -> Result<(), Refused> {
    ORDER.lock().unwrap().push(i);
    tokio::time::sleep(Duration::from_millis(hold)).await;
    Ok(())
}

/// On tokio's paused clock: one slot, calls arriving 1 ms apart each wait their turn
/// in arrival order; the last one's wait runs out at the queue's deadline.
#[tokio::test(start_paused = true)]
async fn async_waiters_run_in_arrival_order_and_time_out_on_tokio_time() {
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(8, Duration::from_millis(35))
        .build()
        .unwrap();
    registry().set_policy("qa.order", policy).unwrap();
    let mut calls = Vec::new();
    for i in 0..4u32 {
        calls.push(tokio::spawn(ordered(i, 10)));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let results: Vec<_> = {
        let mut out = Vec::new();
        for c in calls {
            out.push(c.await.unwrap());
        }
        out
    };
    // 0 runs at 0..10, 1 at 10..20, 2 at 20..30, 3 at 30..40: all within 35 ms.
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(*ORDER.lock().unwrap(), [0, 1, 2, 3]);
    // Now one that cannot get the slot within 35 ms.
    let long = tokio::spawn(ordered(10, 100));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let t0 = tokio::time::Instant::now();
    let late = ordered(11, 1).await;
    assert!(
        matches!(late, Err(Refused(Reason::QueueTimeout))),
        "{late:?}"
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(35));
    long.await.unwrap().unwrap();
    let q = registry().stats("qa.order").unwrap().queue.unwrap();
    assert_eq!((q.admitted, q.timed_out, q.waiting), (3, 1, 0));
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[downgrade(point = "p.macro", priority = if vip { Priority::Critical } else { Priority::Sheddable })]
async fn lookup(vip: bool) -> Result<bool, Refused> {
    Ok(vip)
}

/// `priority = expr` over the arguments: a critical call evicts a sheddable waiter.
#[tokio::test]
async fn priority_from_the_arguments_orders_the_queue() {
    registry()
        .set_policy(
            "p.macro",
            Policy::builder()
                .max_concurrency(1)
                .queue(1, Duration::from_secs(60))
                .build()
                .unwrap(),
        )
        .unwrap();
    let point = registry().point("p.macro").unwrap();
    let held = point.enter().unwrap();
    let mut low = Box::pin(lookup(false));
    assert!(poll_once(&mut low).is_pending(), "waits");
    let mut high = Box::pin(lookup(true));
    assert!(
        poll_once(&mut high).is_pending(),
        "evicts the sheddable call and waits"
    );
    assert_eq!(
        poll_once(&mut low),
        Poll::Ready(Err(Refused(Reason::QueueFull)))
    );
    held.finish(false);
    assert_eq!(poll_once(&mut high), Poll::Ready(Ok(true)));
    assert_eq!(
        priority::current(),
        Priority::Default,
        "the entry's scope is gone"
    );
}
