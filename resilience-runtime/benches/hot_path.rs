//! Hot-path cost of `#[downgrade]`, measured in one run against yardsticks:
//! a plain function, one relaxed atomic increment, governor's `check()` and failsafe's
//! `call`. Run with `cargo bench -p resilience-runtime --bench hot_path`.
//!
//! Two sets of ratios are printed, both measured interleaved (the median over short
//! rounds of the ratio within a round, which holds up better on a noisy host than
//! ratios of rows measured seconds apart):
//!
//! - `ratios`, the exactness work's targets: no policy <= 2.5x the atomic increment;
//!   all five strategies <= 1.8x governor and <= 1/3 of failsafe; 2 threads on one
//!   point <= 8x the single-thread cost per call (from rounds of one batch alone and
//!   one batch on two threads).
//! - `bounds`, the tighter bounds of the pay-for-what-you-use work, each row against
//!   its peer (the `bounds` function lists them): no policy <= 2.0x the atomic
//!   increment, all five <= 1.5x governor, and the single-rule and tower rows.
//!
//! Both run after the criterion rows of the yardsticks and before the scaling rows,
//! which register 100 000 timed points whose hung-call sweeps would otherwise run in
//! the background and show the cost flat in the number of points, buckets and
//! listeners. `downgrade_all_five_fine_thresholds` shows the cost when thresholds are
//! short enough to need the tick counter instead of the cached timeline.

// `criterion_group!` generates undocumented public functions.
#![allow(missing_docs)]

#[path = "support/mod.rs"]
mod support;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::{downgrade, registry, Policy};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[inline(never)]
fn plain(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "bench.none", default)]
#[inline(never)]
fn guarded_none(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "bench.all", default)]
#[inline(never)]
fn guarded_all(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "bench.fine", default)]
#[inline(never)]
fn guarded_fine(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "bench.bucket_only", default)]
#[inline(never)]
fn guarded_bucket_only(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "bench.concurrency_only", default)]
#[inline(never)]
fn guarded_concurrency_only(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[resilience_runtime::breaker(point = "bench.breaker_closed", default = Ok(0))]
#[inline(never)]
fn guarded_breaker(x: u64) -> Result<u64, ()> {
    Ok(black_box(x).wrapping_mul(3))
}

#[downgrade(point = "bench.buckets", default)]
#[inline(never)]
fn guarded_buckets(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

/// Every strategy the issue names, with thresholds that never trip.
fn all_five(buckets: u64) -> Policy {
    five_rules(buckets, 1_000_000_000, Duration::from_secs(3600))
}

/// The five strategies with a token bucket of `capacity` at 10^9 tokens/s and a
/// timeout of `timeout`, in a 10 s window of `buckets` buckets.
fn five_rules(buckets: u64, capacity: u64, timeout: Duration) -> Policy {
    Policy::builder()
        .max_visits(u64::MAX / 2)
        .max_concurrency(1_000_000)
        .token_bucket(1e9, capacity)
        .max_exceptions(u64::MAX / 2)
        .timeouts(timeout, u64::MAX / 2)
        .window(buckets, Duration::from_millis(1000 * 10 / buckets.max(1)))
        .build()
        .unwrap()
}

fn yardsticks(c: &mut Criterion) {
    let mut g = c.benchmark_group("hot_path");
    g.bench_function("plain_fn", |b| b.iter(|| plain(black_box(7))));
    let counter = AtomicU64::new(0);
    g.bench_function("atomic_increment", |b| {
        b.iter(|| black_box(&counter).fetch_add(1, Ordering::Relaxed))
    });
    let limiter = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(u32::MAX).unwrap(),
    ));
    g.bench_function("governor_check", |b| b.iter(|| black_box(limiter.check())));
    let breaker = failsafe::Config::new().build();
    g.bench_function("failsafe_call", |b| {
        b.iter(|| {
            use failsafe::CircuitBreaker;
            black_box(breaker.call(|| Ok::<_, ()>(plain(7))))
        })
    });

    registry().clear_policy("bench.none").unwrap();
    g.bench_function("downgrade_no_policy", |b| {
        b.iter(|| guarded_none(black_box(7)))
    });
    registry().set_policy("bench.all", all_five(10)).unwrap();
    g.bench_function("downgrade_all_five", |b| {
        b.iter(|| guarded_all(black_box(7)))
    });

    // The same rules with thresholds too short for the cached millisecond timeline
    // (a 50 ms timeout, a 1 ms burst): durations and refills read the tick counter.
    registry()
        .set_policy(
            "bench.fine",
            five_rules(10, 1_000_000, Duration::from_millis(50)),
        )
        .unwrap();
    g.bench_function("downgrade_all_five_fine_thresholds", |b| {
        b.iter(|| guarded_fine(black_box(7)))
    });

    // Two threads on the same point: per-call latency of each thread while both run.
    g.bench_function("downgrade_all_five_2_threads", |b| {
        b.iter_custom(|iters| {
            support::two_threads(iters, || {
                guarded_all(black_box(7));
            })
        })
    });
    g.finish();
}

fn scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("scaling");
    registry()
        .set_policy("bench.buckets", all_five(10))
        .unwrap();
    g.bench_function("buckets_10", |b| b.iter(|| guarded_buckets(black_box(7))));
    registry()
        .set_policy("bench.buckets", all_five(600))
        .unwrap();
    g.bench_function("buckets_600", |b| b.iter(|| guarded_buckets(black_box(7))));

    registry().set_policy("bench.all", all_five(10)).unwrap();
    g.bench_function("points_few", |b| b.iter(|| guarded_all(black_box(7))));
    // 100 000 made-up points and a few more: past the default cap on undeclared ones.
    registry().set_max_undeclared_points(u64::MAX);
    for i in 0..100_000 {
        registry()
            .set_policy(&format!("bench.filler.{i}"), all_five(10))
            .unwrap();
    }
    g.bench_function("points_100k", |b| b.iter(|| guarded_all(black_box(7))));

    g.bench_function("listeners_0", |b| b.iter(|| guarded_all(black_box(7))));
    for _ in 0..10 {
        registry().add_listener(|e| {
            black_box(e);
        });
    }
    g.bench_function("listeners_10", |b| b.iter(|| guarded_all(black_box(7))));
    g.finish();

    let idle = registry().point("bench.idle").unwrap();
    let full = registry().point("bench.full").unwrap();
    registry()
        .set_policy(
            "bench.full",
            Policy::builder()
                .max_visits(1)
                .max_concurrency(1)
                .max_exceptions(1)
                .exception_rate(0.5, 10)
                .timeouts(Duration::from_millis(1), 1)
                .token_bucket(1.0, 1)
                .downgrade_percentage(50)
                .delay(Duration::from_secs(10), Some(Duration::from_secs(1)))
                .build()
                .unwrap(),
        )
        .unwrap();
    println!(
        "memory: idle point {} bytes, point with every rule (10-bucket window) {} bytes",
        idle.memory_bytes(),
        full.memory_bytes()
    );
}

/// The targets as ratios measured interleaved (see `support::interleaved`): each
/// ratio is the median over rounds of the ratio within a round, which a host that
/// flips between fast and slow phases moves far less than it moves the criterion rows
/// measured seconds apart.
fn ratios(_: &mut Criterion) {
    let counter = AtomicU64::new(0);
    let limiter = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(u32::MAX).unwrap(),
    ));
    let breaker = failsafe::Config::new().build();
    registry().clear_policy("bench.none").unwrap();
    registry().set_policy("bench.all", all_five(10)).unwrap();
    let atomic = || {
        black_box(black_box(&counter).fetch_add(1, Ordering::Relaxed));
    };
    let governor = || {
        let _ = black_box(limiter.check());
    };
    let failsafe = || {
        use failsafe::CircuitBreaker;
        let _ = black_box(breaker.call(|| Ok::<_, ()>(plain(7))));
    };
    let none = || {
        black_box(guarded_none(black_box(7)));
    };
    let all = || {
        black_box(guarded_all(black_box(7)));
    };
    let off = || resilience_runtime::measure_durations(false);
    let on = || resilience_runtime::measure_durations(true);
    let t = support::interleaved_prepared(
        400,
        5_000,
        &[
            (&off, &atomic),
            (&off, &governor),
            (&off, &failsafe),
            (&off, &none),
            (&off, &all),
            (&on, &all),
        ],
    );
    resilience_runtime::measure_durations(false);
    let [atomic, governor, failsafe, none, all, measured] = [0, 1, 2, 3, 4, 5].map(|i| &t[i][..]);
    println!("interleaved, median of 400 rounds of 5 000 calls each:");
    for (name, times) in [
        ("atomic increment", atomic),
        ("governor check", governor),
        ("failsafe call", failsafe),
        ("no policy", none),
        ("all five", all),
        ("all five, durations measured", measured),
    ] {
        println!("  {name:<28} {:>7.1} ns", support::median(times));
    }
    println!(
        "  no policy / atomic increment = {:.2} (target <= 2.5)",
        support::median_ratio(none, atomic)
    );
    println!(
        "  all five / governor check    = {:.2} (target <= 1.8)",
        support::median_ratio(all, governor)
    );
    println!(
        "  all five / failsafe call     = {:.2} (target <= 0.33)",
        support::median_ratio(all, failsafe)
    );
    println!(
        "  all five, durations measured / all five = {:.2} (the cost of \
         `measure_durations(true)`, which a heartbeat client turns on)",
        support::median_ratio(measured, all)
    );
    let all = || {
        black_box(guarded_all(black_box(7)));
    };
    let (one, two) = support::one_and_two_threads(100, 20_000, &all);
    println!(
        "interleaved, median of 100 rounds of 20 000 calls each: all five on 1 thread \
         {:.1} ns, on 2 threads {:.1} ns per call; 2 threads / 1 = {:.2} (target <= 8)",
        support::median(&one),
        support::median(&two),
        support::median_ratio(&two, &one)
    );
}

/// One call through a tower service that is ready at once: `poll_ready`, `call` and
/// one poll of the response future, which is ready too.
#[cfg(feature = "tower")]
fn tower_call<S>(svc: &std::cell::RefCell<S>)
where
    S: tower::Service<u64>,
    S::Response: std::fmt::Debug,
    S::Error: std::fmt::Debug,
{
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let mut svc = svc.borrow_mut();
    assert!(svc.poll_ready(&mut cx).is_ready());
    let fut = std::pin::pin!(svc.call(black_box(7)));
    match fut.poll(&mut cx) {
        Poll::Ready(r) => {
            black_box(r.unwrap());
        }
        Poll::Pending => unreachable!("the inner service answers at once"),
    }
}

/// The bounds of the pay-for-what-you-use issue, each against its peer, measured
/// interleaved in one run (median over rounds of the ratio within a round):
///
/// | row | peer | bound |
/// |---|---|---|
/// | no policy | a relaxed atomic increment | 2.0x |
/// | all five rules | governor's `check()` | 1.5x |
/// | token bucket only | governor's `check()` | 1.2x |
/// | `max_concurrency` only | tokio's `Semaphore::try_acquire` + drop | 1.2x |
/// | `#[breaker]` closed | failsafe's `call` | 0.15x |
/// | tower `PointLayer`, no policy | tower's `ConcurrencyLimitLayer` | 1.0x |
/// | tower `PointLayer`, all five | tower's `ConcurrencyLimitLayer` | 2.0x |
fn bounds(_: &mut Criterion) {
    let counter = AtomicU64::new(0);
    let limiter = governor::RateLimiter::direct(governor::Quota::per_second(
        NonZeroU32::new(u32::MAX).unwrap(),
    ));
    let semaphore = tokio::sync::Semaphore::new(1_000_000);
    let breaker = failsafe::Config::new().build();
    registry().clear_policy("bench.none").unwrap();
    registry().set_policy("bench.all", all_five(10)).unwrap();
    registry()
        .set_policy(
            "bench.bucket_only",
            Policy::builder()
                .token_bucket(1e9, 1_000_000_000)
                .build()
                .unwrap(),
        )
        .unwrap();
    registry()
        .set_policy(
            "bench.concurrency_only",
            Policy::builder()
                .max_concurrency(1_000_000)
                .build()
                .unwrap(),
        )
        .unwrap();
    let atomic = || {
        black_box(black_box(&counter).fetch_add(1, Ordering::Relaxed));
    };
    let governor = || {
        let _ = black_box(limiter.check());
    };
    let tokio_semaphore = || {
        drop(black_box(semaphore.try_acquire().unwrap()));
    };
    let failsafe = || {
        use failsafe::CircuitBreaker;
        let _ = black_box(breaker.call(|| Ok::<_, ()>(plain(7))));
    };
    let none = || {
        black_box(guarded_none(black_box(7)));
    };
    let all = || {
        black_box(guarded_all(black_box(7)));
    };
    let bucket = || {
        black_box(guarded_bucket_only(black_box(7)));
    };
    let concurrency = || {
        black_box(guarded_concurrency_only(black_box(7)));
    };
    let closed_breaker = || {
        let _ = black_box(guarded_breaker(black_box(7)));
    };
    // The tower rows join with the `tower` feature.
    #[cfg_attr(not(feature = "tower"), allow(unused_mut))]
    let mut candidates: Vec<(&str, &dyn Fn())> = vec![
        ("atomic increment", &atomic),
        ("governor check", &governor),
        ("tokio semaphore try_acquire", &tokio_semaphore),
        ("failsafe call", &failsafe),
        ("no policy", &none),
        ("all five", &all),
        ("token bucket only", &bucket),
        ("max_concurrency only", &concurrency),
        ("#[breaker] closed", &closed_breaker),
    ];
    #[cfg(feature = "tower")]
    let (tower_limit, tower_none, tower_all);
    #[cfg(feature = "tower")]
    {
        use resilience_runtime::tower::PointLayer;
        use std::cell::RefCell;
        use tower::Layer;
        let inner = || tower::service_fn(|x: u64| std::future::ready(Ok::<_, ()>(x)));
        let limit =
            RefCell::new(tower::limit::ConcurrencyLimitLayer::new(1_000_000).layer(inner()));
        let point_none = RefCell::new(PointLayer::new("bench.none").unwrap().layer(inner()));
        let point_all = RefCell::new(PointLayer::new("bench.all").unwrap().layer(inner()));
        tower_limit = move || tower_call(&limit);
        tower_none = move || tower_call(&point_none);
        tower_all = move || tower_call(&point_all);
        candidates.push(("tower ConcurrencyLimitLayer", &tower_limit));
        candidates.push(("tower PointLayer, no policy", &tower_none));
        candidates.push(("tower PointLayer, all five", &tower_all));
    }
    let calls: Vec<&dyn Fn()> = candidates.iter().map(|(_, f)| *f).collect();
    let t = support::interleaved(400, 5_000, &calls);
    let row = |name: &str| {
        let i = candidates.iter().position(|(n, _)| *n == name).unwrap();
        &t[i][..]
    };
    println!("bounds, interleaved, median of 400 rounds of 5 000 calls each:");
    for (i, (name, _)) in candidates.iter().enumerate() {
        println!("  {name:<30} {:>7.1} ns", support::median(&t[i]));
    }
    let mut ratios = vec![
        (
            "no policy / atomic increment",
            "no policy",
            "atomic increment",
            2.0,
        ),
        (
            "all five / governor check",
            "all five",
            "governor check",
            1.5,
        ),
        (
            "token bucket only / governor check",
            "token bucket only",
            "governor check",
            1.2,
        ),
        (
            "max_concurrency only / tokio semaphore",
            "max_concurrency only",
            "tokio semaphore try_acquire",
            1.2,
        ),
        (
            "#[breaker] closed / failsafe call",
            "#[breaker] closed",
            "failsafe call",
            0.15,
        ),
    ];
    if cfg!(feature = "tower") {
        ratios.push((
            "PointLayer no policy / ConcurrencyLimitLayer",
            "tower PointLayer, no policy",
            "tower ConcurrencyLimitLayer",
            1.0,
        ));
        ratios.push((
            "PointLayer all five / ConcurrencyLimitLayer",
            "tower PointLayer, all five",
            "tower ConcurrencyLimitLayer",
            2.0,
        ));
    }
    for (label, a, b, bound) in ratios {
        let r = support::median_ratio(row(a), row(b));
        let verdict = if r <= bound { "ok" } else { "OVER" };
        println!("  {label:<46} = {r:.2} (bound <= {bound}) {verdict}");
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = yardsticks, ratios, bounds, scaling
}
criterion_main!(benches);
