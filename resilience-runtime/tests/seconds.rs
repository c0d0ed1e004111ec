//! The per-second series of every point on the system clock, sampled by the timing
//! wheel: many threads calling points with and without a policy while seconds pass,
//! and policy changes racing them; every call is in exactly one second.

use resilience_runtime::{registry, Policy};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sums the kept seconds of a point: visits, passes, downgrades, exceptions.
fn sum(name: &str) -> (u64, u64, u64, u64) {
    let p = registry().point(name).unwrap();
    p.seconds(resilience_runtime::Point::SECONDS_KEPT)
        .iter()
        .fold((0, 0, 0, 0), |(v, p, d, e), s| {
            (
                v + s.visits,
                p + s.passes,
                d + s.downgrades,
                e + s.exceptions,
            )
        })
}

#[test]
fn every_call_is_in_exactly_one_second_under_many_threads() {
    for (name, threads) in [("sec.none", 1usize), ("sec.none.8", 8), ("sec.none.32", 32)] {
        let point = registry().point(name).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (stop, calls) = (Arc::clone(&stop), Arc::clone(&calls));
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        point.enter().unwrap().finish(n % 7 == i as u64 % 7);
                        n += 1;
                        if n.is_multiple_of(64) {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    }
                    calls.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        // Calls across at least two second boundaries.
        std::thread::sleep(Duration::from_millis(2_200));
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        let total = calls.load(Ordering::Relaxed);
        // The last sample closes the last busy second about a second later.
        let deadline = Instant::now() + Duration::from_secs(5);
        while sum(name).0 != total && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let (visits, passes, downgrades, exceptions) = sum(name);
        assert_eq!((visits, passes, downgrades), (total, total, 0), "{name}");
        let stats = point.stats();
        assert_eq!(stats.totals.visits, total);
        assert_eq!(exceptions, stats.totals.exceptions, "{name}");
        let busy = point
            .seconds(resilience_runtime::Point::SECONDS_KEPT)
            .iter()
            .filter(|s| s.visits > 0)
            .count();
        assert!(busy >= 2, "{name}: {busy} busy seconds");
        // Without a policy the point still has a window and a last cycle.
        assert!(stats.window.is_some(), "{name}");
    }
}

#[test]
fn seconds_stay_exact_while_the_policy_changes() {
    let name = "sec.swapped";
    let point = registry().point(name).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(permit) = point.enter() {
                        permit.finish(false);
                    }
                    n += 1;
                    if n.is_multiple_of(64) {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        })
        .collect();
    // Policy, none, a kill switch, none again...: calls move between the per-thread
    // tallies and the flow word while the sampler reads both.
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_millis(2_200) {
        match i % 3 {
            0 => registry().set_policy(name, Policy::observe()).unwrap(),
            1 => registry()
                .set_policy(name, Policy::builder().max_visits(0).build().unwrap())
                .unwrap(),
            _ => registry().clear_policy(name).unwrap(),
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(3));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let totals = point.stats().totals;
    let deadline = Instant::now() + Duration::from_secs(5);
    while sum(name).0 != totals.visits && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        sum(name),
        (
            totals.visits,
            totals.passes,
            totals.downgrades,
            totals.exceptions
        )
    );
    assert!(totals.downgrades > 0 && totals.passes > 0);
}

/// Under a policy, the first call of each second closes the second before with the
/// counts it reads for the 10-s cycle: a cycle's ten seconds add up to the cycle
/// exactly (visits, passes, downgrades), with threads racing the boundaries.
#[test]
fn a_policy_points_seconds_add_up_to_its_cycle() {
    let name = "sec.cycle";
    registry()
        .set_policy(name, Policy::builder().max_visits(2_000).build().unwrap())
        .unwrap();
    let point = registry().point(name).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(p) = point.enter() {
                        p.finish(false);
                    }
                    n += 1;
                    if n.is_multiple_of(32) {
                        std::thread::sleep(Duration::from_micros(300));
                    }
                }
            })
        })
        .collect();
    // Until a whole cycle has closed with traffic through all of it.
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let first_full = (wall() / 10 + 1) * 10;
    while wall() < first_full + 11 {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let cycle = point.stats().last_cycle.unwrap();
    let start = cycle
        .start
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(start >= first_full, "{start} before {first_full}");
    let seconds: Vec<_> = point
        .seconds(resilience_runtime::Point::SECONDS_KEPT)
        .into_iter()
        .filter(|s| {
            let at = s
                .start
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            (start..start + 10).contains(&at)
        })
        .collect();
    assert_eq!(seconds.len(), 10);
    let sum = |f: fn(&resilience_runtime::SecondStats) -> u64| seconds.iter().map(f).sum::<u64>();
    assert_eq!(
        (sum(|s| s.visits), sum(|s| s.passes), sum(|s| s.downgrades)),
        (cycle.visits, cycle.passes, cycle.downgrades)
    );
    assert!(cycle.visits > 1_000 && cycle.downgrades > 0, "{cycle:?}");
}
