//! The queue's order (`PolicyBuilder::queue_order`): newest first serves the last
//! waiter first and makes room in a full queue by refusing its oldest waiter, tiers
//! still first; the order in code and in policy files (read, checked, written back);
//! and the queue's bounds under 1 to 64 threads while the order and the limit change.

#[path = "support/queues.rs"]
mod queues;

use queues::{four_waiters_served, poll_once, queue};
use resilience_runtime::config::{Format, PolicyFile};
use resilience_runtime::priority::{self, Priority};
use resilience_runtime::{Clock, ManualClock, Point, Policy, QueueOrder, Reason, Registry};
use std::task::Poll;
use std::time::Duration;

fn newest_first(n: u64, waiting: u64, wait: Duration) -> Policy {
    ordered(n, waiting, wait, QueueOrder::NewestFirst)
}

fn ordered(n: u64, waiting: u64, wait: Duration, order: QueueOrder) -> Policy {
    Policy::builder()
        .max_concurrency(n)
        .queue(waiting, wait)
        .queue_order(order)
        .build()
        .unwrap()
}

/// A point of its own registry (on a manual clock, so that no wait runs out) under
/// `policy`.
fn point_with(name: &str, policy: Policy) -> &'static Point {
    let manual = Box::leak(Box::new(ManualClock::new()));
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(manual))));
    registry.set_policy(name, policy).unwrap();
    registry.point(name).unwrap()
}

#[test]
fn newest_first_serves_the_last_waiter_first() {
    let point = point_with("qo.lifo", newest_first(1, 8, Duration::from_secs(60)));
    assert_eq!(four_waiters_served(point), [3, 2, 1, 0]);
}

/// A full queue served newest first refuses its oldest waiter for a new call (counted
/// as evicted, downgraded as `QueueFull`), where the default order refuses the new
/// call (counted as full).
#[test]
fn a_full_queue_newest_first_refuses_its_oldest_waiter() {
    for order in [QueueOrder::NewestFirst, QueueOrder::OldestFirst] {
        let name = format!("qo.full.{}", order.as_str());
        let point = point_with(&name, ordered(1, 2, Duration::from_secs(60), order));
        let held = point.enter().unwrap();
        let mut waiters: Vec<_> = (0..2).map(|_| Box::pin(point.enter_async())).collect();
        for w in &mut waiters {
            assert!(poll_once(w).is_pending());
        }
        let mut newcomer = Box::pin(point.enter_async());
        let refused = match order {
            QueueOrder::NewestFirst => {
                assert!(poll_once(&mut newcomer).is_pending(), "it takes a place");
                let Poll::Ready(Err(d)) = poll_once(&mut waiters[0]) else {
                    panic!("the oldest waiter is refused");
                };
                assert!(
                    poll_once(&mut waiters[1]).is_pending(),
                    "the other one waits"
                );
                d
            }
            _ => {
                let Poll::Ready(Err(d)) = poll_once(&mut newcomer) else {
                    panic!("the new call is refused");
                };
                d
            }
        };
        assert_eq!(refused.reason(), Reason::QueueFull);
        let q = queue(point);
        let expected = match order {
            QueueOrder::NewestFirst => (1, 0, 2),
            _ => (0, 1, 2),
        };
        assert_eq!((q.evicted, q.full, q.waiting), expected, "{order:?}");
        assert_eq!(
            point
                .stats()
                .totals
                .downgrades_by_reason
                .get(Reason::QueueFull),
            1
        );
        held.finish(false);
        // The first in serving order gets the slot: the newcomer, newest first.
        let first = match order {
            QueueOrder::NewestFirst => &mut newcomer,
            _ => &mut waiters[0],
        };
        let Poll::Ready(Ok(permit)) = poll_once(first) else {
            panic!("{order:?}: the first in order gets the freed slot");
        };
        permit.finish(false);
    }
}

/// Tiers come first in either order: a new call of a lower tier never takes a higher
/// waiter's place, and is served after it.
#[test]
fn newest_first_keeps_the_tiers() {
    let point = point_with("qo.tiers", newest_first(1, 2, Duration::from_secs(60)));
    let held = point.enter().unwrap();
    let mut critical = Box::pin(priority::scope(Priority::Critical, point.enter_async()));
    assert!(poll_once(&mut critical).is_pending());
    let mut older = Box::pin(point.enter_async());
    assert!(poll_once(&mut older).is_pending());
    // The queue is full: a normal call takes the older normal waiter's place...
    let mut newer = Box::pin(point.enter_async());
    assert!(poll_once(&mut newer).is_pending());
    assert!(
        matches!(poll_once(&mut older), Poll::Ready(Err(d)) if d.reason() == Reason::QueueFull)
    );
    // ...but a sheddable one finds no waiter of its tier or lower: refused.
    let mut low = Box::pin(priority::scope(Priority::Sheddable, point.enter_async()));
    assert!(matches!(poll_once(&mut low), Poll::Ready(Err(d)) if d.reason() == Reason::QueueFull));
    held.finish(false);
    let Poll::Ready(Ok(first)) = poll_once(&mut critical) else {
        panic!("the critical waiter, the oldest, goes first");
    };
    assert!(poll_once(&mut newer).is_pending());
    first.finish(false);
    let Poll::Ready(Ok(second)) = poll_once(&mut newer) else {
        panic!("then the normal one");
    };
    second.finish(false);
    let q = queue(point);
    assert_eq!((q.admitted, q.evicted, q.full, q.waiting), (2, 1, 1, 0));
}

#[test]
fn the_order_needs_a_queue_and_defaults_to_oldest_first() {
    let err = Policy::builder()
        .max_concurrency(1)
        .queue_order(QueueOrder::NewestFirst)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("queue.order"), "{err}");
    let plain = Policy::builder()
        .max_concurrency(1)
        .queue(4, Duration::from_millis(10))
        .build()
        .unwrap();
    assert_eq!(plain.queue().unwrap().order, QueueOrder::OldestFirst);
    // Set before the queue, it still applies to it.
    let early = Policy::builder()
        .queue_order(QueueOrder::NewestFirst)
        .max_concurrency(1)
        .queue(4, Duration::from_millis(10))
        .build()
        .unwrap();
    assert_eq!(early.queue().unwrap().order, QueueOrder::NewestFirst);
}

#[test]
fn policy_files_read_check_and_write_the_order() {
    let text = "[points.\"qo.file\"]\nmax_concurrency = 2\n\
                queue = { max_waiting = 10, max_wait = \"250ms\", order = \"newest_first\" }\n\
                [points.\"qo.default\"]\nmax_concurrency = 2\n\
                queue = { max_waiting = 10, max_wait = \"250ms\" }\n";
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let order = |name: &str| file.points[name].policy.queue().unwrap().order;
    assert_eq!(order("qo.file"), QueueOrder::NewestFirst);
    assert_eq!(order("qo.default"), QueueOrder::OldestFirst);
    // Written back only where it is not the default, and read back the same.
    let toml = file.to_text(Format::Toml).unwrap();
    assert_eq!(
        toml.matches("order = \"newest_first\"").count(),
        1,
        "{toml}"
    );
    assert!(!toml.contains("oldest_first"), "{toml}");
    assert_eq!(PolicyFile::parse(&toml, Format::Toml).unwrap(), file);
    let json = file.to_text(Format::Json).unwrap();
    assert_eq!(PolicyFile::parse(&json, Format::Json).unwrap(), file);

    for (bad, want) in [
        ("\"lifo\"", "\"oldest_first\" or \"newest_first\""),
        ("1", "string"),
    ] {
        let text = format!(
            "[points.\"qo.bad\"]\nmax_concurrency = 2\n\
             queue = {{ max_waiting = 10, max_wait = \"250ms\", order = {bad} }}\n"
        );
        let err = PolicyFile::parse(&text, Format::Toml).unwrap_err();
        let problem = err
            .problems()
            .iter()
            .find(|p| p.field.as_deref() == Some("queue.order"))
            .unwrap_or_else(|| panic!("{bad}: {err}"));
        assert!(problem.message.contains(want), "{bad}: {}", problem.message);
    }
}

/// 1 to 64 threads on a point of 4 slots with a queue of 16 served newest first, while
/// the policy swaps between orders and between 2 and 4 slots: never more calls in the
/// body than the largest limit, never more waiting than the queue holds, every call
/// ends one way, and every count adds up with nothing left waiting or in flight.
#[test]
fn the_bounds_hold_under_many_threads_while_the_order_changes() {
    for threads in [1u64, 2, 8, 24, 64] {
        let registry: &'static Registry =
            Box::leak(Box::new(Registry::with_clock(Clock::system())));
        let name = "qo.stress";
        let wait = Duration::from_millis(20);
        registry
            .set_policy(name, newest_first(4, 16, wait))
            .unwrap();
        let point = registry.point(name).unwrap();
        let seen = queues::drive(point, threads, move |i| {
            let orders = [QueueOrder::NewestFirst, QueueOrder::OldestFirst];
            let n = if i.is_multiple_of(3) { 2 } else { 4 };
            registry
                .set_policy(name, ordered(n, 16, wait, orders[i % 2]))
                .unwrap();
        });
        let (s, q) = queues::check_books(point, threads, 4, &seen);
        assert!(q.peak_waiting <= 16, "{threads}: {q:?}");
        assert_eq!(
            q.full + q.evicted,
            s.totals.downgrades_by_reason.get(Reason::QueueFull)
        );
    }
}
