//! `Point::call_retrying`: attempts, backoff waits on the manual clock, what is never
//! retried (a downgrade, a panic, an error `retry_if` declines), shared budgets exact
//! under many threads.

use resilience_runtime::retry::{Backoff, BudgetConfig, Retry};
use resilience_runtime::{Clock, ManualClock, Point, Policy, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

fn no_jitter(attempts: u64) -> Retry {
    Retry::builder(attempts)
        .backoff(Backoff::exponential(
            Duration::from_millis(50),
            2.0,
            Duration::from_millis(150),
        ))
        .build()
        .unwrap()
}

#[test]
fn waits_follow_the_backoff_and_the_last_error_is_returned() {
    let (manual, registry) = manual_registry();
    let point = registry.point("retry.waits").unwrap();
    let t0 = manual.now().as_nanos();
    let mut calls = 0;
    let out: Result<(), u32> = point.call_retrying(
        &no_jitter(4),
        None,
        || {
            calls += 1;
            Err(calls)
        },
        |_| Ok(()),
        |_| true,
    );
    assert_eq!(out, Err(4), "the last attempt's error");
    // 50 + 100 + 150 (capped) ms between four attempts.
    assert_eq!(manual.now().as_nanos() - t0, 300_000_000);
    let s = point.retry_stats();
    assert_eq!((s.calls, s.attempts, s.retries, s.exhausted), (1, 4, 3, 1));
    assert_eq!(
        point.stats().totals.exceptions,
        4,
        "every attempt is a call"
    );
}

#[test]
fn errors_the_filter_declines_and_panics_are_not_retried() {
    let (_manual, registry) = manual_registry();
    let point = registry.point("retry.filter").unwrap();
    let out = point.call_retrying(
        &no_jitter(5),
        None,
        || Err::<(), _>(404),
        |_| Ok(()),
        |e| *e >= 500,
    );
    assert_eq!(out, Err(404));
    assert_eq!(point.retry_stats().attempts, 1);
    let panicked = std::panic::catch_unwind(|| {
        point.call_retrying(
            &no_jitter(5),
            None,
            || -> Result<(), u16> { panic!("boom") },
            |_| Ok(()),
            |_| true,
        )
    });
    assert!(panicked.is_err());
    assert_eq!(point.retry_stats().attempts, 2);
}

#[test]
fn a_downgrade_ends_the_call_with_the_fallback_at_once() {
    let (_manual, registry) = manual_registry();
    registry
        .set_policy(
            "retry.downgraded",
            Policy::builder().max_visits(1).build().unwrap(),
        )
        .unwrap();
    let point = registry.point("retry.downgraded").unwrap();
    let out = point.call_retrying(
        &no_jitter(5),
        None,
        || Err::<u8, _>("fail"),
        |_| Ok(9),
        |_| true,
    );
    assert_eq!(
        out,
        Ok(9),
        "the second attempt was downgraded: the fallback answers"
    );
    let s = point.retry_stats();
    assert_eq!((s.attempts, s.retries), (2, 1));
    assert_eq!(point.stats().totals.downgrades, 1);
}

#[test]
fn a_budget_refuses_retries_past_its_allowance() {
    let (_manual, registry) = manual_registry();
    let budget = registry
        .set_retry_budget(
            "tight",
            BudgetConfig::builder()
                .percent(0.0)
                .min_per_second(0)
                .window(Duration::from_secs(10))
                .build()
                .unwrap(),
        )
        .unwrap();
    let point = registry.point("retry.budget").unwrap();
    let out = point.call_retrying(
        &no_jitter(3),
        Some(budget),
        || Err::<(), _>(1),
        |_| Ok(()),
        |_| true,
    );
    assert_eq!(out, Err(1));
    let s = point.retry_stats();
    assert_eq!(
        (s.attempts, s.retries, s.refused_by_budget, s.exhausted),
        (1, 0, 1, 0)
    );
    assert_eq!(budget.stats().refused, 1);
}

/// Two points share a budget; 1 to 64 threads fail every call: the retries of both
/// together never exceed the budget's allowance, and every counter adds up.
#[test]
fn a_shared_budget_holds_under_many_threads() {
    for threads in [1u64, 2, 8, 32, 64] {
        let (_manual, registry) = manual_registry();
        let config = BudgetConfig::builder()
            .percent(10.0)
            .min_per_second(1)
            .window(Duration::from_secs(10))
            .build()
            .unwrap();
        let budget = registry.set_retry_budget("shared", config).unwrap();
        let points: [&'static Point; 2] = [
            registry.point("retry.shared.a").unwrap(),
            registry.point("retry.shared.b").unwrap(),
        ];
        let failures = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let failures = failures.clone();
                std::thread::spawn(move || {
                    let point = points[(t % 2) as usize];
                    for _ in 0..200 {
                        let retry = Retry::builder(3)
                            .backoff(Backoff::fixed(Duration::from_nanos(1)))
                            .build()
                            .unwrap();
                        let out = point.call_retrying(
                            &retry,
                            Some(budget),
                            || Err::<(), _>(()),
                            |_| Ok(()),
                            |_| true,
                        );
                        assert!(out.is_err());
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let calls = threads * 200;
        let [a, b] = points.map(|p| p.retry_stats());
        let retries = a.retries + b.retries;
        // The window covers every call: a manual clock moved only by the 1-ns waits.
        assert!(retries <= config.allowance(calls), "{threads}: {retries}");
        assert_eq!(budget.stats().retries, retries);
        assert_eq!(a.calls + b.calls, calls);
        assert_eq!(a.attempts + b.attempts, calls + retries, "{threads}");
        assert_eq!(
            a.exhausted + b.exhausted + a.refused_by_budget + b.refused_by_budget,
            calls,
            "every call ended by running out of attempts or of budget"
        );
        assert_eq!(failures.load(Ordering::Relaxed), calls);
    }
}

#[test]
fn retries_on_the_system_clock_sleep_the_thread() {
    let registry = resilience_runtime::registry();
    let point = registry.point("retry.system").unwrap();
    let start = std::time::Instant::now();
    let retry = Retry::builder(3)
        .backoff(Backoff::fixed(Duration::from_millis(20)))
        .build()
        .unwrap();
    let mut n = 0;
    let out = point.call_retrying(
        &retry,
        None,
        || {
            n += 1;
            if n < 3 {
                Err(())
            } else {
                Ok(n)
            }
        },
        |_| Ok(0),
        |_| true,
    );
    assert_eq!(out, Ok(3));
    assert!(
        start.elapsed() >= Duration::from_millis(40),
        "{:?}",
        start.elapsed()
    );
}

#[cfg(feature = "prometheus")]
#[test]
fn metrics_carry_the_retry_counters() {
    let point = resilience_runtime::registry()
        .point("retry.metrics")
        .unwrap();
    let retry = Retry::builder(3)
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .build()
        .unwrap();
    let _ = point.call_retrying(&retry, None, || Err::<(), _>(()), |_| Ok(()), |_| true);
    let text = resilience_runtime::metrics::render();
    for (series, n) in [
        ("resilience_retry_calls_total", 1),
        ("resilience_retry_attempts_total", 3),
        ("resilience_retry_retries_total", 2),
        ("resilience_retry_exhausted_total", 1),
        ("resilience_retry_refused_by_budget_total", 0),
        ("resilience_retry_hedges_total", 0),
        ("resilience_retry_cancelled_total", 0),
    ] {
        let line = format!("{series}{{point=\"retry.metrics\"}} {n}");
        assert!(text.lines().any(|l| l == line), "{line} missing");
    }
}

/// Setting a budget's limits changes the budget every caller already holds: a call
/// site that looked it up before sees the new limits; the old limits come back with
/// their counts.
#[test]
fn set_retry_budget_reconfigures_in_place() {
    let (_manual, registry) = manual_registry();
    let held = registry.retry_budget("inplace");
    let none = BudgetConfig::builder()
        .percent(0.0)
        .min_per_second(0)
        .window(Duration::from_secs(10))
        .build()
        .unwrap();
    let again = registry.set_retry_budget("inplace", none).unwrap();
    assert!(std::ptr::eq(held, again), "the same budget");
    assert_eq!(held.config(), none);
    assert!(!held.try_retry(), "the new limits hold for the old handle");
    // Back to the defaults: their counts (none yet) and 10 a second.
    registry
        .set_retry_budget("inplace", BudgetConfig::default())
        .unwrap();
    assert_eq!((0..200).filter(|_| held.try_retry()).count(), 100);
    let s = held.stats();
    assert_eq!(
        (s.retries, s.refused),
        (100, 101),
        "counted over both limits"
    );
    // An invalid config changes nothing (the fields stay public, so a config changed
    // after `build` is checked again).
    let mut bad = none;
    bad.percent = f64::NAN;
    assert_eq!(
        registry.set_retry_budget("inplace", bad).unwrap_err().field,
        "percent"
    );
    assert_eq!(held.config(), BudgetConfig::default());
}
