//! The tower layers under every rule of a point's policy, on tokio's paused clock (the
//! registries run on it too, `Clock::tokio`, so every wait is exact and instant): the
//! queue and its timeout, token waits and pacing, `call_timeout`, cancellation, the
//! readiness contract, retries with a budget, hedging; then the bounds at 1 to 64
//! tasks while the policy changes under the calls.

#[path = "support/one_at_a_time.rs"]
mod one_at_a_time;

use one_at_a_time::gradient_pinned_at_one_with_queue;
use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::retry::{Backoff, BudgetConfig, Retry, RetryPolicy};
use resilience_runtime::tower::{GuardError, PointLayer, RetryLayer, Retryable};
use resilience_runtime::{BreakerPolicy, Clock, Point, Policy, Reason, Registry};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service};

const MS: Duration = Duration::from_millis(1);

/// A registry of the test's own on tokio's clock (paused in these tests).
fn registry() -> &'static Registry {
    let clock = Clock::tokio(&tokio::runtime::Handle::current());
    Box::leak(Box::new(Registry::with_clock(clock)))
}

fn point(r: &'static Registry, name: &str, policy: Policy) -> &'static Point {
    r.set_policy(name, policy).unwrap();
    r.point(name).unwrap()
}

/// What a job asks of the mock service.
#[derive(Clone, Copy, Debug)]
struct Job {
    /// How long the inner call runs.
    hold: Duration,
    /// Whether it fails (`Err`).
    fail: bool,
}

fn job(ms: u64) -> Job {
    Job {
        hold: Duration::from_millis(ms),
        fail: false,
    }
}

/// What the mock saw: calls in flight now and at most, calls started and when.
#[derive(Debug, Default)]
struct Seen {
    inside: AtomicU64,
    most: AtomicU64,
    started: AtomicU64,
    dropped: AtomicU64,
    starts: Mutex<Vec<Duration>>,
}

/// The mock service: counts itself in while its future lives, sleeps `hold` on
/// tokio's clock, answers `Ok(hold in ms)` or `Err("failed")`.
#[derive(Clone, Debug)]
struct Mock {
    seen: Arc<Seen>,
    t0: Instant,
}

impl Mock {
    fn new() -> Mock {
        Mock {
            seen: Arc::default(),
            t0: Instant::now(),
        }
    }

    fn most(&self) -> u64 {
        self.seen.most.load(Ordering::SeqCst)
    }

    fn started(&self) -> u64 {
        self.seen.started.load(Ordering::SeqCst)
    }

    fn starts(&self) -> Vec<Duration> {
        self.seen.starts.lock().unwrap().clone()
    }
}

/// Counted in while the inner future lives.
struct Inside(Arc<Seen>, bool);

impl Drop for Inside {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Service<Job> for Mock {
    type Response = u64;
    type Error = &'static str;
    type Future = Pin<Box<dyn Future<Output = Result<u64, &'static str>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, job: Job) -> Self::Future {
        let seen = self.seen.clone();
        let now = seen.inside.fetch_add(1, Ordering::SeqCst) + 1;
        seen.most.fetch_max(now, Ordering::SeqCst);
        seen.started.fetch_add(1, Ordering::SeqCst);
        seen.starts.lock().unwrap().push(self.t0.elapsed());
        let mut inside = Inside(seen, false);
        Box::pin(async move {
            tokio::time::sleep(job.hold).await;
            inside.1 = true;
            drop(inside);
            if job.fail {
                Err("failed")
            } else {
                Ok(job.hold.as_millis() as u64)
            }
        })
    }
}

fn reason<T: std::fmt::Debug>(r: Result<T, GuardError<&'static str>>) -> Reason {
    match r {
        Err(GuardError::Refused(r)) => r.reason,
        other => panic!("not a refusal: {other:?}"),
    }
}

fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

// ---------------------------------------------------------------- queue

/// Three calls of 40 ms at once through a `PointLayer` of `p`, whose policy admits
/// one call at a time and queues two: the second and third wait their turn in the
/// response future (first in, first out), a fourth finds the queue full, and the inner
/// service never has two calls at once. Returns the service.
async fn three_calls_one_after_the_other(
    p: &'static Point,
) -> resilience_runtime::tower::PointService<Mock> {
    let mock = Mock::new();
    let svc = PointLayer::from_point(p).layer(mock.clone());
    let t0 = Instant::now();
    let a = tokio::spawn(svc.clone().call(job(40)));
    let b = tokio::spawn(svc.clone().call(job(40)));
    let c = tokio::spawn(svc.clone().call(job(40)));
    tokio::task::yield_now().await;
    assert_eq!(reason(svc.clone().call(job(40)).await), Reason::QueueFull);
    assert_eq!(a.await.unwrap().unwrap(), 40);
    assert_eq!(b.await.unwrap().unwrap(), 40);
    assert_eq!(c.await.unwrap().unwrap(), 40);
    assert_eq!(t0.elapsed(), 120 * MS, "one after the other");
    assert_eq!(mock.starts(), [Duration::ZERO, 40 * MS, 80 * MS]);
    assert_eq!(mock.most(), 1);
    svc
}

/// `max_concurrency(1).queue(2, 100ms)`: the second and third calls wait their turn in
/// the response future (first in, first out), a fourth finds the queue full, and a
/// call that waits past 100 ms is refused for its timeout; the inner service never
/// has two calls at once.
#[tokio::test(start_paused = true)]
async fn the_queue_waits_in_order_and_times_out() {
    let r = registry();
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(2, 100 * MS)
        .build()
        .unwrap();
    let p = point(r, "queue", policy);
    let svc = three_calls_one_after_the_other(p).await;

    // A call of 500 ms holds the slot: the next one waits 100 ms and is refused.
    let long = tokio::spawn(svc.clone().call(job(500)));
    tokio::task::yield_now().await;
    let t1 = Instant::now();
    assert_eq!(reason(svc.clone().call(job(1)).await), Reason::QueueTimeout);
    assert_eq!(t1.elapsed(), 100 * MS);
    assert_eq!(long.await.unwrap().unwrap(), 500);

    let s = p.stats();
    let q = s.queue.unwrap();
    assert_eq!(
        (q.admitted, q.full, q.timed_out, q.waiting),
        (2, 1, 1, 0),
        "{q:?}"
    );
    assert_eq!((s.totals.passes, s.totals.downgrades), (4, 2));
    assert_eq!((s.concurrency, s.peak_concurrency), (0, 1));
}

/// A gradient limit pinned at 1 with `queue(2, 100ms)`: calls the limit has no room
/// for wait their turn in the response future as under `max_concurrency(1)`, a fourth
/// finds the queue full, and the inner service never has two calls at once.
#[tokio::test(start_paused = true)]
async fn an_adaptive_limit_with_a_queue_waits_in_the_response_future() {
    let r = registry();
    let policy = gradient_pinned_at_one_with_queue(2, 100 * MS);
    let p = point(r, "queue.adaptive", policy);
    three_calls_one_after_the_other(p).await;
    let q = p.stats().queue.unwrap();
    assert_eq!((q.admitted, q.full, q.waiting), (2, 1, 0), "{q:?}");
}

/// Through `.respond()` the queue's refusals are 429s.
#[tokio::test(start_paused = true)]
async fn queue_refusals_answer_429() {
    let r = registry();
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(1, 10 * MS)
        .build()
        .unwrap();
    let p = point(r, "queue.http", policy);
    let svc = PointLayer::from_point(p)
        .retry_after(Duration::from_secs(1))
        .respond()
        .layer(tower::service_fn(|ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        }));
    let held = tokio::spawn(svc.clone().call(1000));
    tokio::task::yield_now().await;
    let res = svc.clone().call(1).await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "1");
    assert!(res.body().contains("queue_timeout"), "{}", res.body());
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
}

// ---------------------------------------------------------------- token wait

/// `pacing(10/s, 250 ms)`: calls are spaced 100 ms apart, each waiting in its response
/// future; a call whose token is due more than 250 ms out is refused at once.
#[tokio::test(start_paused = true)]
async fn pacing_spaces_calls_and_refuses_past_max_wait() {
    let r = registry();
    let p = point(
        r,
        "pacing",
        Policy::builder().pacing(10.0, 250 * MS).build().unwrap(),
    );
    let mock = Mock::new();
    let svc = PointLayer::from_point(p).layer(mock.clone());
    let t0 = Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|_| tokio::spawn(svc.clone().call(job(0))))
        .collect();
    let mut outcomes = Vec::new();
    for c in calls {
        outcomes.push(c.await.unwrap().map_err(|e| e.refused().unwrap().reason));
    }
    assert_eq!(outcomes, [Ok(0), Ok(0), Ok(0), Err(Reason::TokenBucket)]);
    // tokio's timer has millisecond ticks: a wait ends on the tick at or after it.
    let starts = mock.starts();
    for (at, due) in starts.iter().zip([0, 100, 200]) {
        assert!(
            *at >= due * MS && *at <= (due + 1) * MS,
            "{starts:?}: due at {due} ms"
        );
    }
    assert_eq!(starts.len(), 3);
    assert!(t0.elapsed() <= 201 * MS);
}

/// `token_bucket(rate, capacity).token_wait(..)`: over the run, the inner service
/// starts at most `capacity + rate * t` calls, and every call that waited started
/// within its `max_wait`.
#[tokio::test(start_paused = true)]
async fn a_waiting_token_bucket_keeps_its_bound() {
    let r = registry();
    let policy = Policy::builder()
        .token_bucket(20.0, 5)
        .token_wait(200 * MS)
        .build()
        .unwrap();
    let p = point(r, "bucket", policy);
    let mock = Mock::new();
    let svc = PointLayer::from_point(p).layer(mock.clone());
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for round in 0..10u64 {
        for _ in 0..8 {
            let mut svc = svc.clone();
            tasks.push(tokio::spawn(async move {
                let asked = Instant::now();
                let out = svc.call(job(1)).await;
                (out.is_ok(), asked)
            }));
        }
        tokio::time::sleep(Duration::from_millis(50 + round)).await;
    }
    let mut admitted = 0;
    for t in tasks {
        let (ok, _asked) = t.await.unwrap();
        admitted += u64::from(ok);
    }
    let t = t0.elapsed();
    let bound = 5 + (20.0 * t.as_secs_f64()).floor() as u64;
    assert_eq!(mock.started(), admitted);
    assert!(
        admitted <= bound,
        "{admitted} admitted in {t:?} (bound {bound})"
    );
    // Each start, `i` from 0, is no earlier than the bucket allows.
    for (i, at) in mock.starts().iter().enumerate() {
        let allowed = (i as u64 + 1).saturating_sub(5);
        assert!(
            at.as_secs_f64() * 20.0 + 1e-9 >= allowed as f64,
            "start {i} at {at:?}"
        );
    }
    assert!(admitted > 5, "the bucket refilled: {admitted}");
}

// ---------------------------------------------------------------- call_timeout

/// The policy's `call_timeout` cuts the inner future at its deadline: dropped (its
/// drop runs), counted a pass and a timeout (no downgrade, no cancellation), the slot
/// released, and answered `Refused` with `Reason::Deadline`.
#[tokio::test(start_paused = true)]
async fn call_timeout_cuts_the_inner_future() {
    let r = registry();
    let policy = Policy::builder()
        .max_concurrency(4)
        .call_timeout(100 * MS)
        .build()
        .unwrap();
    let p = point(r, "deadline", policy);
    let mock = Mock::new();
    let mut svc = PointLayer::from_point(p)
        .retry_after(Duration::from_secs(2))
        .layer(mock.clone());
    let t0 = Instant::now();
    let err = svc.call(job(1000)).await.unwrap_err();
    assert_eq!(t0.elapsed(), 100 * MS);
    let refused = err.refused().copied().unwrap();
    assert_eq!(refused.reason, Reason::Deadline);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(2)));
    assert_eq!(
        mock.seen.dropped.load(Ordering::SeqCst),
        1,
        "the cut dropped it"
    );
    assert_eq!(mock.seen.inside.load(Ordering::SeqCst), 0);
    // In time: answered.
    assert_eq!(svc.call(job(99)).await.unwrap(), 99);
    let s = p.stats();
    let t = s.totals;
    assert_eq!(
        (
            t.passes,
            t.timeouts,
            t.downgrades,
            t.cancelled,
            t.exceptions
        ),
        (2, 1, 0, 0, 0)
    );
    assert_eq!(s.concurrency, 0);
}

/// A cut is a failure for the breaker, and through `.respond()` a 504; the open
/// breaker then answers 503 with its wait.
#[tokio::test(start_paused = true)]
async fn a_cut_answers_504_and_trips_the_breaker() {
    let r = registry();
    let p = point(
        r,
        "deadline.http",
        Policy::builder().call_timeout(50 * MS).build().unwrap(),
    );
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .open_wait(Backoff::fixed(Duration::from_secs(30)))
        .build()
        .unwrap();
    r.set_breaker("deadline.http", BreakerPolicy::Classic(config))
        .unwrap();
    let mut svc =
        PointLayer::from_point(p)
            .respond()
            .layer(tower::service_fn(|ms: u64| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }));
    let res = svc.call(1000).await.unwrap();
    assert_eq!(res.status(), 504);
    assert!(res.headers().get("retry-after").is_none());
    let res = svc.call(1).await.unwrap();
    assert_eq!(res.status(), 503, "the cut opened the breaker");
    assert_eq!(res.headers()["retry-after"], "30");
    assert_eq!(p.stats().totals.timeouts, 1);
}

/// The deadline is read from the policy in force when the call is admitted: a change
/// applies from the next call.
#[tokio::test(start_paused = true)]
async fn a_changed_call_timeout_applies_to_the_next_call() {
    let r = registry();
    let p = point(
        r,
        "deadline.change",
        Policy::builder().call_timeout(100 * MS).build().unwrap(),
    );
    let mut svc = PointLayer::from_point(p).layer(Mock::new());
    let slow = svc.call(job(150));
    r.set_policy(
        "deadline.change",
        Policy::builder().call_timeout(200 * MS).build().unwrap(),
    )
    .unwrap();
    assert_eq!(reason(slow.await), Reason::Deadline);
    assert_eq!(svc.call(job(150)).await.unwrap(), 150);
}

// ---------------------------------------------------------------- cancellation

/// A response future dropped while its call runs releases the slot and counts the
/// call cancelled; one dropped while it waits in the queue leaves the queue (never
/// having begun) and the next waiter gets the slot.
#[tokio::test(start_paused = true)]
async fn a_dropped_future_gives_back_its_slot_or_its_place() {
    let r = registry();
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(4, Duration::from_secs(10))
        .build()
        .unwrap();
    let p = point(r, "cancel", policy);
    let mock = Mock::new();
    let svc = PointLayer::from_point(p).layer(mock.clone());

    let mut running = Box::pin(svc.clone().call(job(1000)));
    assert!(poll_once(running.as_mut()).is_pending());
    let mut waiting = Box::pin(svc.clone().call(job(10)));
    assert!(poll_once(waiting.as_mut()).is_pending());
    let next = tokio::spawn(svc.clone().call(job(10)));
    tokio::task::yield_now().await;
    assert_eq!(p.stats().queue.unwrap().waiting, 2);

    drop(waiting); // leaves the queue
    let q = p.stats().queue.unwrap();
    assert_eq!((q.waiting, q.cancelled), (1, 1));
    let t0 = Instant::now();
    drop(running); // the slot goes to the next waiter at once
    assert_eq!(next.await.unwrap().unwrap(), 10);
    assert_eq!(t0.elapsed(), 10 * MS);
    let s = p.stats();
    assert_eq!((s.totals.cancelled, s.totals.passes), (1, 2));
    assert_eq!((s.concurrency, s.queue.unwrap().waiting), (0, 0));
    assert_eq!(
        mock.started(),
        2,
        "the dropped waiter never called the service"
    );
    assert_eq!(mock.seen.dropped.load(Ordering::SeqCst), 1);
}

/// Tower's contract: a service may be made ready and dropped without a call (axum's
/// per-request clones, a balancer probing). Readiness takes nothing of the point, so
/// nothing leaks, whatever the policy.
#[tokio::test(start_paused = true)]
async fn ready_services_dropped_without_a_call_hold_nothing() {
    let r = registry();
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(1, Duration::from_secs(1))
        .pacing(1.0, Duration::from_secs(1))
        .build()
        .unwrap();
    let p = point(r, "ready", policy);
    let layer = PointLayer::from_point(p);
    for _ in 0..100 {
        let mut svc = layer.layer(Mock::new());
        let ready = svc.poll_ready(&mut Context::from_waker(Waker::noop()));
        assert!(matches!(ready, Poll::Ready(Ok(()))));
    }
    let s = p.stats();
    assert_eq!((s.concurrency, s.totals.visits), (0, 0));
    assert!(s.queue.is_none_or(|q| q.waiting == 0));
    // The first call still gets the slot and the token at once.
    let mut svc = layer.layer(Mock::new());
    let t0 = Instant::now();
    assert_eq!(svc.call(job(5)).await.unwrap(), 5);
    assert_eq!(t0.elapsed(), 5 * MS);
}

// ---------------------------------------------------------------- retries

/// The mock, failing its first `n` calls with `Err`.
#[derive(Clone)]
struct Failing {
    mock: Mock,
    left: Arc<AtomicU64>,
}

impl Service<Job> for Failing {
    type Response = u64;
    type Error = &'static str;
    type Future = <Mock as Service<Job>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        self.mock.poll_ready(cx)
    }

    fn call(&mut self, j: Job) -> Self::Future {
        let fail = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        self.mock.call(Job { fail, ..j })
    }
}

fn failing(n: u64) -> (Mock, Failing) {
    let mock = Mock::new();
    let svc = Failing {
        mock: mock.clone(),
        left: Arc::new(AtomicU64::new(n)),
    };
    (mock, svc)
}

/// Every attempt is a call of the point (its exceptions counted), the backoff is
/// waited on the paused clock, and the retries are counted as `#[retry]` counts them.
#[tokio::test(start_paused = true)]
async fn retries_are_calls_of_the_point_with_its_backoff() {
    let r = registry();
    let p = point(
        r,
        "retry",
        Policy::builder().max_concurrency(8).build().unwrap(),
    );
    let (mock, flaky) = failing(2);
    let retry = Retry::builder(3)
        .backoff(Backoff::fixed(10 * MS))
        .build()
        .unwrap();
    let mut svc = RetryLayer::from_point(p)
        .retry(retry)
        .layer(PointLayer::from_point(p).layer(flaky));
    let t0 = Instant::now();
    assert_eq!(svc.call(job(1)).await.unwrap(), 1);
    assert_eq!(
        t0.elapsed(),
        23 * MS,
        "3 attempts of 1 ms, 2 waits of 10 ms"
    );
    assert_eq!(mock.started(), 3);
    let s = p.stats();
    let rs = s.retry;
    assert_eq!(
        (rs.calls, rs.attempts, rs.retries, rs.exhausted),
        (1, 3, 2, 0)
    );
    assert_eq!((s.totals.passes, s.totals.exceptions), (3, 2));

    // Exhausted: the last error comes back.
    let (_, down) = failing(u64::MAX);
    let mut svc = RetryLayer::from_point(p)
        .retry(retry)
        .layer(PointLayer::from_point(p).layer(down));
    let err = svc.call(job(1)).await.unwrap_err();
    assert!(matches!(err, GuardError::Inner("failed")));
    assert_eq!(p.retry_stats().exhausted, 1);
}

/// The point's `retry` section wins over the layer's settings, its budget over the
/// layer's; a budget that refuses ends the call with its last error.
#[tokio::test(start_paused = true)]
async fn the_points_retry_section_and_budget_win() {
    let r = registry();
    let p = r.point("retry.section").unwrap();
    let (mock, down) = failing(u64::MAX);
    let layer_budget = r
        .set_retry_budget(
            "layer",
            BudgetConfig::builder()
                .percent(1000.0)
                .min_per_second(100)
                .build()
                .unwrap(),
        )
        .unwrap();
    let mut svc = RetryLayer::from_point(p)
        .retry(Retry::builder(2).build().unwrap())
        .budget(layer_budget)
        .layer(PointLayer::from_point(p).layer(down));
    // The section: 5 attempts of 1 ms fixed backoff, and a budget of its own that
    // allows 20% of the calls and nothing more.
    let section = RetryPolicy::builder(
        Retry::builder(5)
            .backoff(Backoff::fixed(MS))
            .build()
            .unwrap(),
    )
    .budget(
        BudgetConfig::builder()
            .percent(20.0)
            .min_per_second(0)
            .window(Duration::from_secs(10))
            .build()
            .unwrap(),
    )
    .build()
    .unwrap();
    r.set_retry("retry.section", section).unwrap();
    for _ in 0..10 {
        assert!(svc.call(job(0)).await.is_err());
    }
    let rs = p.retry_stats();
    // 20% of the calls so far when each retry asks: the 5th and the 10th call get one
    // retry each; every other retry is refused.
    assert_eq!(rs.calls, 10);
    assert_eq!(rs.retries, 2, "{rs:?}");
    assert_eq!(rs.refused_by_budget, 10 - rs.exhausted, "{rs:?}");
    assert_eq!(mock.started(), 12);
    assert_eq!(
        layer_budget.stats().retries,
        0,
        "the section's budget was used"
    );
}

/// An attempt the point refuses is never retried (a retry only adds load to what
/// refused it), and neither is one it cuts at its deadline.
#[tokio::test(start_paused = true)]
async fn refused_and_cut_attempts_are_not_retried() {
    let r = registry();
    let p = point(
        r,
        "retry.refused",
        Policy::builder().max_visits(0).build().unwrap(),
    );
    let (mock, down) = failing(u64::MAX);
    let mut svc = RetryLayer::from_point(p).layer(PointLayer::from_point(p).layer(down));
    assert_eq!(reason(svc.call(job(0)).await), Reason::Visits);
    assert_eq!(mock.started(), 0);
    let rs = p.retry_stats();
    assert_eq!((rs.calls, rs.attempts, rs.retries), (1, 1, 0));

    r.set_policy(
        "retry.refused",
        Policy::builder().call_timeout(10 * MS).build().unwrap(),
    )
    .unwrap();
    let t0 = Instant::now();
    assert_eq!(reason(svc.call(job(100)).await), Reason::Deadline);
    assert_eq!(t0.elapsed(), 10 * MS, "one attempt, cut");
    assert_eq!(p.retry_stats().retries, 0);
}

/// A request the policy cannot copy is sent once, as it is, and never retried.
#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_copied_is_not_retried() {
    #[derive(Clone)]
    struct OnlyCopiesShortJobs;
    impl Retryable<Job, u64, GuardError<&'static str>> for OnlyCopiesShortJobs {
        fn clone_request(&self, req: &Job) -> Option<Job> {
            (req.hold < 10 * MS).then_some(*req)
        }
        fn is_retryable(&self, result: &Result<u64, GuardError<&'static str>>) -> bool {
            result.is_err()
        }
    }
    let r = registry();
    let p = r.point("retry.copy").unwrap();
    let (mock, down) = failing(u64::MAX);
    let mut svc = RetryLayer::from_point(p)
        .retry(
            Retry::builder(3)
                .backoff(Backoff::fixed(MS))
                .build()
                .unwrap(),
        )
        .policy(OnlyCopiesShortJobs)
        .layer(PointLayer::from_point(p).layer(down));
    assert!(svc.call(job(50)).await.is_err());
    assert_eq!(mock.started(), 1, "sent once");
    assert!(svc.call(job(1)).await.is_err());
    assert_eq!(mock.started(), 1 + 3);
    let rs = p.retry_stats();
    assert_eq!((rs.calls, rs.attempts, rs.retries), (2, 4, 2));
}

// ---------------------------------------------------------------- hedging

/// A slow first attempt gets a hedge after the delay; the hedge answers, and the slow
/// one is dropped: a cancelled call of the point, a cancelled hedge in the retry
/// statistics; the inner service saw two calls at most.
#[tokio::test(start_paused = true)]
async fn a_hedge_answers_for_a_slow_attempt() {
    let r = registry();
    let p = point(
        r,
        "hedge",
        Policy::builder().max_concurrency(4).build().unwrap(),
    );
    let mock = Mock::new();
    let calls = Arc::new(AtomicU64::new(0));
    let inner = {
        let (mock, calls) = (mock.clone(), calls.clone());
        tower::service_fn(move |j: Job| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            let hold = if first { 5000 * MS } else { j.hold };
            mock.clone().call(Job { hold, ..j })
        })
    };
    let mut svc = RetryLayer::from_point(p)
        .hedge(30 * MS)
        .layer(PointLayer::from_point(p).layer(inner));
    let t0 = Instant::now();
    assert_eq!(svc.call(job(5)).await.unwrap(), 5);
    assert_eq!(
        t0.elapsed(),
        35 * MS,
        "hedged at 30 ms, answered 5 ms later"
    );
    assert_eq!(mock.most(), 2);
    let s = p.stats();
    let rs = s.retry;
    assert_eq!(
        (rs.calls, rs.attempts, rs.hedges, rs.cancelled),
        (1, 2, 1, 1)
    );
    assert_eq!(
        (s.totals.passes, s.totals.cancelled, s.concurrency),
        (2, 1, 0)
    );
}

/// Hedges spend the budget like retries: one the budget refuses is not sent.
#[tokio::test(start_paused = true)]
async fn a_hedge_the_budget_refuses_is_not_sent() {
    let r = registry();
    let p = r.point("hedge.budget").unwrap();
    let budget = r
        .set_retry_budget(
            "hedge.none",
            BudgetConfig::builder()
                .percent(0.0)
                .min_per_second(0)
                .build()
                .unwrap(),
        )
        .unwrap();
    let mock = Mock::new();
    let mut svc = RetryLayer::from_point(p)
        .budget(budget)
        .hedge(10 * MS)
        .layer(PointLayer::from_point(p).layer(mock.clone()));
    let t0 = Instant::now();
    assert_eq!(svc.call(job(100)).await.unwrap(), 100);
    assert_eq!(
        t0.elapsed(),
        100 * MS,
        "no hedge: the first attempt answered"
    );
    assert_eq!(mock.started(), 1);
    let rs = p.retry_stats();
    assert_eq!((rs.hedges, rs.refused_by_budget), (0, 1));
}

// ---------------------------------------------------------------- the bounds

/// `n` tasks call through the layer in a loop, some giving up on their calls (a
/// timeout around the call drops its future), while another task swaps the policy
/// between two bulkheads with queues (2 and 4 slots). Checked: the inner service never
/// has more calls than the larger limit allows, the point's peak agrees, every call is
/// accounted for (admitted, refused or dropped), no slot or queue place is left
/// behind.
#[tokio::test(start_paused = true)]
async fn bulkhead_bounds_hold_at_1_to_64_tasks_with_policy_swaps() {
    for n in [1u64, 2, 4, 8, 16, 64] {
        let r = registry();
        let bulkhead = |slots: u64| {
            Policy::builder()
                .max_concurrency(slots)
                .queue(16, 30 * MS)
                .build()
                .unwrap()
        };
        let name = "bounds";
        let p = point(r, name, bulkhead(2));
        let mock = Mock::new();
        let svc = PointLayer::from_point(p).layer(mock.clone());
        let swapper = tokio::spawn(async move {
            for i in 0..40u64 {
                r.set_policy(name, bulkhead(if i % 2 == 0 { 4 } else { 2 }))
                    .unwrap();
                tokio::time::sleep(7 * MS).await;
            }
        });
        let tasks: Vec<_> = (0..n)
            .map(|t| {
                let mut svc = svc.clone();
                tokio::spawn(async move {
                    let mut seen = [0u64; 3];
                    let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    for _ in 0..20 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let (hold, patience) = (1 + x % 15, 5 + (x >> 16) % 60);
                        let call = svc.call(job(hold));
                        match tokio::time::timeout(Duration::from_millis(patience), call).await {
                            Ok(Ok(_)) => seen[0] += 1,
                            Ok(Err(_)) => seen[1] += 1,
                            Err(_) => seen[2] += 1,
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut all = [0u64; 3];
        for t in tasks {
            for (a, s) in all.iter_mut().zip(t.await.unwrap()) {
                *a += s;
            }
        }
        swapper.await.unwrap();
        let [ran, refused, dropped] = all;
        let s = p.stats();
        let t = s.totals;
        let q = s.queue.unwrap_or_default();
        let case = format!("{n} tasks: {t:?} {q:?}");
        assert!(mock.most() <= 4, "{case}: {} inside at once", mock.most());
        assert!(s.peak_concurrency <= 4, "{case}");
        assert_eq!(ran + refused + dropped, n * 20, "{case}");
        assert_eq!(t.visits, t.passes + t.downgrades, "{case}");
        assert_eq!(t.downgrades, refused, "{case}");
        // A call dropped while it ran is a cancelled pass; one dropped while it
        // waited never began.
        assert_eq!(t.passes, ran + t.cancelled, "{case}");
        assert_eq!(dropped, t.cancelled + q.cancelled, "{case}");
        assert_eq!(mock.started(), t.passes, "{case}");
        assert_eq!((s.concurrency, q.waiting), (0, 0), "{case}: left behind");
        assert_eq!(mock.seen.inside.load(Ordering::SeqCst), 0, "{case}");
    }
}

/// Tasks against a waiting token bucket while the policy is swapped between two
/// forms with the same bucket (the token wait changes: 40 ms, 20 ms): at most
/// `capacity + rate * t` starts over the run, exactly as the engine states it.
#[tokio::test(start_paused = true)]
async fn token_bounds_hold_at_1_to_64_tasks_with_policy_swaps() {
    for n in [1u64, 2, 4, 8, 16, 64] {
        let r = registry();
        let bucket = |wait: Duration| {
            Policy::builder()
                .token_bucket(50.0, 4)
                .token_wait(wait)
                .build()
                .unwrap()
        };
        let name = "token.bounds";
        let p = point(r, name, bucket(40 * MS));
        let mock = Mock::new();
        let svc = PointLayer::from_point(p).layer(mock.clone());
        let swapper = tokio::spawn(async move {
            for i in 0..20u64 {
                tokio::time::sleep(11 * MS).await;
                r.set_policy(name, bucket(if i % 2 == 0 { 20 * MS } else { 40 * MS }))
                    .unwrap();
            }
        });
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..n)
            .map(|t| {
                let mut svc = svc.clone();
                tokio::spawn(async move {
                    let mut ok = 0u64;
                    for i in 0..10u64 {
                        if svc.call(job(0)).await.is_ok() {
                            ok += 1;
                        }
                        tokio::time::sleep(Duration::from_millis(1 + (t + i) % 7)).await;
                    }
                    ok
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        swapper.await.unwrap();
        let t = t0
            .elapsed()
            .max(mock.starts().last().copied().unwrap_or_default());
        let bound = 4 + (50.0 * t.as_secs_f64()).floor() as u64;
        let s = p.stats();
        let case = format!("{n} tasks, {admitted} admitted in {t:?}: {:?}", s.totals);
        assert!(admitted <= bound, "{case} (bound {bound})");
        assert_eq!(mock.started(), admitted, "{case}");
        assert_eq!(s.totals.passes, admitted, "{case}");
        assert_eq!(
            s.totals.visits,
            s.totals.passes + s.totals.downgrades,
            "{case}"
        );
        assert_eq!(s.concurrency, 0, "{case}");
    }
}
