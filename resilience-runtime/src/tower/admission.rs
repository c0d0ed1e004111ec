//! [`AdmissionLayer`]: a service guarded by an adaptive limit, and the [`Admission`]
//! trait of the limits it takes.

use super::error::Refused;
use super::future::{Finish, ResponseFuture};
use super::respond::{AsError, AsResponse, RefusalMode};
use crate::adaptive::{AdaptiveLimiter, Gate, GatePermit, GradientLimiter, LatencyPermit};
use crate::sync::Arc;
use crate::Reason;
use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// A limit an [`AdmissionLayer`] can guard a service with: [`Gate`],
/// [`AdaptiveLimiter`] and [`GradientLimiter`].
pub trait Admission: Send + Sync + 'static {
    /// The guard of an admitted call.
    type Guard: Finish;

    /// Admits a call now, or says why not.
    fn admit(this: &Arc<Self>) -> Result<Self::Guard, Reason>;
}

impl Admission for Gate {
    type Guard = GatePermit<Arc<Gate>>;

    fn admit(this: &Arc<Self>) -> Result<Self::Guard, Reason> {
        this.try_acquire_owned().map_err(|_| Reason::Concurrency)
    }
}

impl Admission for AdaptiveLimiter {
    type Guard = LatencyPermit<Arc<AdaptiveLimiter>>;

    fn admit(this: &Arc<Self>) -> Result<Self::Guard, Reason> {
        this.try_acquire_owned(this.now())
            .map_err(|_| Reason::Overloaded)
    }
}

impl Admission for GradientLimiter {
    type Guard = LatencyPermit<Arc<GradientLimiter>>;

    fn admit(this: &Arc<Self>) -> Result<Self::Guard, Reason> {
        this.try_acquire_owned(this.now())
            .map_err(|_| Reason::Overloaded)
    }
}

/// A [`Layer`] that guards a service with an adaptive limit ([`Gate`],
/// [`AdaptiveLimiter`], [`GradientLimiter`]), shared by every clone.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::Gate;
/// use resilience_runtime::tower::AdmissionLayer;
/// use resilience_runtime::Reason;
/// use std::sync::Arc;
/// use tower::{Layer, Service};
///
/// let gate = Arc::new(Gate::new(1).unwrap());
/// let layer = AdmissionLayer::new("search", gate.clone());
/// let mut svc = layer.layer(tower::service_fn(|x: u32| async move { Ok::<_, ()>(x) }));
/// let held = svc.call(1);
/// assert_eq!(gate.active(), 1);
/// let err = futures_executor::block_on(svc.clone().call(2)).unwrap_err();
/// assert_eq!(err.refused().unwrap().reason, Reason::Concurrency);
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
    /// A layer guarding with `admission`; `name` identifies it in [`Refused`].
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

#[cfg(feature = "tonic")]
impl<A, M> AdmissionLayer<A, M> {
    /// Answers refused gRPC calls with their status (see
    /// [`PointLayer::grpc`](super::PointLayer::grpc)).
    pub fn grpc(self) -> AdmissionLayer<A, super::AsStatus> {
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
    M: RefusalMode<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = ResponseFuture<S::Future, A::Guard, M>;

    /// Forwards to the inner service; no slot is reserved here (see the
    /// [module docs](super)).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::inner_error)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match A::admit(&self.admission) {
            Ok(guard) => ResponseFuture::admitted(self.inner.call(req), guard),
            Err(reason) => ResponseFuture::refused(Refused {
                point: self.name,
                reason,
                retry_after: self.retry_after,
            }),
        }
    }
}
