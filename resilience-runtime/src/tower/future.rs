//! The response future of every guarded service: the inner future with the call's
//! [`CallGuard`], ended by the outcome, a panic or a drop.

use super::error::Rejected;
use super::respond::RejectMode;
use crate::adaptive::{Gate, GatePermit, LatencyLimiter, LatencyPermit};
use crate::sync::Arc;
use crate::Permit;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

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

impl CallGuard for Permit<'static> {
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
    pub(super) fn admitted(inner: F, guard: G) -> Self {
        ResponseFuture {
            inner: Some(inner),
            guard: Some(guard),
            refused: None,
            mode: PhantomData,
        }
    }

    pub(super) fn refused(rejected: Rejected) -> Self {
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
