//! tower middleware (feature `tower`): guard a [`Service`] with a point of the
//! registry ([`PointLayer`]) or an adaptive limit ([`AdmissionLayer`]), and turn a
//! refusal into an error or an HTTP response; give requests a priority from a header
//! ([`PriorityLayer`]).
//!
//! # Shared state
//!
//! A layer and every service it makes share one limit, however often they are cloned:
//! [`PointLayer`] holds the `&'static` [`Point`] of the registry, [`AdmissionLayer`] an
//! `Arc` of its limit. This matters behind axum, which clones the service for every
//! request; a limit kept per clone (as tower's own `ConcurrencyLimit` and `RateLimit`
//! do) is never enforced there.
//!
//! # Readiness
//!
//! `poll_ready` only forwards to the inner service; the decision is taken in `call`.
//! Reserving a slot in `poll_ready` would hold it between readiness and the call, and
//! forever for a service that is made ready and then dropped without a call (axum's
//! per-request clones, load balancers probing readiness); and a full limit answered
//! with `Pending` would make callers queue, which is what fail-fast admission is meant
//! to prevent. A refused call is answered at once with a ready future. For the same
//! reason a [`PointLayer`] never waits: a point with a queue or a token bucket that
//! waits refuses at once in the layer ([`Point::try_enter`]).
//!
//! # Outcomes
//!
//! The guard ([`Permit`] or an adaptive permit) lives in the response future: an
//! `Ok` ends the call as a success, an `Err` as a failure, a panic while polling the
//! inner future as a panic, and dropping the future before it completes (a client
//! that went away, a timeout around it) as a cancelled call. With
//! [`respond`](PointLayer::respond), HTTP responses with a 5xx status also count as
//! failures.
//!
//! # HTTP
//!
//! [`Rejected::status`] maps every limit to `429 Too Many Requests` and an open
//! breaker to `503 Service Unavailable` (the server's own state, not the client's
//! rate); a rejection carries `Retry-After` when the layer was given a wait
//! ([`retry_after`](PointLayer::retry_after)). A [`PointLayer`] refusing a call for
//! an open breaker reports the breaker's own wait instead: the time until it may
//! admit a probe (classic breaker: until its open wait ends; SRE breaker: its
//! `force_pass_interval`), in whole seconds rounded up, at least 1.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::tower::{PointLayer, Rejected};
//! use resilience_runtime::{registry, Policy};
//! use std::convert::Infallible;
//! use tower::{Layer, Service};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! registry().set_policy("docs.tower.echo", Policy::builder().max_visits(0).build()?)?;
//! let layer = PointLayer::new("docs.tower.echo")?.respond();
//! let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//! }));
//! let res = futures_executor::block_on(svc.call(http::Request::new(())))?;
//! assert_eq!(res.status(), 429);
//! # Ok(()) }
//! ```

mod keyed;
mod priority;

pub use keyed::{KeyedPointLayer, KeyedPointService};
pub use priority::{PriorityLayer, PriorityService};

use crate::adaptive::{
    AdaptiveLimiter, AdaptivePermit, Gate, GatePermit, GradientLimiter, GradientPermit,
    LatencyLimiter, LatencyPermit,
};
use crate::sync::Arc;
use crate::{Downgraded, Permit, Point, PointNameError, Reason};
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// Which rule refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// A point's policy downgraded the call.
    Downgraded(Reason),
    /// A [`Gate`] had no free slot.
    CapacityExhausted,
    /// An adaptive limit ([`AdaptiveLimiter`], [`GradientLimiter`]) found the service
    /// overloaded.
    Overloaded,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::Downgraded(r) => write!(f, "downgraded ({r})"),
            RejectReason::CapacityExhausted => f.write_str("capacity exhausted"),
            RejectReason::Overloaded => f.write_str("overloaded"),
        }
    }
}

/// A call refused by a [`PointLayer`] or an [`AdmissionLayer`]: which guard, why, and
/// how long to wait before retrying when that is known.
///
/// # Examples
///
/// ```
/// use resilience_runtime::tower::{Rejected, RejectReason};
/// use resilience_runtime::Reason;
/// use std::time::Duration;
///
/// let r = Rejected {
///     point: "api.search",
///     reason: RejectReason::Downgraded(Reason::Concurrency),
///     retry_after: Some(Duration::from_millis(1500)),
/// };
/// let res: http::Response<String> = r.into_http_response();
/// assert_eq!(res.status(), 429);
/// assert_eq!(res.headers()["retry-after"], "2");
/// assert_eq!(res.body(), "`api.search` refused the request: downgraded (concurrency)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The point's name, or the name given to the [`AdmissionLayer`].
    pub point: &'static str,
    /// The rule that refused the call.
    pub reason: RejectReason,
    /// How long the client should wait before retrying, when known.
    pub retry_after: Option<Duration>,
}

impl Rejected {
    /// The rejection of a point's downgrade.
    pub fn from_downgraded(d: Downgraded, retry_after: Option<Duration>) -> Self {
        Rejected {
            point: d.point(),
            reason: RejectReason::Downgraded(d.reason()),
            retry_after,
        }
    }

    /// The HTTP status for this rejection: `429 Too Many Requests` for every limit,
    /// `503 Service Unavailable` for an open breaker, `504 Gateway Timeout` for a call
    /// cut at its deadline ([`Reason::Deadline`], when a `Downgraded` from a
    /// `timeout = "..."` function is turned into a rejection).
    pub fn status(&self) -> StatusCode {
        match self.reason {
            // An open breaker is the server's own state, not the client's rate.
            RejectReason::Downgraded(Reason::BreakerOpen) => StatusCode::SERVICE_UNAVAILABLE,
            RejectReason::Downgraded(Reason::Deadline) => StatusCode::GATEWAY_TIMEOUT,
            RejectReason::Downgraded(_)
            | RejectReason::CapacityExhausted
            | RejectReason::Overloaded => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// An HTTP response for this rejection: [`status`](Rejected::status), a
    /// `Retry-After` header in whole seconds (rounded up, at least 1) when the wait is
    /// known, and the message as a plain-text body.
    pub fn into_http_response<B: From<String>>(self) -> http::Response<B> {
        let mut res = http::Response::new(B::from(self.to_string()));
        *res.status_mut() = self.status();
        let headers = res.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        res
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` refused the request: {}", self.point, self.reason)
    }
}

impl std::error::Error for Rejected {}

impl<B: From<String>> From<Rejected> for http::Response<B> {
    fn from(r: Rejected) -> Self {
        r.into_http_response()
    }
}

/// The error of a guarded service in the default mode ([`AsError`]): the guard refused
/// the call, or the inner service failed.
#[derive(Debug)]
pub enum GuardError<E> {
    /// The guard refused the call; the inner service was not called.
    Rejected(Rejected),
    /// The inner service's error.
    Inner(E),
}

impl<E> GuardError<E> {
    /// The rejection, if this is one.
    pub fn rejected(&self) -> Option<&Rejected> {
        match self {
            GuardError::Rejected(r) => Some(r),
            GuardError::Inner(_) => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Rejected(r) => r.fmt(f),
            GuardError::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GuardError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Rejected(_) => None,
            GuardError::Inner(e) => Some(e),
        }
    }
}

/// How a guarded service reports a refusal and judges an outcome; the mode of a
/// [`PointService`] or [`AdmissionService`].
///
/// [`AsError`] returns [`GuardError`]s; [`AsResponse`] answers HTTP requests itself.
pub trait RejectMode<Res, E> {
    /// The guarded service's error type.
    type Error;

    /// What the service returns for a refused call.
    fn rejected(rejected: Rejected) -> Result<Res, Self::Error>;

    /// Wraps an error of the inner service.
    fn inner_error(error: E) -> Self::Error;

    /// Whether the outcome counts as a failure for the guard.
    fn is_failure(result: &Result<Res, E>) -> bool;
}

/// The default mode: a refusal is `Err(GuardError::Rejected(..))`, and the inner
/// service's `Err` is a failure.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsError;

impl<Res, E> RejectMode<Res, E> for AsError {
    type Error = GuardError<E>;

    fn rejected(rejected: Rejected) -> Result<Res, GuardError<E>> {
        Err(GuardError::Rejected(rejected))
    }

    fn inner_error(error: E) -> GuardError<E> {
        GuardError::Inner(error)
    }

    fn is_failure(result: &Result<Res, E>) -> bool {
        result.is_err()
    }
}

/// The HTTP mode: a refusal is answered with [`Rejected::into_http_response`], the
/// error type stays the inner service's (so axum accepts the layer as it is), and a
/// 5xx response or an `Err` is a failure.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsResponse;

impl<B: From<String>, E> RejectMode<http::Response<B>, E> for AsResponse {
    type Error = E;

    fn rejected(rejected: Rejected) -> Result<http::Response<B>, E> {
        Ok(rejected.into_http_response())
    }

    fn inner_error(error: E) -> E {
        error
    }

    fn is_failure(result: &Result<http::Response<B>, E>) -> bool {
        result
            .as_ref()
            .map_or(true, |res| res.status().is_server_error())
    }
}

/// The guard of one admitted call, held by the response future until the call ends.
pub trait CallGuard: Send + 'static {
    /// The call ended; `failed` says whether it failed.
    fn finish(self, failed: bool);

    /// The call panicked. Counts as a failure unless the guard knows better.
    fn panicked(self)
    where
        Self: Sized,
    {
        self.finish(true);
    }
}

impl CallGuard for Permit {
    fn finish(self, failed: bool) {
        Permit::finish(self, failed);
    }

    fn panicked(self) {
        Permit::panicked(self);
    }
}

impl CallGuard for GatePermit<Arc<Gate>> {
    fn finish(self, _failed: bool) {
        // The gate only times the call; dropping releases the slot.
    }
}

impl<T: LatencyLimiter + Send + Sync + 'static> CallGuard for LatencyPermit<Arc<T>> {
    fn finish(self, failed: bool) {
        if failed {
            self.fail();
        } else {
            let now = self.limiter().now();
            self.pass(now);
        }
    }
}

/// A limit an [`AdmissionLayer`] can guard a service with: [`Gate`],
/// [`AdaptiveLimiter`] and [`GradientLimiter`].
pub trait Admission: Send + Sync + 'static {
    /// The guard of an admitted call.
    type Guard: CallGuard;

    /// Admits a call now, or says why not.
    fn admit(this: &Arc<Self>) -> Result<Self::Guard, RejectReason>;
}

impl Admission for Gate {
    type Guard = GatePermit<Arc<Gate>>;

    fn admit(this: &Arc<Self>) -> Result<Self::Guard, RejectReason> {
        this.try_acquire_owned()
            .map_err(|_| RejectReason::CapacityExhausted)
    }
}

impl Admission for AdaptiveLimiter {
    type Guard = AdaptivePermit<Arc<AdaptiveLimiter>>;

    fn admit(this: &Arc<Self>) -> Result<Self::Guard, RejectReason> {
        this.try_acquire_owned(this.now())
            .map_err(|_| RejectReason::Overloaded)
    }
}

impl Admission for GradientLimiter {
    type Guard = GradientPermit<Arc<GradientLimiter>>;

    fn admit(this: &Arc<Self>) -> Result<Self::Guard, RejectReason> {
        this.try_acquire_owned(this.now())
            .map_err(|_| RejectReason::Overloaded)
    }
}

/// A [`Layer`] that guards a service with a point of the registry: each call enters
/// the point ([`Point::enter`]) and holds its [`Permit`] until the response is ready.
///
/// Clones and the services they make share the point, and with it every limit of its
/// policy.
///
/// # Examples
///
/// ```
/// use resilience_runtime::tower::{GuardError, PointLayer, RejectReason};
/// use resilience_runtime::{registry, Policy, Reason};
/// use tower::{Layer, Service};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// registry().set_policy("docs.tower.layer", Policy::builder().max_concurrency(1).build()?)?;
/// let layer = PointLayer::new("docs.tower.layer")?;
/// let mut a = layer.layer(tower::service_fn(|x: u32| async move { Ok::<_, String>(x * 2) }));
/// let mut b = a.clone();
/// let first = a.call(1); // holds the only slot until it completes
/// let err = futures_executor::block_on(b.call(2)).unwrap_err();
/// assert_eq!(err.rejected().unwrap().reason, RejectReason::Downgraded(Reason::Concurrency));
/// assert_eq!(futures_executor::block_on(first).unwrap(), 2);
/// assert_eq!(futures_executor::block_on(b.call(3)).unwrap(), 6);
/// # Ok(()) }
/// ```
pub struct PointLayer<M = AsError> {
    point: &'static Point,
    retry_after: Option<Duration>,
    mode: PhantomData<fn() -> M>,
}

impl<M> Clone for PointLayer<M> {
    fn clone(&self) -> Self {
        PointLayer {
            point: self.point,
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

impl<M> fmt::Debug for PointLayer<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PointLayer")
            .field("point", &self.point.name())
            .field("retry_after", &self.retry_after)
            .field("mode", &std::any::type_name::<M>())
            .finish()
    }
}

impl PointLayer {
    /// A layer guarding with the point `name` of the global
    /// [`registry`](crate::registry()), created if needed.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] when `name` is not a valid point name.
    pub fn new(name: &str) -> Result<Self, PointNameError> {
        Ok(PointLayer::from_point(crate::registry().point(name)?))
    }

    /// A layer guarding with `point` (of any registry).
    pub fn from_point(point: &'static Point) -> Self {
        PointLayer {
            point,
            retry_after: None,
            mode: PhantomData,
        }
    }
}

impl<M> PointLayer<M> {
    /// The point.
    pub fn point(&self) -> &'static Point {
        self.point
    }

    /// Sets the wait reported with each rejection (HTTP `Retry-After`).
    ///
    /// A rejection for an open breaker ([`Reason::BreakerOpen`]) reports the
    /// breaker's own wait instead whenever it is known, set or not: the time until
    /// the breaker may admit a probe (classic: until its open wait ends; SRE while
    /// dropping: its `force_pass_interval`). This wait is the fallback for a breaker
    /// whose wait is unknown (a classic breaker half-open with every probe slot
    /// taken).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::{Backoff, ClassicConfig};
    /// use resilience_runtime::tower::PointLayer;
    /// use resilience_runtime::{registry, BreakerPolicy};
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{Layer, Service};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = ClassicConfig {
    ///     consecutive_failures: Some(1),
    ///     open_wait: Backoff::fixed(Duration::from_secs(30)),
    ///     ..ClassicConfig::default()
    /// };
    /// registry().set_breaker("docs.tower.retry_after", BreakerPolicy::Classic(config))?;
    /// let layer = PointLayer::new("docs.tower.retry_after")?
    ///     .retry_after(Duration::from_secs(2)) // for the other rejections
    ///     .respond();
    /// let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
    ///     let mut res = http::Response::new(String::new());
    ///     *res.status_mut() = http::StatusCode::BAD_GATEWAY; // a failure
    ///     Ok::<_, Infallible>(res)
    /// }));
    /// let call = |svc: &mut _| futures_executor::block_on(Service::call(svc, http::Request::new(())));
    /// assert_eq!(call(&mut svc)?.status(), 502); // trips the breaker
    /// let res = call(&mut svc)?;
    /// assert_eq!(res.status(), 503);
    /// // The breaker's wait (just under 30 s, rounded up), not the layer's 2 s.
    /// assert_eq!(res.headers()["retry-after"], "30");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// Calls through this layer have a key, taken from each request by `key` (see
    /// [`crate::keys`]; a request for which it gives `None` is a call without key):
    /// the point's `keys` section limits each key on its own.
    ///
    /// ```
    /// use resilience_runtime::keys::KeyPolicy;
    /// use resilience_runtime::tower::PointLayer;
    /// use resilience_runtime::{registry, Policy};
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{Layer, Service};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let keys = KeyPolicy::builder().limit(1, Duration::from_secs(60)).build()?;
    /// registry().set_policy("docs.tower.keyed", Policy::builder().keys(keys).build()?)?;
    /// let tenant = |req: &http::Request<()>| {
    ///     req.headers().get("x-tenant").and_then(|v| v.to_str().ok()).map(str::to_owned)
    /// };
    /// let layer = PointLayer::new("docs.tower.keyed")?.keyed(tenant).respond();
    /// let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("ok")))
    /// }));
    /// let req = |t: &str| http::Request::builder().header("x-tenant", t).body(()).unwrap();
    /// let mut call = |t| futures_executor::block_on(Service::call(&mut svc, req(t)));
    /// assert_eq!(call("a")?.status(), 200);
    /// assert_eq!(call("a")?.status(), 429, "tenant a used its one call a minute");
    /// assert_eq!(call("b")?.status(), 200);
    /// # Ok(()) }
    /// ```
    pub fn keyed<F>(self, key: F) -> KeyedPointLayer<F, M> {
        KeyedPointLayer::new(self.point, self.retry_after, key)
    }

    /// Answers refused HTTP requests with a response instead of an error
    /// ([`AsResponse`]), so the layer fits axum's `Router::layer`/`route_layer`
    /// without an error handler.
    pub fn respond(self) -> PointLayer<AsResponse> {
        PointLayer {
            point: self.point,
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

impl<S, M> Layer<S> for PointLayer<M> {
    type Service = PointService<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        PointService {
            inner,
            point: self.point,
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

/// The service made by a [`PointLayer`].
pub struct PointService<S, M = AsError> {
    inner: S,
    point: &'static Point,
    retry_after: Option<Duration>,
    mode: PhantomData<fn() -> M>,
}

impl<S: Clone, M> Clone for PointService<S, M> {
    fn clone(&self) -> Self {
        PointService {
            inner: self.inner.clone(),
            point: self.point,
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

impl<S: fmt::Debug, M> fmt::Debug for PointService<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PointService")
            .field("inner", &self.inner)
            .field("point", &self.point.name())
            .finish_non_exhaustive()
    }
}

impl<S, Req, M> Service<Req> for PointService<S, M>
where
    S: Service<Req>,
    M: RejectMode<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = ResponseFuture<S::Future, Permit, M>;

    /// Forwards to the inner service; no slot is reserved here (see the
    /// [module docs](self)).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::inner_error)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        // Never waits (a queue or a waiting token bucket refuses at once here).
        match self.point.try_enter() {
            Ok(permit) => ResponseFuture::admitted(self.inner.call(req), permit),
            Err(d) => ResponseFuture::refused(rejection(self.point, d, self.retry_after)),
        }
    }
}

/// The rejection of a call `point` refused, with its wait: an open breaker's own
/// (the time until it may admit a probe) when known, else `retry_after`.
fn rejection(point: &'static Point, d: Downgraded, retry_after: Option<Duration>) -> Rejected {
    let breaker_wait = (d.reason() == Reason::BreakerOpen)
        .then(|| point.breaker_retry_in())
        .flatten();
    Rejected::from_downgraded(d, breaker_wait.or(retry_after))
}

/// A [`Layer`] that guards a service with an adaptive limit ([`Gate`],
/// [`AdaptiveLimiter`], [`GradientLimiter`]), shared by every clone.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::Gate;
/// use resilience_runtime::tower::{AdmissionLayer, RejectReason};
/// use std::sync::Arc;
/// use tower::{Layer, Service};
///
/// let gate = Arc::new(Gate::new(1).unwrap());
/// let layer = AdmissionLayer::new("search", gate.clone());
/// let mut svc = layer.layer(tower::service_fn(|x: u32| async move { Ok::<_, ()>(x) }));
/// let held = svc.call(1);
/// assert_eq!(gate.active(), 1);
/// let err = futures_executor::block_on(svc.clone().call(2)).unwrap_err();
/// assert_eq!(err.rejected().unwrap().reason, RejectReason::CapacityExhausted);
/// drop(held); // a cancelled call releases its slot
/// assert_eq!(gate.active(), 0);
/// ```
pub struct AdmissionLayer<A, M = AsError> {
    name: &'static str,
    admission: Arc<A>,
    retry_after: Option<Duration>,
    mode: PhantomData<fn() -> M>,
}

impl<A, M> Clone for AdmissionLayer<A, M> {
    fn clone(&self) -> Self {
        AdmissionLayer {
            name: self.name,
            admission: Arc::clone(&self.admission),
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

impl<A: fmt::Debug, M> fmt::Debug for AdmissionLayer<A, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionLayer")
            .field("name", &self.name)
            .field("admission", &self.admission)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl<A: Admission> AdmissionLayer<A> {
    /// A layer guarding with `admission`; `name` identifies it in [`Rejected`].
    pub fn new(name: &'static str, admission: Arc<A>) -> Self {
        AdmissionLayer {
            name,
            admission,
            retry_after: None,
            mode: PhantomData,
        }
    }
}

impl<A, M> AdmissionLayer<A, M> {
    /// The shared limit.
    pub fn admission(&self) -> &Arc<A> {
        &self.admission
    }

    /// Sets the wait reported with each rejection (HTTP `Retry-After`).
    #[must_use]
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// Answers refused HTTP requests with a response instead of an error
    /// ([`AsResponse`]).
    pub fn respond(self) -> AdmissionLayer<A, AsResponse> {
        AdmissionLayer {
            name: self.name,
            admission: self.admission,
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

impl<S, A, M> Layer<S> for AdmissionLayer<A, M> {
    type Service = AdmissionService<S, A, M>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmissionService {
            inner,
            name: self.name,
            admission: Arc::clone(&self.admission),
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

/// The service made by an [`AdmissionLayer`].
pub struct AdmissionService<S, A, M = AsError> {
    inner: S,
    name: &'static str,
    admission: Arc<A>,
    retry_after: Option<Duration>,
    mode: PhantomData<fn() -> M>,
}

impl<S: Clone, A, M> Clone for AdmissionService<S, A, M> {
    fn clone(&self) -> Self {
        AdmissionService {
            inner: self.inner.clone(),
            name: self.name,
            admission: Arc::clone(&self.admission),
            retry_after: self.retry_after,
            mode: PhantomData,
        }
    }
}

impl<S: fmt::Debug, A: fmt::Debug, M> fmt::Debug for AdmissionService<S, A, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionService")
            .field("inner", &self.inner)
            .field("name", &self.name)
            .field("admission", &self.admission)
            .finish_non_exhaustive()
    }
}

impl<S, A, Req, M> Service<Req> for AdmissionService<S, A, M>
where
    S: Service<Req>,
    A: Admission,
    M: RejectMode<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = ResponseFuture<S::Future, A::Guard, M>;

    /// Forwards to the inner service; no slot is reserved here (see the
    /// [module docs](self)).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::inner_error)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match A::admit(&self.admission) {
            Ok(guard) => ResponseFuture::admitted(self.inner.call(req), guard),
            Err(reason) => ResponseFuture::refused(Rejected {
                point: self.name,
                reason,
                retry_after: self.retry_after,
            }),
        }
    }
}

pin_project! {
    /// The response future of a guarded service: the inner future with the call's
    /// guard, or a refusal ready at once.
    pub struct ResponseFuture<F, G, M> {
        #[pin]
        inner: Option<F>,
        guard: Option<G>,
        refused: Option<Rejected>,
        mode: PhantomData<fn() -> M>,
    }
}

impl<F, G, M> ResponseFuture<F, G, M> {
    fn admitted(inner: F, guard: G) -> Self {
        ResponseFuture {
            inner: Some(inner),
            guard: Some(guard),
            refused: None,
            mode: PhantomData,
        }
    }

    fn refused(rejected: Rejected) -> Self {
        ResponseFuture {
            inner: None,
            guard: None,
            refused: Some(rejected),
            mode: PhantomData,
        }
    }
}

impl<F, G, M> fmt::Debug for ResponseFuture<F, G, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("admitted", &self.guard.is_some())
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

/// Reports a panic of the inner future to the guard while the panic unwinds through
/// `poll` (an executor may drop the future later, outside the unwinding).
struct OnUnwind<'a, G: CallGuard>(&'a mut Option<G>);

impl<G: CallGuard> Drop for OnUnwind<'_, G> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(guard) = self.0.take() {
                guard.panicked();
            }
        }
    }
}

impl<F, G, M, Res, E> Future for ResponseFuture<F, G, M>
where
    F: Future<Output = Result<Res, E>>,
    G: CallGuard,
    M: RejectMode<Res, E>,
{
    type Output = Result<Res, M::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(rejected) = this.refused.take() {
            return Poll::Ready(M::rejected(rejected));
        }
        let inner = this
            .inner
            .as_pin_mut()
            .expect("ResponseFuture polled after completion");
        let on_unwind = OnUnwind(this.guard);
        let result = ready!(inner.poll(cx));
        if let Some(guard) = on_unwind.0.take() {
            guard.finish(M::is_failure(&result));
        }
        Poll::Ready(result.map_err(M::inner_error))
    }
}
