//! Concurrency invariants under real threads and the system clock.

use resilience_runtime::{Clock, Policy, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const THREADS: usize = 4;
const CALLS: u64 = 100_000;

#[test]
fn concurrency_3_is_never_exceeded_and_counts_add_up() {
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    reg.set_policy(
        "stress",
        Policy::builder().max_concurrency(3).build().unwrap(),
    )
    .unwrap();
    let p = reg.point("stress").unwrap();
    let inside = Arc::new(AtomicU64::new(0));
    let max_seen = Arc::new(AtomicU64::new(0));
    let passed = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (inside, max_seen, passed) = (
                Arc::clone(&inside),
                Arc::clone(&max_seen),
                Arc::clone(&passed),
            );
            std::thread::spawn(move || {
                for i in 0..CALLS {
                    if let Ok(permit) = p.enter() {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max_seen.fetch_max(now, Ordering::SeqCst);
                        if i % 64 == 0 {
                            std::thread::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        passed.fetch_add(1, Ordering::Relaxed);
                        // mix outcomes: exceptions, panics-as-exceptions, cancellations
                        match (i + t as u64) % 4 {
                            0 => permit.finish(true),
                            1 => drop(permit),
                            _ => permit.finish(false),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = p.stats();
    assert!(
        max_seen.load(Ordering::SeqCst) <= 3,
        "saw {} in flight",
        max_seen.load(Ordering::SeqCst)
    );
    assert_eq!(s.totals.visits, THREADS as u64 * CALLS);
    assert_eq!(s.totals.visits, s.totals.passes + s.totals.downgrades);
    assert_eq!(s.totals.passes, passed.load(Ordering::Relaxed));
    assert_eq!(s.totals.downgrades, s.totals.downgrades_by_reason.total());
    assert_eq!(s.concurrency, 0, "every permit came back");
    assert!(s.peak_concurrency <= 3);
}

#[test]
fn panicking_calls_release_their_permits_under_contention() {
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    reg.set_policy(
        "stress-panic",
        Policy::builder().max_concurrency(2).build().unwrap(),
    )
    .unwrap();
    let p = reg.point("stress-panic").unwrap();
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(move || {
                let mut panics = 0u64;
                for i in 0..2_000u32 {
                    let r = std::panic::catch_unwind(|| {
                        p.call(
                            || {
                                if i % 2 == 0 {
                                    panic!("boom");
                                }
                                Ok::<_, ()>(())
                            },
                            |_| Ok(()),
                        )
                    });
                    panics += u64::from(r.is_err());
                }
                panics
            })
        })
        .collect();
    let panics: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    std::panic::set_hook(prev_hook);
    let s = p.stats();
    assert_eq!(s.concurrency, 0);
    assert_eq!(s.totals.exceptions, panics);
    assert_eq!(
        s.totals.visits,
        THREADS as u64 * 2_000,
        "every call is one visit"
    );
    assert_eq!(s.totals.downgrades, s.totals.downgrades_by_reason.total());
}

#[test]
fn policy_swaps_under_load_never_tear_or_leak() {
    // A clock that does not move: the memory compared below is the point's forms and
    // slots, not its per-second history, which grows (boundedly) as seconds pass.
    let manual = resilience_runtime::ManualClock::new();
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    reg.set_policy(
        "stress-swap",
        Policy::builder().max_concurrency(2).build().unwrap(),
    )
    .unwrap();
    let p = reg.point("stress-swap").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let inside = Arc::new(AtomicU64::new(0));
    let max_seen = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, inside, max_seen) = (
                Arc::clone(&stop),
                Arc::clone(&inside),
                Arc::clone(&max_seen),
            );
            std::thread::spawn(move || {
                let (mut calls, mut ran) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    calls += 1;
                    if let Ok(permit) = p.enter() {
                        ran += 1;
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max_seen.fetch_max(now, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        permit.finish(false);
                    }
                }
                (calls, ran)
            })
        })
        .collect();
    // Alternate between two limits (and other rules) while calls run, between plain
    // rules and rules that take the general entry (a delay; a threshold short enough
    // for the tick counter), so that calls race with the switch between the two.
    // The settings repeat every 30 swaps: the point keeps one compiled form per
    // distinct setting, so its memory stops growing after the first 30. (The
    // hung-call table is made by the first timed call, and the per-reason counters by
    // the first downgrade, whenever those come: make them first, so that they are in
    // both measurements.)
    let none = Policy::builder().max_visits(0).build().unwrap();
    reg.set_policy("stress-swap", none).unwrap();
    assert!(p.enter().is_err());
    let timed = Policy::builder()
        .timeouts(Duration::from_secs(5), 1_000_000)
        .build()
        .unwrap();
    reg.set_policy("stress-swap", timed).unwrap();
    p.enter().unwrap().finish(false);
    let mut after_one_cycle = 0;
    for i in 0..2_000 {
        if i == 30 {
            after_one_cycle = p.memory_bytes();
        }
        let b = Policy::builder().max_concurrency(if i % 2 == 0 { 1 } else { 2 });
        let b = if i % 3 == 0 {
            b.max_visits(1_000_000)
        } else {
            b
        };
        let b = match i % 5 {
            0 => b.delay(Duration::from_secs(1), Some(Duration::from_millis(100))),
            1 => b.timeouts(Duration::from_millis(50), 1_000_000),
            2 => b.timeouts(Duration::from_secs(5), 1_000_000),
            _ => b,
        };
        reg.set_policy("stress-swap", b.build().unwrap()).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (calls, ran) = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold((0, 0), |(c, r), (wc, wr)| (c + wc, r + wr));
    assert!(max_seen.load(Ordering::SeqCst) <= 2);
    assert_eq!(
        p.memory_bytes(),
        after_one_cycle,
        "repeated settings reuse their kept forms"
    );
    let s = p.stats();
    assert_eq!(s.concurrency, 0);
    // The two calls made above count too (one downgraded, one timed).
    assert_eq!(s.totals.visits, calls + 2, "every call is one visit");
    assert_eq!(s.totals.passes, ran + 1, "every admitted call is a pass");
    assert_eq!(s.totals.downgrades, s.totals.downgrades_by_reason.total());
}

/// `#[breaker]` calls racing with breaker and policy changes (set, clear, replace,
/// classic, disabled) never crash, never leak a slot, and every call is one visit.
#[test]
fn breaker_swaps_under_load_keep_counts_exact() {
    use resilience_runtime::breaker::ClassicConfig;
    use resilience_runtime::BreakerPolicy;
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let p = reg.point("stress.breaker").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapped = Arc::new(AtomicU64::new(0));
    let swapper = {
        let stop = Arc::clone(&stop);
        let swapped = Arc::clone(&swapped);
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match i % 6 {
                    0 => reg
                        .set_breaker("stress.breaker", BreakerPolicy::default())
                        .unwrap(),
                    1 => reg.clear_breaker("stress.breaker").unwrap(),
                    2 => reg
                        .set_breaker(
                            "stress.breaker",
                            BreakerPolicy::Classic(ClassicConfig::default()),
                        )
                        .unwrap(),
                    3 => reg
                        .set_policy(
                            "stress.breaker",
                            Policy::builder().max_concurrency(2).build().unwrap(),
                        )
                        .unwrap(),
                    4 => reg
                        .set_breaker("stress.breaker", BreakerPolicy::Disabled)
                        .unwrap(),
                    _ => reg.clear_policy("stress.breaker").unwrap(),
                }
                i += 1;
                swapped.store(i, Ordering::Relaxed);
                std::thread::yield_now();
            }
            i
        })
    };
    // At least this many calls per thread, and on until 50 swaps have raced them.
    let calls = 50_000u64;
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let swapped = Arc::clone(&swapped);
            std::thread::spawn(move || {
                let mut ran = 0u64;
                let mut i = 0u64;
                while i < calls || swapped.load(Ordering::Relaxed) < 50 {
                    i += 1;
                    let mut slot = None;
                    if resilience_runtime::__private::enter_breaker(p, &mut slot).is_ok() {
                        ran += 1;
                        resilience_runtime::__private::finish(
                            p,
                            &mut slot,
                            (i + t).is_multiple_of(7),
                        );
                    }
                    assert!(slot.is_none(), "a finished permit leaves its slot empty");
                }
                (ran, i)
            })
        })
        .collect();
    let (ran, made) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |(r, m), (ran, made)| (r + ran, m + made));
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps >= 50, "only {swaps} swaps happened");
    let s = p.stats();
    assert_eq!(s.totals.visits, made, "every call is one visit");
    assert_eq!(ran, s.totals.passes, "every admitted call is a pass");
    assert_eq!(s.totals.downgrades, s.totals.downgrades_by_reason.total());
    assert_eq!(s.concurrency, 0, "no slot leaked");
}

/// Calls without a policy are counted per thread: totals are exact across live and
/// exited threads, and a policy set mid-way takes over the counting seamlessly.
#[test]
fn calls_without_policy_are_counted_exactly_across_threads() {
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let p = reg.point("stress.unpoliced").unwrap();
    let waves = 5u64;
    let per_thread = 20_000u64;
    for wave in 0..waves {
        if wave == 3 {
            reg.set_policy("stress.unpoliced", Policy::observe())
                .unwrap();
        }
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        let permit = p.enter().unwrap();
                        permit.finish(i % 10 == 0);
                    }
                })
            })
            .collect();
        // Totals read while threads count and exit never go down.
        let mut last = 0;
        while threads.iter().any(|t| !t.is_finished()) {
            let v = p.stats().totals.visits;
            assert!(v >= last, "{v} after {last}");
            last = v;
        }
        for t in threads {
            t.join().unwrap();
        }
        let s = p.stats();
        assert_eq!(s.totals.visits, (wave + 1) * THREADS as u64 * per_thread);
        assert_eq!(s.totals.passes, s.totals.visits);
        assert_eq!(
            s.totals.exceptions,
            (wave + 1) * THREADS as u64 * per_thread / 10
        );
    }
}

/// The cap on undeclared points holds exactly when many threads make new names at
/// once, refuses with a clear error, and never refuses an existing or a declared point.
#[test]
fn the_cap_on_undeclared_points_holds_under_racing_threads() {
    for threads in [1usize, 4, 16, 64] {
        let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
        reg.set_max_undeclared_points(100);
        let made: u64 = (0..threads)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut made = 0;
                    // Every thread tries 60 names, 20 of them shared with the others.
                    for i in 0..60 {
                        let name = if i < 20 {
                            format!("cap.shared.{i}")
                        } else {
                            format!("cap.{t}.{i}")
                        };
                        match reg.point(&name) {
                            Ok(p) => {
                                assert_eq!(p.name(), name);
                                made += 1;
                            }
                            Err(e) => assert!(e.to_string().contains("at most 100 points"), "{e}"),
                        }
                    }
                    made
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        let held = reg.point_names().len() as u64;
        assert_eq!(reg.undeclared_points(), held, "{threads} threads");
        assert!(held <= 100, "{threads} threads: {held} points");
        if threads * 40 + 20 >= 100 {
            assert_eq!(
                held, 100,
                "{threads} threads: the cap is reached, not undershot"
            );
        }
        assert!(made >= held);
        // Existing names still come back.
        let first = reg.point_names()[0];
        assert!(reg.point(first).is_ok());
    }
}
