//! [`RetryLayer`]: retries (and hedged attempts) of a service, with the retry settings
//! and budget of a point, counted in its [`retry_stats`](crate::Point::retry_stats) as
//! `#[retry]` counts; [`Retryable`], which says which requests can be sent again and
//! which outcomes are worth it.

use crate::__private::attempt_async;
use crate::retry::hedge::{HedgeSpec, LatencyLog};
use crate::retry::{Retry, RetryBudget};
use crate::sync::Arc;
use crate::{FieldError, Point, PointNameError};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// What a [`RetryLayer`] asks of each request and outcome, as tower's own
/// `retry::Policy` does: whether the request can be sent again (a copy of it), and
/// whether an outcome is an error worth another attempt.
///
/// An attempt refused or cut by a [`PointLayer`](super::PointLayer) right below the
/// retry layer is never retried, whatever this says (as `#[retry]` never retries a
/// downgraded attempt).
///
/// # Examples
///
/// Retry gRPC-style "try again" errors of any cloneable request:
///
/// ```
/// use resilience_runtime::tower::Retryable;
///
/// #[derive(Clone)]
/// struct Transient;
///
/// impl<Req: Clone, Res> Retryable<Req, Res, std::io::Error> for Transient {
///     fn clone_request(&self, req: &Req) -> Option<Req> {
///         Some(req.clone())
///     }
///     fn is_retryable(&self, result: &Result<Res, std::io::Error>) -> bool {
///         matches!(result, Err(e) if e.kind() == std::io::ErrorKind::TimedOut)
///     }
/// }
/// ```
pub trait Retryable<Req, Res, E> {
    /// A copy of `req` for another attempt, or `None` if it cannot be sent again (a
    /// streamed body, a method that is not idempotent): then it is sent once, as it
    /// is, and never retried or hedged. Asked before each attempt, from the original
    /// request; it must answer alike for the same request.
    fn clone_request(&self, req: &Req) -> Option<Req>;

    /// Whether `result` is an error to retry.
    fn is_retryable(&self, result: &Result<Res, E>) -> bool;
}

/// The default [`Retryable`]: requests that are `Clone` are cloned, and every `Err`
/// is retried (a refusal of a [`PointLayer`](super::PointLayer) below never is).
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryErrors;

impl<Req: Clone, Res, E> Retryable<Req, Res, E> for RetryErrors {
    fn clone_request(&self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }

    fn is_retryable(&self, result: &Result<Res, E>) -> bool {
        result.is_err()
    }
}

/// A [`Retryable`] for HTTP: requests with an idempotent method (`GET`, `HEAD`,
/// `OPTIONS`, `TRACE`, `PUT`, `DELETE`) and a body that is `Clone` (`String`,
/// `Bytes`, `Full<Bytes>`, ...) are cloned; an `Err` and a `502`, `503` or `504`
/// response are retried. A request with a streamed body (axum's `Body`, hyper's
/// `Incoming`) is not `Clone`: buffer it first, or it cannot use this policy.
///
/// # Examples
///
/// ```
/// use resilience_runtime::tower::{RetryHttp, Retryable};
///
/// let get = http::Request::get("/price").body(String::new()).unwrap();
/// let post = http::Request::post("/order").body(String::from("{}")).unwrap();
/// let policy = RetryHttp;
/// assert!(Retryable::<_, http::Response<()>, ()>::clone_request(&policy, &get).is_some());
/// assert!(Retryable::<_, http::Response<()>, ()>::clone_request(&policy, &post).is_none());
/// let busy = http::Response::builder().status(503).body(()).unwrap();
/// assert!(Retryable::<http::Request<String>, _, ()>::is_retryable(&policy, &Ok(busy)));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryHttp;

impl<B: Clone, ResB, E> Retryable<http::Request<B>, http::Response<ResB>, E> for RetryHttp {
    fn clone_request(&self, req: &http::Request<B>) -> Option<http::Request<B>> {
        req.method().is_idempotent().then(|| req.clone())
    }

    fn is_retryable(&self, result: &Result<http::Response<ResB>, E>) -> bool {
        match result {
            Ok(res) => matches!(res.status().as_u16(), 502..=504),
            Err(_) => true,
        }
    }
}

/// A [`Layer`] that retries a service's calls with the retry settings and budget of a
/// point: its `retry` section if one is set ([`Registry::set_retry`](crate::Registry::set_retry),
/// a policy file, the console), else the layer's own ([`retry`](Self::retry), by
/// default `#[retry]`'s: 3 attempts, 50 ms doubling up to 2 s, full jitter), and the
/// section's budget if it sets one, else the layer's ([`budget`](Self::budget)).
/// Calls, attempts, retries, exhausted calls, refused retries, hedges and cancelled
/// hedges are counted in the point's [`retry_stats`](crate::Point::retry_stats)
/// exactly as for `#[retry]`.
///
/// Put it right above a [`PointLayer`](super::PointLayer) of the same point: each
/// attempt is then a call of the point (waiting, cut at its `call_timeout`, counted),
/// and an attempt the point refuses or cuts ends the call at once with that answer.
/// (The refusal is seen while the attempt is polled; a layer between them that moves
/// the call to another task, such as tower's `Buffer`, hides it.)
///
/// Requests are copied by a [`Retryable`] policy ([`RetryErrors`] by default,
/// [`RetryHttp`] for HTTP clients, or your own): **a request the policy cannot copy is
/// sent once, as it is, and never retried** (it still counts as a call of one
/// attempt). Waits between attempts are on the point's clock: `tokio::time::sleep` on
/// the system clock (a tokio runtime with its time driver is needed), advanced at once
/// on a manual one. The response future is boxed, and `Send`.
///
/// With [`hedge`](Self::hedge) (idempotent requests only), an attempt that has not
/// answered after the hedge delay gets another one beside it, as
/// `#[retry(hedge = "..")]` does (see the guide's
/// [hedging](crate::guide::retries#hedging)).
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::{Backoff, Retry};
/// use resilience_runtime::tower::{PointLayer, RetryLayer};
/// use resilience_runtime::registry;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tower::{Layer, Service};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let failures = Arc::new(AtomicU32::new(2));
/// let flaky = {
///     let failures = failures.clone();
///     tower::service_fn(move |x: u32| {
///         let fail = failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
///         async move { if fail { Err("busy") } else { Ok(x) } }
///     })
/// };
/// let retry = Retry::builder(3).backoff(Backoff::fixed(Duration::from_millis(1))).build()?;
/// let point = PointLayer::new("docs.tower.retry")?;
/// let mut svc = RetryLayer::new("docs.tower.retry")?.retry(retry).layer(point.layer(flaky));
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// assert_eq!(rt.block_on(svc.call(7)).unwrap(), 7); // third time lucky
/// let stats = registry().stats("docs.tower.retry").unwrap();
/// assert_eq!((stats.retry.calls, stats.retry.attempts, stats.retry.retries), (1, 3, 2));
/// assert_eq!(stats.totals.exceptions, 2, "each attempt is a call of the point");
/// # Ok(()) }
/// ```
pub struct RetryLayer<P = RetryErrors> {
    point: &'static Point,
    retry: Retry,
    budget: Option<&'static RetryBudget>,
    hedge: Option<&'static HedgeSpec>,
    policy: Arc<P>,
}

impl<P> Clone for RetryLayer<P> {
    fn clone(&self) -> Self {
        RetryLayer {
            point: self.point,
            retry: self.retry,
            budget: self.budget,
            hedge: self.hedge,
            policy: Arc::clone(&self.policy),
        }
    }
}

impl<P> fmt::Debug for RetryLayer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("point", &self.point.name())
            .field("retry", &self.retry)
            .field("budget", &self.budget.is_some())
            .field("hedge", &self.hedge)
            .field("policy", &std::any::type_name::<P>())
            .finish()
    }
}

impl RetryLayer {
    /// A layer retrying with the settings of the point `name` of the global
    /// [`registry`](crate::registry()), created if needed.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] when `name` is not a valid point name.
    pub fn new(name: &str) -> Result<Self, PointNameError> {
        Ok(RetryLayer::from_point(crate::registry().point(name)?))
    }

    /// A layer retrying with the settings of `point` (of any registry).
    pub fn from_point(point: &'static Point) -> Self {
        RetryLayer {
            point,
            retry: Retry::new(3),
            budget: None,
            hedge: None,
            policy: Arc::new(RetryErrors),
        }
    }
}

impl<P> RetryLayer<P> {
    /// The point.
    pub fn point(&self) -> &'static Point {
        self.point
    }

    /// Attempts and backoff while the point has no `retry` section (which wins
    /// while set, as over `#[retry]`'s arguments).
    #[must_use]
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The budget retries and hedges spend, unless the point's `retry` section sets
    /// one of the point's own: each call deposits, each retry or hedge withdraws (see
    /// [`RetryBudget`]); one the budget refuses is not made, counted in
    /// `refused_by_budget`.
    #[must_use]
    pub fn budget(mut self, budget: &'static RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Hedges after `delay`: when an attempt has not answered after `delay` (counted
    /// from the latest attempt started), another starts beside it, while attempts
    /// remain (hedges count as attempts) and the budget allows; the first answer that
    /// is not an error to retry wins and the others are dropped (each a cancelled
    /// call of a point layer below). For idempotent requests only. The delay is on
    /// tokio's clock.
    ///
    /// # Panics
    ///
    /// A hedged call asks the [`Retryable`] policy for a copy before each attempt: if
    /// it gives `None` for a request it copied before (breaking its contract), the
    /// call's future panics.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::tower::RetryLayer;
    /// use resilience_runtime::registry;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use tower::{Layer, Service};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// static CALLS: AtomicU32 = AtomicU32::new(0);
    /// let replica = tower::service_fn(|sku: &'static str| async move {
    ///     if CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
    ///         tokio::time::sleep(Duration::from_secs(5)).await; // a stalled replica
    ///     }
    ///     Ok::<_, std::io::Error>(sku.len())
    /// });
    /// let layer = RetryLayer::new("docs.tower.hedge")?.hedge(Duration::from_millis(30));
    /// let mut svc = layer.layer(replica);
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
    /// rt.block_on(async {
    ///     let t0 = tokio::time::Instant::now();
    ///     assert_eq!(svc.call("abc").await.unwrap(), 3);
    ///     assert_eq!(t0.elapsed(), Duration::from_millis(30), "the hedge answered");
    /// });
    /// let r = registry().stats("docs.tower.hedge").unwrap().retry;
    /// assert_eq!((r.calls, r.attempts, r.hedges, r.cancelled), (1, 2, 1, 1));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn hedge(mut self, delay: Duration) -> Self {
        let nanos = crate::clock::nanos(delay).max(1);
        // One small spec per layer built (layers are built once, at start), for the
        // engine's hedging, which takes it for the life of the program.
        self.hedge = Some(Box::leak(Box::new(HedgeSpec::Fixed { nanos })));
        self
    }

    /// Hedges at a percentile of this layer's own attempt latencies (`95.0` for p95;
    /// 50 ..= 99.9, in tenths), as `#[retry(hedge = "p95")]`: no hedge before the
    /// layer has measured 20 attempts. Each call of this method makes a latency log of
    /// its own (about 600 bytes, kept for the life of the program): build the layer
    /// once and clone it.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] for `hedge` when `percentile` is not within 50 ..= 99.9.
    pub fn hedge_percentile(mut self, percentile: f64) -> Result<Self, FieldError> {
        let tenths = (percentile * 10.0).round();
        if !(500.0..=999.0).contains(&tenths) {
            return Err(FieldError::new(
                "hedge",
                format!("the percentile must be within 50..=99.9, got {percentile}"),
            ));
        }
        let log: &'static LatencyLog = Box::leak(Box::new(LatencyLog::new()));
        self.hedge = Some(Box::leak(Box::new(HedgeSpec::Percentile {
            tenths: tenths as u32,
            log,
        })));
        Ok(self)
    }

    /// Copies requests and chooses the errors to retry with `policy` (see
    /// [`Retryable`]).
    pub fn policy<Q>(self, policy: Q) -> RetryLayer<Q> {
        RetryLayer {
            point: self.point,
            retry: self.retry,
            budget: self.budget,
            hedge: self.hedge,
            policy: Arc::new(policy),
        }
    }
}

impl<S, P> Layer<S> for RetryLayer<P> {
    type Service = RetryService<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by a [`RetryLayer`].
pub struct RetryService<S, P = RetryErrors> {
    inner: S,
    layer: RetryLayer<P>,
}

impl<S: Clone, P> Clone for RetryService<S, P> {
    fn clone(&self) -> Self {
        RetryService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, P> fmt::Debug for RetryService<S, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

/// The response future of a [`RetryService`].
pub type RetryFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

/// One attempt: the service made ready, then called. Its output, and whether a point
/// layer below refused or cut it.
async fn attempt<S: Service<Req>, Req>(
    service: &mut S,
    req: Req,
) -> (Result<S::Response, S::Error>, bool) {
    attempt_async(async {
        std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
        service.call(req).await
    })
    .await
}

impl<S, P, Req> Service<Req> for RetryService<S, P>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
    P: Retryable<Req, S::Response, S::Error> + Send + Sync + 'static,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RetryFuture<S::Response, S::Error>;

    /// Forwards to the inner service (the first attempt uses the service made ready
    /// here; the others make a clone ready).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let fresh = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, fresh);
        let RetryLayer {
            point,
            retry,
            budget,
            hedge,
            ref policy,
        } = self.layer;
        let policy = Arc::clone(policy);
        Box::pin(async move {
            let budget = point.begin_retrying(budget);
            match hedge {
                Some(spec) => hedged(point, budget, retry, spec, policy, service, req).await,
                None => retried(point, budget, retry, &*policy, service, req).await,
            }
        })
    }
}

/// Attempts one at a time, as `Point::call_retrying_async` makes them.
async fn retried<S, P, Req>(
    point: &'static Point,
    budget: Option<&'static RetryBudget>,
    retry: Retry,
    policy: &P,
    mut service: S,
    req: Req,
) -> Result<S::Response, S::Error>
where
    S: Service<Req>,
    P: Retryable<Req, S::Response, S::Error>,
{
    let mut done = 0;
    let mut next = policy.clone_request(&req);
    let mut req = req;
    loop {
        let (out, refused) = attempt(&mut service, req).await;
        if refused || !policy.is_retryable(&out) {
            return out;
        }
        // A request the policy cannot copy was sent once, as it is.
        let Some(again) = next.take() else {
            return out;
        };
        done += 1;
        match point.retry_after(|| retry, budget, done) {
            Some(wait) => point.retry_clock().sleep_async(wait).await,
            None => return out,
        }
        next = policy.clone_request(&again);
        req = again;
    }
}

/// Hedged attempts, by the engine's combinator (`#[retry(hedge = "..")]`'s).
async fn hedged<S, P, Req>(
    point: &'static Point,
    budget: Option<&'static RetryBudget>,
    retry: Retry,
    spec: &'static HedgeSpec,
    policy: Arc<P>,
    service: S,
    req: Req,
) -> Result<S::Response, S::Error>
where
    S: Service<Req> + Clone,
    P: Retryable<Req, S::Response, S::Error>,
{
    if policy.clone_request(&req).is_none() {
        // Cannot be sent twice: once, as it is.
        let mut service = service;
        return attempt(&mut service, req).await.0;
    }
    // Owns the template and the service, so that the call's future holds no borrow
    // of them across its awaits (and is `Send` without `Sync`).
    let make = move || {
        let copy = policy.clone_request(&req);
        let mut service = service.clone();
        let policy = Arc::clone(&policy);
        async move {
            let Some(copy) = copy else {
                panic!("`Retryable::clone_request` gave `None` for a request it copied before");
            };
            let (out, refused) = attempt(&mut service, copy).await;
            let again = !refused && policy.is_retryable(&out);
            (out, refused, again)
        }
    };
    crate::point::run_hedged(
        point,
        budget,
        || point.effective_retry(|| retry),
        spec,
        make,
    )
    .await
}
