//! An async `#[downgrade]` / `#[breaker]` fn whose future is dropped mid-flight is a
//! cancelled call, on a point with a policy (its permit dropped) and on one without
//! policy or breaker (no permit: the slot's guard records it).

use resilience_runtime::{breaker, downgrade, registry, Policy};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Pending on its first poll, ready on the next.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Polls a future once and drops it: a caller that gave up mid-flight.
fn poll_once_and_drop<F: Future>(f: F) -> bool {
    let mut f = pin!(f);
    f.as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
}

#[downgrade(point = "cm.plain")]
async fn plain() -> Result<u32, resilience_runtime::Downgraded> {
    YieldOnce(false).await;
    Ok(1)
}

#[downgrade(point = "cm.policy", default)]
async fn governed() -> u32 {
    YieldOnce(false).await;
    1
}

#[breaker(point = "cm.breaker", default)]
async fn guarded() -> u32 {
    YieldOnce(false).await;
    1
}

#[test]
fn a_dropped_future_without_a_policy_is_cancelled() {
    assert!(!poll_once_and_drop(plain()));
    let s = registry().stats("cm.plain").unwrap();
    assert_eq!(s.totals.cancelled, 1);
    assert_eq!(s.totals.exceptions, 0);
    assert_eq!(s.concurrency, 0);
    // Never polled: the call never began.
    drop(plain());
    assert_eq!(registry().stats("cm.plain").unwrap().totals.cancelled, 1);
    // A completed call is not cancelled.
    assert_eq!(futures_executor::block_on(plain()), Ok(1));
    assert_eq!(registry().stats("cm.plain").unwrap().totals.cancelled, 1);
}

#[test]
fn a_dropped_future_with_a_policy_is_cancelled_once() {
    registry()
        .set_policy(
            "cm.policy",
            Policy::builder().max_concurrency(1).build().unwrap(),
        )
        .unwrap();
    assert!(!poll_once_and_drop(governed()));
    let s = registry().stats("cm.policy").unwrap();
    assert_eq!((s.totals.passes, s.totals.cancelled), (1, 1));
    assert_eq!(s.concurrency, 0);
    // The slot came back: the next call runs.
    assert_eq!(futures_executor::block_on(governed()), 1);
    let s = registry().stats("cm.policy").unwrap();
    assert_eq!((s.totals.passes, s.totals.cancelled), (2, 1));
    assert_eq!(s.window.unwrap().cancelled, 1);
}

#[test]
fn a_dropped_breaker_future_is_cancelled() {
    assert!(!poll_once_and_drop(guarded()));
    let s = registry().stats("cm.breaker").unwrap();
    assert_eq!((s.totals.cancelled, s.totals.exceptions), (1, 0));
    assert_eq!(s.concurrency, 0);
}

#[test]
fn a_refused_call_dropped_in_its_fallback_is_not_cancelled() {
    registry()
        .set_policy(
            "cm.refused",
            Policy::builder().max_visits(0).build().unwrap(),
        )
        .unwrap();
    assert!(!poll_once_and_drop(refused()));
    let s = registry().stats("cm.refused").unwrap();
    assert_eq!((s.totals.downgrades, s.totals.cancelled), (1, 0));
}

async fn slow_fallback() -> u32 {
    YieldOnce(false).await;
    0
}

#[downgrade(point = "cm.refused", fallback = slow_fallback)]
async fn refused() -> u32 {
    1
}
