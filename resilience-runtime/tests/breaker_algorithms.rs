//! The pure breaker algorithms: go-zero's rolling window, the SRE adaptive breaker and
//! the classic three-state breaker, with time driven by hand.

use resilience_runtime::breaker::{
    ClassicBreaker, ClassicConfig, ClassicConfigBuilder, ClassicState, DroppingTransition, Outcome,
    OutcomeCells, SreBreaker, SreConfig, SreVerdict, Transition, TransitionReason,
};
use resilience_runtime::retry::Backoff;
use resilience_runtime::rolling::{RollingWindow, RollingWindowError};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

#[path = "support/go_zero.rs"]
mod go_zero;
use go_zero::{at, go_zero, Window};

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;

/// splitmix64: a fixed-seed random walk without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn sums(w: &RollingWindow, now: u64) -> Vec<f64> {
    let mut v = Vec::new();
    w.reduce(at(now), |b| v.push(b.sum));
    v
}

// ---- RollingWindow ------------------------------------------------------------------

#[test]
fn rolling_window_rejects_bad_geometry() {
    let d = Duration::from_millis(50);
    assert_eq!(
        RollingWindow::new(0, d, at(0)).unwrap_err(),
        RollingWindowError::ZeroSize
    );
    assert_eq!(
        RollingWindow::new(3, Duration::ZERO, at(0)).unwrap_err(),
        RollingWindowError::ZeroInterval
    );
}

/// go-zero `TestRollingWindowAdd`.
#[test]
fn rolling_window_add() {
    let step = 50 * MS;
    let w = RollingWindow::new(3, Duration::from_nanos(step), at(1_000)).unwrap();
    let t = |n: u64| 1_000 + n * step;
    assert_eq!(sums(&w, t(0)), [0.0, 0.0, 0.0]);
    w.add(at(t(0)), 1.0);
    assert_eq!(sums(&w, t(0)), [0.0, 0.0, 1.0]);
    w.add(at(t(1)), 2.0);
    w.add(at(t(1)), 3.0);
    assert_eq!(sums(&w, t(1)), [0.0, 1.0, 5.0]);
    for v in [4.0, 5.0, 6.0] {
        w.add(at(t(2)), v);
    }
    assert_eq!(sums(&w, t(2)), [1.0, 5.0, 15.0]);
    w.add(at(t(3)), 7.0);
    assert_eq!(sums(&w, t(3)), [5.0, 15.0, 7.0]);
}

/// go-zero `TestRollingWindowBucketTimeBoundary`: boundaries are anchored at creation,
/// so a step shorter than the interval that crosses one moves to the next bucket.
#[test]
fn rolling_window_bucket_time_boundary() {
    let w = RollingWindow::new(3, Duration::from_millis(30), at(0)).unwrap();
    assert_eq!(sums(&w, 0), [0.0, 0.0, 0.0]);
    w.add(at(0), 1.0);
    assert_eq!(sums(&w, 0), [0.0, 0.0, 1.0]);
    w.add(at(45 * MS), 2.0);
    w.add(at(45 * MS), 3.0);
    assert_eq!(sums(&w, 45 * MS), [0.0, 1.0, 5.0]);
    // 20 ms later (< 30 ms), but past the 60 ms boundary.
    for v in [4.0, 5.0, 6.0] {
        w.add(at(65 * MS), v);
    }
    assert_eq!(sums(&w, 65 * MS), [1.0, 5.0, 15.0]);
    // 20 ms later again, still before the 90 ms boundary: same bucket.
    w.add(at(85 * MS), 7.0);
    assert_eq!(sums(&w, 85 * MS), [1.0, 5.0, 22.0]);
    w.add(at(95 * MS), 8.0);
    assert_eq!(sums(&w, 95 * MS), [5.0, 22.0, 8.0]);
}

/// go-zero `TestRollingWindowReset` (current bucket ignored).
#[test]
fn rolling_window_reset() {
    let step = 50 * MS;
    let w = RollingWindow::new(3, Duration::from_nanos(step), at(0))
        .unwrap()
        .with_ignore_current(true);
    w.add(at(0), 1.0);
    assert_eq!(sums(&w, step), [0.0, 1.0]);
    assert_eq!(sums(&w, 2 * step), [1.0]);
    assert!(sums(&w, 3 * step).is_empty());
    // Across the whole window.
    w.add(at(3 * step), 1.0);
    assert!(sums(&w, 13 * step).is_empty());
}

/// go-zero `TestRollingWindowReduce`.
#[test]
fn rolling_window_reduce() {
    let step = 50 * MS;
    for (ignore, expect) in [(false, 10.0), (true, 4.0)] {
        let w = RollingWindow::new(4, Duration::from_nanos(step), at(0))
            .unwrap()
            .with_ignore_current(ignore);
        for x in 0..4u64 {
            for i in 0..=x {
                w.add(at(x * step), i as f64);
            }
        }
        let mut sum = 0.0;
        w.reduce(at(3 * step), |b| sum += b.sum);
        assert_eq!(sum, expect, "ignore current: {ignore}");
    }
}

#[test]
fn rolling_window_counts_and_generic_buckets() {
    let w = RollingWindow::<OutcomeCells>::with_cells(4, Duration::from_millis(10), at(0)).unwrap();
    w.add(at(0), Outcome::Success);
    w.add(at(10 * MS), Outcome::Failure);
    w.add(at(10 * MS), Outcome::Drop);
    let mut seen = Vec::new();
    w.reduce(at(10 * MS), |b| seen.push((b.success, b.failure, b.drop)));
    assert_eq!(seen, [(0, 0, 0), (0, 0, 0), (1, 0, 0), (0, 1, 1)]);
}

/// Concurrent adds within one lap: the totals are exact; readers run alongside.
#[test]
fn rolling_window_concurrent_adds_are_exact() {
    const THREADS: u64 = 8;
    const ADDS: u64 = 20_000;
    let size = 64;
    let step = MS;
    let w = RollingWindow::new(size, Duration::from_nanos(step), at(0)).unwrap();
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let w = &w;
            let done = &done;
            s.spawn(move || {
                for i in 0..ADDS {
                    // Time moves forward within one lap (ticks 0..64), sometimes
                    // stale: every add must land in the window.
                    let tick = (i * 64 / ADDS + t % 2).min(63);
                    w.add(at(tick * step), 1.0);
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        s.spawn(|| {
            let mut last = 0;
            while done.load(Ordering::Relaxed) < THREADS {
                let mut count = 0;
                w.reduce(at(63 * step), |b| count += b.count);
                assert!(count <= THREADS * ADDS);
                // Within one lap nothing is ever reset, so the count only grows.
                assert!(count >= last, "{count} < {last}");
                last = count;
            }
        });
    });
    let (mut count, mut sum) = (0, 0.0);
    w.reduce(at(63 * step), |b| {
        count += b.count;
        sum += b.sum;
    });
    assert_eq!(count, THREADS * ADDS);
    assert_eq!(sum, (THREADS * ADDS) as f64);
}

/// Concurrent adds across many laps: nothing panics, bucket counts stay plausible, and
/// the last bucket, written after every thread finished, is exact.
#[test]
fn rolling_window_concurrent_rotation() {
    const THREADS: u64 = 4;
    let w = RollingWindow::new(4, Duration::from_nanos(100), at(0)).unwrap();
    let clock = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..20_000 {
                    let now = clock.fetch_add(7, Ordering::Relaxed);
                    w.add(at(now), 1.0);
                    let mut count = 0;
                    w.reduce(at(now), |b| count += b.count);
                    assert!(count <= 4 * 20_000 * THREADS);
                }
            });
        }
    });
    let end = clock.load(Ordering::Relaxed) + 1_000;
    for _ in 0..10 {
        w.add(at(end), 2.0);
    }
    let mut buckets = Vec::new();
    w.reduce(at(end), |b| buckets.push((b.sum, b.count)));
    assert_eq!(buckets.last(), Some(&(20.0, 10)));
    assert_eq!(buckets.len(), 4);
}

// ---- SRE breaker --------------------------------------------------------------------

#[test]
fn sre_drop_ratio_vectors() {
    let cases = [
        ((80, 80, 0, 0), 0.0),
        ((6, 0, 0, 0), 0.14286),
        ((10, 0, 1, 0), 0.45455),
        ((100, 50, 0, 0), 0.19802),
        ((100, 50, 0, 10), 0.14851),
        ((200, 100, 40, 0), 0.42289),
        ((100_010, 10, 0, 0), 0.99979),
        ((200, 100, 0, 0), 0.22388),
        ((2000, 1000, 0, 10), 0.18553),
    ];
    for ((total, accepts, failing, working), expect) in cases {
        let got = go_zero(Window {
            total,
            accepts,
            failing_buckets: failing,
            working_buckets: working,
        });
        assert!(
            (got - expect).abs() < 5e-6,
            "({total}, {accepts}, {failing}, {working}) -> {got}, expected {expect}"
        );
    }
}

fn sre() -> SreBreaker {
    SreBreaker::new(SreConfig::default(), at(0)).unwrap()
}

/// go-zero `TestGoogleBreakerClose`.
#[test]
fn sre_successes_never_trip() {
    let b = sre();
    for _ in 0..80 {
        b.on_success(at(0));
    }
    assert_eq!(b.allow_with_roll(at(0), 0.0).verdict, SreVerdict::Accepted);
    for _ in 0..120 {
        b.on_success(at(0));
    }
    assert_eq!(b.allow_with_roll(at(0), 0.0).verdict, SreVerdict::Accepted);
}

/// go-zero `TestGoogleBreakerOpen`: after 100 000 failures nearly all calls are rejected.
#[test]
fn sre_open_after_many_failures() {
    let b = sre();
    for _ in 0..10 {
        b.on_success(at(0));
    }
    assert!(b.allow(at(0)).is_admitted());
    for _ in 0..100_000 {
        b.on_failure(at(0));
    }
    let now = 500 * MS; // two buckets later
    let rejected = (0..100).filter(|_| !b.allow(at(now)).is_admitted()).count();
    assert!(
        rejected >= 75,
        "only {rejected} of 100 rejected at {now} ns"
    );
    assert!(b.is_dropping());
    assert!(b.history(at(now)).drops >= rejected as u64);
}

/// go-zero `TestGoogleBreakerHalfOpen`: once the failures have left the window and
/// successes come back, calls are accepted again.
#[test]
fn sre_recovers_after_the_window_rolls_over() {
    let b = sre();
    for _ in 0..10_000 {
        b.on_failure(at(0));
    }
    let now = 500 * MS;
    assert!((0..100).filter(|_| !b.allow(at(now)).is_admitted()).count() >= 75);
    let later = now + 10 * SECOND;
    let first = b.allow(at(later));
    assert!(first.is_admitted());
    assert_eq!(first.transition, Some(DroppingTransition::Stopped));
    for _ in 0..10_000 {
        b.on_success(at(later));
    }
    assert!((0..100).all(|_| b.allow(at(later)).is_admitted()));
    assert!(!b.is_dropping());
}

/// go-zero `TestGoogleBreakerSelfProtection`: up to `protection` calls never trip.
#[test]
fn sre_protection_calls_never_trip() {
    for failures in 0..=5 {
        let b = sre();
        for _ in 0..failures {
            b.on_failure(at(0));
        }
        let d = b.allow_with_roll(at(10 * MS), 0.0);
        assert_eq!(d.verdict, SreVerdict::Accepted, "{failures} failures");
        assert_eq!(d.drop_ratio, 0.0);
    }
    let b = sre();
    for _ in 0..6 {
        b.on_failure(at(0));
    }
    assert_eq!(b.allow_with_roll(at(0), 0.0).verdict, SreVerdict::Refused);
    // A larger protection tolerates more.
    let tolerant =
        SreBreaker::new(SreConfig::builder().protection(10).build().unwrap(), at(0)).unwrap();
    for _ in 0..10 {
        tolerant.on_failure(at(0));
    }
    assert!(tolerant.allow_with_roll(at(0), 0.0).is_admitted());
}

/// go-zero `TestGoogleBreakerSelfProtection`: `total < 2 * success` never trips.
#[test]
fn sre_mostly_successful_never_trips() {
    let mut rng = Rng(7);
    for _ in 0..50 {
        let b = sre();
        let size = rng.below(10_000);
        for _ in 0..=size {
            b.on_success(at(0));
        }
        for _ in 0..size / 3 {
            b.on_failure(at(0));
        }
        assert!(b.allow_with_roll(at(0), 0.0).is_admitted(), "size {size}");
    }
}

/// go-zero `TestGoogleBreakerHistory`.
#[test]
fn sre_history() {
    let b = sre();
    for i in 0..10 {
        b.on_success(at(i * 5 * MS));
    }
    let h = b.history(at(50 * MS));
    assert_eq!((h.accepts, h.total), (10, 10));

    let b = sre();
    for i in 0..10 {
        b.on_failure(at(i * 5 * MS));
    }
    let h = b.history(at(50 * MS));
    assert_eq!((h.accepts, h.total), (0, 10));

    let b = sre();
    for i in 0..5 {
        b.on_failure(at(i * 100 * MS));
    }
    for i in 5..10 {
        b.on_success(at(i * 100 * MS));
    }
    let h = b.history(at(SECOND));
    assert_eq!((h.accepts, h.total), (5, 10));
    assert_eq!((h.failing_buckets, h.working_buckets), (0, 2));

    // Auto reset.
    let h = b.history(at(20 * SECOND));
    assert_eq!((h.accepts, h.total), (0, 0));
}

/// While dropping, one call per second is forced through (after the first admitted
/// call while dropping, as in go-zero).
#[test]
fn sre_forced_probe_once_a_second() {
    let b = sre();
    for _ in 0..1_000 {
        b.on_failure(at(0));
    }
    let start = 100 * MS;
    assert_eq!(
        b.allow_with_roll(at(start), 0.999_999).verdict,
        SreVerdict::Accepted
    );
    let mut forced = Vec::new();
    let mut now = start;
    while now < start + 5 * SECOND + 500 * MS {
        now += MS;
        // roll 0.0: never admitted by the dice.
        match b.allow_with_roll(at(now), 0.0).verdict {
            SreVerdict::ForcedProbe => forced.push(now),
            SreVerdict::Refused => {}
            SreVerdict::Accepted => panic!("accepted at {now} ns"),
        }
    }
    let expect: Vec<u64> = (1..=5).map(|i| start + i * (SECOND + MS)).collect();
    assert_eq!(forced, expect);
}

#[test]
fn sre_forced_probe_is_won_by_one_thread() {
    let b = sre();
    for _ in 0..1_000 {
        b.on_failure(at(0));
    }
    assert!(b.allow_with_roll(at(0), 0.999_999).is_admitted());
    let now = 2 * SECOND;
    let barrier = Barrier::new(8);
    let forced = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..100 {
                    if b.allow_with_roll(at(now), 0.0).verdict == SreVerdict::ForcedProbe {
                        forced.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(forced.load(Ordering::Relaxed), 1);
}

#[test]
fn sre_concurrent_records_are_counted() {
    let b = sre();
    let admitted = AtomicU64::new(0);
    let rejected = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (b, admitted, rejected) = (&b, &admitted, &rejected);
            s.spawn(move || {
                for i in 0..5_000u64 {
                    let now = i * MS / 10;
                    if b.allow(at(now)).is_admitted() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                        if (i + t) % 3 == 0 {
                            b.on_success(at(now));
                        } else {
                            b.on_failure(at(now));
                        }
                    } else {
                        rejected.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let h = b.history(at(SECOND));
    assert_eq!(h.accepts + h.failures, admitted.load(Ordering::Relaxed));
    assert_eq!(h.drops, rejected.load(Ordering::Relaxed));
    assert_eq!(h.total, 20_000);
}

// ---- classic breaker ----------------------------------------------------------------

fn classic(config: ClassicConfig) -> ClassicBreaker {
    ClassicBreaker::new(config, at(0)).unwrap()
}

fn trip_config(probes: u64) -> ClassicConfig {
    trip(probes).build().unwrap()
}

fn trip(probes: u64) -> ClassicConfigBuilder {
    ClassicConfig::builder()
        .consecutive_failures(1)
        .open_wait(Backoff::exponential(
            Duration::from_secs(1),
            2.0,
            Duration::from_secs(8),
        ))
        .half_open_probes(probes)
}

#[test]
fn classic_opens_on_failure_rate_after_minimum_calls() {
    let b = classic(
        ClassicConfig::builder()
            .failure_rate(0.5)
            .minimum_calls(10)
            .build()
            .unwrap(),
    );
    // 9 failures: above the rate but below the minimum number of calls.
    for i in 0..9 {
        assert_eq!(b.allow(at(i)).unwrap().failure(at(i)), None);
    }
    assert_eq!(b.state(), ClassicState::Closed);
    let t = b
        .allow(at(9))
        .unwrap()
        .failure(at(9))
        .expect("10 calls, 100% failed");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            ClassicState::Closed,
            ClassicState::Open,
            TransitionReason::FailureRate
        )
    );
    assert_eq!(b.state(), ClassicState::Open);
    assert_eq!(b.transition_count(), 1);
    let r = b.allow(at(10)).unwrap_err();
    assert_eq!(
        (r.state, r.retry_at),
        (ClassicState::Open, Some(at(9 + 5 * SECOND)))
    );
}

#[test]
fn classic_rate_below_threshold_stays_closed() {
    let b = classic(
        ClassicConfig::builder()
            .failure_rate(0.5)
            .minimum_calls(10)
            .build()
            .unwrap(),
    );
    for i in 0..1_000u64 {
        let ticket = b.allow(at(i * MS)).unwrap();
        let t = if i % 3 == 0 {
            ticket.failure(at(i * MS))
        } else {
            ticket.success(at(i * MS))
        };
        assert_eq!(t, None);
    }
    assert_eq!(b.state(), ClassicState::Closed);
}

#[test]
fn classic_window_forgets_old_failures() {
    let b = classic(
        ClassicConfig::builder()
            .failure_rate(0.5)
            .minimum_calls(4)
            .window(Duration::from_secs(1))
            .buckets(10)
            .build()
            .unwrap(),
    );
    for _ in 0..3 {
        b.allow(at(0)).unwrap().failure(at(0));
    }
    // A second later the three failures have left the window.
    let now = SECOND;
    assert_eq!(b.allow(at(now)).unwrap().failure(at(now)), None);
    assert_eq!(b.stats(at(now)).calls, 1);
}

#[test]
fn classic_opens_on_slow_call_rate() {
    let b = classic(
        ClassicConfig::builder()
            .failure_rate(1.0)
            .slow_call_rate(0.5)
            .slow_call_duration(Duration::from_millis(100))
            .minimum_calls(4)
            .build()
            .unwrap(),
    );
    let mut now = 0;
    for (i, ms) in [10, 150, 20].into_iter().enumerate() {
        let ticket = b.allow(at(now)).unwrap();
        now += ms * MS;
        assert_eq!(ticket.success(at(now)), None, "call {i}");
    }
    let ticket = b.allow(at(now)).unwrap();
    let t = ticket
        .finish(at(now), false, Duration::from_millis(100))
        .expect("2 of 4 slow");
    assert_eq!(t.reason, TransitionReason::SlowCallRate);
    assert_eq!(b.stats(at(now)).slow_calls, 2);
}

#[test]
fn classic_opens_on_consecutive_failures() {
    let b = classic(
        ClassicConfig::builder()
            .failure_rate(1.0)
            .minimum_calls(1_000)
            .consecutive_failures(5)
            .build()
            .unwrap(),
    );
    for i in 0..4 {
        assert_eq!(b.allow(at(i)).unwrap().failure(at(i)), None);
    }
    let t = b.allow(at(4)).unwrap().failure(at(4)).unwrap();
    assert_eq!(t.reason, TransitionReason::ConsecutiveFailures);
    assert_eq!(t.open_until, Some(at(4 + 5 * SECOND)));
}

#[test]
fn classic_half_open_after_the_wait() {
    let b = classic(trip_config(2));
    b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    assert_eq!(
        b.allow(at(SECOND - 1)).unwrap_err().retry_at,
        Some(at(SECOND))
    );
    assert_eq!(b.state(), ClassicState::Open, "lazy until a call arrives");
    let first = b.allow(at(SECOND)).unwrap();
    assert!(first.is_probe());
    let t = first.transition().expect("this call moved the breaker");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            ClassicState::Open,
            ClassicState::HalfOpen,
            TransitionReason::WaitElapsed
        )
    );
    let second = b.allow(at(SECOND)).unwrap();
    assert!(second.is_probe() && second.transition().is_none());
    let r = b.allow(at(SECOND)).unwrap_err();
    assert_eq!((r.state, r.retry_at), (ClassicState::HalfOpen, None));
    drop((first, second));
}

#[test]
fn classic_all_probes_succeed_closes_and_resets() {
    let b = classic(trip_config(3));
    b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    let probes: Vec<_> = (0..3).map(|_| b.allow(at(SECOND)).unwrap()).collect();
    let mut closed = None;
    for (i, p) in probes.into_iter().enumerate() {
        let t = p.success(at(SECOND + 1));
        if i < 2 {
            assert_eq!(t, None);
        } else {
            closed = t;
        }
    }
    let t = closed.expect("the last probe closes");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            ClassicState::HalfOpen,
            ClassicState::Closed,
            TransitionReason::ProbesSucceeded
        )
    );
    let s = b.stats(at(SECOND + 1));
    assert_eq!(
        (s.state, s.calls, s.failures, s.consecutive_failures),
        (ClassicState::Closed, 0, 0, 0)
    );
    assert_eq!(s.transitions, 3);
    // The backoff starts over: the next trip waits the base time again.
    let t = b
        .allow(at(2 * SECOND))
        .unwrap()
        .failure(at(2 * SECOND))
        .unwrap();
    assert_eq!(t.open_until, Some(at(3 * SECOND)));
}

#[test]
fn classic_probe_failure_reopens_with_longer_backoff() {
    let b = classic(trip_config(2));
    let t = b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    let mut until = t.open_until.unwrap().as_nanos();
    assert_eq!(until, SECOND);
    let mut waits = Vec::new();
    for _ in 0..5 {
        let probe = b.allow(at(until)).unwrap();
        let other = b.allow(at(until)).unwrap();
        let t = probe
            .failure(at(until + 10))
            .expect("a failed probe reopens");
        assert_eq!(
            (t.from, t.to, t.reason),
            (
                ClassicState::HalfOpen,
                ClassicState::Open,
                TransitionReason::ProbeFailed
            )
        );
        // The other probe belongs to the finished half-open period: ignored.
        assert_eq!(other.success(at(until + 20)), None);
        assert_eq!(b.state(), ClassicState::Open);
        let next = t.open_until.unwrap().as_nanos();
        waits.push((next - (until + 10)) / SECOND);
        until = next;
    }
    assert_eq!(waits, [2, 4, 8, 8, 8]);
}

#[test]
fn classic_jittered_backoff_stays_within_bounds() {
    let b = classic(
        trip(1)
            .open_wait(
                Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(4))
                    .with_jitter(0.5),
            )
            .build()
            .unwrap(),
    );
    let mut now = 0;
    let t = b.allow(at(now)).unwrap().failure(at(now)).unwrap();
    let mut until = t.open_until.unwrap().as_nanos();
    assert!((SECOND / 2..=SECOND).contains(&until), "{until}");
    for attempt in 1..6u32 {
        now = until;
        let t = b.allow(at(now)).unwrap().failure(at(now)).unwrap();
        until = t.open_until.unwrap().as_nanos();
        let full = (SECOND << attempt).min(4 * SECOND);
        let wait = until - now;
        assert!(
            (full / 2..=full).contains(&wait),
            "attempt {attempt}: {wait}"
        );
    }
}

#[test]
fn classic_dropped_probe_frees_its_slot() {
    let b = classic(trip_config(1));
    b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    let probe = b.allow(at(SECOND)).unwrap();
    assert!(b.allow(at(SECOND)).is_err());
    drop(probe);
    assert_eq!(b.stats(at(SECOND)).probes_admitted, 0);
    assert_eq!(
        b.state(),
        ClassicState::HalfOpen,
        "a dropped probe is neither outcome"
    );
    let probe = b.allow(at(SECOND)).unwrap();
    assert_eq!(probe.success(at(SECOND)).unwrap().to, ClassicState::Closed);
}

#[test]
fn classic_panicking_probe_frees_its_slot() {
    let b = classic(trip_config(1));
    b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _probe = b.allow(at(SECOND)).unwrap();
        panic!("the protected call panicked");
    }));
    assert!(result.is_err());
    assert_eq!(b.stats(at(SECOND)).probes_admitted, 0);
    assert!(b.allow(at(SECOND)).is_ok());
}

#[test]
fn classic_dropped_closed_ticket_records_nothing() {
    let b = classic(ClassicConfig::default());
    for _ in 0..100 {
        let _ = b.allow(at(0)).unwrap();
    }
    assert_eq!(b.stats(at(0)).calls, 0);
}

#[test]
fn classic_a_dropped_future_frees_its_probe() {
    // A probe held across an await point, the future dropped before completion.
    let b = classic(trip_config(1));
    b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    let fut = async {
        let probe = b.allow(at(SECOND)).unwrap();
        std::future::pending::<()>().await;
        probe.success(at(SECOND))
    };
    let mut fut = Box::pin(fut);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert_eq!(b.stats(at(SECOND)).probes_admitted, 1);
    drop(fut);
    assert_eq!(b.stats(at(SECOND)).probes_admitted, 0);
}

/// 8 threads race for the probe slots: exactly `M` are admitted, exactly one call
/// reports open → half-open, and when every probe succeeds exactly one call closes.
#[test]
fn classic_exactly_m_probes_under_contention() {
    const THREADS: usize = 8;
    for round in 0..100u64 {
        let m = 1 + round % 5;
        let b = classic(trip_config(m));
        b.allow(at(0)).unwrap().failure(at(0)).unwrap();
        let barrier = Barrier::new(THREADS);
        let tickets: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (b, barrier) = (&b, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        (0..10)
                            .filter_map(|_| b.allow(at(SECOND)).ok())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        assert_eq!(tickets.len(), m as usize, "round {round}");
        assert_eq!(
            tickets.iter().filter(|t| t.transition().is_some()).count(),
            1
        );
        assert!(tickets.iter().all(|t| t.is_probe()));
        let s = b.stats(at(SECOND));
        assert_eq!((s.state, s.probes_admitted), (ClassicState::HalfOpen, m));

        // Complete them all concurrently: exactly one closing transition.
        let closes = AtomicU64::new(0);
        let barrier = Barrier::new(tickets.len());
        std::thread::scope(|s| {
            for t in tickets {
                let (closes, barrier) = (&closes, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    if let Some(t) = t.success(at(SECOND + 1)) {
                        assert_eq!(t.to, ClassicState::Closed);
                        closes.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(closes.load(Ordering::Relaxed), 1, "round {round}");
        assert_eq!(b.state(), ClassicState::Closed);
        assert_eq!(b.transition_count(), 3);
    }
}

/// Threads that take probe slots and drop them again never let more than `M` probes
/// run at once.
#[test]
fn classic_probe_slots_under_churn() {
    const M: u64 = 3;
    let b = classic(trip_config(M));
    b.allow(at(0)).unwrap().failure(at(0)).unwrap();
    let running = AtomicU64::new(0);
    let max_running = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..5_000 {
                    if let Ok(ticket) = b.allow(at(SECOND)) {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        max_running.fetch_max(now, Ordering::SeqCst);
                        assert!(now <= M, "{now} probes running");
                        running.fetch_sub(1, Ordering::SeqCst);
                        drop(ticket);
                    }
                }
            });
        }
    });
    assert!(max_running.load(Ordering::SeqCst) >= 1);
    let s = b.stats(at(SECOND));
    assert_eq!(
        (s.state, s.probes_admitted, s.probes_succeeded),
        (ClassicState::HalfOpen, 0, 0)
    );
}

fn check_legal(t: &Transition) {
    use ClassicState::*;
    let legal = matches!(
        (t.from, t.to),
        (Closed, Open) | (Open, HalfOpen) | (HalfOpen, Open) | (HalfOpen, Closed)
    );
    assert!(legal, "illegal transition {t:?}");
}

/// Property-style random walk (fixed seeds): the breaker never goes open → closed
/// without half-open, the reported transitions chain, and the counters agree.
#[test]
fn classic_random_walk_never_skips_half_open() {
    let mut closes = 0;
    for seed in 0..20u64 {
        let mut rng = Rng(seed);
        let failure_rate = 0.3 + rng.below(5) as f64 / 10.0;
        let minimum_calls = 1 + rng.below(8);
        let consecutive_failures = (rng.below(2) == 0).then(|| 1 + rng.below(4));
        let slow_calls = rng.below(2) == 0;
        let mut config = ClassicConfig::builder()
            .failure_rate(failure_rate)
            .minimum_calls(minimum_calls)
            .slow_call_duration(Duration::from_millis(50))
            .window(Duration::from_secs(1))
            .buckets(5)
            .open_wait(
                Backoff::exponential(Duration::from_millis(100), 2.0, Duration::from_secs(2))
                    .with_jitter(0.3),
            )
            .half_open_probes(1 + rng.below(3))
            .cancellations_are_failures(false);
        if let Some(n) = consecutive_failures {
            config = config.consecutive_failures(n);
        }
        if slow_calls {
            config = config.slow_call_rate(0.5);
        }
        let config = config.build().unwrap();
        let b = classic(config);
        let mut now = 0u64;
        let mut held = Vec::new();
        let mut log: Vec<Transition> = Vec::new();
        let mut observed = vec![ClassicState::Closed];
        for step in 0..5_000 {
            match rng.below(10) {
                0..=1 => now += rng.below(300) * MS,
                2..=4 => {
                    if let Ok(t) = b.allow(at(now)) {
                        log.extend(t.transition());
                        held.push(t);
                    }
                }
                _ if !held.is_empty() => {
                    let t = held.swap_remove(rng.below(held.len() as u64) as usize);
                    let elapsed = Duration::from_millis(rng.below(100));
                    let outcome = match rng.below(8) {
                        0 => None, // dropped
                        1..=3 => t.finish(at(now), true, elapsed),
                        _ => t.finish(at(now), false, elapsed),
                    };
                    log.extend(outcome);
                }
                _ => {}
            }
            let state = b.state();
            if observed.last() != Some(&state) {
                observed.push(state);
            }
            assert_eq!(
                b.transition_count(),
                log.len() as u64,
                "seed {seed} step {step}"
            );
            let s = b.stats(at(now));
            assert!(s.probes_succeeded <= s.probes_admitted);
            assert!(s.probes_admitted <= b.config().half_open_probes);
        }
        assert!(
            log.len() > 10,
            "seed {seed}: the walk should move ({} transitions)",
            log.len()
        );
        let mut state = ClassicState::Closed;
        for t in &log {
            check_legal(t);
            assert_eq!(t.from, state, "seed {seed}: transitions must chain: {t:?}");
            state = t.to;
        }
        for pair in observed.windows(2) {
            assert_ne!(
                (pair[0], pair[1]),
                (ClassicState::Open, ClassicState::Closed),
                "seed {seed}"
            );
        }
        closes += log.iter().filter(|t| t.to == ClassicState::Closed).count();
    }
    assert!(closes > 0, "the walks should also close the breaker");
}

/// Many threads, random operations, a shared clock: every transition reported is legal
/// and their number matches the counter.
#[test]
fn classic_concurrent_random_walk() {
    let b = classic(
        ClassicConfig::builder()
            .failure_rate(0.5)
            .minimum_calls(5)
            .consecutive_failures(3)
            .window(Duration::from_millis(100))
            .buckets(4)
            .open_wait(Backoff::exponential(
                Duration::from_micros(50),
                2.0,
                Duration::from_micros(400),
            ))
            .half_open_probes(2)
            .build()
            .unwrap(),
    );
    let clock = AtomicU64::new(0);
    let reported = AtomicU64::new(0);
    std::thread::scope(|s| {
        for seed in 0..8u64 {
            let (b, clock, reported) = (&b, &clock, &reported);
            s.spawn(move || {
                let mut rng = Rng(seed * 7 + 1);
                let record = |t: Option<Transition>| {
                    if let Some(t) = t {
                        check_legal(&t);
                        reported.fetch_add(1, Ordering::Relaxed);
                    }
                };
                for _ in 0..20_000 {
                    let now = clock.fetch_add(rng.below(2_000), Ordering::Relaxed);
                    if let Ok(ticket) = b.allow(at(now)) {
                        record(ticket.transition());
                        let end = clock.load(Ordering::Relaxed);
                        match rng.below(5) {
                            0 => drop(ticket),
                            1 | 2 => record(ticket.failure(at(end))),
                            _ => record(ticket.success(at(end))),
                        }
                    }
                }
            });
        }
    });
    let transitions = reported.load(Ordering::Relaxed);
    assert!(transitions > 10, "{transitions}");
    assert_eq!(b.transition_count(), transitions);
}

#[test]
fn sre_config_errors_name_the_field() {
    assert_eq!(SreConfig::builder().k(1.0).build().unwrap_err().field, "k");
    let err = ClassicConfig::builder()
        .failure_rate(f64::NAN)
        .build()
        .unwrap_err();
    assert_eq!(err.field, "failure_rate");
    // The fields stay public: the breakers check them again.
    let mut sre = SreConfig::default();
    sre.k = 1.0;
    assert_eq!(SreBreaker::new(sre, at(0)).unwrap_err().field, "k");
    let mut classic = ClassicConfig::default();
    classic.failure_rate = f64::NAN;
    assert_eq!(
        ClassicBreaker::new(classic, at(0)).unwrap_err().field,
        "failure_rate"
    );
}
