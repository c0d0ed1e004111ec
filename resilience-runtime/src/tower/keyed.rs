//! [`PointLayer::keyed`](super::PointLayer::keyed): a point layer whose calls have a
//! key taken from each request (a tenant header, a user id), limited per key by the
//! point's `keys` section (see [`crate::keys`]).

use super::future::PointFuture;
use super::{AsError, AsResponse, RefusalMode};
use crate::keys::{HotKey, KeyArg};
use crate::Point;
use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// A [`PointLayer`](super::PointLayer) whose calls have a key: made by
/// [`PointLayer::keyed`](super::PointLayer::keyed).
pub struct KeyedPointLayer<F, M = AsError> {
    point: &'static Point,
    retry_after: Option<Duration>,
    key: F,
    mode: PhantomData<fn() -> M>,
}

impl<F, M> KeyedPointLayer<F, M> {
    pub(super) fn new(point: &'static Point, retry_after: Option<Duration>, key: F) -> Self {
        KeyedPointLayer {
            point,
            retry_after,
            key,
            mode: PhantomData,
        }
    }

    /// The point.
    pub fn point(&self) -> &'static Point {
        self.point
    }

    /// Answers refused HTTP requests with a response instead of an error (see
    /// [`PointLayer::respond`](super::PointLayer::respond)).
    pub fn respond(self) -> KeyedPointLayer<F, AsResponse> {
        KeyedPointLayer::new(self.point, self.retry_after, self.key)
    }
}

#[cfg(feature = "tonic")]
impl<F, M> KeyedPointLayer<F, M> {
    /// Answers refused gRPC calls with their status (see
    /// [`PointLayer::grpc`](super::PointLayer::grpc)).
    pub fn grpc(self) -> KeyedPointLayer<F, super::AsStatus> {
        KeyedPointLayer::new(self.point, self.retry_after, self.key)
    }
}

impl<F: Clone, M> Clone for KeyedPointLayer<F, M> {
    fn clone(&self) -> Self {
        KeyedPointLayer::new(self.point, self.retry_after, self.key.clone())
    }
}

impl<F, M> fmt::Debug for KeyedPointLayer<F, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPointLayer")
            .field("point", &self.point.name())
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl<S, F: Clone, M> Layer<S> for KeyedPointLayer<F, M> {
    type Service = KeyedPointService<S, F, M>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedPointService {
            inner,
            point: self.point,
            retry_after: self.retry_after,
            key: self.key.clone(),
            mode: PhantomData,
        }
    }
}

/// The service made by a [`KeyedPointLayer`].
pub struct KeyedPointService<S, F, M = AsError> {
    inner: S,
    point: &'static Point,
    retry_after: Option<Duration>,
    key: F,
    mode: PhantomData<fn() -> M>,
}

impl<S: Clone, F: Clone, M> Clone for KeyedPointService<S, F, M> {
    fn clone(&self) -> Self {
        KeyedPointService {
            inner: self.inner.clone(),
            point: self.point,
            retry_after: self.retry_after,
            key: self.key.clone(),
            mode: PhantomData,
        }
    }
}

impl<S: fmt::Debug, F, M> fmt::Debug for KeyedPointService<S, F, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPointService")
            .field("inner", &self.inner)
            .field("point", &self.point.name())
            .finish_non_exhaustive()
    }
}

impl<S, F, K, Req, M> Service<Req> for KeyedPointService<S, F, M>
where
    S: Service<Req> + Clone,
    F: Fn(&Req) -> Option<K>,
    K: HotKey,
    M: RefusalMode<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = PointFuture<S, Req, M>;

    /// Forwards to the inner service (see [`PointService`](super::PointService)).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::inner_error)
    }

    /// As [`PointService`](super::PointService)'s, with the request's key: a call
    /// whose key has its next call due within the `keys` section's `max_wait` waits
    /// for it in the returned future.
    fn call(&mut self, req: Req) -> Self::Future {
        match (self.key)(&req) {
            Some(key) => PointFuture::start(
                self.point,
                self.retry_after,
                Some(KeyArg::new(&&key)),
                &mut self.inner,
                S::clone,
                req,
            ),
            None => PointFuture::start(
                self.point,
                self.retry_after,
                None,
                &mut self.inner,
                S::clone,
                req,
            ),
        }
    }
}
