//! What `#[retry]` adds to a call that succeeds on its first attempt: the same fn
//! with and without the attribute (the retry counts a call and an attempt on its
//! point; the backoff is only built when a retry happens). With the `tokio` feature,
//! async rows too: `#[retry]` with and without `hedge = "30ms"` on a call that answers
//! before the delay, on its first poll and after one `Pending` (which arms the hedge
//! timer), each driven by `futures_executor::block_on` inside a tokio context.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::retry;

#[inline(never)]
fn plain(x: u64) -> Result<u64, ()> {
    Ok(black_box(x).wrapping_mul(3))
}

#[retry(point = "bench.retry", attempts = 3)]
#[inline(never)]
fn retried(x: u64) -> Result<u64, ()> {
    Ok(black_box(x).wrapping_mul(3))
}

#[retry(point = "bench.retry.budget", attempts = 3, budget = "bench")]
#[inline(never)]
fn retried_with_budget(x: u64) -> Result<u64, ()> {
    Ok(black_box(x).wrapping_mul(3))
}

fn first_attempt_succeeds(c: &mut Criterion) {
    let mut g = c.benchmark_group("retry_macro");
    g.bench_function("plain_fn", |b| b.iter(|| plain(black_box(7))));
    g.bench_function("retry_first_attempt_ok", |b| {
        b.iter(|| retried(black_box(7)))
    });
    g.bench_function("retry_with_budget_first_attempt_ok", |b| {
        b.iter(|| retried_with_budget(black_box(7)))
    });
    g.finish();
}

#[cfg(feature = "tokio")]
mod hedged {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// `Pending` once (waking itself), then ready: an answer that is not immediate.
    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[retry(point = "bench.retry.async", attempts = 3)]
    #[inline(never)]
    async fn retried_async(x: u64, wait: bool) -> Result<u64, ()> {
        if wait {
            YieldOnce(false).await;
        }
        Ok(black_box(x).wrapping_mul(3))
    }

    #[retry(point = "bench.retry.hedged", attempts = 3, hedge = "30ms")]
    #[inline(never)]
    async fn hedged(x: u64, wait: bool) -> Result<u64, ()> {
        if wait {
            YieldOnce(false).await;
        }
        Ok(black_box(x).wrapping_mul(3))
    }

    pub(super) fn answers_before_the_delay(c: &mut Criterion) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _context = runtime.enter();
        let mut g = c.benchmark_group("retry_macro");
        g.bench_function("async_retry_first_poll_ok", |b| {
            b.iter(|| futures_executor::block_on(retried_async(black_box(7), false)))
        });
        g.bench_function("async_hedged_first_poll_ok", |b| {
            b.iter(|| futures_executor::block_on(hedged(black_box(7), false)))
        });
        g.bench_function("async_retry_after_one_pending_ok", |b| {
            b.iter(|| futures_executor::block_on(retried_async(black_box(7), true)))
        });
        g.bench_function("async_hedged_after_one_pending_ok", |b| {
            b.iter(|| futures_executor::block_on(hedged(black_box(7), true)))
        });
        g.finish();
        assert_eq!(
            resilience_runtime::registry()
                .point("bench.retry.hedged")
                .unwrap()
                .retry_stats()
                .hedges,
            0
        );
    }
}

#[cfg(feature = "tokio")]
criterion_group!(
    benches,
    first_attempt_succeeds,
    hedged::answers_before_the_delay
);
#[cfg(not(feature = "tokio"))]
criterion_group!(benches, first_attempt_succeeds);
criterion_main!(benches);
