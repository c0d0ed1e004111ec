//! Runs `N` guarded calls of one hot path, for counting their instructions under
//! callgrind (`scripts/instructions.sh`): `hot_calls PATH N`. The per-call count is
//! the difference between two runs of different `N` divided by the difference, so the
//! set-up (registry, policy, first-call work) cancels out.
//!
//! The global registry runs on a manual clock that never moves: on the system clock
//! the count would follow the wall time (the cached timeline's refreshes and probes,
//! the seconds closed), which valgrind stretches fifty-fold. Reading either clock is
//! one load on the pass path.
//!
//! Paths: `no_policy`, `all_five`, `concurrency_only`, `bucket_only`, `breaker`,
//! `tower_no_policy`, `tower_all_five`, `keyed`.

use resilience_runtime::{breaker, downgrade, registry, Policy};
use std::hint::black_box;
use std::time::Duration;

#[downgrade(point = "instr.none", default)]
#[inline(never)]
fn none(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[downgrade(point = "instr.all", default)]
#[inline(never)]
fn all(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[breaker(point = "instr.breaker", default = Ok(0))]
#[inline(never)]
fn closed_breaker(x: u64) -> Result<u64, ()> {
    Ok(black_box(x).wrapping_mul(3))
}

#[downgrade(point = "instr.keyed", key = tenant, default)]
#[inline(never)]
fn keyed(tenant: &str, x: u64) -> u64 {
    black_box(tenant.len() as u64 ^ x)
}

/// Every rule the hot-path bench calls "all five", with thresholds that never trip.
fn all_five() -> Policy {
    Policy::builder()
        .max_visits(u64::MAX / 2)
        .max_concurrency(1_000_000)
        .token_bucket(1e9, 1_000_000_000)
        .max_exceptions(u64::MAX / 2)
        .timeouts(Duration::from_secs(3600), u64::MAX / 2)
        .build()
        .expect("a valid policy")
}

fn main() {
    let clock = resilience_runtime::ManualClock::new();
    resilience_runtime::init_registry(resilience_runtime::Clock::manual(&clock))
        .expect("the registry is made here first");
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_default();
    let n: u64 = args
        .next()
        .and_then(|n| n.parse().ok())
        .expect("usage: hot_calls PATH N");
    match path.as_str() {
        "no_policy" => hot_loop(n, |i| {
            black_box(none(black_box(i)));
        }),
        "all_five" => {
            registry().set_policy("instr.all", all_five()).unwrap();
            hot_loop(n, |i| {
                black_box(all(black_box(i)));
            });
        }
        // One rule each, on the same function as `all_five` (each path runs in a
        // process of its own).
        "concurrency_only" | "bucket_only" => {
            let policy = if path == "concurrency_only" {
                Policy::builder().max_concurrency(1_000_000)
            } else {
                Policy::builder().token_bucket(1e9, 1_000_000_000)
            };
            registry()
                .set_policy("instr.all", policy.build().unwrap())
                .unwrap();
            hot_loop(n, |i| {
                black_box(all(black_box(i)));
            });
        }
        "breaker" => hot_loop(n, |i| {
            let _ = black_box(closed_breaker(black_box(i)));
        }),
        "keyed" => {
            let keys = resilience_runtime::keys::KeyPolicy::builder()
                .limit(1_000_000_000, Duration::from_secs(1))
                .build()
                .unwrap();
            registry()
                .set_policy("instr.keyed", Policy::builder().keys(keys).build().unwrap())
                .unwrap();
            hot_loop(n, |i| {
                black_box(keyed(black_box("tenant-a"), black_box(i)));
            });
        }
        "tower_no_policy" => tower_calls(n),
        "tower_all_five" => {
            registry().set_policy("instr.tower", all_five()).unwrap();
            tower_calls(n)
        }
        other => panic!("unknown path {other:?}"),
    }
}

/// The calls whose instructions are counted: callgrind collects inside this function
/// only (`--toggle-collect=*hot_loop*`), so the engine's background threads and the
/// set-up are left out.
#[inline(never)]
fn hot_loop(n: u64, mut call: impl FnMut(u64)) {
    for i in 0..n {
        call(i);
    }
}

/// `n` calls through tower's `PointLayer` on its point (without a policy unless the
/// path set one), each ready at once: `poll_ready`, `call`, one poll of the response future.
fn tower_calls(n: u64) {
    use resilience_runtime::tower::PointLayer;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tower::{Layer, Service};
    let inner = tower::service_fn(|x: u64| std::future::ready(Ok::<_, ()>(x)));
    let mut svc = PointLayer::new("instr.tower").unwrap().layer(inner);
    let mut cx = Context::from_waker(Waker::noop());
    hot_loop(n, |i| {
        assert!(svc.poll_ready(&mut cx).is_ready());
        let fut = std::pin::pin!(svc.call(black_box(i)));
        match fut.poll(&mut cx) {
            Poll::Ready(r) => {
                black_box(r.unwrap());
            }
            Poll::Pending => unreachable!("the inner service answers at once"),
        }
    });
}
