//! The response futures of the guarded services: [`PointFuture`] (a point's call:
//! admission, deadline, outcome) and [`ResponseFuture`] (the inner future with the
//! call's [`Finish`], ended by the outcome, a panic or a drop).

use super::error::{refusal, Refused};
use super::respond::RefusalMode;
use crate::adaptive::{Gate, GatePermit, LatencyLimiter, LatencyPermit};
use crate::keys::KeyArg;
use crate::point::admit::permit::Outcome;
use crate::point::admit::queue::{Admission, WaitFuture};
use crate::sync::Arc;
use crate::{Downgraded, Permit, Point, Reason};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tower::Service;

/// The guard of one admitted call, held by the response future until the call ends.
pub trait Finish: Send + 'static {
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

impl Finish for Permit<'static> {
    fn finish(self, failed: bool) {
        Permit::finish(self, failed);
    }

    fn panicked(self) {
        Permit::panicked(self);
    }
}

impl Finish for GatePermit<Arc<Gate>> {
    fn finish(self, _failed: bool) {
        // The gate only times the call; dropping releases the slot.
    }
}

impl<T: LatencyLimiter + Send + Sync + 'static> Finish for LatencyPermit<Arc<T>> {
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
        refused: Option<Refused>,
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

    pub(super) fn refused(rejected: Refused) -> Self {
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
struct OnUnwind<'a, G: Finish>(&'a mut Option<G>);

impl<G: Finish> Drop for OnUnwind<'_, G> {
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
    G: Finish,
    M: RefusalMode<Res, E>,
{
    type Output = Result<Res, M::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(rejected) = this.refused.take() {
            return Poll::Ready(M::refused(rejected));
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

/// A call waiting for admission, with what it needs to start once admitted: the
/// inner service (made ready by `poll_ready`) and the request.
struct Waiting<S, Req> {
    wait: WaitFuture<'static, 'static>,
    service: S,
    request: Req,
}

/// Where a [`PointFuture`] is. The stage owns nothing (dropping it is free): what a
/// waiting call carries (its service and request) and a deadline's timer are boxed
/// in fields of their own, so that only a call that waits or runs under a
/// `call_timeout` pays for them.
#[derive(Clone, Copy)]
enum Stage {
    /// Waiting for its token or in the queue (`PointFuture::waiting`).
    Waiting,
    /// Admitted and running, without a deadline.
    Running,
    /// Admitted and running, with a deadline (in nanoseconds) not yet armed.
    Timed(u64),
    /// Admitted and running until the deadline (`PointFuture::deadline`).
    Deadline,
    /// Refused for this reason: the answer at the first poll (with
    /// `PointFuture::retry_after`, set to the refusal's own).
    Refused(Reason),
    /// Answered (or cut).
    Done,
}

impl Stage {
    /// The stage of a call admitted on `point`.
    #[inline]
    fn running(point: &Point) -> Self {
        match point.call_timeout_ns() {
            0 => Stage::Running,
            ns => Stage::Timed(ns),
        }
    }

    fn is_running(&self) -> bool {
        matches!(self, Stage::Running | Stage::Timed(_) | Stage::Deadline)
    }
}

pin_project! {
    /// The response future of a [`PointService`](super::PointService) (and of a keyed
    /// one): a call waiting for admission (the policy's queue or token wait), running
    /// under the policy's `call_timeout`, or refused.
    ///
    /// Dropping it gives back whatever the call holds: a waiting call leaves the
    /// queue (never having begun), a running one releases its slot and counts as
    /// cancelled.
    pub struct PointFuture<S, Req, M>
    where
        S: Service<Req>,
    {
        #[pin]
        inner: Option<S::Future>,
        // The call's permit while it runs (none for a call on a point without policy
        // or breaker, whose end is counted without one).
        permit: Option<Permit<'static>>,
        stage: Stage,
        // What a waiting call carries (with `Stage::Waiting`).
        waiting: Option<Box<Waiting<S, Req>>>,
        // The timer of a call under a deadline (with `Stage::Deadline`).
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        point: &'static Point,
        // The layer's `Retry-After`; with `Stage::Refused`, the refusal's own.
        retry_after: Option<Duration>,
        mode: PhantomData<fn() -> M>,
    }

    impl<S, Req, M> PinnedDrop for PointFuture<S, Req, M>
    where
        S: Service<Req>,
    {
        #[inline]
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.stage.is_running() {
                // The inner future first (its own drops run before the slot is
                // released), then the call counts as cancelled.
                let mut inner = this.inner;
                inner.set(None);
                Permit::end_in(this.point, this.permit, Outcome::Cancelled);
            }
        }
    }
}

impl<S: Service<Req>, Req, M> PointFuture<S, Req, M> {
    /// Enters `point` for a call (with `key`, if any) as an async `#[downgrade]` call
    /// does, without blocking, and returns its future: `service` (made ready) is
    /// called at once if the call is admitted; if it must wait, the wait is detached
    /// from this stack frame into the future, which takes the ready `service` with it
    /// and leaves `clone(service)` in its place for the next `poll_ready`.
    #[inline]
    pub(super) fn start(
        point: &'static Point,
        mut retry_after: Option<Duration>,
        key: Option<KeyArg<'_>>,
        service: &mut S,
        clone: impl FnOnce(&S) -> S,
        request: Req,
    ) -> Self {
        let mut permit = None;
        let mut waiting = None;
        let (inner, stage) = match point.enter_async_keyed_in(&mut permit, None, key) {
            Admission::Ready(Ok(())) => (Some(service.call(request)), Stage::running(point)),
            Admission::Ready(Err(d)) => {
                let stage;
                (stage, retry_after) = refused_stage(point, d, retry_after);
                (None, stage)
            }
            Admission::Wait(wait) => {
                // The service made ready goes with the call; a clone takes its place
                // (tower's advice for a service called from its future).
                let fresh = clone(service);
                let service = std::mem::replace(service, fresh);
                waiting = Some(Box::new(Waiting {
                    wait: wait.detach(),
                    service,
                    request,
                }));
                (None, Stage::Waiting)
            }
        };
        PointFuture {
            inner,
            permit,
            stage,
            waiting,
            deadline: None,
            point,
            retry_after,
            mode: PhantomData,
        }
    }
}

impl<S: Service<Req>, Req, M> fmt::Debug for PointFuture<S, Req, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let refused = match self.stage {
            Stage::Refused(reason) => Some(refused(self.point, reason, self.retry_after)),
            _ => None,
        };
        f.debug_struct("PointFuture")
            .field("point", &self.point.name())
            .field("waiting", &matches!(self.stage, Stage::Waiting))
            .field("running", &self.stage.is_running())
            .field("refused", &refused)
            .finish_non_exhaustive()
    }
}

/// The stage of a call on `point` refused as `d` says, with the refusal's
/// `Retry-After`: an open breaker's wait when it knows one, else the layer's
/// `retry_after`.
#[inline]
fn refused_stage(
    point: &'static Point,
    d: Downgraded,
    retry_after: Option<Duration>,
) -> (Stage, Option<Duration>) {
    let refused = refusal(point, d, retry_after);
    (Stage::Refused(refused.reason), refused.retry_after)
}

/// The answer of a call on `point` refused for `reason`.
fn refused(point: &Point, reason: Reason, retry_after: Option<Duration>) -> Refused {
    Refused {
        point: point.name(),
        reason,
        retry_after,
    }
}

/// The timer of a call's deadline, `ns` from now.
fn deadline_in(ns: u64) -> Pin<Box<tokio::time::Sleep>> {
    Box::pin(tokio::time::sleep(Duration::from_nanos(ns)))
}

/// Records a panic of the inner future on the call while the panic unwinds through
/// `poll` (as [`OnUnwind`] does for the other guards).
struct CallOnUnwind<'a> {
    point: &'static Point,
    permit: &'a mut Option<Permit<'static>>,
    stage: &'a mut Stage,
}

impl Drop for CallOnUnwind<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if std::thread::panicking() && self.stage.is_running() {
            *self.stage = Stage::Done;
            Permit::end_in(self.point, self.permit, Outcome::Exception);
        }
    }
}

impl<S, Req, M> PointFuture<S, Req, M>
where
    S: Service<Req>,
    M: RefusalMode<S::Response, S::Error>,
{
    /// A poll of a call that is not simply running: a wait to go on with, a deadline
    /// to arm, a refusal to answer. `None` when the call now runs (its inner future is
    /// polled next).
    #[cold]
    #[inline(never)]
    fn advance(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Result<S::Response, M::Error>>> {
        let mut this = self.project();
        let point = *this.point;
        match *this.stage {
            Stage::Running | Stage::Deadline => {}
            Stage::Timed(ns) => {
                *this.deadline = Some(deadline_in(ns));
                *this.stage = Stage::Deadline;
            }
            Stage::Waiting => {
                let Some(waiting) = this.waiting.as_mut() else {
                    unreachable!("a waiting call carries its wait");
                };
                match Pin::new(&mut waiting.wait).poll(cx) {
                    Poll::Pending => return Some(Poll::Pending),
                    Poll::Ready(Err(d)) => {
                        *this.waiting = None;
                        (*this.stage, *this.retry_after) =
                            refused_stage(point, d, *this.retry_after);
                    }
                    Poll::Ready(Ok(())) => {
                        let Some(waiting) = this.waiting.take() else {
                            unreachable!("matched above");
                        };
                        let Waiting {
                            mut wait,
                            mut service,
                            request,
                        } = *waiting;
                        *this.permit = wait.take_permit();
                        this.inner.set(Some(service.call(request)));
                        *this.stage = match Stage::running(point) {
                            Stage::Timed(ns) => {
                                *this.deadline = Some(deadline_in(ns));
                                Stage::Deadline
                            }
                            running => running,
                        };
                    }
                }
            }
            Stage::Refused(_) | Stage::Done => {}
        }
        if let Stage::Refused(reason) = *this.stage {
            *this.stage = Stage::Done;
            // For a `RetryLayer` above: a refused attempt is not retried.
            crate::__private::mark_downgraded();
            return Some(Poll::Ready(M::refused(refused(
                point,
                reason,
                *this.retry_after,
            ))));
        }
        None
    }
}

impl<S, Req, M> Future for PointFuture<S, Req, M>
where
    S: Service<Req>,
    M: RefusalMode<S::Response, S::Error>,
{
    type Output = Result<S::Response, M::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A running call (the common case) goes straight to its inner future; the
        // other stages are out of line, so that this path stays small.
        if !matches!(self.stage, Stage::Running) {
            if let Some(answer) = self.as_mut().advance(cx) {
                return answer;
            }
        }
        let mut this = self.project();
        let point = *this.point;
        let inner = this
            .inner
            .as_mut()
            .as_pin_mut()
            .expect("PointFuture polled after completion");
        let on_unwind = CallOnUnwind {
            point,
            permit: this.permit,
            stage: this.stage,
        };
        if let Poll::Ready(result) = inner.poll(cx) {
            let outcome = if M::is_failure(&result) {
                Outcome::Exception
            } else {
                Outcome::Ok
            };
            *on_unwind.stage = Stage::Done;
            Permit::end_in(point, on_unwind.permit, outcome);
            // Not panicking: its drop would do nothing.
            std::mem::forget(on_unwind);
            this.inner.set(None);
            if this.deadline.is_some() {
                *this.deadline = None;
            }
            return Poll::Ready(result.map_err(M::inner_error));
        }
        // Not panicking: its drop would do nothing.
        std::mem::forget(on_unwind);
        let cut = match this.deadline {
            Some(deadline) => deadline.as_mut().poll(cx).is_ready(),
            None => false,
        };
        if !cut {
            return Poll::Pending;
        }
        // As `__private::run_with_deadline`: the inner future is dropped first (its own
        // drops run before the slot is released), then the call is a timeout and a
        // failure for the breaker, never a refusal.
        this.inner.set(None);
        *this.stage = Stage::Done;
        *this.deadline = None;
        Permit::end_in(point, this.permit, Outcome::TimedOut);
        crate::__private::mark_downgraded();
        Poll::Ready(M::refused(refused(
            point,
            Reason::Deadline,
            *this.retry_after,
        )))
    }
}
