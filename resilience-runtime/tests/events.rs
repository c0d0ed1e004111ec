//! Typed listener events and `flush_listeners`: kinds told apart, filtered listeners,
//! the legacy flat listener, waiting for delivery (also from many threads, with a full
//! queue, from inside a listener), and listeners that never hold up a guarded call.

use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::sources::{PointConfig, Source};
use resilience_runtime::{
    BreakerPolicy, BreakerState, Clock, DowngradeEvent, Event, EventKind, Policy, Reason, Registry,
    EVENT_QUEUE_CAPACITY,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(20);

/// A registry of its own, so its delivery thread and counters are the test's alone.
fn registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

fn deny_all(r: &Registry, name: &str) {
    r.set_policy(name, Policy::builder().max_visits(0).build().unwrap())
        .unwrap();
}

fn shadow_deny_all(r: &Registry, name: &str) {
    let policy = Policy::builder()
        .max_visits(0)
        .shadow(true)
        .build()
        .unwrap();
    r.set_policy(name, policy).unwrap();
}

fn trip_on_first_failure(r: &Registry, name: &str) {
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .build()
        .unwrap();
    r.set_breaker(name, BreakerPolicy::Classic(config)).unwrap();
}

/// One downgrade, one shadow downgrade, one breaker change (closed -> open), in
/// this order.
fn one_of_each(r: &'static Registry) {
    deny_all(r, "ev.down");
    shadow_deny_all(r, "ev.shadow");
    trip_on_first_failure(r, "ev.breaker");
    assert!(r.point("ev.down").unwrap().enter().is_err());
    r.point("ev.shadow").unwrap().enter().unwrap().finish(false);
    r.point("ev.breaker").unwrap().enter().unwrap().finish(true);
}

/// A gate a listener can be held at: `close` makes it wait, `open` lets it go.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn close(&self) {
        *self.closed.lock().unwrap() = true;
    }

    fn open(&self) {
        *self.closed.lock().unwrap() = false;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.changed.wait(closed).unwrap();
        }
    }
}

#[test]
fn events_tell_their_kinds_apart() {
    let r = registry();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    r.add_event_listener(move |e| sink.lock().unwrap().push(e.clone()));
    one_of_each(r);
    assert!(r.flush_listeners(LONG));

    let all = seen.lock().unwrap();
    let kinds: Vec<(EventKind, &str)> = all.iter().map(|e| (e.kind(), e.point())).collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Policy, "ev.down"),
            (EventKind::Policy, "ev.shadow"),
            (EventKind::Policy, "ev.breaker"),
            (EventKind::Downgrade, "ev.down"),
            (EventKind::Shadow, "ev.shadow"),
            (EventKind::Breaker, "ev.breaker"),
        ]
    );
    match &all[0] {
        Event::Policy(c) => {
            assert_eq!(c.source, Source::Code);
            assert_eq!(c.before.policy, None);
            assert_eq!(
                c.after.policy.as_ref().and_then(Policy::max_visits),
                Some(0)
            );
            assert_eq!(all[0].time(), c.time);
        }
        other => panic!("{other:?}"),
    }
    match &all[2] {
        Event::Policy(c) => assert!(c.before.breaker.is_none() && c.after.breaker.is_some()),
        other => panic!("{other:?}"),
    }
    let seen = &all[3..];
    match &seen[0] {
        Event::Downgrade(d) => {
            assert_eq!(d.reason, Reason::Visits);
            assert!(!d.shadow && d.breaker.is_none());
        }
        other => panic!("{other:?}"),
    }
    match &seen[1] {
        Event::Shadow(d) => {
            assert_eq!(d.reason, Reason::Visits);
            assert!(d.shadow && d.breaker.is_none());
        }
        other => panic!("{other:?}"),
    }
    match &seen[2] {
        Event::Breaker(b) => {
            assert_eq!(
                (b.change.from, b.change.to),
                (BreakerState::Closed, BreakerState::Open)
            );
            assert!(b.change.cause.is_some(), "the classic breaker says why");
            assert_eq!(seen[2].time(), b.time);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.delivered_events(), 6);
    assert_eq!(r.dropped_events(), 0);
}

#[test]
fn the_flat_listener_still_sees_everything_as_before() {
    let r = registry();
    let flat = Arc::new(Mutex::new(Vec::<DowngradeEvent>::new()));
    let typed = Arc::new(Mutex::new(Vec::<Event>::new()));
    let (f, t) = (Arc::clone(&flat), Arc::clone(&typed));
    r.add_listener(move |e| f.lock().unwrap().push(e.clone()));
    r.add_event_listener(move |e| t.lock().unwrap().push(e.clone()));
    one_of_each(r);
    assert!(r.flush_listeners(LONG));

    let flat = flat.lock().unwrap();
    let typed = typed.lock().unwrap();
    assert_eq!(flat.len(), 3);
    assert_eq!(
        flat[2].reason,
        Reason::BreakerOpen,
        "breaker changes as before"
    );
    assert!(flat[2].breaker.is_some());
    assert!(flat[1].shadow);
    // Each typed event is its flat record sorted by kind, and converts back to it;
    // policy changes have no record (the flat listener never sees them).
    let (policy, others): (Vec<&Event>, Vec<&Event>) =
        typed.iter().partition(|e| e.kind() == EventKind::Policy);
    assert_eq!(policy.len(), 3);
    assert_eq!(others.len(), flat.len());
    for (record, event) in flat.iter().zip(others) {
        assert_eq!(&Event::from(record.clone()), event);
        assert_eq!(&DowngradeEvent::try_from(event.clone()).unwrap(), record);
    }
    let change = policy[0].clone();
    assert_eq!(DowngradeEvent::try_from(change.clone()), Err(change));
    assert_eq!(
        r.delivered_events(),
        6,
        "an event counts once, however many see it"
    );
}

#[test]
fn policy_events_follow_every_source_and_the_kind_filter() {
    let r = registry();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    r.add_event_listener_of(&[EventKind::Policy], move |e| {
        sink.lock().unwrap().push(e.clone());
    });
    let console = Source::Console;
    deny_all(r, "ev.policy");
    r.set_layer(
        "ev.policy",
        console.clone(),
        PointConfig::builder().policy(Policy::observe()).build(),
    )
    .unwrap();
    // The same layer again: the rules stay, their origin's version moves.
    r.set_layer(
        "ev.policy",
        console.clone(),
        PointConfig::builder().policy(Policy::observe()).build(),
    )
    .unwrap();
    assert!(
        r.point("ev.policy").unwrap().enter().is_ok(),
        "the console's layer wins"
    );
    r.clear_layer("ev.policy", console.clone()).unwrap();
    r.clear_policy("ev.policy").unwrap();
    assert!(r.flush_listeners(LONG));
    let seen = seen.lock().unwrap();
    let version = |c: &resilience_runtime::sources::EffectivePolicy| {
        c.origin(resilience_runtime::sources::Section::Rules)
            .map(|o| o.version)
    };
    match &seen[2] {
        Event::Policy(c) => assert!(version(&c.after) > version(&c.before)),
        other => panic!("{other:?}"),
    }
    let changes: Vec<(Source, Option<u64>, Option<u64>)> = seen
        .iter()
        .map(|e| match e {
            Event::Policy(c) => (
                c.source.clone(),
                c.before.policy.as_ref().and_then(Policy::max_visits),
                c.after.policy.as_ref().and_then(Policy::max_visits),
            ),
            other => panic!("only policy events: {other:?}"),
        })
        .collect();
    assert_eq!(
        changes,
        [
            (Source::Code, None, Some(0)),
            (console.clone(), Some(0), None),
            (console.clone(), None, None),
            (console, None, Some(0)),
            (Source::Code, Some(0), None),
        ]
    );
}

#[test]
fn filtered_listeners_see_only_their_kind() {
    let r = registry();
    let downgrades = Arc::new(Mutex::new(Vec::new()));
    let breakers = Arc::new(Mutex::new(Vec::new()));
    let shadows = Arc::new(Mutex::new(Vec::new()));
    let (d, b, s) = (
        Arc::clone(&downgrades),
        Arc::clone(&breakers),
        Arc::clone(&shadows),
    );
    r.add_downgrade_listener(move |e| d.lock().unwrap().push(e.point));
    r.add_breaker_listener(move |e| b.lock().unwrap().push((e.point, e.change.to)));
    r.add_shadow_listener(move |e| s.lock().unwrap().push(e.point));
    one_of_each(r);
    assert!(r.flush_listeners(LONG));
    assert_eq!(*downgrades.lock().unwrap(), ["ev.down"]);
    assert_eq!(*shadows.lock().unwrap(), ["ev.shadow"]);
    assert_eq!(
        *breakers.lock().unwrap(),
        [("ev.breaker", BreakerState::Open)]
    );
}

#[test]
fn removed_listeners_stop_seeing_events() {
    let r = registry();
    deny_all(r, "ev.removed");
    let count = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&count);
    let id = r.add_downgrade_listener(move |_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    let point = r.point("ev.removed").unwrap();
    assert!(point.enter().is_err());
    assert!(r.flush_listeners(LONG));
    assert!(r.remove_listener(id));
    assert!(!r.remove_listener(id), "already removed");
    assert!(point.enter().is_err());
    assert!(r.flush_listeners(LONG));
    assert_eq!(count.load(Ordering::Relaxed), 1);
}

#[test]
fn flush_without_listeners_returns_at_once() {
    let r = registry();
    deny_all(r, "ev.nobody");
    assert!(r.point("ev.nobody").unwrap().enter().is_err());
    let start = Instant::now();
    assert!(r.flush_listeners(Duration::ZERO));
    assert!(r.flush_listeners(LONG));
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(r.delivered_events(), 0);
}

#[test]
fn flush_waits_for_a_slow_listener() {
    let r = registry();
    deny_all(r, "ev.slow");
    let done = Arc::new(AtomicU64::new(0));
    let d = Arc::clone(&done);
    r.add_downgrade_listener(move |_| {
        std::thread::sleep(Duration::from_millis(30));
        d.fetch_add(1, Ordering::Release);
    });
    let point = r.point("ev.slow").unwrap();
    let start = Instant::now();
    for _ in 0..5 {
        assert!(point.enter().is_err());
    }
    assert!(r.flush_listeners(LONG));
    assert_eq!(
        done.load(Ordering::Acquire),
        5,
        "all five handled on return"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "it really waited"
    );
    // Nothing queued since: returns without waiting for anything.
    assert!(r.flush_listeners(Duration::from_secs(1)));
}

#[test]
fn flush_times_out_while_a_listener_is_stuck_and_succeeds_after() {
    let r = registry();
    deny_all(r, "ev.stuck");
    let gate = Arc::new(Gate::default());
    gate.close();
    let g = Arc::clone(&gate);
    r.add_downgrade_listener(move |_| g.pass());
    assert!(r.point("ev.stuck").unwrap().enter().is_err());

    let start = Instant::now();
    assert!(!r.flush_listeners(Duration::from_millis(100)));
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(
        !r.flush_listeners(Duration::ZERO),
        "zero timeout: no waiting"
    );

    gate.open();
    assert!(r.flush_listeners(LONG));
    assert_eq!(r.delivered_events(), 1);
}

#[test]
fn flush_from_inside_a_listener_returns_false_at_once() {
    let r = registry();
    deny_all(r, "ev.reentrant");
    let answer = Arc::new(Mutex::new(None));
    let a = Arc::clone(&answer);
    r.add_downgrade_listener(move |_| {
        let start = Instant::now();
        let flushed = r.flush_listeners(Duration::from_secs(10));
        *a.lock().unwrap() = Some((flushed, start.elapsed()));
    });
    assert!(r.point("ev.reentrant").unwrap().enter().is_err());
    assert!(r.flush_listeners(LONG));
    let (flushed, took) = answer.lock().unwrap().expect("the listener ran");
    assert!(!flushed);
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[test]
fn a_panicking_event_listener_is_isolated() {
    let r = registry();
    deny_all(r, "ev.panic");
    r.add_event_listener(|_| panic!("a broken listener"));
    let count = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&count);
    r.add_event_listener(move |_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    let point = r.point("ev.panic").unwrap();
    for _ in 0..3 {
        assert!(point.enter().is_err());
    }
    assert!(r.flush_listeners(LONG));
    assert_eq!(count.load(Ordering::Relaxed), 3);
    assert_eq!(r.delivered_events(), 3);
}

/// Every thread makes its own downgrades, then flushes: each flush must cover every
/// event its thread queued, whatever the other threads queue meanwhile.
#[test]
fn flush_covers_what_each_thread_queued() {
    const THREADS: usize = 4;
    const ROUNDS: u64 = 20;
    const PER_ROUND: u64 = 25;
    let r = registry();
    let names: Vec<&'static str> = (0..THREADS)
        .map(|i| &*Box::leak(format!("ev.mt.{i}").into_boxed_str()))
        .collect();
    for name in &names {
        deny_all(r, name);
    }
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..THREADS).map(|_| AtomicU64::new(0)).collect());
    let c = Arc::clone(&counts);
    let lookup = names.clone();
    r.add_downgrade_listener(move |d| {
        let i = lookup.iter().position(|n| *n == d.point).unwrap();
        c[i].fetch_add(1, Ordering::Relaxed);
    });
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|s| {
        for (i, name) in names.iter().enumerate() {
            let (counts, barrier) = (Arc::clone(&counts), Arc::clone(&barrier));
            s.spawn(move || {
                let point = r.point(name).unwrap();
                barrier.wait();
                for round in 1..=ROUNDS {
                    for _ in 0..PER_ROUND {
                        assert!(point.enter().is_err());
                    }
                    assert!(r.flush_listeners(LONG));
                    let dropped = r.stats(name).unwrap().dropped_events;
                    let seen = counts[i].load(Ordering::Relaxed);
                    assert_eq!(
                        seen + dropped,
                        round * PER_ROUND,
                        "thread {i} round {round}"
                    );
                }
            });
        }
    });
    let total: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert_eq!(
        total + r.dropped_events(),
        THREADS as u64 * ROUNDS * PER_ROUND
    );
    assert_eq!(r.delivered_events(), total);
}

/// A stuck listener fills the queue: calls stay fast and drops are counted; a
/// flush cannot even queue its marker until the listener moves, then succeeds.
#[test]
fn a_full_queue_drops_and_counts_and_flush_waits_for_room() {
    let r = registry();
    deny_all(r, "ev.full");
    let gate = Arc::new(Gate::default());
    gate.close();
    let entered = Arc::new(AtomicBool::new(false));
    let (g, e) = (Arc::clone(&gate), Arc::clone(&entered));
    r.add_downgrade_listener(move |_| {
        e.store(true, Ordering::Release);
        g.pass();
    });
    let point = r.point("ev.full").unwrap();
    assert!(point.enter().is_err());
    // Wait until the delivery thread holds the first event: the queue is then empty.
    let start = Instant::now();
    while !entered.load(Ordering::Acquire) {
        assert!(start.elapsed() < LONG, "the delivery thread never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    let extra = 100;
    let start = Instant::now();
    for _ in 0..EVENT_QUEUE_CAPACITY + extra {
        assert!(point.enter().is_err());
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "a stuck listener never blocks a call"
    );
    assert_eq!(r.dropped_events(), extra as u64);
    assert_eq!(r.stats("ev.full").unwrap().dropped_events, extra as u64);
    assert!(
        !r.flush_listeners(Duration::from_millis(50)),
        "no room for the marker"
    );

    // Another thread flushes while the queue is still full; it gets in once the
    // listener moves.
    std::thread::scope(|s| {
        let waiter = s.spawn(|| r.flush_listeners(LONG));
        std::thread::sleep(Duration::from_millis(50));
        gate.open();
        assert!(waiter.join().unwrap());
    });
    assert_eq!(r.delivered_events(), 1 + EVENT_QUEUE_CAPACITY as u64);
}
