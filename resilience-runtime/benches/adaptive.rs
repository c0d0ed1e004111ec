//! Per-call cost of the adaptive limits and of the tower layers, in-process (no
//! network): a tower service and an axum `Router` called directly, bare and guarded.
//! Run with `cargo bench -p resilience-runtime --features tower --bench adaptive`.

// `criterion_group!` generates undocumented public functions.
#![allow(missing_docs)]

use axum::body::Body;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::adaptive::{
    AdaptiveConfig, AdaptiveLimiter, FixedCpu, Gate, GradientConfig, GradientLimiter,
};
use resilience_runtime::tower::{AdmissionLayer, PointLayer};
use resilience_runtime::{registry, Clock, Policy};
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::{Layer, Service};

/// The cheapest possible service: doubles a number.
#[derive(Clone)]
struct Double;

impl Service<u64> for Double {
    type Response = u64;
    type Error = Infallible;
    type Future = Ready<Result<u64, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    #[inline(never)]
    fn call(&mut self, x: u64) -> Self::Future {
        ready(Ok(black_box(x).wrapping_mul(2)))
    }
}

/// Polls a future that completes without waiting (all of the services here).
fn run<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A layer that only forwards: what any layer costs behind axum's `route_layer`.
#[derive(Clone)]
struct PassThrough;

impl<S> Layer<S> for PassThrough {
    type Service = Forward<S>;
    fn layer(&self, inner: S) -> Forward<S> {
        Forward(inner)
    }
}

#[derive(Clone)]
struct Forward<S>(S);

impl<S: Service<R>, R> Service<R> for Forward<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, req: R) -> S::Future {
        self.0.call(req)
    }
}

fn call<S: Service<u64>>(svc: &mut S, x: u64) -> Result<S::Response, S::Error> {
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => unreachable!("always ready"),
    }
    run(svc.call(x))
}

fn shedder(cpu: u64) -> Arc<AdaptiveLimiter> {
    Arc::new(
        AdaptiveLimiter::with_parts(
            AdaptiveConfig::default(),
            Arc::new(FixedCpu::new(cpu)),
            Clock::system(),
        )
        .unwrap(),
    )
}

fn tower_layers(c: &mut Criterion) {
    let mut g = c.benchmark_group("tower");
    let mut bare = Double;
    g.bench_function("bare_service", |b| b.iter(|| call(&mut bare, black_box(7))));

    let mut none = PointLayer::new("bench.tower.none").unwrap().layer(Double);
    g.bench_function("point_layer_no_policy", |b| {
        b.iter(|| call(&mut none, black_box(7)))
    });

    registry()
        .set_policy(
            "bench.tower.limit",
            Policy::builder().max_concurrency(1_000).build().unwrap(),
        )
        .unwrap();
    let mut limited = PointLayer::new("bench.tower.limit").unwrap().layer(Double);
    g.bench_function("point_layer_max_concurrency", |b| {
        b.iter(|| call(&mut limited, black_box(7)))
    });

    let mut gate = AdmissionLayer::new("gate", Arc::new(Gate::new(1_000).unwrap())).layer(Double);
    g.bench_function("admission_gate", |b| {
        b.iter(|| call(&mut gate, black_box(7)))
    });

    let mut cool = AdmissionLayer::new("shed", shedder(100)).layer(Double);
    g.bench_function("admission_shedder_cool_cpu", |b| {
        b.iter(|| call(&mut cool, black_box(7)))
    });
    let mut hot = AdmissionLayer::new("shed", shedder(950)).layer(Double);
    g.bench_function("admission_shedder_hot_cpu", |b| {
        b.iter(|| call(&mut hot, black_box(7)))
    });

    let gradient = Arc::new(GradientLimiter::new(GradientConfig::default()).unwrap());
    let mut grad = AdmissionLayer::new("gradient", gradient).layer(Double);
    g.bench_function("admission_gradient", |b| {
        b.iter(|| call(&mut grad, black_box(7)))
    });
    g.finish();
}

fn axum_router(c: &mut Criterion) {
    let mut g = c.benchmark_group("axum");
    registry()
        .set_policy(
            "bench.axum.limit",
            Policy::builder().max_concurrency(1_000).build().unwrap(),
        )
        .unwrap();
    let handler = || async { "ok" };
    let mut bare: Router = Router::new().route("/", get(handler));
    let mut noop: Router = Router::new().route("/", get(handler).route_layer(PassThrough));
    let mut guarded: Router = Router::new().route(
        "/",
        get(handler).route_layer(PointLayer::new("bench.axum.limit").unwrap().respond()),
    );
    let mut gated: Router = Router::new().route(
        "/",
        get(handler).route_layer(
            AdmissionLayer::new("gate", Arc::new(Gate::new(1_000).unwrap())).respond(),
        ),
    );
    for (name, router) in [
        ("bare_router", &mut bare),
        ("router_passthrough_layer", &mut noop),
        ("router_point_layer", &mut guarded),
        ("router_gate_layer", &mut gated),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let req = Request::get("/").body(Body::empty()).unwrap();
                let res = run(Service::call(router, req)).unwrap();
                assert_eq!(res.status(), 200);
                black_box(res)
            })
        });
    }
    g.finish();
}

fn limiters(c: &mut Criterion) {
    let mut g = c.benchmark_group("limiter");
    let atomic = std::sync::atomic::AtomicU64::new(0);
    g.bench_function("atomic_increment", |b| {
        b.iter(|| atomic.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    });

    let gate = Gate::new(1_000).unwrap();
    g.bench_function("timer_read", |b| b.iter(|| black_box(gate.now())));
    g.bench_function("gate_acquire_release", |b| {
        b.iter(|| drop(black_box(gate.try_acquire().unwrap())))
    });

    for (name, cpu) in [("shedder_cool_cpu", 100), ("shedder_hot_cpu", 950)] {
        let l = shedder(cpu);
        let mut now = l.now();
        g.bench_function(format!("{name}_explicit_now"), |b| {
            b.iter(|| {
                now += Duration::from_nanos(1_000);
                l.try_acquire(now)
                    .unwrap()
                    .pass(now + Duration::from_nanos(500));
            })
        });
        g.bench_function(format!("{name}_clock"), |b| {
            b.iter(|| {
                let p = l.try_acquire(l.now()).unwrap();
                p.pass(l.now());
            })
        });
    }

    let gradient = GradientLimiter::new(GradientConfig::default()).unwrap();
    g.bench_function("gradient_clock", |b| {
        b.iter(|| {
            let p = gradient.try_acquire(gradient.now()).unwrap();
            p.pass(gradient.now());
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = limiters, tower_layers, axum_router
}
criterion_main!(benches);
