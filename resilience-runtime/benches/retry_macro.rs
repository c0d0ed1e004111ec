//! What `#[retry]` adds to a call that succeeds on its first attempt: the same fn
//! with and without the attribute (the retry counts a call and an attempt on its
//! point; the backoff is only built when a retry happens).
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

criterion_group!(benches, first_attempt_succeeds);
criterion_main!(benches);
