//! The cost of `timeout = "..."` on an async call whose deadline does not fire, next to
//! the same call without it and to `tokio::time::timeout` around the bare call, on a
//! current-thread runtime. Two bodies: one ready at once, one pending once
//! (`yield_now`, as a call waiting on I/O: the deadline's timer is then registered in
//! tokio's wheel and removed when the call ends).
//! Run with `cargo bench -p resilience-runtime --features tokio --bench deadline`.
//!
//! Candidates are measured interleaved (see `support::median_ratio`): each round times
//! a batch of every candidate in turn, and each ratio is the median over rounds of the
//! ratio within a round, which a host whose speed drifts barely moves.
//!
//! Target: the attribute's deadline costs about what `tokio::time::timeout` itself
//! costs (the difference is one load of the compiled policy and the bookkeeping of a
//! cut that never happens).

// Only the medians are used here.
#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

use resilience_runtime::downgrade;
use std::hint::black_box;
use std::time::{Duration, Instant};

const ROUNDS: usize = 200;
const BATCH: u64 = 20_000;

#[inline(never)]
fn work(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

async fn bare_ready(x: u64) -> u64 {
    work(x)
}

#[downgrade(point = "bench.deadline.ready.plain", default)]
async fn plain_ready(x: u64) -> u64 {
    work(x)
}

#[downgrade(point = "bench.deadline.ready.timed", timeout = "1s", default)]
async fn timed_ready(x: u64) -> u64 {
    work(x)
}

async fn bare_pending(x: u64) -> u64 {
    tokio::task::yield_now().await;
    work(x)
}

#[downgrade(point = "bench.deadline.pending.plain", default)]
async fn plain_pending(x: u64) -> u64 {
    tokio::task::yield_now().await;
    work(x)
}

#[downgrade(point = "bench.deadline.pending.timed", timeout = "1s", default)]
async fn timed_pending(x: u64) -> u64 {
    tokio::task::yield_now().await;
    work(x)
}

/// Per-call times (ns) of every candidate in every round, measured interleaved: a
/// round runs a batch of each candidate, one after the other, in one `block_on`.
fn interleaved(
    rt: &tokio::runtime::Runtime,
    candidates: &[&dyn Fn(u64) -> Batch],
) -> Vec<Vec<f64>> {
    let mut times = vec![Vec::with_capacity(ROUNDS); candidates.len()];
    for _ in 0..ROUNDS {
        for (candidate, t) in candidates.iter().zip(&mut times) {
            let start = Instant::now();
            black_box(rt.block_on(candidate(BATCH)));
            t.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
        }
    }
    times
}

type Batch = std::pin::Pin<Box<dyn std::future::Future<Output = u64>>>;

macro_rules! batch {
    (|$x:ident| $call:expr) => {
        &|n: u64| -> Batch {
            Box::pin(async move {
                let mut sum = 0u64;
                for $x in 0..n {
                    sum = sum.wrapping_add($call);
                }
                sum
            })
        }
    };
}

fn report(title: &str, times: &[Vec<f64>]) {
    let [bare, plain, timed, tokio_alone] = times else {
        unreachable!("four candidates")
    };
    let ns = support::median;
    println!("{title} (median of {ROUNDS} rounds of {BATCH} calls, ns per call):");
    println!("  bare async fn                        {:>7.1}", ns(bare));
    println!("  #[downgrade]                         {:>7.1}", ns(plain));
    println!(
        "  #[downgrade(timeout = \"1s\")]         {:>7.1}",
        ns(timed)
    );
    println!(
        "  tokio::time::timeout(1s, bare fn)    {:>7.1}",
        ns(tokio_alone)
    );
    println!(
        "  timeout / no timeout                 {:>7.2}",
        support::median_ratio(timed, plain)
    );
    println!(
        "  timeout / tokio::time::timeout alone {:>7.2}",
        support::median_ratio(timed, tokio_alone)
    );
    let added = |a: &[f64], b: &[f64]| {
        let d: Vec<f64> = a.iter().zip(b).map(|(a, b)| a - b).collect();
        support::median(&d)
    };
    println!(
        "  added by the attribute's deadline    {:>7.1} ns (tokio::time::timeout adds {:.1} ns to the bare fn)",
        added(timed, plain),
        added(tokio_alone, bare),
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let deadline = Duration::from_secs(1);
    // Warm up: points looked up, timer wheel and allocator warm.
    let _ = interleaved(
        &rt,
        &[
            batch!(|x| timed_ready(x).await),
            batch!(|x| timed_pending(x).await),
        ],
    );

    let ready = interleaved(
        &rt,
        &[
            batch!(|x| bare_ready(x).await),
            batch!(|x| plain_ready(x).await),
            batch!(|x| timed_ready(x).await),
            batch!(|x| tokio::time::timeout(deadline, bare_ready(x)).await.unwrap()),
        ],
    );
    report("ready at once", &ready);

    let pending = interleaved(
        &rt,
        &[
            batch!(|x| bare_pending(x).await),
            batch!(|x| plain_pending(x).await),
            batch!(|x| timed_pending(x).await),
            batch!(|x| tokio::time::timeout(deadline, bare_pending(x))
                .await
                .unwrap()),
        ],
    );
    report("pending once (yield_now)", &pending);
}
