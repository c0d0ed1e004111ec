//! [`PointLayer`]: a service guarded by a point of the registry.

use super::future::PointFuture;
use super::keyed::KeyedPointLayer;
use super::respond::{AsError, AsResponse, RefusalMode};
use crate::{Point, PointNameError};
use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// A [`Layer`] that guards a service with a point of the registry: each call enters
/// the point as an async `#[downgrade]` call does ([`Point::enter_async`]), under every
/// rule of its policy, and holds its [`Permit`](crate::Permit) until the response is
/// ready.
///
/// Clones and the services they make share the point, and with it every limit of its
/// policy. A call that must wait (the queue, a token wait) waits in the response
/// future ([`PointFuture`](super::PointFuture)) and calls the inner service once
/// admitted; the policy's `call_timeout` cuts the inner future; `poll_ready` takes
/// nothing of the point (see the [module docs](super#readiness)). The inner service
/// must be `Clone`: a call that waits takes the one made ready into its future.
///
/// # Examples
///
/// ```
/// use resilience_runtime::tower::{GuardError, PointLayer};
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
/// assert_eq!(err.refused().unwrap().reason, Reason::Concurrency);
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

    /// Sets the wait reported with each refusal (HTTP `Retry-After`).
    ///
    /// A refusal for an open breaker ([`Reason::BreakerOpen`](crate::Reason::BreakerOpen)) reports the
    /// breaker's own wait instead whenever it is known, set or not: the time until
    /// the breaker may admit a probe (classic: until its open wait ends; SRE while
    /// dropping: its `force_pass_interval`). This wait is the fallback for a breaker
    /// whose wait is unknown (a classic breaker half-open with every probe slot
    /// taken).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::ClassicConfig;
    /// use resilience_runtime::retry::Backoff;
    /// use resilience_runtime::tower::PointLayer;
    /// use resilience_runtime::{registry, BreakerPolicy};
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::{Layer, Service};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = ClassicConfig::builder()
    ///     .consecutive_failures(1)
    ///     .open_wait(Backoff::fixed(Duration::from_secs(30)))
    ///     .build()?;
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

#[cfg(feature = "tonic")]
impl<M> PointLayer<M> {
    /// Answers refused gRPC calls with their status (feature `tonic`,
    /// [`AsStatus`](super::AsStatus)): `RESOURCE_EXHAUSTED` for limits, `UNAVAILABLE`
    /// for an open breaker, `DEADLINE_EXCEEDED` for a call cut at its `call_timeout`,
    /// with `grpc-retry-pushback-ms` when the wait is known. For tonic's
    /// `Server::builder().layer(..)`, or around a client's `Channel`.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::tower::PointLayer;
    /// use resilience_runtime::{registry, Policy};
    /// use std::convert::Infallible;
    /// use tower::{Layer, Service};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// registry().set_policy("docs.tower.grpc", Policy::builder().max_visits(0).build()?)?;
    /// let mut svc = PointLayer::new("docs.tower.grpc")?.grpc().layer(tower::service_fn(
    ///     |_req: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) },
    /// ));
    /// let res = futures_executor::block_on(svc.call(http::Request::new(())))?;
    /// let status = tonic::Status::from_header_map(res.headers()).unwrap();
    /// assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    /// # Ok(()) }
    /// ```
    pub fn grpc(self) -> PointLayer<super::AsStatus> {
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
    S: Service<Req> + Clone,
    M: RefusalMode<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = PointFuture<S, Req, M>;

    /// Forwards to the inner service; nothing of the point is taken here, so a
    /// service made ready and dropped without a call holds nothing (see the
    /// [module docs](super#readiness)).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::inner_error)
    }

    /// Enters the point: an admitted call calls the inner service at once; a call
    /// that must wait (queue, token wait) waits in the returned future and calls the
    /// inner service once admitted; a refused call is answered by the future.
    fn call(&mut self, req: Req) -> Self::Future {
        PointFuture::start(
            self.point,
            self.retry_after,
            None,
            &mut self.inner,
            S::clone,
            req,
        )
    }
}
