//! The concurrency rule's queue (`PolicyBuilder::queue`).
//! Run with `cargo bench -p resilience-runtime --features tokio --bench queue`.
//!
//! 1. The pass path of a point whose queue is empty, against the same point without a
//!    queue (`max_concurrency` alone), sync `#[downgrade]` fns, measured interleaved
//!    (see `support::median_ratio`). Target: at most 1.10.
//! 2. One wait-and-wake round trip: a slot held, a second call waits (polled once:
//!    queued), the slot is freed (which wakes it), the waiter is polled again and gets
//!    the slot, then frees it. Against the same round trip on
//!    `tokio::sync::Semaphore::acquire`, both polled by hand inside one `block_on` of a
//!    current-thread runtime.

#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

use resilience_runtime::{downgrade, registry, Policy};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[downgrade(point = "bench.queue.without", default)]
#[inline(never)]
fn without_queue(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "bench.queue.with", default)]
#[inline(never)]
fn with_queue(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

fn main() {
    let limit = |queue: bool| {
        let b = Policy::builder().max_concurrency(1_000_000);
        let b = if queue {
            b.queue(100, Duration::from_secs(1))
        } else {
            b
        };
        b.build().unwrap()
    };
    registry()
        .set_policy("bench.queue.without", limit(false))
        .unwrap();
    registry()
        .set_policy("bench.queue.with", limit(true))
        .unwrap();
    let without = || {
        black_box(without_queue(black_box(7)));
    };
    let with = || {
        black_box(with_queue(black_box(7)));
    };
    let t = support::interleaved(400, 5_000, &[&without, &with]);
    println!("pass path, interleaved, median of 400 rounds of 5 000 calls (ns per call):");
    println!(
        "  max_concurrency alone            {:>7.1}",
        support::median(&t[0])
    );
    println!(
        "  max_concurrency + empty queue    {:>7.1}",
        support::median(&t[1])
    );
    println!(
        "  empty queue / no queue           {:>7.2} (target <= 1.10)",
        support::median_ratio(&t[1], &t[0])
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    registry()
        .set_policy(
            "bench.queue.trip",
            Policy::builder()
                .max_concurrency(1)
                .queue(4, Duration::from_secs(10))
                .build()
                .unwrap(),
        )
        .unwrap();
    let point = registry().point("bench.queue.trip").unwrap();
    let ours = |n: u64| {
        for _ in 0..n {
            let held = point.enter().unwrap();
            let mut waiter = pin!(point.enter_async());
            assert!(poll_once(waiter.as_mut()).is_pending());
            held.finish(false);
            let Poll::Ready(Ok(permit)) = poll_once(waiter.as_mut()) else {
                panic!("woken with the slot");
            };
            permit.finish(false);
        }
    };
    let semaphore = tokio::sync::Semaphore::new(1);
    let theirs = |n: u64| {
        for _ in 0..n {
            let held = semaphore.try_acquire().unwrap();
            let mut waiter = pin!(semaphore.acquire());
            assert!(poll_once(waiter.as_mut()).is_pending());
            drop(held);
            let Poll::Ready(Ok(permit)) = poll_once(waiter.as_mut()) else {
                panic!("woken with the permit");
            };
            drop(permit);
        }
    };
    const ROUNDS: usize = 200;
    const BATCH: u64 = 2_000;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // Unconstrained: tokio's co-operative budget would make the semaphore answer
    // `Pending` every 128 polls of this one task.
    rt.block_on(tokio::task::unconstrained(async {
        for _ in 0..ROUNDS {
            let start = Instant::now();
            ours(BATCH);
            a.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
            let start = Instant::now();
            theirs(BATCH);
            b.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
        }
    }));
    println!("wait-and-wake round trip, interleaved, median of {ROUNDS} rounds of {BATCH} (ns):");
    println!(
        "  point queue (enter_async)        {:>7.1}",
        support::median(&a)
    );
    println!(
        "  tokio Semaphore::acquire         {:>7.1}",
        support::median(&b)
    );
    println!(
        "  queue / semaphore                {:>7.2}",
        support::median_ratio(&a, &b)
    );
}
