//! Call durations in the per-second series (`SecondStats::{measured, mean_duration,
//! max_duration}`): exact on a manual clock, exact counts under many threads and
//! racing policy changes, and plausible on the system clock. Every test turns the
//! measuring on (`durations_off.rs` checks it is off by default).

use resilience_runtime::{
    measure_durations, registry, Clock, ManualClock, Point, Policy, Registry, SecondStats,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    measure_durations(true);
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

fn empty() -> Policy {
    Policy::builder().build().unwrap()
}

#[test]
fn each_second_has_the_count_mean_and_max_of_the_calls_that_ended_in_it() {
    let (manual, registry) = manual_registry();
    registry.set_policy("dur.manual", empty()).unwrap();
    let point = registry.point("dur.manual").unwrap();
    let ms = Duration::from_millis;
    // Second 1: calls of 3 ms and 5 ms (one failing: still a duration).
    let a = point.enter().unwrap();
    manual.advance(ms(3));
    a.finish(false);
    let b = point.enter().unwrap();
    manual.advance(ms(5));
    b.finish(true);
    // A call that starts in second 1 and ends in second 2, 1 s long.
    let long = point.enter().unwrap();
    manual.advance(Duration::from_secs(1));
    long.finish(false);
    // Second 2 also: a 0-length call. A cancelled call has no duration.
    point.enter().unwrap().finish(false);
    drop(point.enter().unwrap());
    manual.advance(Duration::from_secs(1));
    let seconds = point.seconds(2);
    let view = |s: &SecondStats| (s.passes, s.measured, s.mean_duration, s.max_duration);
    assert_eq!(view(&seconds[0]), (3, 2, Some(ms(4)), Some(ms(5))));
    assert_eq!(
        view(&seconds[1]),
        (2, 2, Some(Duration::from_micros(500_000)), Some(ms(1000)))
    );
}

#[test]
fn a_point_without_a_policy_is_timed_too() {
    let (manual, registry) = manual_registry();
    let point = registry.point("dur.none").unwrap();
    let p = point.enter().unwrap();
    manual.advance(Duration::from_millis(7));
    p.finish(false);
    let p = point.enter().unwrap();
    manual.advance(Duration::from_millis(3));
    p.finish(true);
    // A cancelled call has no duration.
    drop(point.enter().unwrap());
    manual.advance(Duration::from_secs(1));
    let s = &point.seconds(1)[0];
    let ms = Duration::from_millis;
    assert_eq!(
        (
            s.visits,
            s.exceptions,
            s.cancelled,
            s.measured,
            s.mean_duration,
            s.max_duration
        ),
        (3, 1, 1, 2, Some(ms(5)), Some(ms(7)))
    );
}

/// Without a policy too, every finished call is measured once under many threads.
#[test]
fn calls_without_a_policy_are_measured_once_under_many_threads() {
    for threads in [1u64, 8, 64] {
        let (manual, registry) = manual_registry();
        let point: &'static Point = registry.point("dur.none.threads").unwrap();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                std::thread::spawn(move || {
                    for i in 0..500 {
                        point.enter().unwrap().finish(i % 5 == 0);
                    }
                })
            })
            .collect();
        for _ in 0..10 {
            manual.advance(Duration::from_millis(100));
        }
        for w in workers {
            w.join().unwrap();
        }
        manual.advance(Duration::from_secs(2));
        let seconds = point.seconds(Point::SECONDS_KEPT);
        let measured: u64 = seconds.iter().map(|s| s.measured).sum();
        let visits: u64 = seconds.iter().map(|s| s.visits).sum();
        assert_eq!(
            (measured, visits),
            (threads * 500, threads * 500),
            "{threads}"
        );
    }
}

#[test]
fn downgraded_calls_are_not_measured() {
    let (manual, registry) = manual_registry();
    registry
        .set_policy(
            "dur.refused",
            Policy::builder().max_visits(1).build().unwrap(),
        )
        .unwrap();
    let point = registry.point("dur.refused").unwrap();
    let p = point.enter().unwrap();
    assert!(point.enter().is_err());
    manual.advance(Duration::from_millis(2));
    p.finish(false);
    manual.advance(Duration::from_secs(1));
    let s = &point.seconds(1)[0];
    assert_eq!((s.visits, s.downgrades, s.measured), (2, 1, 1));
    assert_eq!(s.max_duration, Some(Duration::from_millis(2)));
}

/// Many threads (past the owned lanes, so the shared lane is used too) finish calls
/// while the clock moves and the policy changes under them: every finished call is
/// measured exactly once, and the longest call of a second is its max.
#[test]
fn every_finished_call_is_measured_once_under_many_threads_and_policy_swaps() {
    for threads in [1usize, 2, 8, 24, 64] {
        let (manual, registry) = manual_registry();
        let name = "dur.threads";
        registry.set_policy(name, empty()).unwrap();
        let point: &'static Point = registry.point(name).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (stop, finished) = (stop.clone(), finished.clone());
                std::thread::spawn(move || {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(p) = point.enter() {
                            p.finish(n % 3 == 0);
                            n += 1;
                        }
                    }
                    finished.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        for step in 0..40u64 {
            // Policies with and without rules (all admit every call); the series and
            // durations survive every change.
            let policy = if step % 2 == 0 {
                empty()
            } else {
                Policy::builder().max_concurrency(1_000).build().unwrap()
            };
            registry.set_policy(name, policy).unwrap();
            manual.advance(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        // One long call, alone in its second: the max of that second.
        let p = point.enter().unwrap();
        manual.advance(Duration::from_millis(1_500));
        p.finish(false);
        manual.advance(Duration::from_secs(1));
        let total = finished.load(Ordering::Relaxed) + 1;
        let seconds = point.seconds(Point::SECONDS_KEPT);
        let measured: u64 = seconds.iter().map(|s| s.measured).sum();
        let passes: u64 = seconds.iter().map(|s| s.passes).sum();
        assert_eq!(measured, total, "{threads} threads");
        assert_eq!(passes, total, "{threads} threads");
        let last = seconds.iter().rev().find(|s| s.measured > 0).unwrap();
        assert_eq!(last.max_duration, Some(Duration::from_millis(1_500)));
        assert_eq!(last.measured, 1);
        // No call outlasted the loop (a preempted thread's call may span all of
        // it), and every mean is at most its second's max.
        for s in &seconds {
            if let (Some(mean), Some(max)) = (s.mean_duration, s.max_duration) {
                assert!(
                    mean <= max && max <= Duration::from_millis(2_000),
                    "{threads}: {s:?}"
                );
            }
        }
    }
}

#[test]
fn durations_on_the_system_clock() {
    measure_durations(true);
    let name = "dur.system";
    registry().set_policy(name, empty()).unwrap();
    let point = registry().point(name).unwrap();
    for _ in 0..5 {
        let p = point.enter().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        p.finish(false);
    }
    // The series closes the second about 20 ms after it ends (later on a busy host).
    let measured = || point.seconds(5).iter().map(|s| s.measured).sum::<u64>();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while measured() < 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(measured(), 5);
    let seconds = point.seconds(5);
    let max = seconds.iter().filter_map(|s| s.max_duration).max().unwrap();
    // The cached timeline has a resolution of about a millisecond, and on a loaded
    // host its refresh thread can fall behind by a few milliseconds (a call then reads
    // shorter or longer); a loaded host may also oversleep.
    assert!(
        max >= Duration::from_millis(10) && max < Duration::from_millis(500),
        "{max:?}"
    );
    for s in seconds.iter().filter(|s| s.measured > 0) {
        let mean = s.mean_duration.unwrap();
        assert!(mean >= Duration::from_millis(1) && mean <= max, "{mean:?}");
    }
}
