//! The SDS bar: every strategy's observable numbers, on a manual clock.

use resilience_runtime::{Clock, ManualClock, Point, Policy, Reason, Registry};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

fn setup(name: &str, policy: Policy) -> (ManualClock, &'static Registry, &'static Point) {
    let clock = ManualClock::new();
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    reg.set_policy(name, policy).unwrap();
    (clock, reg, reg.point(name).unwrap())
}

/// Runs `n` calls; `body(i)` says whether call `i` (1-based) fails. Returns the
/// outcome of each call: `None` = ran, `Some(reason)` = downgraded.
fn run(
    point: &'static Point,
    n: usize,
    mut body: impl FnMut(usize) -> bool,
) -> Vec<Option<Reason>> {
    (1..=n)
        .map(|i| match point.enter() {
            Ok(permit) => {
                let failed = body(i);
                permit.finish(failed);
                None
            }
            Err(d) => Some(d.reason()),
        })
        .collect()
}

fn downgraded_calls(out: &[Option<Reason>]) -> Vec<usize> {
    out.iter()
        .enumerate()
        .filter(|(_, r)| r.is_some())
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn visits_limit_5_over_10_calls() {
    let (clock, _, p) = setup("visits", Policy::builder().max_visits(5).build().unwrap());
    let out = run(p, 10, |_| false);
    assert_eq!(downgraded_calls(&out), [6, 7, 8, 9, 10]);
    assert!(out.iter().flatten().all(|r| *r == Reason::Visits));
    let s = p.stats();
    assert_eq!(
        (s.totals.visits, s.totals.passes, s.totals.downgrades),
        (10, 5, 5)
    );
    // Downgraded visits do not keep the point downgraded: the window is `visits - downgrades`.
    let w = s.window.unwrap();
    assert_eq!((w.visits, w.downgrades, w.passes), (10, 5, 5));
    // After the window slides past, five more pass.
    clock.advance(Duration::from_secs(10));
    assert_eq!(downgraded_calls(&run(p, 10, |_| false)), [6, 7, 8, 9, 10]);
}

#[test]
fn visits_zero_is_a_kill_switch() {
    let (_, _, p) = setup("kill", Policy::builder().max_visits(0).build().unwrap());
    assert_eq!(downgraded_calls(&run(p, 3, |_| false)), [1, 2, 3]);
}

#[test]
fn window_slides_one_bucket_at_a_time() {
    let (clock, _, p) = setup(
        "slide",
        Policy::builder()
            .max_visits(3)
            .window(3, Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    // one pass in each of three buckets fills the window
    for _ in 0..3 {
        assert!(p.enter().is_ok());
        clock.advance(Duration::from_millis(100));
    }
    // the first bucket has left the window: exactly one more fits
    assert_eq!(downgraded_calls(&run(p, 2, |_| false)), [2]);
}

#[test]
fn concurrency_2_with_5_workers_x_10_calls_downgrades_exactly_30() {
    let (_, _, p) = setup(
        "conc",
        Policy::builder().max_concurrency(2).build().unwrap(),
    );
    let entered = Arc::new(Barrier::new(5));
    let downgraded = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..5)
        .map(|_| {
            let entered = Arc::clone(&entered);
            let downgraded = Arc::clone(&downgraded);
            std::thread::spawn(move || {
                for _ in 0..10 {
                    entered.wait(); // everyone asks at once
                    let permit = p.enter();
                    entered.wait(); // everyone has asked before anyone finishes
                    match permit {
                        Ok(permit) => permit.finish(false),
                        Err(d) => {
                            assert_eq!(d.reason(), Reason::Concurrency);
                            downgraded.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(downgraded.load(Ordering::Relaxed), 30);
    let s = p.stats();
    assert_eq!(s.totals.downgrades, 30);
    assert_eq!(s.concurrency, 0, "every permit came back");
    assert_eq!(s.peak_concurrency, 2);
}

#[test]
fn exceptions_5_with_every_call_failing() {
    let (_, _, p) = setup("exc", Policy::builder().max_exceptions(5).build().unwrap());
    let out = run(p, 10, |_| true);
    assert_eq!(downgraded_calls(&out), [6, 7, 8, 9, 10]);
    assert!(out.iter().flatten().all(|r| *r == Reason::Exceptions));
}

#[test]
fn exception_rate_50_percent_with_floor_5() {
    let (_, _, p) = setup(
        "rate",
        Policy::builder().exception_rate(0.5, 5).build().unwrap(),
    );
    let out = run(p, 10, |_| true);
    assert_eq!(downgraded_calls(&out), [6, 7, 8, 9, 10]);
    assert!(out.iter().flatten().all(|r| *r == Reason::ExceptionRate));
}

#[test]
fn exception_rate_below_threshold_passes() {
    let (_, _, p) = setup(
        "rate-low",
        Policy::builder().exception_rate(0.5, 5).build().unwrap(),
    );
    // every third call fails: 33% < 50%
    assert!(downgraded_calls(&run(p, 30, |i| i % 3 == 0)).is_empty());
}

#[test]
fn timeout_count_5_with_every_call_slow() {
    let (clock, _, p) = setup(
        "timeouts",
        Policy::builder()
            .timeouts(Duration::from_millis(100), 5)
            .build()
            .unwrap(),
    );
    let out = run(p, 10, |_| {
        clock.advance(Duration::from_millis(150));
        false
    });
    assert_eq!(downgraded_calls(&out), [6, 7, 8, 9, 10]);
    assert_eq!(
        p.stats().totals.timeouts,
        5,
        "downgraded calls are never timed"
    );
}

#[test]
fn a_call_exactly_at_the_threshold_is_not_a_timeout() {
    let (clock, _, p) = setup(
        "timeouts-edge",
        Policy::builder()
            .timeouts(Duration::from_millis(100), 1)
            .build()
            .unwrap(),
    );
    run(p, 3, |_| {
        clock.advance(Duration::from_millis(100));
        false
    });
    assert_eq!(p.stats().totals.timeouts, 0);
}

#[test]
fn token_bucket_is_a_real_bucket() {
    let (clock, _, p) = setup(
        "tokens",
        Policy::builder().token_bucket(2.0, 4).build().unwrap(),
    );
    // starts full: a burst of 4
    assert_eq!(downgraded_calls(&run(p, 6, |_| false)), [5, 6]);
    // continuous refill: half a second brings one token
    clock.advance(Duration::from_millis(500));
    assert_eq!(downgraded_calls(&run(p, 2, |_| false)), [2]);
    // an idle point saves up to the capacity, never more
    clock.advance(Duration::from_secs(60));
    assert_eq!(downgraded_calls(&run(p, 6, |_| false)), [5, 6]);
    assert_eq!(
        p.stats()
            .totals
            .downgrades_by_reason
            .get(Reason::TokenBucket),
        5
    );
}

#[test]
fn token_bucket_rate_zero_admits_nothing() {
    let (_, _, p) = setup(
        "tokens0",
        Policy::builder().token_bucket(0.0, 5).build().unwrap(),
    );
    assert_eq!(downgraded_calls(&run(p, 2, |_| false)), [1, 2]);
}

#[test]
fn percentage_zero_never_downgrades_and_emits_nothing() {
    let (_, reg, p) = setup(
        "pct0",
        Policy::builder()
            .max_visits(0)
            .downgrade_percentage(0)
            .build()
            .unwrap(),
    );
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    reg.add_listener(move |e| {
        let _ = tx.lock().unwrap().send(e.reason);
    });
    assert!(downgraded_calls(&run(p, 100, |_| false)).is_empty());
    assert_eq!(p.stats().totals.downgrades, 0);
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
}

#[test]
fn percentage_50_downgrades_about_half_of_the_tripped_calls() {
    let (_, _, p) = setup(
        "pct50",
        Policy::builder()
            .max_visits(0)
            .downgrade_percentage(50)
            .build()
            .unwrap(),
    );
    let n = downgraded_calls(&run(p, 10_000, |_| false)).len();
    assert!((4_500..5_500).contains(&n), "{n} of 10000 downgraded");
}

#[test]
fn reason_is_the_first_tripped_rule_in_sds_order() {
    // visits before everything
    let (_, _, p) = setup(
        "order1",
        Policy::builder()
            .max_visits(0)
            .token_bucket(0.0, 1)
            .max_concurrency(0)
            .max_exceptions(0)
            .timeouts(Duration::from_secs(1), 0)
            .exception_rate(0.0, 0)
            .build()
            .unwrap(),
    );
    assert_eq!(run(p, 1, |_| false), [Some(Reason::Visits)]);
    // then token bucket, concurrency, timeouts, exceptions, exception rate
    let cases: [(Policy, Reason); 5] = [
        (
            Policy::builder()
                .token_bucket(0.0, 1)
                .max_concurrency(0)
                .max_exceptions(0)
                .build()
                .unwrap(),
            Reason::TokenBucket,
        ),
        (
            Policy::builder()
                .max_concurrency(0)
                .timeouts(Duration::from_secs(1), 0)
                .build()
                .unwrap(),
            Reason::Concurrency,
        ),
        (
            Policy::builder()
                .timeouts(Duration::from_secs(1), 0)
                .max_exceptions(0)
                .build()
                .unwrap(),
            Reason::Timeouts,
        ),
        (
            Policy::builder()
                .max_exceptions(0)
                .exception_rate(0.0, 0)
                .build()
                .unwrap(),
            Reason::Exceptions,
        ),
        (
            Policy::builder().exception_rate(0.0, 0).build().unwrap(),
            Reason::ExceptionRate,
        ),
    ];
    for (i, (policy, reason)) in cases.into_iter().enumerate() {
        let (_, _, p) = setup(&format!("order{}", i + 2), policy);
        assert_eq!(run(p, 1, |_| false), [Some(reason)], "case {i}");
        assert_eq!(
            p.stats().concurrency,
            0,
            "no slot held by a downgraded call"
        );
    }
}

#[test]
fn delay_keeps_the_point_down_and_probes_every_interval() {
    let (clock, reg, p) = setup(
        "delay",
        Policy::builder()
            .max_exceptions(1)
            .delay(Duration::from_secs(10), Some(Duration::from_secs(1)))
            .build()
            .unwrap(),
    );
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    reg.add_listener(move |e| {
        let _ = tx.lock().unwrap().send((e.reason, e.delay_cause));
    });
    // one failure, then the exception rule trips and starts the delay
    assert_eq!(run(p, 2, |_| true), [None, Some(Reason::Exceptions)]);
    assert!(p.stats().in_delay);
    // inside the delay: downgraded with reason Delay
    assert_eq!(run(p, 1, |_| false), [Some(Reason::Delay)]);
    // after one retry interval exactly one probe goes through; it fails
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        run(p, 3, |_| true),
        [None, Some(Reason::Delay), Some(Reason::Delay)]
    );
    // the failing probe scheduled the next one a full interval later
    clock.advance(Duration::from_millis(999));
    assert_eq!(run(p, 1, |_| false), [Some(Reason::Delay)]);
    clock.advance(Duration::from_millis(1));
    // this probe succeeds and ends the delay early (SDS never does)
    assert_eq!(run(p, 1, |_| false), [None]);
    assert!(!p.stats().in_delay);
    // the exception window still holds the failures, so the rule trips again: the
    // delay restarts from the chain, not from stale state
    let reasons: Vec<_> = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(5)).ok())
        .take(5)
        .collect();
    assert_eq!(reasons.len(), 5);
    assert_eq!(reasons[0], (Reason::Exceptions, None));
    assert!(reasons[1..]
        .iter()
        .all(|r| *r == (Reason::Delay, Some(Reason::Exceptions))));
}

#[test]
fn delay_without_probes_expires_on_time() {
    let (clock, _, p) = setup(
        "delay-noprobe",
        Policy::builder()
            .max_visits(1)
            .delay(Duration::from_secs(10), None)
            .window(1, Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    assert_eq!(downgraded_calls(&run(p, 2, |_| false)), [2]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(run(p, 1, |_| false), [Some(Reason::Delay)]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(run(p, 1, |_| false), [None]);
}

#[test]
fn policy_change_keeps_counters_permits_and_delay() {
    let (clock, reg, p) = setup("change", Policy::builder().max_visits(5).build().unwrap());
    run(p, 5, |_| false);
    reg.set_policy("change", Policy::builder().max_visits(6).build().unwrap())
        .unwrap();
    // the window was kept: exactly one more visit fits
    assert_eq!(downgraded_calls(&run(p, 3, |_| false)), [2, 3]);

    // concurrency: in-flight calls keep their slots across a change (no fresh permits)
    reg.set_policy(
        "change",
        Policy::builder().max_concurrency(2).build().unwrap(),
    )
    .unwrap();
    let a = p.enter().unwrap();
    let b = p.enter().unwrap();
    reg.set_policy(
        "change",
        Policy::builder().max_concurrency(2).build().unwrap(),
    )
    .unwrap();
    assert_eq!(p.enter().unwrap_err().reason(), Reason::Concurrency);
    reg.set_policy(
        "change",
        Policy::builder().max_concurrency(3).build().unwrap(),
    )
    .unwrap();
    let c = p.enter().unwrap();
    assert_eq!(p.enter().unwrap_err().reason(), Reason::Concurrency);
    for permit in [a, b, c] {
        permit.finish(false);
    }
    assert_eq!(p.stats().concurrency, 0);

    // delay state survives a change of thresholds
    reg.set_policy(
        "change",
        Policy::builder()
            .max_visits(0)
            .delay(Duration::from_secs(10), None)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(run(p, 1, |_| false), [Some(Reason::Visits)]);
    reg.set_policy(
        "change",
        Policy::builder()
            .max_visits(1000)
            .delay(Duration::from_secs(10), None)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(run(p, 1, |_| false), [Some(Reason::Delay)]);
    clock.advance(Duration::from_secs(10));
    assert_eq!(run(p, 1, |_| false), [None]);
    // totals were never reset
    assert_eq!(p.stats().totals.visits, 5 + 3 + 5 + 3);
}

#[test]
fn clearing_a_policy_lets_everything_through() {
    let (_, reg, p) = setup("clear", Policy::builder().max_visits(0).build().unwrap());
    assert!(p.enter().is_err());
    reg.clear_policy("clear").unwrap();
    assert!(reg.policy("clear").unwrap().is_none());
    assert!(p.enter().is_ok());
    // Without a policy the point still has a window (from its per-second series):
    // the refused call and the one that passed.
    let w = p.stats().window.unwrap();
    assert_eq!((w.visits, w.passes, w.downgrades), (2, 1, 1));
}

#[test]
fn permits_come_back_after_panics_and_cancellation() {
    let (_, _, p) = setup(
        "panics",
        Policy::builder().max_concurrency(1).build().unwrap(),
    );
    for _ in 0..3 {
        let r = std::panic::catch_unwind(|| {
            p.call(|| -> Result<(), ()> { panic!("boom") }, |_| Ok(()))
        });
        assert!(r.is_err());
    }
    assert_eq!(p.stats().concurrency, 0);
    assert_eq!(p.stats().totals.exceptions, 3);
    // a dropped permit is a cancelled call: slot back, no exception
    drop(p.enter().unwrap());
    assert_eq!(p.stats().concurrency, 0);
    assert_eq!(p.stats().totals.exceptions, 3);
}

#[test]
fn cancelled_future_releases_its_slot() {
    let (_, _, p) = setup(
        "cancel",
        Policy::builder().max_concurrency(1).build().unwrap(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let slow = p.call_async(
            || async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, ()>(1)
            },
            |_| async { Ok(0) },
        );
        let r = tokio::time::timeout(Duration::from_millis(10), slow).await;
        assert!(r.is_err(), "timed out, future dropped");
    });
    assert_eq!(p.stats().concurrency, 0);
    assert_eq!(p.stats().totals.exceptions, 0);
    assert_eq!(p.call(|| Ok::<_, ()>(1), |_| Ok(0)), Ok(1));
}

#[test]
fn listener_sees_every_downgrade_and_survives_a_panicking_one() {
    let (_, reg, p) = setup("listen", Policy::builder().max_visits(2).build().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let seen2 = Arc::clone(&seen);
    reg.add_listener(|_| panic!("a broken listener"));
    let id = reg.add_listener(move |e| {
        assert_eq!(e.point, "listen");
        assert_eq!(e.reason, Reason::Visits);
        seen2.fetch_add(1, Ordering::SeqCst);
    });
    let out = run(p, 50, |_| false);
    assert_eq!(downgraded_calls(&out).len(), 48);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.load(Ordering::SeqCst) < 48 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(seen.load(Ordering::SeqCst), 48);
    assert!(reg.remove_listener(id));
    assert!(!reg.remove_listener(id));
}

#[test]
fn a_slow_listener_never_blocks_calls_and_drops_are_counted() {
    let (_, reg, p) = setup(
        "slow-listener",
        Policy::builder().max_visits(0).build().unwrap(),
    );
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g2 = Arc::clone(&gate);
    reg.add_listener(move |_| drop(g2.lock()));
    let n = resilience_runtime::EVENT_QUEUE_CAPACITY + 1000;
    let started = std::time::Instant::now();
    assert_eq!(downgraded_calls(&run(p, n, |_| false)).len(), n);
    assert!(started.elapsed() < Duration::from_secs(30));
    let s = p.stats();
    assert!(s.dropped_events >= 999, "dropped {}", s.dropped_events);
    assert_eq!(reg.dropped_events(), s.dropped_events);
    drop(held);
}

#[test]
fn last_cycle_is_wall_clock_aligned() {
    let (clock, _, p) = setup(
        "cycle",
        Policy::builder()
            .max_visits(3)
            .max_exceptions(100)
            .build()
            .unwrap(),
    );
    run(p, 5, |i| i == 1);
    assert_eq!(
        p.stats().last_cycle.unwrap().visits,
        0,
        "first cycle not closed yet"
    );
    clock.advance(Duration::from_secs(10));
    let cycle = p.stats().last_cycle.unwrap();
    assert_eq!(
        (
            cycle.visits,
            cycle.passes,
            cycle.downgrades,
            cycle.exceptions
        ),
        (5, 3, 2, 1)
    );
    assert_eq!(cycle.downgrades_by_reason.get(Reason::Visits), 2);
    assert_eq!(cycle.peak_concurrency, 1);
    let start = cycle.start.duration_since(std::time::UNIX_EPOCH).unwrap();
    assert_eq!(start.as_secs() % 10, 0);
    // an idle cycle reports zeros
    clock.advance(Duration::from_secs(10));
    assert_eq!(p.stats().last_cycle.unwrap().visits, 0);
}

#[test]
fn bad_point_names_are_errors() {
    let reg = Registry::with_clock(Clock::system());
    for bad in ["", "   ", "a\tb"] {
        let e = reg.point(bad).unwrap_err();
        assert_eq!(e.name(), bad);
        assert!(reg.set_policy(bad, Policy::observe()).is_err());
        assert!(reg.clear_policy(bad).is_err());
        assert!(reg.policy(bad).is_err());
    }
    assert!(reg.stats("never.created").is_none());
}

#[test]
fn many_buckets_window() {
    let (clock, _, p) = setup(
        "wide",
        Policy::builder()
            .max_visits(599)
            .window(600, Duration::from_millis(10))
            .build()
            .unwrap(),
    );
    for _ in 0..600 {
        assert!(p.enter().is_ok() as u8 <= 1);
        clock.advance(Duration::from_millis(10));
    }
    // 599 passed and one was downgraded across the last 600 buckets; the first bucket
    // has just left the window
    assert_eq!(p.stats().totals.downgrades, 1);
    assert_eq!(p.stats().window.unwrap().visits, 599);
}

#[test]
fn a_hung_call_counts_as_a_timeout_before_it_returns() {
    let (clock, _, p) = setup(
        "hung",
        Policy::builder()
            .timeouts(Duration::from_millis(100), 1)
            .build()
            .unwrap(),
    );
    let hung = p.enter().unwrap();
    clock.advance(Duration::from_millis(150));
    // The process-wide wheel sweeps every 25 ms of real time (a quarter of the
    // threshold); wait for it, bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while p.stats().totals.timeouts == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(p.stats().totals.timeouts, 1, "counted while still running");
    assert_eq!(p.enter().unwrap_err().reason(), Reason::Timeouts);
    // when it finally returns it is not counted a second time
    hung.finish(false);
    assert_eq!(p.stats().totals.timeouts, 1);
    assert_eq!(p.stats().concurrency, 0);
}

#[test]
fn adaptive_limit_is_a_policy_option() {
    use resilience_runtime::adaptive::GradientConfig;
    use resilience_runtime::AdaptiveLimit;
    let config = GradientConfig::builder()
        .initial_limit(2)
        .min_limit(1)
        .max_limit(2)
        .build()
        .unwrap();
    let (_, _, p) = setup(
        "adaptive",
        Policy::builder()
            .adaptive(AdaptiveLimit::Gradient(config))
            .build()
            .unwrap(),
    );
    let a = p.enter().unwrap();
    let b = p.enter().unwrap();
    assert_eq!(p.enter().unwrap_err().reason(), Reason::Overloaded);
    a.finish(false);
    drop(b); // cancelled: leaves the flight too
    assert!(p.enter().is_ok());
    assert_eq!(
        p.stats()
            .totals
            .downgrades_by_reason
            .get(Reason::Overloaded),
        1
    );
    // invalid settings are named (the fields stay public, so the policy checks them
    // again)
    let mut gradient = GradientConfig::default();
    gradient.min_limit = 0;
    let bad = Policy::builder()
        .adaptive(AdaptiveLimit::Gradient(gradient))
        .build()
        .unwrap_err();
    assert_eq!(bad.fields(), ["adaptive"]);
    assert!(bad.to_string().contains("min_limit"), "{bad}");
}

/// Real time: thresholds of 200 ms and more are measured on the cached timeline,
/// shorter ones on the tick counter; both count slow calls and only slow calls.
#[test]
fn timeouts_on_the_system_clock_in_both_units() {
    for (name, threshold, slow, fast) in [("rt.coarse", 250, 320, 5), ("rt.fine", 30, 60, 1)] {
        let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
        reg.set_policy(
            name,
            Policy::builder()
                .timeouts(Duration::from_millis(threshold), 100)
                .build()
                .unwrap(),
        )
        .unwrap();
        let p = reg.point(name).unwrap();
        let permit = p.enter().unwrap();
        std::thread::sleep(Duration::from_millis(fast));
        permit.finish(false);
        assert_eq!(
            p.stats().totals.timeouts,
            0,
            "{name}: a fast call is no timeout"
        );
        let permit = p.enter().unwrap();
        std::thread::sleep(Duration::from_millis(slow));
        permit.finish(false);
        assert_eq!(p.stats().totals.timeouts, 1, "{name}: a slow call is one");
    }
}

/// Real time: a token bucket with a long burst span (timeline) and a short one (ticks)
/// both start full and refill at their rate.
#[test]
fn token_buckets_on_the_system_clock_in_both_units() {
    // 1000/s with 500 tokens = a 500 ms burst span; 1000/s with 20 = 20 ms.
    for (name, capacity) in [("rt.tokens.coarse", 500u64), ("rt.tokens.fine", 20)] {
        let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
        reg.set_policy(
            name,
            Policy::builder()
                .token_bucket(1000.0, capacity)
                .build()
                .unwrap(),
        )
        .unwrap();
        let p = reg.point(name).unwrap();
        let started = std::time::Instant::now();
        let admitted = (0..capacity * 2)
            .filter(|_| p.enter().map(|permit| permit.finish(false)).is_ok())
            .count() as u64;
        // Full at start; the burst itself may see one refill per elapsed millisecond.
        let refills = started.elapsed().as_millis() as u64 + 2;
        assert!(
            admitted >= capacity && admitted <= capacity + refills,
            "{name}: {admitted} admitted from a bucket of {capacity}"
        );
        std::thread::sleep(Duration::from_millis(20));
        let refilled = (0..capacity * 2)
            .filter(|_| p.enter().map(|permit| permit.finish(false)).is_ok())
            .count() as u64;
        assert!(
            refilled >= 10,
            "{name}: only {refilled} after 20 ms at 1000/s"
        );
    }
}
