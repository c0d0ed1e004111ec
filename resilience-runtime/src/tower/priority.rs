//! [`PriorityLayer`]: the priority of each request from a header (or a request
//! extension), for the points and breakers below it (see [`crate::priority`]).

use crate::priority::{self, Priority};
use http::header::HeaderName;
use std::fmt;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// A [`Layer`] that gives each HTTP request a [`Priority`] for everything below it:
/// the request extension `Priority` if one is set (by an earlier layer that
/// authenticates the caller, say), else the value of a header (`critical`,
/// `default`, `sheddable`, any case), else a default. The inner service's `call`
/// runs at that priority, and so does every poll of its future (see
/// [`priority::scope`]), so a [`PointLayer`](super::PointLayer) below it, and the
/// `#[downgrade]` functions the handler calls, see it.
///
/// Put it outside (before) the point layers:
/// `ServiceBuilder::new().layer(PriorityLayer::header("x-priority")).layer(point_layer)`.
///
/// # Examples
///
/// ```
/// use resilience_runtime::priority::{self, Priority};
/// use resilience_runtime::tower::PriorityLayer;
/// use tower::{Layer, Service};
///
/// let layer = PriorityLayer::header("x-priority");
/// let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
///     Ok::<_, ()>(priority::current())
/// }));
/// let req = http::Request::builder().header("x-priority", "critical").body(()).unwrap();
/// assert_eq!(futures_executor::block_on(svc.call(req)), Ok(Priority::Critical));
/// let plain = http::Request::new(());
/// assert_eq!(futures_executor::block_on(svc.call(plain)), Ok(Priority::Default));
/// // An extension set by an earlier layer wins over the header.
/// let mut req = http::Request::builder().header("x-priority", "critical").body(()).unwrap();
/// req.extensions_mut().insert(Priority::Sheddable);
/// assert_eq!(futures_executor::block_on(svc.call(req)), Ok(Priority::Sheddable));
/// ```
#[derive(Clone)]
pub struct PriorityLayer {
    header: Option<HeaderName>,
    default: Priority,
}

impl fmt::Debug for PriorityLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriorityLayer")
            .field("header", &self.header)
            .field("default", &self.default)
            .finish()
    }
}

impl PriorityLayer {
    /// Reads the priority from the header `name` (and the request extension).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name (a programming error, like
    /// `HeaderName::from_static`).
    pub fn header(name: &'static str) -> PriorityLayer {
        PriorityLayer {
            header: Some(HeaderName::from_static(name)),
            default: Priority::Default,
        }
    }

    /// Reads the priority from the request extension only.
    pub fn extension() -> PriorityLayer {
        PriorityLayer {
            header: None,
            default: Priority::Default,
        }
    }

    /// The priority of a request that says none (or an unknown one); `Default` unless
    /// set.
    #[must_use]
    pub fn or(mut self, default: Priority) -> PriorityLayer {
        self.default = default;
        self
    }

    fn of<B>(&self, req: &http::Request<B>) -> Priority {
        if let Some(p) = req.extensions().get::<Priority>() {
            return *p;
        }
        self.header
            .as_ref()
            .and_then(|h| req.headers().get(h))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.default)
    }
}

impl<S> Layer<S> for PriorityLayer {
    type Service = PriorityService<S>;

    fn layer(&self, inner: S) -> PriorityService<S> {
        PriorityService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by a [`PriorityLayer`].
#[derive(Clone, Debug)]
pub struct PriorityService<S> {
    inner: S,
    layer: PriorityLayer,
}

impl<S, B> Service<http::Request<B>> for PriorityService<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = priority::Scoped<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let p = self.layer.of(&req);
        let future = priority::with(p, || self.inner.call(req));
        priority::scope(p, future)
    }
}
