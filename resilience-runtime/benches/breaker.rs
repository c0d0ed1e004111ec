//! Closed-path cost of `#[breaker]` against failsafe's `call` and a hand-rolled
//! `Mutex` breaker, in the same run; 1 and 2 threads.
//! Run with `cargo bench -p resilience-runtime --bench breaker`.
//!
//! Target: `#[breaker]` costs at most a quarter of failsafe's `call` and scales to two
//! threads without a lock on the pass path. The ratio is also printed as measured
//! interleaved, which holds up better on a noisy host.

// `criterion_group!` generates undocumented public functions.
#![allow(missing_docs)]

#[path = "support/mod.rs"]
mod support;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::breaker;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::two_threads;

#[inline(never)]
fn work(x: u64) -> Result<u64, ()> {
    Ok(black_box(x).wrapping_mul(3))
}

#[breaker(point = "bench.breaker", default = Ok(0))]
#[inline(never)]
fn guarded(x: u64) -> Result<u64, ()> {
    work(x)
}

/// The breaker most services write first: one mutex around a failure counter.
struct MutexBreaker {
    state: Mutex<(u32, Option<Instant>)>,
}

impl MutexBreaker {
    fn call<T, E>(&self, f: impl FnOnce() -> Result<T, E>) -> Option<Result<T, E>> {
        {
            let s = self.state.lock().unwrap();
            if let Some(opened) = s.1 {
                if opened.elapsed() < Duration::from_secs(5) {
                    return None;
                }
            }
        }
        let r = f();
        let mut s = self.state.lock().unwrap();
        if r.is_err() {
            s.0 += 1;
            if s.0 >= 5 {
                s.1 = Some(Instant::now());
            }
        } else {
            s.0 = 0;
            s.1 = None;
        }
        Some(r)
    }
}

fn closed_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker_closed");
    g.bench_function("plain_fn", |b| b.iter(|| work(black_box(7))));
    let fs = failsafe::Config::new().build();
    g.bench_function("failsafe_call", |b| {
        b.iter(|| {
            use failsafe::CircuitBreaker;
            black_box(fs.call(|| work(7)))
        })
    });
    let mb = MutexBreaker {
        state: Mutex::new((0, None)),
    };
    g.bench_function("mutex_breaker", |b| {
        b.iter(|| black_box(mb.call(|| work(7))))
    });
    g.bench_function("resilience_breaker", |b| b.iter(|| guarded(black_box(7))));

    g.bench_function("failsafe_call_2_threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                use failsafe::CircuitBreaker;
                let _ = black_box(fs.call(|| work(7)));
            })
        })
    });
    g.bench_function("mutex_breaker_2_threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(mb.call(|| work(7)));
            })
        })
    });
    g.bench_function("resilience_breaker_2_threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(guarded(7));
            })
        })
    });
    g.finish();

    // The target as a ratio measured interleaved (see `support::interleaved`).
    let t = support::interleaved(
        400,
        5_000,
        &[
            &|| {
                use failsafe::CircuitBreaker;
                let _ = black_box(fs.call(|| work(7)));
            },
            &|| {
                let _ = black_box(guarded(black_box(7)));
            },
        ],
    );
    println!(
        "interleaved, median of 400 rounds of 5 000 calls each: failsafe call {:.1} ns, \
         #[breaker] {:.1} ns; #[breaker] / failsafe call = {:.2} (target <= 0.2)",
        support::median(&t[0]),
        support::median(&t[1]),
        support::median_ratio(&t[1], &t[0])
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = closed_path
}
criterion_main!(benches);
