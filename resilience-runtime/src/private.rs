//! The only doorway generated code uses into the runtime. Not a public API: no
//! stability promise, no docs promised.

pub use crate::error::Downgraded;
use crate::sync::atomic::{AtomicPtr, Ordering};

pub use crate::point::admit::permit::Permit;
pub use crate::point::Point;

/// A point handle cached in a function-local `static` at each call site.
#[derive(Debug)]
pub struct StaticPoint {
    name: &'static str,
    /// The point once looked up (null before): one load on every call.
    cell: AtomicPtr<Point>,
}

impl StaticPoint {
    /// A handle for `name`, resolved on first use. Evaluated at compile time (the
    /// handle is a `static`), so a name past the point-name limit (a default name, a
    /// module path, that the macro could not measure) is a compile error, not a panic
    /// at the first call.
    pub const fn new(name: &'static str) -> StaticPoint {
        assert!(
            name.len() <= crate::MAX_POINT_NAME_LEN,
            "a point name must be at most 256 bytes long: name the point with `point = \"...\"`"
        );
        StaticPoint {
            name,
            cell: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The point, looked up in the global registry on the first call only (with the
    /// `testing` feature, in the test registry in scope, if any, at every call).
    #[inline]
    pub fn get(&'static self) -> &'static Point {
        #[cfg(feature = "testing")]
        if let Some(registry) = crate::registry::scoped::scoped() {
            return self.scoped(registry);
        }
        let point = self.cell.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `init` from a `&'static Point`.
        match unsafe { point.cast_const().as_ref() } {
            Some(p) => p,
            None => self.init(),
        }
    }

    /// The point in a test's registry (feature `testing`): looked up at each call,
    /// never cached, so that the next test's registry gets its own.
    #[cfg(feature = "testing")]
    #[cold]
    fn scoped(&'static self, registry: &'static crate::Registry) -> &'static Point {
        match registry.point(self.name) {
            Ok(p) => p,
            // As in `init`: unreachable from generated code.
            Err(e) => panic!("{e}"),
        }
    }

    #[cold]
    fn init(&'static self) -> &'static Point {
        // The global registry's, whatever is in scope: the cache outlives scopes.
        let point = match crate::registry::global().point(self.name) {
            Ok(p) => p,
            // The macro rejects empty names and default names are module paths, so
            // this is unreachable from generated code.
            Err(e) => panic!("{e}"),
        };
        // Threads racing here store the same point: the registry has one per name.
        self.cell
            .store(std::ptr::from_ref(point).cast_mut(), Ordering::Release);
        point
    }
}

/// Wrapper for autoref-specialised classification of a call's output.
#[derive(Debug)]
pub struct Classify<'a, T>(pub &'a T);

/// Chosen for `Result` outputs: an `Err` is an exception.
pub trait ClassifyResult {
    /// Whether the output is an exception.
    fn __resilience_is_err(&self) -> bool;
}

impl<T, E> ClassifyResult for Classify<'_, Result<T, E>> {
    #[inline]
    fn __resilience_is_err(&self) -> bool {
        self.0.is_err()
    }
}

/// Chosen for every other output: only panics are exceptions.
pub trait ClassifyOther {
    /// Whether the output is an exception.
    fn __resilience_is_err(&self) -> bool;
}

impl<T> ClassifyOther for &Classify<'_, T> {
    #[inline]
    fn __resilience_is_err(&self) -> bool {
        false
    }
}

/// What a `#[downgrade]` / `#[breaker]` fn without fallback returns when refused; a
/// public trait, so that the error about a return type that cannot carry a refusal
/// names it at its public path.
pub use crate::error::FromDowngraded;

pub use crate::declared::{DeclaredPoint, DECLARED_POINTS};
pub use crate::unwind::CatchUnwind;
pub use linkme;

/// The entry of `#[downgrade]`: [`Point::enter`], writing an admitted call's permit
/// into `slot` (the generated code's own variable), where it stays until [`finish`]
/// or [`panicked`]; a permit never moved is never copied through the stack. A call with
/// nothing to complete but an exception (no policy, no breaker) leaves `slot` empty.
#[inline(always)]
pub fn enter(point: &'static Point, slot: &mut Option<Permit<'static>>) -> Result<(), Downgraded> {
    point.enter_in(slot)
}

/// The entry of `#[breaker]`: like [`enter`], but installs the default SRE breaker on
/// the point unless a breaker setting exists.
#[inline(always)]
pub fn enter_breaker(
    point: &'static Point,
    slot: &mut Option<Permit<'static>>,
) -> Result<(), Downgraded> {
    point.enter_breaker_in(slot)
}

/// Records that the call [`enter`] admitted on `point` (its permit, if any, in `slot`)
/// finished; `exception` says whether it failed.
#[inline(always)]
pub fn finish(point: &'static Point, slot: &mut Option<Permit<'static>>, exception: bool) {
    trace_outcome(if exception { "exception" } else { "ok" }, None);
    Permit::finish_in(point, slot, exception);
}

/// Records that the call [`enter`] admitted on `point` (its permit, if any, in `slot`)
/// panicked.
#[inline]
pub fn panicked(point: &'static Point, slot: &mut Option<Permit<'static>>) {
    trace_outcome("panic", None);
    Permit::finish_in(point, slot, true);
}

/// Records that the call [`enter`] admitted on `point` (its permit, if any, in `slot`)
/// was cut at its deadline: a timeout, and a failure for the point's breaker.
#[inline]
pub fn timed_out(point: &'static Point, slot: &mut Option<Permit<'static>>) {
    trace_outcome("timeout", Some(crate::error::Reason::Deadline));
    Permit::end_in(point, slot, crate::point::admit::permit::Outcome::TimedOut);
}

/// Records that the call was refused (or, on its way in, cut): `downgraded`.
#[inline(always)]
pub fn refused(downgraded: &Downgraded) {
    trace_outcome("downgraded", Some(downgraded.reason));
}

/// The span of a call of `point` (see [`crate::call_span`]).
#[cfg(feature = "tracing")]
#[inline]
pub fn call_span(point: &'static Point) -> tracing::Span {
    crate::call_span::call_span(point.name())
}

#[cfg(feature = "tracing")]
pub use tracing::Instrument;

/// `traced! { sync point; BODY }` / `traced! { async point; BODY }`: the guarded
/// call's statements (the entry, the body, the completion) in the caller's block, inside
/// the call's `tracing` span with the `tracing` feature: entered for the rest of a sync
/// call, instrumenting an async one (whose `return`s then leave the instrumented
/// block, which is the call's value). Without the feature, the statements as they are.
#[cfg(feature = "tracing")]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_traced {
    (sync $point:ident; $($body:tt)*) => {
        let __resilience_span = $crate::__private::call_span($point).entered();
        $($body)*
    };
    (async $point:ident; $($body:tt)*) => {
        $crate::__private::Instrument::instrument(
            async move { $($body)* },
            $crate::__private::call_span($point),
        )
        .await
    };
}

/// `traced! { .. }` without the `tracing` feature: the statements as they are.
#[cfg(not(feature = "tracing"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_traced {
    ($kind:ident $point:ident; $($body:tt)*) => {
        $($body)*
    };
}

pub use crate::__resilience_traced as traced;

pub use crate::point::admit::queue::{Admission, WaitFuture};

/// `key = expr`: the call's key (see [`crate::keys`]); public, so that the error
/// about a key that is not a `HotKey` names `KeyArg::new` at its public path.
pub use crate::keys::KeyArg;

/// The entry of a sync `#[downgrade]` fn with `key = ...` (see [`enter`]).
#[inline(always)]
pub fn enter_keyed(
    point: &'static Point,
    slot: &mut Option<Permit<'static>>,
    key: &KeyArg<'_>,
) -> Result<(), Downgraded> {
    point.enter_keyed_in(slot, key)
}

/// The entry of a sync `#[breaker]` fn with `key = ...` (see [`enter_breaker`]).
#[inline(always)]
pub fn enter_breaker_keyed(
    point: &'static Point,
    slot: &mut Option<Permit<'static>>,
    key: &KeyArg<'_>,
) -> Result<(), Downgraded> {
    point.enter_breaker_keyed_in(slot, key)
}

/// The entry of an async `#[downgrade]` fn with `key = ...` (see [`enter_async`]).
#[inline(always)]
pub fn enter_async_keyed<'a>(
    call: &'a mut Pending<'static>,
    key: KeyArg<'a>,
) -> Admission<'a, 'static> {
    let Pending {
        point, slot, done, ..
    } = call;
    point.enter_async_keyed_in(slot, Some(done), Some(key))
}

/// The entry of an async `#[breaker]` fn with `key = ...`.
#[inline(always)]
pub fn enter_breaker_async_keyed<'a>(
    call: &'a mut Pending<'static>,
    key: KeyArg<'a>,
) -> Admission<'a, 'static> {
    let Pending {
        point, slot, done, ..
    } = call;
    point.enter_breaker_async_keyed_in(slot, Some(done), key)
}

/// `priority = expr`: the call's tier, set for its entry (see [`crate::priority`]).
#[derive(Debug)]
pub struct PriorityScope {
    /// Held for its `Drop`, which restores the previous priority.
    _scope: crate::priority::Scope,
}

impl PriorityScope {
    /// Sets `priority` until the scope is dropped.
    #[inline]
    pub fn enter(priority: crate::priority::Priority) -> PriorityScope {
        PriorityScope {
            _scope: crate::priority::Scope::enter(priority),
        }
    }
}

/// The entry of an async `#[downgrade]` fn: [`enter`] that never blocks; with a queue
/// and every slot taken, `Admission::Wait` is awaited by the generated code. While the
/// call waits its guard records nothing (a call dropped while it waits never began).
#[inline(always)]
pub fn enter_async<'a>(call: &'a mut Pending<'static>) -> Admission<'a, 'static> {
    let Pending {
        point, slot, done, ..
    } = call;
    point.enter_async_in(slot, Some(done))
}

/// The entry of an async `#[breaker]` fn (see [`enter_breaker`]).
#[inline(always)]
pub fn enter_breaker_async<'a>(call: &'a mut Pending<'static>) -> Admission<'a, 'static> {
    let Pending {
        point, slot, done, ..
    } = call;
    point.enter_breaker_async_in(slot, Some(done))
}

use crate::point::admit::pending::trace_outcome;
pub use crate::point::admit::pending::Pending;

// ---- `timeout = "..."`: the deadline of an async call (feature `tokio`) ----

/// Runs `fut`, the body of a call that `enter` admitted on `point` (its permit, if any,
/// in `slot`), until its deadline: the policy's
/// [`call_timeout`](crate::PolicyBuilder::call_timeout) if it sets one, else `default`
/// (the attribute's `timeout`). A body that finishes in time gives `Ok(its output)`,
/// to be completed by [`finish`] or [`panicked`] as usual. At the deadline the body's
/// future is dropped, the call is recorded by [`timed_out`] (a timeout, a failure for
/// the breaker, its slot released) and the result is `Err(Downgraded)` with
/// [`Reason::Deadline`](crate::Reason::Deadline), which the generated code hands to the
/// fallback exactly as a refusal.
///
/// Needs a tokio runtime with its time driver (`enable_time` or `enable_all`), as
/// `tokio::time::timeout` does.
#[cfg(feature = "tokio")]
pub async fn run_with_deadline<F: std::future::Future>(
    point: &'static Point,
    slot: &mut Option<Permit<'static>>,
    default: std::time::Duration,
    fut: F,
) -> Result<F::Output, Downgraded> {
    let deadline = point.call_timeout().unwrap_or(default);
    // The awaited `Timeout`, and the body's future in it, is dropped when the `.await`
    // ends: the body's own drops have run before the slot is released below.
    let outcome = tokio::time::timeout(deadline, fut).await;
    match outcome {
        Ok(out) => Ok(out),
        Err(_elapsed) => {
            timed_out(point, slot);
            Err(Downgraded {
                point: point.name(),
                reason: crate::error::Reason::Deadline,
            })
        }
    }
}

/// `deadline!({ ERROR } point, slot, default, future)`: the generated code of a
/// `timeout = "..."` function calls [`run_with_deadline`] through it, so that without
/// the `tokio` feature the build stops with one error saying what to enable (and no
/// follow-up error about a missing function). `ERROR` is that error, a
/// `compile_error!` the macro wrote at the user's token: given as it is, it names no
/// macro of this module (an error raised here would, in a note).
#[cfg(feature = "tokio")]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_deadline {
    ({ $($error:tt)* } $($call:tt)*) => {
        $crate::__private::run_with_deadline($($call)*)
    };
}

/// `deadline!(..)` without the `tokio` feature: the macro's compile error, and a
/// future of the right type so that it is the only error.
#[cfg(not(feature = "tokio"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_deadline {
    ({ $($error:tt)* } $point:expr, $slot:expr, $default:expr, $future:expr $(,)?) => {{
        $($error)*
        let _ = ($point, $slot, $default);
        async move { ::core::result::Result::<_, $crate::Downgraded>::Ok($future.await) }
    }};
}

pub use crate::__resilience_deadline as deadline;

// ---- `#[retry]` ----

pub use crate::retry::RetryBudget;

/// A retry budget cached in a function-local `static` at each call site, like
/// [`StaticPoint`].
#[derive(Debug)]
pub struct StaticBudget {
    name: &'static str,
    cell: AtomicPtr<RetryBudget>,
}

impl StaticBudget {
    /// A handle for the budget `name` of the global registry, resolved on first use.
    pub const fn new(name: &'static str) -> StaticBudget {
        StaticBudget {
            name,
            cell: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The budget, looked up in the global registry on the first call only (with the
    /// `testing` feature, in the test registry in scope, if any, at every call).
    #[inline]
    pub fn get(&'static self) -> &'static RetryBudget {
        #[cfg(feature = "testing")]
        if let Some(registry) = crate::registry::scoped::scoped() {
            return registry.retry_budget(self.name);
        }
        let budget = self.cell.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `init` from a `&'static RetryBudget`.
        match unsafe { budget.cast_const().as_ref() } {
            Some(b) => b,
            None => self.init(),
        }
    }

    #[cold]
    fn init(&'static self) -> &'static RetryBudget {
        let budget = crate::registry::global().retry_budget(self.name);
        self.cell
            .store(std::ptr::from_ref(budget).cast_mut(), Ordering::Release);
        budget
    }
}

/// The attribute's retry settings, checked at compile time.
#[derive(Debug)]
pub struct RetrySpec {
    /// Attempts in all, 1..=100.
    pub attempts: u64,
    /// `backoff = "exponential"` (else fixed: `base` between attempts).
    pub exponential: bool,
    /// The first wait.
    pub base_nanos: u64,
    /// Growth per retry (exponential).
    pub multiplier: f64,
    /// The longest wait (exponential).
    pub max_nanos: u64,
    /// 0 (none), 0.5 (equal) or 1 (full).
    pub jitter: f64,
}

impl RetrySpec {
    #[cold]
    fn retry(&self) -> crate::retry::Retry {
        use std::time::Duration;
        let base = Duration::from_nanos(self.base_nanos);
        let backoff = if self.exponential {
            crate::retry::Backoff::exponential(
                base,
                self.multiplier,
                Duration::from_nanos(self.max_nanos),
            )
        } else {
            crate::retry::Backoff::fixed(base)
        };
        crate::retry::Retry {
            attempts: self.attempts,
            backoff: backoff.with_jitter(self.jitter),
        }
    }
}

/// One `#[retry]` call: its point (where it is counted), budget and attempts so far.
#[derive(Debug)]
pub struct Retrying {
    point: &'static Point,
    budget: Option<&'static RetryBudget>,
    done: u32,
}

impl Retrying {
    /// Counts the call and its first attempt, deposits into `budget`.
    #[inline]
    pub fn begin(point: &'static Point, budget: Option<&'static RetryBudget>) -> Retrying {
        let budget = point.begin_retrying(budget);
        Retrying {
            point,
            budget,
            done: 0,
        }
    }

    /// After an attempt that failed with an error to retry: the wait before the next
    /// attempt, or `None` when attempts are exhausted or the budget refuses (counted).
    #[cold]
    pub fn failed(&mut self, spec: &RetrySpec) -> Option<std::time::Duration> {
        self.done += 1;
        self.point
            .retry_after(|| spec.retry(), self.budget, self.done)
    }

    /// The retry settings of this call: the point's retry section if a layer sets
    /// one, else the attribute's. The one place that decides them.
    #[cold]
    pub fn effective(&self, spec: &RetrySpec) -> crate::retry::Retry {
        self.point.effective_retry(|| spec.retry())
    }

    /// Waits `d` on the point's clock (the thread sleeps; a manual clock advances).
    #[cold]
    pub fn sleep(&self, d: std::time::Duration) {
        self.point.retry_clock().sleep(d);
    }

    /// Waits `d`: `tokio::time::sleep` on the system clock, advancing a manual clock.
    #[cfg(feature = "tokio")]
    pub async fn sleep_async(&self, d: std::time::Duration) {
        self.point.retry_clock().sleep_async(d).await;
    }
}

/// `retry_sleep!({ ERROR } retrying, wait)`: the wait of an async `#[retry]` fn, with
/// the runtime's `tokio` feature (`ERROR` as for `deadline!`).
#[cfg(feature = "tokio")]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_retry_sleep {
    ({ $($error:tt)* } $retrying:expr, $wait:expr $(,)?) => {
        $crate::__private::Retrying::sleep_async($retrying, $wait)
    };
}

/// `retry_sleep!(..)` without the `tokio` feature: the macro's compile error.
#[cfg(not(feature = "tokio"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_retry_sleep {
    ({ $($error:tt)* } $retrying:expr, $wait:expr $(,)?) => {{
        $($error)*
        let _ = ($retrying, $wait);
        async {}
    }};
}

pub use crate::__resilience_retry_sleep as retry_sleep;

pub use crate::retry::hedge::{HedgeSpec, LatencyLog};

/// Runs an async `#[retry(hedge = "..")]` call (see `retry::hedge`): `make` starts an
/// attempt from fresh copies of the arguments; its future gives the attempt's output,
/// whether the attribute below downgraded it, and whether it is an error to retry.
/// (A plain fn returning the combinator's future: no second future around it.)
#[cfg(feature = "tokio")]
#[inline]
pub fn hedged<R, F, Fut>(
    retrying: Retrying,
    spec: &'static RetrySpec,
    hedge: &'static HedgeSpec,
    make: F,
) -> impl std::future::Future<Output = R>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (R, bool, bool)>,
{
    let (point, budget) = (retrying.point, retrying.budget);
    crate::point::run_hedged(point, budget, move || retrying.effective(spec), hedge, make)
}

/// `retry_hedge!({ ERROR } retrying, spec, hedge, make)`: the hedged call of an async
/// `#[retry(hedge = "..")]` fn, with the runtime's `tokio` feature (`ERROR` as for
/// `deadline!`).
#[cfg(feature = "tokio")]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_retry_hedge {
    ({ $($error:tt)* } $($call:tt)*) => {
        $crate::__private::hedged($($call)*)
    };
}

/// `retry_hedge!(..)` without the `tokio` feature: the macro's compile error.
#[cfg(not(feature = "tokio"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_retry_hedge {
    ({ $($error:tt)* } $retrying:expr, $spec:expr, $hedge:expr, $make:expr $(,)?) => {{
        $($error)*
        let _ = ($retrying, $spec, $hedge, $make);
        async { ::core::unreachable!() }
    }};
}

pub use crate::__resilience_retry_hedge as retry_hedge;

std::thread_local! {
    /// Set by the `#[downgrade]`/`#[breaker]` stacked below a `#[retry]` when it
    /// refuses (or cuts) the attempt; read and reset by the retry around the attempt.
    static DOWNGRADED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current attempt of the `#[retry]` above as downgraded: it is not retried.
#[cold]
pub fn mark_downgraded() {
    DOWNGRADED.with(|m| m.set(true));
}

/// Restores the mark of the enclosing attempt (if any) when an attempt ends, even by
/// a panic.
struct MarkScope {
    outer: bool,
}

impl MarkScope {
    #[inline]
    fn enter(mark: bool) -> MarkScope {
        MarkScope {
            outer: DOWNGRADED.with(|m| m.replace(mark)),
        }
    }

    /// The attempt's mark; the enclosing one is back.
    #[inline]
    fn leave(self) -> bool {
        let outer = self.outer;
        std::mem::forget(self);
        DOWNGRADED.with(|m| m.replace(outer))
    }
}

impl Drop for MarkScope {
    fn drop(&mut self) {
        DOWNGRADED.with(|m| m.set(self.outer));
    }
}

/// Runs one attempt of a sync `#[retry]` fn: its output, and whether the stacked
/// `#[downgrade]`/`#[breaker]` refused it. Attempts nest (a retrying fn called in the
/// body of another keeps its own mark).
#[inline]
pub fn attempt<R>(f: impl FnOnce() -> R) -> (R, bool) {
    let scope = MarkScope::enter(false);
    let out = f();
    (out, scope.leave())
}

/// One attempt of a sync `#[retry]` fn with nothing stacked below it that could mark
/// it (a retrying fn called in the body keeps its own mark in its own scope).
#[inline(always)]
pub fn attempt_unmarked<R>(f: impl FnOnce() -> R) -> (R, bool) {
    (f(), false)
}

/// One attempt of an async `#[retry]` fn: the mark lives in the future between polls
/// and in the thread-local only during each poll, so tasks that move between threads
/// (or interleave on one) never see each other's marks.
#[derive(Debug)]
pub struct Attempt<F> {
    inner: F,
    mark: bool,
}

/// Wraps one attempt of an async `#[retry]` fn (see [`Attempt`]).
#[inline]
pub fn attempt_async<F: std::future::Future>(inner: F) -> Attempt<F> {
    Attempt { inner, mark: false }
}

impl<F: std::future::Future> std::future::Future for Attempt<F> {
    type Output = (F::Output, bool);

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // SAFETY: `inner` is structurally pinned: never moved out of `self`, and
        // `Attempt` has no `Drop` impl; `mark` is a plain `bool`, never pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let inner = unsafe { std::pin::Pin::new_unchecked(&mut this.inner) };
        let scope = MarkScope::enter(this.mark);
        let polled = inner.poll(cx);
        this.mark = scope.leave();
        match polled {
            std::task::Poll::Ready(out) => std::task::Poll::Ready((out, this.mark)),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// What `#[retry]` asks of the fn: public traits, so that the errors about a fn that
/// does not fit name them at their public paths.
pub use crate::retry::{Fallible, RetryArgument, RetryPredicate};
