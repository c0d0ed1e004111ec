//! `Point::call_retrying_async` (feature `tokio`): backoff on tokio's paused clock or
//! the registry's manual clock, downgrades end the call at once, a dropped call is a
//! cancelled attempt and leaves no slot taken.
#![cfg(feature = "tokio")]

use resilience_runtime::retry::{Backoff, Retry};
use resilience_runtime::{Clock, ManualClock, Policy, Reason, Registry};
use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;

fn fixed(attempts: u64, ms: u64) -> Retry {
    Retry::builder(attempts)
        .backoff(Backoff::fixed(Duration::from_millis(ms)))
        .build()
        .unwrap()
}

fn fresh_registry(clock: Clock) -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(clock)))
}

#[tokio::test(start_paused = true)]
async fn waits_on_tokio_time_and_counts_every_attempt() {
    let registry = fresh_registry(Clock::system());
    let point = registry.point("ra.waits").unwrap();
    let t0 = tokio::time::Instant::now();
    let mut n = 0;
    let out: Result<u32, u32> = point
        .call_retrying_async(
            &fixed(4, 100),
            None,
            || {
                n += 1;
                let n = n;
                async move {
                    if n < 3 {
                        Err(n)
                    } else {
                        Ok(n)
                    }
                }
            },
            |_| Ok(0),
            |_| true,
        )
        .await;
    assert_eq!(out, Ok(3));
    assert_eq!(t0.elapsed(), Duration::from_millis(200), "two fixed waits");
    let s = point.retry_stats();
    assert_eq!((s.calls, s.attempts, s.retries, s.exhausted), (1, 3, 2, 0));
    assert_eq!(point.stats().totals.exceptions, 2);
}

#[tokio::test]
async fn a_manual_clock_is_advanced_instead_of_waiting() {
    let manual = ManualClock::new();
    let registry = fresh_registry(Clock::manual(&manual));
    let point = registry.point("ra.manual").unwrap();
    let t0 = manual.now().as_nanos();
    let out: Result<(), &str> = point
        .call_retrying_async(
            &fixed(3, 250),
            None,
            || async { Err("busy") },
            |_| Ok(()),
            |e| *e == "busy",
        )
        .await;
    assert_eq!(out, Err("busy"));
    assert_eq!(manual.now().as_nanos() - t0, 500_000_000);
    assert_eq!(point.retry_stats().exhausted, 1);
}

#[tokio::test]
async fn a_downgrade_ends_the_call_with_the_fallback() {
    let registry = fresh_registry(Clock::system());
    registry
        .set_policy("ra.down", Policy::builder().max_visits(1).build().unwrap())
        .unwrap();
    let point = registry.point("ra.down").unwrap();
    let out: Result<&str, &str> = point
        .call_retrying_async(
            &fixed(5, 1),
            None,
            || async { Err("busy") },
            |d| {
                assert_eq!(d.reason(), Reason::Visits);
                Ok("fallback")
            },
            |_| true,
        )
        .await;
    assert_eq!(out, Ok("fallback"));
    let s = point.retry_stats();
    assert_eq!(
        (s.attempts, s.retries),
        (2, 1),
        "the second attempt was refused"
    );
}

#[test]
fn a_dropped_call_is_a_cancelled_attempt_and_frees_its_slot() {
    let manual = ManualClock::new();
    let registry = fresh_registry(Clock::manual(&manual));
    registry
        .set_policy(
            "ra.drop",
            Policy::builder().max_concurrency(1).build().unwrap(),
        )
        .unwrap();
    let point = registry.point("ra.drop").unwrap();
    let retry = fixed(3, 1);
    let call = point.call_retrying_async(
        &retry,
        None,
        std::future::pending::<Result<(), ()>>,
        |_| Ok(()),
        |_| true,
    );
    let mut call = Box::pin(call);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(call.as_mut().poll(&mut cx).is_pending());
    assert_eq!(point.stats().concurrency, 1);
    drop(call);
    let s = point.stats();
    assert_eq!((s.concurrency, s.totals.cancelled), (0, 1));
    assert_eq!(s.totals.passes, 1);
}

#[tokio::test]
async fn a_panic_keeps_unwinding_and_is_an_exception() {
    let registry = fresh_registry(Clock::system());
    let point = registry.point("ra.panic").unwrap();
    let task = tokio::spawn(async move {
        point
            .call_retrying_async(
                &fixed(3, 1),
                None,
                || async { panic!("boom") },
                |_| Ok::<(), ()>(()),
                |_| true,
            )
            .await
    });
    assert!(task.await.unwrap_err().is_panic());
    let s = point.stats();
    assert_eq!((s.totals.exceptions, s.concurrency), (1, 0));
    assert_eq!(point.retry_stats().attempts, 1, "a panic is never retried");
}
