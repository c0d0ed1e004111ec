//! The standalone SRE breaker used go-zero style: `try_allow` returns a promise
//! marked `accept`/`reject`, `mark_success`/`mark_failure` record without asking,
//! `stats` shows the failing and working bucket runs; from one thread and from many.

use resilience_runtime::breaker::{
    DroppingTransition, Outcome, OutcomeCounts, SreBreaker, SreConfig, SreHistory, SreVerdict,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

#[path = "support/go_zero.rs"]
mod go_zero;
use go_zero::{at, go_zero, Window};

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;
/// go-zero's bucket: 10 s / 40.
const BUCKET: u64 = 250 * MS;

fn sre() -> SreBreaker {
    SreBreaker::new(SreConfig::default(), at(0)).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 5e-6
}

#[test]
fn promises_record_what_they_are_marked() {
    let b = sre();
    b.try_allow(at(0)).unwrap().accept(at(MS));
    b.try_allow(at(0)).unwrap().accept(at(MS));
    b.try_allow(at(0)).unwrap().reject(at(2 * MS));
    let unmarked = b.try_allow(at(3 * MS)).unwrap();
    drop(unmarked);
    let h = b.history(at(3 * MS));
    assert_eq!((h.accepts, h.failures, h.drops, h.total), (2, 1, 0, 3));
    assert_eq!(b.last_pass(), None, "not dropping: no pass recorded");
}

#[test]
fn marks_are_outcomes_without_asking() {
    let asked = sre();
    let marked = sre();
    for i in 0..20u64 {
        let now = i * 100 * MS;
        if i.is_multiple_of(3) {
            asked.on_failure(at(now));
            marked.mark_failure(at(now));
        } else {
            asked.on_success(at(now));
            marked.mark_success(at(now));
        }
    }
    let end = 2 * SECOND;
    assert_eq!(asked.history(at(end)), marked.history(at(end)));
    assert_eq!(marked.stats(at(end)).history.total, 20);
    assert_eq!(marked.history(at(end)).drops, 0, "marking never drops");
}

/// The runs the stats show are go-zero's `history()` over the window's buckets.
#[test]
fn stats_show_the_failing_and_working_runs() {
    let b = sre();
    // Buckets: S, S, F, (empty), F, F  -> failing run 3 (the empty bucket does not
    // interrupt it), working run 0.
    let script: [(u64, Option<Outcome>); 6] = [
        (0, Some(Outcome::Success)),
        (1, Some(Outcome::Success)),
        (2, Some(Outcome::Failure)),
        (3, None),
        (4, Some(Outcome::Failure)),
        (5, Some(Outcome::Failure)),
    ];
    let mut expect = Vec::new();
    for (i, outcome) in script {
        let now = i * BUCKET;
        let mut counts = OutcomeCounts::default();
        match outcome {
            Some(Outcome::Success) => {
                b.mark_success(at(now));
                counts.success = 1;
            }
            Some(Outcome::Failure) => {
                b.mark_failure(at(now));
                counts.failure = 1;
            }
            _ => {}
        }
        expect.push(counts);
    }
    let s = b.stats(at(5 * BUCKET));
    assert_eq!(s.history, SreHistory::from_buckets(&expect));
    assert_eq!(
        (s.history.failing_buckets, s.history.working_buckets),
        (3, 0)
    );
    // Then three buckets of successes: working run 3, failing run 0.
    for i in 6..9 {
        b.mark_success(at(i * BUCKET));
    }
    let s = b.stats(at(8 * BUCKET));
    assert_eq!(
        (s.history.failing_buckets, s.history.working_buckets),
        (0, 3)
    );
    assert_eq!((s.history.accepts, s.history.failures), (5, 3));
    assert_eq!(s.drop_ratio, 0.0);
    assert!(!s.dropping);
}

/// PEERS.md's vectors for the current formula (k = 1.5, protection 5, 40 buckets),
/// reached through marks, then checked against `stats` and the promise API.
#[test]
fn stats_drop_ratio_matches_go_zero_vectors() {
    // (6, 0, 0, 0) -> 0.14286: six drops, nothing else: (6 - 5) / 7.
    let b = sre();
    for _ in 0..6 {
        b.record(at(0), Outcome::Drop);
    }
    assert!(close(b.stats(at(0)).drop_ratio, 0.14286));

    // (10, 0, 1, 0) -> 0.45455: ten failures in one bucket: (10 - 5) / 11.
    let b = sre();
    for _ in 0..10 {
        b.mark_failure(at(0));
    }
    let s = b.stats(at(0));
    assert_eq!(s.history.failing_buckets, 1);
    assert!(close(s.drop_ratio, 0.45455));

    // (100, 50, 0, 10) -> 0.14851: 50 failures in bucket 0, then ten buckets of
    // five successes: (100 - 5 - 75) / 101 x (40 - 10) / 40.
    let b = sre();
    for _ in 0..50 {
        b.mark_failure(at(0));
    }
    for i in 1..=10 {
        for _ in 0..5 {
            b.mark_success(at(i * BUCKET));
        }
    }
    let s = b.stats(at(10 * BUCKET));
    assert_eq!(
        (
            s.history.total,
            s.history.accepts,
            s.history.failing_buckets,
            s.history.working_buckets
        ),
        (100, 50, 0, 10)
    );
    assert!(close(s.drop_ratio, 0.14851), "{}", s.drop_ratio);

    // (100010, 10, 0, 0) -> 0.99979: go-zero's TestGoogleBreakerOpen fixture.
    let b = sre();
    for _ in 0..10 {
        b.mark_success(at(0));
    }
    for _ in 0..100_000 {
        b.mark_failure(at(0));
    }
    let s = b.stats(at(0));
    assert!(close(s.drop_ratio, 0.99979), "{}", s.drop_ratio);
    assert_eq!(
        s.drop_ratio,
        go_zero(Window {
            total: 100_010,
            accepts: 10,
            failing_buckets: 0,
            working_buckets: 0,
        }),
        "stats use the public formula"
    );
    let rejected = b.try_allow_with_roll(at(0), 0.9997).unwrap_err();
    assert_eq!(
        rejected.drop_ratio, s.drop_ratio,
        "the ratio the call faced"
    );
    assert_eq!(rejected.transition, Some(DroppingTransition::Started));
    // After that drop: (100011 - 5 - 15) / 100012 = 0.99979..., still under 0.9999.
    let admitted = b.try_allow_with_roll(at(0), 0.9999).unwrap();
    assert_eq!(admitted.decision().verdict, SreVerdict::Accepted);
    admitted.accept(at(MS));
    let s = b.stats(at(MS));
    assert_eq!((s.history.drops, s.history.accepts), (1, 11));
    assert!(s.dropping);
    assert_eq!(
        s.last_pass,
        Some(at(0)),
        "an admitted call while dropping is a pass"
    );
}

#[test]
fn a_rejection_records_a_drop_and_says_when_to_retry() {
    let config = SreConfig::builder()
        .force_pass_interval(Duration::from_secs(3))
        .build()
        .unwrap();
    let b = SreBreaker::new(config, at(0)).unwrap();
    for _ in 0..1_000 {
        b.mark_failure(at(0));
    }
    let before = b.stats(at(0)).drop_ratio;
    let r = b.try_allow_with_roll(at(0), 0.0).unwrap_err();
    assert_eq!(r.drop_ratio, before);
    assert_eq!(r.retry_after, Duration::from_secs(3));
    assert_eq!(r.to_string(), "circuit breaker is open");
    let as_error: &dyn std::error::Error = &r;
    assert!(as_error.source().is_none());
    assert_eq!(b.history(at(0)).drops, 1);
    // The dice alone: rejected again (no pass yet, so no forced probe).
    assert!(b.try_allow_with_roll(at(5 * SECOND), 0.0).is_err());
    assert_eq!(b.history(at(5 * SECOND)).drops, 2);
}

#[test]
fn forced_probes_come_through_the_promise() {
    let b = sre();
    for _ in 0..1_000 {
        b.mark_failure(at(0));
    }
    // A lucky roll admits a call while dropping: the last pass.
    let lucky = b.try_allow_with_roll(at(SECOND), 0.999_999).unwrap();
    assert!(!lucky.is_forced_probe());
    lucky.reject(at(SECOND + MS));
    assert_eq!(b.last_pass(), Some(at(SECOND)));
    assert!(
        b.try_allow_with_roll(at(2 * SECOND), 0.0).is_err(),
        "exactly 1 s: not yet"
    );
    let probe = b.try_allow_with_roll(at(2 * SECOND + 1), 0.0).unwrap();
    assert!(probe.is_forced_probe());
    assert_eq!(probe.decision().verdict, SreVerdict::ForcedProbe);
    assert!(probe.decision().drop_ratio > 0.9);
    probe.accept(at(2 * SECOND + 2));
    assert!(b.try_allow_with_roll(at(2 * SECOND + 3), 0.0).is_err());
    let h = b.history(at(2 * SECOND + 3));
    assert_eq!((h.accepts, h.failures, h.drops), (1, 1_001, 2));
}

/// Threads ask, mark and drop promises at once: every outcome and every drop is
/// counted exactly once.
#[test]
fn concurrent_promises_count_every_outcome_once() {
    const THREADS: u64 = 4;
    const CALLS: u64 = 5_000;
    let b = Arc::new(sre());
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let (accepted, rejected, dropped, unmarked, marked) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let b = Arc::clone(&b);
            let barrier = Arc::clone(&barrier);
            let counters = [
                Arc::clone(&accepted),
                Arc::clone(&rejected),
                Arc::clone(&dropped),
                Arc::clone(&unmarked),
                Arc::clone(&marked),
            ];
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..CALLS {
                    // Spread over the first 5 s of the window (20 buckets).
                    let now = (i * 5 * SECOND) / CALLS;
                    // Thread 0 only marks; the others ask (owned promises for odd
                    // threads), with two calls in three failing.
                    if t == 0 {
                        if i.is_multiple_of(2) {
                            b.mark_failure(at(now));
                        } else {
                            b.mark_success(at(now));
                        }
                        counters[4].fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let asked = if t % 2 == 1 {
                        b.try_allow_owned(at(now))
                            .map(|p| (p.decision().verdict, Some(p), None))
                    } else {
                        b.try_allow(at(now))
                            .map(|p| (p.decision().verdict, None, Some(p)))
                    };
                    match asked {
                        Err(_) => {
                            counters[2].fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((_, owned, borrowed)) => {
                            let fail = !i.is_multiple_of(3);
                            if i.is_multiple_of(97) {
                                counters[3].fetch_add(1, Ordering::Relaxed);
                                continue; // dropped unmarked
                            }
                            match (owned, borrowed, fail) {
                                (Some(p), _, true) => p.reject(at(now)),
                                (Some(p), _, false) => p.accept(at(now)),
                                (_, Some(p), true) => p.reject(at(now)),
                                (_, Some(p), false) => p.accept(at(now)),
                                _ => unreachable!(),
                            }
                            let c = if fail { &counters[1] } else { &counters[0] };
                            c.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let now = 5 * SECOND;
    let h = b.stats(at(now)).history;
    let marked = marked.load(Ordering::Relaxed);
    let (acc, rej, drop) = (
        accepted.load(Ordering::Relaxed),
        rejected.load(Ordering::Relaxed),
        dropped.load(Ordering::Relaxed),
    );
    assert_eq!(h.accepts, acc + marked / 2, "successes");
    assert_eq!(h.failures, rej + marked / 2, "failures");
    assert_eq!(h.drops, drop, "every rejection is one drop");
    assert_eq!(h.total, acc + rej + drop + marked);
    assert!(drop > 0, "two failures in three must make it drop");
    assert!(unmarked.load(Ordering::Relaxed) > 0);
    assert_eq!(
        acc + rej + drop + unmarked.load(Ordering::Relaxed),
        (THREADS - 1) * CALLS,
        "every asked call is accounted for"
    );
}

/// While dropping, threads racing past the force-pass interval get one forced probe
/// between them.
#[test]
fn one_forced_probe_per_interval_across_threads() {
    const THREADS: usize = 4;
    let b = Arc::new(sre());
    for _ in 0..1_000 {
        b.mark_failure(at(0));
    }
    b.try_allow_with_roll(at(0), 0.999_999)
        .unwrap()
        .reject(at(0));
    for round in 1..=5u64 {
        let now = round * (SECOND + 1);
        let barrier = Arc::new(Barrier::new(THREADS));
        let probes: u32 = (0..THREADS)
            .map(|_| {
                let (b, barrier) = (Arc::clone(&b), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..50)
                        .map(|_| match b.try_allow_with_roll(at(now), 0.0) {
                            Ok(p) => {
                                assert!(p.is_forced_probe());
                                p.reject(at(now));
                                1
                            }
                            Err(_) => 0,
                        })
                        .sum::<u32>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(probes, 1, "round {round}");
        assert_eq!(b.last_pass(), Some(at(now)));
    }
}
