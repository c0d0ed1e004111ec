//! Cancelled calls count: a permit dropped without an outcome, a `call_async` future
//! dropped mid-flight, with or without a policy; late cancellations are timeouts and
//! breaker failures; counts add up under many threads with random cancellations.

use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::retry::Backoff;
use resilience_runtime::{BreakerPolicy, BreakerState, Clock, ManualClock, Policy, Reason};
use resilience_runtime::{Point, Registry};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

/// Polls a future once and drops it: a caller that gave up mid-flight.
fn poll_once_and_drop<F: Future>(f: F) -> bool {
    let mut f = pin!(f);
    let ready = f
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    ready
}

#[test]
fn a_dropped_permit_is_a_cancelled_call_with_or_without_a_policy() {
    let (_manual, registry) = manual_registry();
    let plain = registry.point("cancel.plain").unwrap();
    drop(plain.enter().unwrap());
    let t = plain.stats().totals;
    assert_eq!((t.passes, t.cancelled, t.exceptions), (1, 1, 0));

    registry
        .set_policy(
            "cancel.policy",
            Policy::builder().max_concurrency(1).build().unwrap(),
        )
        .unwrap();
    let governed = registry.point("cancel.policy").unwrap();
    drop(governed.enter().unwrap());
    // The slot came back.
    let p = governed.enter().unwrap();
    p.finish(false);
    let t = governed.stats().totals;
    assert_eq!((t.passes, t.cancelled, t.exceptions), (2, 1, 0));
    assert_eq!(governed.stats().window.unwrap().cancelled, 1);
}

#[test]
fn a_call_async_future_dropped_mid_flight_is_cancelled() {
    let (_manual, registry) = manual_registry();
    for (name, policy) in [
        ("cancel.async.plain", None),
        (
            "cancel.async.policy",
            Some(Policy::builder().max_concurrency(1).build().unwrap()),
        ),
    ] {
        if let Some(p) = policy {
            registry.set_policy(name, p).unwrap();
        }
        let point: &'static Point = registry.point(name).unwrap();
        let ready = poll_once_and_drop(
            point.call_async(std::future::pending::<Result<(), ()>>, |_| async { Ok(()) }),
        );
        assert!(!ready);
        let t = point.stats().totals;
        assert_eq!((t.passes, t.cancelled, t.exceptions), (1, 1, 0), "{name}");
        assert_eq!(point.stats().concurrency, 0, "{name}");
        // A call that ends is not cancelled.
        let out = futures_executor::block_on(
            point.call_async(|| async { Ok::<_, ()>(3) }, |_| async { Ok(0) }),
        );
        assert_eq!(out, Ok(3));
        assert_eq!(point.stats().totals.cancelled, 1, "{name}");
    }
}

#[test]
fn a_call_cancelled_past_the_timeout_threshold_is_a_timeout() {
    let (manual, registry) = manual_registry();
    let name = "cancel.late";
    registry
        .set_policy(
            name,
            Policy::builder()
                .timeouts(Duration::from_millis(150), 3)
                .build()
                .unwrap(),
        )
        .unwrap();
    let point = registry.point(name).unwrap();
    // Cancelled in time: not a timeout.
    let early = point.enter().unwrap();
    manual.advance(Duration::from_millis(100));
    drop(early);
    assert_eq!(point.stats().totals.timeouts, 0);
    // Cancelled late, three times: three timeouts, and the rule trips.
    for _ in 0..3 {
        let late = point.enter().unwrap();
        manual.advance(Duration::from_millis(200));
        drop(late);
    }
    let t = point.stats().totals;
    assert_eq!((t.cancelled, t.timeouts, t.exceptions), (4, 3, 0));
    assert_eq!(point.enter().unwrap_err().reason(), Reason::Timeouts);
}

#[test]
fn a_classic_breaker_counts_late_cancellations_as_failures() {
    let (manual, registry) = manual_registry();
    let name = "cancel.breaker";
    registry
        .set_policy(
            name,
            Policy::builder()
                .timeouts(Duration::from_millis(50), u64::MAX / 2)
                .build()
                .unwrap(),
        )
        .unwrap();
    registry
        .set_breaker(
            name,
            BreakerPolicy::Classic(
                ClassicConfig::builder()
                    .consecutive_failures(3)
                    .open_wait(Backoff::fixed(Duration::from_secs(60)))
                    .build()
                    .unwrap(),
            ),
        )
        .unwrap();
    let point = registry.point(name).unwrap();
    // Ten calls cancelled in time: the breaker does not see them.
    for _ in 0..10 {
        let p = point.enter().unwrap();
        manual.advance(Duration::from_millis(10));
        drop(p);
    }
    assert_eq!(point.stats().breaker.unwrap().state, BreakerState::Closed);
    // Three cancelled past the threshold: three failures in a row.
    for _ in 0..3 {
        let p = point.enter().unwrap();
        manual.advance(Duration::from_millis(80));
        drop(p);
    }
    assert_eq!(point.stats().breaker.unwrap().state, BreakerState::Open);
    assert_eq!(point.enter().unwrap_err().reason(), Reason::BreakerOpen);
}

/// 64 threads under `max_concurrency(8)`, each call randomly finished, failed or
/// cancelled, while the policy changes: no slot leaks and every count adds up.
#[test]
fn counts_add_up_under_random_cancellations_and_policy_swaps() {
    for threads in [1u64, 4, 16, 64] {
        let (_manual, registry) = manual_registry();
        let name = "cancel.stress";
        registry
            .set_policy(name, Policy::builder().max_concurrency(8).build().unwrap())
            .unwrap();
        let point: &'static Point = registry.point(name).unwrap();
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let cancelled = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (ok, failed, cancelled) = (ok.clone(), failed.clone(), cancelled.clone());
                std::thread::spawn(move || {
                    let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for _ in 0..2_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let Ok(p) = point.enter() else { continue };
                        match x % 3 {
                            0 => {
                                p.finish(false);
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            1 => {
                                p.finish(true);
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {
                                drop(p);
                                cancelled.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for i in 0..20 {
            let n = if i % 2 == 0 { 4 } else { 8 };
            registry
                .set_policy(name, Policy::builder().max_concurrency(n).build().unwrap())
                .unwrap();
            std::thread::yield_now();
        }
        for w in workers {
            w.join().unwrap();
        }
        let s = point.stats();
        let t = s.totals;
        assert_eq!(t.visits, threads * 2_000, "{threads}");
        assert_eq!(t.visits, t.passes + t.downgrades, "{threads}");
        let (ok, failed, cancelled) = (
            ok.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            cancelled.load(Ordering::Relaxed),
        );
        assert_eq!(t.passes, ok + failed + cancelled, "{threads}");
        assert_eq!(
            (t.exceptions, t.cancelled),
            (failed, cancelled),
            "{threads}"
        );
        assert_eq!(s.concurrency, 0, "{threads}: a slot leaked");
        assert!(s.peak_concurrency <= 8, "{threads}");
    }
}

/// `cancellations_are_failures` (SRE and classic, from a policy file): calls cut in
/// time by their caller count as failures, so a service that bounds its calls with
/// `tokio::time::timeout` gets a breaker that opens; the file round-trips it.
#[test]
fn breakers_can_count_every_cancellation_as_a_failure() {
    use resilience_runtime::config::{Format, PolicyFile};
    let (manual, registry) = manual_registry();
    let text = r#"
[points."cancel.opt.classic".breaker]
algorithm = "classic"
consecutive_failures = 3
cancellations_are_failures = true

[points."cancel.opt.sre".breaker]
algorithm = "sre"
cancellations_are_failures = true
"#;
    registry.load_policies_str(text, Format::Toml).unwrap();
    let classic = registry.point("cancel.opt.classic").unwrap();
    for _ in 0..3 {
        let p = classic.enter().unwrap();
        manual.advance(Duration::from_millis(5));
        drop(p);
    }
    assert_eq!(classic.stats().breaker.unwrap().state, BreakerState::Open);
    let sre = registry.point("cancel.opt.sre").unwrap();
    for _ in 0..50 {
        if let Ok(p) = sre.enter() {
            drop(p);
        }
    }
    let b = sre.stats().breaker.unwrap();
    assert_eq!(b.state, BreakerState::Open, "{b:?}");
    // Written back as set.
    let written = PolicyFile::from_registry(registry)
        .to_text(Format::Toml)
        .unwrap();
    assert_eq!(
        written.matches("cancellations_are_failures = true").count(),
        2,
        "{written}"
    );
    // A wrong type is refused with the field named.
    let bad = r#"
[points."x".breaker]
algorithm = "classic"
cancellations_are_failures = "yes"
"#;
    let err = PolicyFile::parse(bad, Format::Toml)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cancellations_are_failures"), "{err}");
}
