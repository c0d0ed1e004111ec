//! The concurrency rule's queue (`PolicyBuilder::queue`): order, deadlines on the
//! manual clock, a full queue, cancellation, policy changes while calls wait, and the
//! bound under many threads and tasks; and the same queue under an adaptive limit.

#[path = "support/one_at_a_time.rs"]
mod one_at_a_time;
#[path = "support/queues.rs"]
mod queues;

use one_at_a_time::gradient_pinned_at_one_with_queue;
use queues::{four_waiters_served, poll_once, queue, until_waiting};
use resilience_runtime::config::Format;
use resilience_runtime::{Clock, ManualClock, Permit, Point, Policy, Reason, Registry};
use std::task::Poll;
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

fn bulkhead(n: u64, waiting: u64, wait: Duration) -> Policy {
    Policy::builder()
        .max_concurrency(n)
        .queue(waiting, wait)
        .build()
        .unwrap()
}

/// A point of its own registry (on a manual clock) under a gradient limit pinned at 1
/// (min = max = initial) with a queue.
fn gradient_queue(name: &str, waiting: u64, wait: Duration) -> (ManualClock, &'static Point) {
    let (manual, registry) = manual_registry();
    registry
        .set_policy(name, gradient_pinned_at_one_with_queue(waiting, wait))
        .unwrap();
    (manual, registry.point(name).unwrap())
}

/// A point of its own registry (on a manual clock) under [`bulkhead`]`(n, waiting,
/// wait)`, with the registry (for the tests that change the policy later).
fn bulkhead_point(
    name: &str,
    n: u64,
    waiting: u64,
    wait: Duration,
) -> (ManualClock, &'static Registry, &'static Point) {
    let (manual, registry) = manual_registry();
    registry
        .set_policy(name, bulkhead(n, waiting, wait))
        .unwrap();
    (manual, registry, registry.point(name).unwrap())
}

#[test]
fn waiters_are_served_first_in_first_out() {
    let (_, _, point) = bulkhead_point("q.fifo", 1, 8, Duration::from_secs(60));
    assert_eq!(four_waiters_served(point), [0, 1, 2, 3]);
}

/// A call on `point` (whose room is held, with a `max_wait` of 100 ms) waits on its
/// thread: still waiting at 99 ms on the manual clock, refused for its timeout at
/// 100 ms.
fn waits_out_100ms(manual: &ManualClock, point: &'static Point) {
    let waiter = std::thread::spawn(move || point.enter().map(Permit::finish_ok));
    until_waiting(point, 1);
    manual.advance(Duration::from_millis(99));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(queue(point).waiting, 1, "not yet");
    manual.advance(Duration::from_millis(1));
    let err = waiter.join().unwrap().unwrap_err();
    assert_eq!(err.reason(), Reason::QueueTimeout);
}

#[test]
fn a_wait_runs_out_on_the_manual_clock() {
    let (manual, _, point) = bulkhead_point("q.timeout", 1, 8, Duration::from_millis(100));
    let held = point.enter().unwrap();
    waits_out_100ms(&manual, point);
    let q = queue(point);
    assert_eq!((q.timed_out, q.waiting, q.admitted), (1, 0, 0));
    assert_eq!(
        q.max_wait,
        Duration::from_millis(100),
        "waited exactly its deadline"
    );
    let s = point.stats();
    assert_eq!(s.totals.downgrades, 1);
    assert_eq!(s.totals.visits, 2, "the holder and the waiter");
    held.finish(false);
    assert_eq!(point.stats().concurrency, 0);
}

trait FinishOk {
    fn finish_ok(self);
}

impl FinishOk for Permit<'_> {
    fn finish_ok(self) {
        self.finish(false);
    }
}

#[test]
fn a_full_queue_refuses_at_once() {
    let (_, _, point) = bulkhead_point("q.full", 1, 1, Duration::from_secs(60));
    let held = point.enter().unwrap();
    let waiter = std::thread::spawn(move || point.enter().map(Permit::finish_ok));
    until_waiting(point, 1);
    assert_eq!(point.enter().unwrap_err().reason(), Reason::QueueFull);
    let q = queue(point);
    assert_eq!((q.full, q.waiting), (1, 1));
    assert_eq!(point.stats().totals.downgrades, 1);
    held.finish(false);
    waiter.join().unwrap().unwrap();
    assert_eq!(queue(point).admitted, 1);
}

#[test]
fn a_cancelled_async_waiter_leaves_and_never_takes_a_slot() {
    let (_, _, point) = bulkhead_point("q.cancel", 1, 8, Duration::from_secs(60));
    let held = point.enter().unwrap();
    let mut first = Box::pin(point.enter_async());
    let mut second = Box::pin(point.enter_async());
    assert!(poll_once(&mut first).is_pending());
    assert!(poll_once(&mut second).is_pending());
    assert_eq!(queue(point).waiting, 2);
    // The oldest gives up; the freed slot goes to the next.
    drop(first);
    assert_eq!(queue(point).waiting, 1);
    held.finish(false);
    let Poll::Ready(Ok(permit)) = poll_once(&mut second) else {
        panic!("the second waiter gets the slot");
    };
    let q = queue(point);
    assert_eq!((q.cancelled, q.admitted, q.waiting), (1, 1, 0));
    let s = point.stats();
    assert_eq!(
        (s.totals.passes, s.totals.downgrades, s.totals.cancelled),
        (2, 0, 0)
    );
    permit.finish(false);
    assert_eq!(point.stats().concurrency, 0);
}

#[test]
fn a_woken_waiter_dropped_at_once_passes_its_wake_on() {
    let (_, _, point) = bulkhead_point("q.pass_on", 1, 8, Duration::from_secs(60));
    let held = point.enter().unwrap();
    let mut first = Box::pin(point.enter_async());
    let mut second = Box::pin(point.enter_async());
    assert!(poll_once(&mut first).is_pending());
    assert!(poll_once(&mut second).is_pending());
    // The slot frees and wakes the first, which is dropped before it runs.
    held.finish(false);
    drop(first);
    let Poll::Ready(Ok(permit)) = poll_once(&mut second) else {
        panic!("the wake went on to the second waiter");
    };
    permit.finish(false);
    let s = point.stats();
    assert_eq!((s.concurrency, queue(point).waiting), (0, 0));
}

#[test]
fn policy_changes_wake_waiters_to_ask_again() {
    let name = "q.change";
    let (_manual, registry, point) = bulkhead_point(name, 1, 8, Duration::from_secs(60));
    let held = point.enter().unwrap();
    let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(point.enter_async())).collect();
    for w in &mut waiters {
        assert!(poll_once(w).is_pending());
    }
    // A raised limit admits two of them.
    registry
        .set_policy(name, bulkhead(3, 8, Duration::from_secs(60)))
        .unwrap();
    let mut admitted = Vec::new();
    let mut still = Vec::new();
    for mut w in waiters {
        match poll_once(&mut w) {
            Poll::Ready(Ok(p)) => admitted.push(p),
            Poll::Ready(Err(d)) => panic!("{d}"),
            Poll::Pending => still.push(w),
        }
    }
    assert_eq!((admitted.len(), still.len()), (2, 1));
    assert_eq!(point.stats().concurrency, 3);
    // A lowered limit admits nobody while more are in flight than it allows.
    registry
        .set_policy(name, bulkhead(1, 8, Duration::from_secs(60)))
        .unwrap();
    held.finish(false);
    admitted.pop().unwrap().finish(false);
    assert!(
        poll_once(&mut still[0]).is_pending(),
        "2 in flight, limit 1"
    );
    admitted.pop().unwrap().finish(false);
    let Poll::Ready(Ok(last)) = poll_once(&mut still[0]) else {
        panic!("admitted once in flight is below the new limit");
    };
    // Without a queue, a waiter is refused for concurrency.
    let mut late = Box::pin(point.enter_async());
    assert!(poll_once(&mut late).is_pending());
    registry
        .set_policy(name, Policy::builder().max_concurrency(1).build().unwrap())
        .unwrap();
    let Poll::Ready(Err(d)) = poll_once(&mut late) else {
        panic!("refused");
    };
    assert_eq!(d.reason(), Reason::Concurrency);
    last.finish(false);
    let q = queue(point);
    assert_eq!((q.admitted, q.refused, q.waiting), (3, 1, 0));
}

#[test]
fn new_calls_queue_behind_waiters() {
    let (_, _, point) = bulkhead_point("q.behind", 1, 8, Duration::from_secs(60));
    let held = point.enter().unwrap();
    let mut waiter = Box::pin(point.enter_async());
    assert!(poll_once(&mut waiter).is_pending());
    held.finish(false);
    // A slot is free, but a call waits: a new call queues behind it.
    let mut newcomer = Box::pin(point.enter_async());
    assert!(poll_once(&mut newcomer).is_pending());
    let Poll::Ready(Ok(first)) = poll_once(&mut waiter) else {
        panic!("the waiter goes first");
    };
    assert!(poll_once(&mut newcomer).is_pending());
    first.finish(false);
    let Poll::Ready(Ok(second)) = poll_once(&mut newcomer) else {
        panic!("then the newcomer");
    };
    second.finish(false);
}

#[test]
fn policy_files_read_and_check_the_queue() {
    let (_manual, registry) = manual_registry();
    registry
        .load_policies_str(
            "[points.\"q.file\"]\nmax_concurrency = 2\nqueue = { max_waiting = 10, max_wait = \"250ms\" }\n",
            Format::Toml,
        )
        .unwrap();
    let q = registry.policy("q.file").unwrap().unwrap().queue().unwrap();
    assert_eq!(
        (q.max_waiting, q.max_wait),
        (10, Duration::from_millis(250))
    );
    let err = registry
        .load_policies_str(
            "[points.\"q.bad\"]\nqueue = { max_waiting = 0, max_wait = \"0s\", extra = 1 }\n",
            Format::Toml,
        )
        .unwrap_err();
    let fields: Vec<_> = err
        .problems()
        .iter()
        .filter_map(|p| p.field.clone())
        .collect();
    assert!(fields.contains(&"queue.extra".to_owned()), "{fields:?}");
    let err = registry
        .load_policies_str(
            "[points.\"q.bad\"]\nqueue = { max_waiting = 0, max_wait = \"0s\" }\n",
            Format::Toml,
        )
        .unwrap_err();
    let fields: Vec<_> = err
        .problems()
        .iter()
        .filter_map(|p| p.field.clone())
        .collect();
    for want in ["queue", "queue.max_waiting", "queue.max_wait"] {
        assert!(fields.iter().any(|f| f == want), "{want} in {fields:?}");
    }
}

/// 1 to 64 threads on a point of 4 slots with a queue, while the limit swaps between
/// 2 and 4: never more calls in the body than the largest limit, each waiter ends
/// one way, and every count adds up with nothing left waiting or in flight.
#[test]
fn the_bound_holds_under_many_threads_and_swaps() {
    for threads in [1u64, 2, 8, 24, 64] {
        let registry: &'static Registry =
            Box::leak(Box::new(Registry::with_clock(Clock::system())));
        let name = "q.stress";
        registry
            .set_policy(name, bulkhead(4, 16, Duration::from_millis(20)))
            .unwrap();
        let point = registry.point(name).unwrap();
        let seen = queues::drive(point, threads, move |i| {
            let n = if i.is_multiple_of(2) { 2 } else { 4 };
            registry
                .set_policy(name, bulkhead(n, 16, Duration::from_millis(20)))
                .unwrap();
        });
        let (s, q) = queues::check_books(point, threads, 4, &seen);
        assert_eq!(q.full, s.totals.downgrades_by_reason.get(Reason::QueueFull));
    }
}

#[test]
fn try_enter_never_waits() {
    let (_, _, point) = bulkhead_point("q.try", 1, 8, Duration::from_secs(60));
    let held = point.try_enter().unwrap();
    assert_eq!(point.try_enter().unwrap_err().reason(), Reason::Concurrency);
    assert_eq!(queue(point).waiting, 0, "nobody queued");
    held.finish(false);
    point.try_enter().unwrap().finish(false);
}

/// Under an adaptive limit with a queue, a call the limit has no room for waits (a
/// sync caller parked) and runs when a call ends; without a call ending its wait runs
/// out; `try_enter` never waits.
#[test]
fn an_adaptive_limit_with_a_queue_makes_calls_wait_for_its_room() {
    let (manual, point) = gradient_queue("q.adaptive", 8, Duration::from_millis(100));
    let held = point.enter().unwrap();
    assert_eq!(
        point.try_enter().unwrap_err().reason(),
        Reason::Overloaded,
        "try_enter is refused at once"
    );
    let waiter = std::thread::spawn(move || point.enter().map(Permit::finish_ok));
    until_waiting(point, 1);
    held.finish(false);
    waiter.join().unwrap().unwrap();

    // Nobody gives the room back: the wait runs out on the manual clock.
    let held = point.enter().unwrap();
    waits_out_100ms(&manual, point);
    held.finish(false);
    let q = queue(point);
    assert_eq!((q.admitted, q.timed_out, q.waiting), (1, 1, 0));
    let s = point.stats();
    assert_eq!(s.totals.passes, 3, "two holders and the woken waiter");
    assert_eq!(s.totals.downgrades_by_reason.get(Reason::Overloaded), 1);
    assert_eq!(s.totals.downgrades_by_reason.get(Reason::QueueTimeout), 1);
    assert_eq!(s.concurrency, 0);
}

/// An async call waits for the adaptive limit's room in its future, never blocking,
/// and a full queue refuses at once.
#[test]
fn an_async_call_waits_for_the_adaptive_limit_in_its_future() {
    let (_manual, point) = gradient_queue("q.adaptive.async", 1, Duration::from_secs(60));
    let held = point.enter().unwrap();
    let mut waiting = Box::pin(point.enter_async());
    assert!(poll_once(&mut waiting).is_pending());
    assert_eq!(queue(point).waiting, 1);
    let mut full = Box::pin(point.enter_async());
    match poll_once(&mut full) {
        Poll::Ready(Err(d)) => assert_eq!(d.reason(), Reason::QueueFull),
        other => panic!("a second waiter finds the queue of one full: {other:?}"),
    }
    held.finish(false);
    match poll_once(&mut waiting) {
        Poll::Ready(Ok(permit)) => permit.finish(false),
        other => panic!("the waiter takes the room given back: {other:?}"),
    }
    let q = queue(point);
    assert_eq!((q.admitted, q.full, q.waiting), (1, 1, 0));
}

/// A queue needs a limit to wait under: `max_concurrency` or an adaptive limit, in
/// code and in policy files.
#[test]
fn a_queue_needs_max_concurrency_or_an_adaptive_limit() {
    let err = Policy::builder()
        .queue(4, Duration::from_millis(10))
        .build()
        .unwrap_err();
    assert!(
        err.to_string().contains("queue") && err.to_string().contains("adaptive"),
        "{err}"
    );
    let (_manual, registry) = manual_registry();
    registry
        .load_policies_str(
            "[points.\"q.file.adaptive\"]\nqueue = { max_waiting = 4, max_wait = \"20ms\" }\n\
             [points.\"q.file.adaptive\".adaptive]\nalgorithm = \"gradient\"\n",
            Format::Toml,
        )
        .unwrap();
    let p = registry.policy("q.file.adaptive").unwrap().unwrap();
    assert!(p.adaptive().is_some());
    assert_eq!(p.queue().unwrap().max_waiting, 4);
}
