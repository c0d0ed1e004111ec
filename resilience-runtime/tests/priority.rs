//! Priorities under overload: the queue serves higher tiers first and evicts lower
//! ones when full, the gradient limit keeps a share for critical calls, the SRE
//! breaker drops the lowest tier first (`priority = expr` on the macros: in
//! `queue_async.rs`, which has tokio).

use resilience_runtime::adaptive::GradientConfig;
use resilience_runtime::breaker::SreConfig;
use resilience_runtime::priority::{self, Priority};
use resilience_runtime::{
    AdaptiveLimit, BreakerPolicy, Clock, ManualClock, Policy, Reason, Registry,
};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

fn bulkhead(waiting: u64) -> Policy {
    Policy::builder()
        .max_concurrency(1)
        .queue(waiting, Duration::from_secs(60))
        .build()
        .unwrap()
}

#[test]
fn the_queue_serves_higher_tiers_first() {
    let (_manual, registry) = manual_registry();
    registry.set_policy("p.order", bulkhead(8)).unwrap();
    let point = registry.point("p.order").unwrap();
    let held = point.enter().unwrap();
    let mut waiters = Vec::new();
    for tier in [
        Priority::Sheddable,
        Priority::Default,
        Priority::Sheddable,
        Priority::Critical,
    ] {
        let mut w = Box::pin(priority::scope(tier, point.enter_async()));
        assert!(poll_once(&mut w).is_pending());
        waiters.push((tier, w));
    }
    held.finish(false);
    let mut served = Vec::new();
    for _ in 0..4 {
        let mut next = None;
        for (i, (tier, w)) in waiters.iter_mut().enumerate() {
            if let Poll::Ready(Ok(permit)) = poll_once(w) {
                next = Some((i, *tier, permit));
                break;
            }
        }
        let (i, tier, permit) = next.expect("one waiter is admitted per freed slot");
        served.push((tier, i));
        waiters.remove(i);
        permit.finish(false);
    }
    // Critical, then default, then the sheddable ones in arrival order.
    assert_eq!(
        served.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        [
            Priority::Critical,
            Priority::Default,
            Priority::Sheddable,
            Priority::Sheddable
        ]
    );
}

#[test]
fn a_full_queue_evicts_a_lower_tier_for_a_higher_one() {
    let (_manual, registry) = manual_registry();
    registry.set_policy("p.evict", bulkhead(1)).unwrap();
    let point = registry.point("p.evict").unwrap();
    let held = point.enter().unwrap();
    let mut low = Box::pin(priority::scope(Priority::Sheddable, point.enter_async()));
    assert!(poll_once(&mut low).is_pending());
    // Another sheddable call finds the queue full: refused.
    let mut same = Box::pin(priority::scope(Priority::Sheddable, point.enter_async()));
    assert!(matches!(poll_once(&mut same), Poll::Ready(Err(d)) if d.reason() == Reason::QueueFull));
    // A critical one takes the sheddable one's place.
    let mut high = Box::pin(priority::scope(Priority::Critical, point.enter_async()));
    assert!(poll_once(&mut high).is_pending());
    let Poll::Ready(Err(evicted)) = poll_once(&mut low) else {
        panic!("the sheddable waiter is evicted");
    };
    assert_eq!(evicted.reason(), Reason::QueueFull);
    held.finish(false);
    let Poll::Ready(Ok(permit)) = poll_once(&mut high) else {
        panic!("the critical waiter gets the slot");
    };
    permit.finish(false);
    let s = point.stats();
    let q = s.queue.unwrap();
    assert_eq!((q.evicted, q.full, q.admitted, q.waiting), (1, 1, 1, 0));
    assert_eq!(s.totals.downgrades_by_reason.get(Reason::QueueFull), 2);
    assert_eq!(s.totals.visits, s.totals.passes + s.totals.downgrades);
}

#[test]
fn the_gradient_limit_keeps_a_share_for_critical_calls() {
    let (_manual, registry) = manual_registry();
    let config = GradientConfig::builder()
        .initial_limit(10)
        .critical_reserve(0.3)
        .build()
        .unwrap();
    let policy = Policy::builder()
        .adaptive(AdaptiveLimit::Gradient(config))
        .build()
        .unwrap();
    registry.set_policy("p.reserve", policy).unwrap();
    let point = registry.point("p.reserve").unwrap();
    let mut held: Vec<_> = (0..10).filter_map(|_| point.enter().ok()).collect();
    assert_eq!(held.len(), 7, "default calls stop at 70% of the limit");
    assert_eq!(point.enter().unwrap_err().reason(), Reason::Overloaded);
    let critical: Vec<_> = (0..10)
        .filter_map(|_| priority::with(Priority::Critical, || point.enter().ok()))
        .collect();
    assert_eq!(critical.len(), 3, "critical calls use the rest");
    held.extend(critical);
    for p in held {
        p.finish(false);
    }
}

#[test]
fn the_sre_breaker_drops_the_lowest_tier_first() {
    let (_manual, registry) = manual_registry();
    registry
        .set_breaker(
            "p.sre",
            BreakerPolicy::Sre {
                config: SreConfig::default(),
                slow_call: None,
            },
        )
        .unwrap();
    let point = registry.point("p.sre").unwrap();
    // 40% of the calls succeed: go-zero's drop ratio is about
    // (total - protection - 1.5 * accepts) / (total + 1) = 0.4 (the manual clock never
    // moves, so the window keeps every call and no forced probe recurs). Made at the
    // critical tier, which is not dropped below 0.5: the ratio is not fed by drops.
    priority::with(Priority::Critical, || {
        for i in 0..10_000 {
            if let Ok(p) = point.enter() {
                p.finish(i % 5 >= 2);
            }
        }
    });
    let admitted = |tier: Priority| {
        (0..300)
            .filter(|i| {
                priority::with(tier, || match point.enter() {
                    Ok(p) => {
                        // The same mix, so the ratio stays where it is.
                        p.finish(i % 5 >= 2);
                        true
                    }
                    Err(_) => false,
                })
            })
            .count()
    };
    let [sheddable, default, critical] =
        [Priority::Sheddable, Priority::Default, Priority::Critical].map(admitted);
    // Drop probabilities about 0.8, 0.4 and 0: 60, 180 and 300 of 300.
    assert!(
        sheddable < default && default < critical,
        "admitted: sheddable {sheddable}, default {default}, critical {critical}"
    );
    assert!((20..110).contains(&sheddable), "sheddable {sheddable}");
    assert!((130..240).contains(&default), "default {default}");
    assert!(critical >= 295, "critical {critical}");
}
