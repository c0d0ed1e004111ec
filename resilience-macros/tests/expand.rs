//! End-to-end tests of the expansion against a mock of the runtime's
//! `__private` module, so that this crate's tests do not depend on
//! `resilience-runtime` (which depends on this crate).
//!
//! `extern crate self as resilience_runtime` makes the default path
//! `::resilience_runtime::__private` resolve to the mock below. Pedantic
//! clippy is on so that CI's `clippy -D warnings` checks that expansions do
//! not make users' code lint-dirty.
#![warn(clippy::pedantic)]
#![allow(missing_docs, unreachable_pub)]

extern crate self as resilience_runtime;

use std::fmt::Display;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use resilience_macros::{breaker, downgrade};

/// The runtime contract, with a log of what the generated code reported.
#[allow(clippy::missing_panics_doc, clippy::missing_errors_doc)]
pub mod __private {
    use std::any::Any;
    use std::future::Future;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::pin::Pin;
    use std::sync::{Mutex, OnceLock};
    use std::task::{Context, Poll};
    use std::time::Duration;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Event {
        /// `enter` let the call through.
        Entered,
        /// `enter_breaker` let the call through.
        BreakerEntered,
        Rejected,
        Success,
        Exception,
        Panicked,
        Cancelled,
        /// `run_with_deadline` cut the call.
        TimedOut,
        /// `enter_async` made the call wait (a point given to `wait`).
        Waited,
        /// `PriorityScope::enter` set this priority.
        Prioritised(u8),
    }

    static LOG: Mutex<Vec<(&'static str, Event)>> = Mutex::new(Vec::new());
    static REJECT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    static CUT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    static WAIT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

    /// Calls of `point` wait once (one pending poll) before they are entered.
    pub fn wait(point: &'static str) {
        WAIT.lock().unwrap().push(point);
    }
    static DEADLINES: Mutex<Vec<(&'static str, Duration)>> = Mutex::new(Vec::new());

    pub fn events(point: &str) -> Vec<Event> {
        LOG.lock()
            .unwrap()
            .iter()
            .filter(|(name, _)| *name == point)
            .map(|(_, event)| *event)
            .collect()
    }

    pub fn reject(point: &'static str) {
        REJECT.lock().unwrap().push(point);
    }

    /// Every later call of `point` under a deadline is cut after its first poll.
    pub fn cut(point: &'static str) {
        CUT.lock().unwrap().push(point);
    }

    /// The attribute's deadline, as each call of `point` handed it over.
    pub fn deadlines(point: &str) -> Vec<Duration> {
        DEADLINES
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _)| *name == point)
            .map(|(_, d)| *d)
            .collect()
    }

    fn log(point: &'static str, event: Event) {
        LOG.lock().unwrap().push((point, event));
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Downgraded {
        pub point: &'static str,
        /// Cut at the deadline (the runtime's `Reason::Deadline`), not refused.
        pub cut: bool,
    }

    #[derive(Debug)]
    pub struct Point {
        name: &'static str,
    }

    impl Point {
        fn admit(&'static self, event: Event, slot: &mut Option<Permit>) -> Result<(), Downgraded> {
            if REJECT.lock().unwrap().contains(&self.name) {
                log(self.name, Event::Rejected);
                return Err(Downgraded {
                    point: self.name,
                    cut: false,
                });
            }
            log(self.name, event);
            *slot = Some(Permit {
                point: Some(self.name),
            });
            Ok(())
        }
    }

    pub fn enter(point: &'static Point, slot: &mut Option<Permit>) -> Result<(), Downgraded> {
        point.admit(Event::Entered, slot)
    }

    pub fn enter_breaker(
        point: &'static Point,
        slot: &mut Option<Permit>,
    ) -> Result<(), Downgraded> {
        point.admit(Event::BreakerEntered, slot)
    }

    /// The async entry: ready at once (the mock has no queue), or, for a point given
    /// to `wait`, after one pending poll.
    #[allow(missing_debug_implementations)]
    pub enum Admission<'a> {
        Ready(Result<(), Downgraded>),
        Wait(Pin<Box<dyn Future<Output = Result<(), Downgraded>> + Send + 'a>>),
    }

    pub fn enter_async(call: &mut Pending) -> Admission<'_> {
        let Pending { point, slot, done } = call;
        let point = *point;
        if WAIT.lock().unwrap().contains(&point.name) {
            log(point.name, Event::Waited);
            // As the runtime: nothing to record while the call waits.
            *done = true;
            let mut polled = false;
            return Admission::Wait(Box::pin(std::future::poll_fn(move |cx| {
                if !polled {
                    polled = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                *done = false;
                Poll::Ready(point.admit(Event::Entered, slot))
            })));
        }
        Admission::Ready(point.admit(Event::Entered, slot))
    }

    static KEYS: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());
    static REJECT_KEYS: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

    /// The keys the calls of `point` entered with, in order.
    pub fn keys(point: &str) -> Vec<String> {
        KEYS.lock()
            .unwrap()
            .iter()
            .filter(|(name, _)| *name == point)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// Every later call of `point` with the key `key` is refused.
    pub fn reject_key(point: &'static str, key: &str) {
        REJECT_KEYS.lock().unwrap().push((point, key.to_owned()));
    }

    /// `key = expr`: the key's text (the runtime also takes a fingerprint). Not
    /// `Send`, as the runtime's: the generated code must not hold it across an await.
    #[derive(Clone, Copy)]
    #[allow(missing_debug_implementations)]
    pub struct KeyArg<'k> {
        text: &'k dyn std::fmt::Display,
    }

    impl<'k> KeyArg<'k> {
        pub fn new<K: std::hash::Hash + std::fmt::Display + ?Sized>(key: &'k &K) -> KeyArg<'k> {
            KeyArg { text: key }
        }
    }

    /// Logs the key; `Err` if it is to be refused.
    fn keyed(point: &'static Point, key: &KeyArg<'_>) -> Result<(), Downgraded> {
        let text = key.text.to_string();
        let refused = REJECT_KEYS
            .lock()
            .unwrap()
            .iter()
            .any(|(name, k)| *name == point.name && *k == text);
        KEYS.lock().unwrap().push((point.name, text));
        if refused {
            log(point.name, Event::Rejected);
            return Err(Downgraded {
                point: point.name,
                cut: false,
            });
        }
        Ok(())
    }

    pub fn enter_keyed(
        point: &'static Point,
        slot: &mut Option<Permit>,
        key: &KeyArg<'_>,
    ) -> Result<(), Downgraded> {
        keyed(point, key)?;
        enter(point, slot)
    }

    pub fn enter_breaker_keyed(
        point: &'static Point,
        slot: &mut Option<Permit>,
        key: &KeyArg<'_>,
    ) -> Result<(), Downgraded> {
        keyed(point, key)?;
        enter_breaker(point, slot)
    }

    pub fn enter_async_keyed<'a>(call: &'a mut Pending, key: KeyArg<'a>) -> Admission<'a> {
        if let Err(d) = keyed(call.point, &key) {
            return Admission::Ready(Err(d));
        }
        enter_async(call)
    }

    pub fn enter_breaker_async_keyed<'a>(call: &'a mut Pending, key: KeyArg<'a>) -> Admission<'a> {
        if let Err(d) = keyed(call.point, &key) {
            return Admission::Ready(Err(d));
        }
        enter_breaker_async(call)
    }

    /// The tier of `priority = expr`, logged under the point `priority` when set.
    #[derive(Debug)]
    pub struct PriorityScope;

    impl PriorityScope {
        #[must_use]
        pub fn enter(priority: u8) -> PriorityScope {
            log("priority", Event::Prioritised(priority));
            PriorityScope
        }
    }

    pub fn enter_breaker_async(call: &mut Pending) -> Admission<'_> {
        Admission::Ready(call.point.admit(Event::BreakerEntered, &mut call.slot))
    }

    /// The generated code hands back the point it entered with the slot it entered.
    fn completed(point: &'static Point, slot: &mut Option<Permit>) -> Option<&'static str> {
        let name = slot.take().and_then(|mut p| p.point.take());
        assert!(
            name.is_none_or(|name| name == point.name),
            "finished on another point"
        );
        name
    }

    pub fn finish(point: &'static Point, slot: &mut Option<Permit>, is_exception: bool) {
        let event = if is_exception {
            Event::Exception
        } else {
            Event::Success
        };
        if let Some(name) = completed(point, slot) {
            log(name, event);
        }
    }

    pub fn panicked(point: &'static Point, slot: &mut Option<Permit>) {
        if let Some(name) = completed(point, slot) {
            log(name, Event::Panicked);
        }
    }

    pub fn timed_out(point: &'static Point, slot: &mut Option<Permit>) {
        if let Some(name) = completed(point, slot) {
            log(name, Event::TimedOut);
        }
    }

    pub fn cancelled(point: &'static Point, slot: &mut Option<Permit>) {
        if let Some(name) = completed(point, slot) {
            log(name, Event::Cancelled);
        }
    }

    /// The guard of an async call's slot: dropped before `done`, a cancelled call.
    #[derive(Debug)]
    pub struct Pending {
        pub point: &'static Point,
        pub slot: Option<Permit>,
        pub done: bool,
    }

    impl Pending {
        #[must_use]
        pub fn new(point: &'static Point) -> Pending {
            Pending {
                point,
                slot: None,
                done: false,
            }
        }
    }

    impl Drop for Pending {
        fn drop(&mut self) {
            if !self.done {
                cancelled(self.point, &mut self.slot);
            }
        }
    }

    /// The runtime's deadline, minus the timer: a call of a point given to `cut`
    /// is polled once, then dropped and cut.
    pub async fn run_with_deadline<F: Future>(
        point: &'static Point,
        slot: &mut Option<Permit>,
        default: Duration,
        future: F,
    ) -> Result<F::Output, Downgraded> {
        DEADLINES.lock().unwrap().push((point.name, default));
        if !CUT.lock().unwrap().contains(&point.name) {
            return Ok(future.await);
        }
        let mut future = Box::pin(future);
        let polled = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        if let Poll::Ready(out) = polled {
            return Ok(out);
        }
        drop(future);
        timed_out(point, slot);
        Err(Downgraded {
            point: point.name,
            cut: true,
        })
    }

    #[macro_export]
    macro_rules! __mock_deadline {
        ({ $($error:tt)* } $($call:tt)*) => {
            $crate::__private::run_with_deadline($($call)*)
        };
    }
    pub use crate::__mock_deadline as deadline;

    /// As the runtime's with its `tracing` feature: an async call runs in an
    /// `async move` block of its own, awaited in place (so `return` leaves the block).
    #[macro_export]
    macro_rules! __mock_traced {
        (sync $point:ident; $($body:tt)*) => {
            let _ = $point;
            $($body)*
        };
        (async $point:ident; $($body:tt)*) => {
            async move { $($body)* }.await
        };
    }
    pub use crate::__mock_traced as traced;

    /// A refused call (its span's outcome in the runtime).
    pub fn refused(downgraded: &Downgraded) {
        let _ = downgraded;
    }

    #[derive(Debug)]
    pub struct StaticPoint {
        name: &'static str,
        cell: OnceLock<&'static Point>,
    }

    impl StaticPoint {
        #[must_use]
        pub const fn new(name: &'static str) -> StaticPoint {
            StaticPoint {
                name,
                cell: OnceLock::new(),
            }
        }

        pub fn get(&'static self) -> &'static Point {
            self.cell
                .get_or_init(|| Box::leak(Box::new(Point { name: self.name })))
        }
    }

    #[derive(Debug)]
    pub struct Permit {
        point: Option<&'static str>,
    }

    impl Drop for Permit {
        fn drop(&mut self) {
            if let Some(point) = self.point.take() {
                log(point, Event::Cancelled);
            }
        }
    }

    pub trait FromDowngraded {
        fn from_downgraded(d: Downgraded) -> Self;
    }

    impl<T, E: From<Downgraded>> FromDowngraded for Result<T, E> {
        fn from_downgraded(d: Downgraded) -> Self {
            Err(E::from(d))
        }
    }

    #[derive(Debug)]
    pub struct Classify<'a, T>(pub &'a T);

    pub trait ClassifyResult {
        fn __resilience_is_err(&self) -> bool;
    }

    impl<T, E> ClassifyResult for Classify<'_, Result<T, E>> {
        fn __resilience_is_err(&self) -> bool {
            self.0.is_err()
        }
    }

    pub trait ClassifyOther {
        fn __resilience_is_err(&self) -> bool;
    }

    impl<T> ClassifyOther for &Classify<'_, T> {
        fn __resilience_is_err(&self) -> bool {
            false
        }
    }

    #[derive(Debug)]
    pub struct CatchUnwind<F> {
        inner: Pin<Box<F>>,
    }

    impl<F> CatchUnwind<F> {
        pub fn new(inner: F) -> Self {
            CatchUnwind {
                inner: Box::pin(inner),
            }
        }
    }

    impl<F: Future> Future for CatchUnwind<F> {
        type Output = Result<F::Output, Box<dyn Any + Send>>;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let inner = self.inner.as_mut();
            match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
                Ok(Poll::Pending) => Poll::Pending,
                Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
                Err(panic) => Poll::Ready(Err(panic)),
            }
        }
    }

    // Link-time declarations: one static per annotated fn (see `declared_point`).
    pub use linkme;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DeclaredPoint {
        pub name: &'static str,
        pub function: &'static str,
        pub line: u32,
        pub breaker: bool,
        pub has_fallback: bool,
    }

    impl DeclaredPoint {
        #[must_use]
        pub const fn downgrade(
            name: &'static str,
            function: &'static str,
            _file: &'static str,
            line: u32,
            has_fallback: bool,
        ) -> Self {
            DeclaredPoint {
                name,
                function,
                line,
                breaker: false,
                has_fallback,
            }
        }

        #[must_use]
        pub const fn breaker(
            name: &'static str,
            function: &'static str,
            _file: &'static str,
            line: u32,
            has_fallback: bool,
        ) -> Self {
            DeclaredPoint {
                name,
                function,
                line,
                breaker: true,
                has_fallback,
            }
        }
    }

    #[linkme::distributed_slice]
    pub static DECLARED_POINTS: [DeclaredPoint];
}

/// The same runtime under another path, for `crate = "..."`.
mod renamed {
    pub use crate::__private;
}

use __private::{cut, deadlines, events, reject, Downgraded, Event};

#[derive(Debug, PartialEq, Eq)]
enum Error {
    Downgraded(&'static str),
    Client,
    Server,
}

impl From<Downgraded> for Error {
    fn from(d: Downgraded) -> Self {
        Error::Downgraded(d.point)
    }
}

impl From<std::num::ParseIntError> for Error {
    fn from(_: std::num::ParseIntError) -> Self {
        Error::Client
    }
}

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Pending on the first poll, ready on the second.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

// ---------------------------------------------------------------- sync

#[downgrade(point = "sync::result")]
fn result(ok: bool) -> Result<u32, Error> {
    if ok {
        Ok(1)
    } else {
        Err(Error::Server)
    }
}

#[test]
fn sync_result_records_success_and_exception() {
    assert_eq!(result(true), Ok(1));
    assert_eq!(result(false), Err(Error::Server));
    assert_eq!(
        events("sync::result"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::Exception
        ]
    );
}

#[downgrade(point = "sync::rejected")]
fn rejected() -> Result<u32, Error> {
    unreachable!("the body must not run when downgraded")
}

#[test]
fn downgraded_without_fallback_returns_err() {
    reject("sync::rejected");
    assert_eq!(rejected(), Err(Error::Downgraded("sync::rejected")));
    assert_eq!(events("sync::rejected"), [Event::Rejected]);
}

#[downgrade]
fn default_name() -> Result<(), Error> {
    Ok(())
}

#[test]
fn default_point_name_is_the_fn_path() {
    default_name().unwrap();
    let name = concat!(module_path!(), "::", "default_name");
    assert_eq!(events(name), [Event::Entered, Event::Success]);
}

#[downgrade(point = "sync::early_return")]
fn early_return(input: &str) -> Result<u32, Error> {
    if input.is_empty() {
        return Ok(0);
    }
    let n: u32 = input.parse()?;
    Ok(n + 1)
}

#[test]
fn return_and_question_mark_end_the_body_not_the_wrapper() {
    assert_eq!(early_return(""), Ok(0));
    assert!(early_return("x").is_err());
    assert_eq!(early_return("41"), Ok(42));
    assert_eq!(
        events("sync::early_return"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::Exception,
            Event::Entered,
            Event::Success
        ]
    );
}

#[downgrade(point = "sync::panics")]
fn panics() -> Result<u32, Error> {
    panic!("boom")
}

#[test]
fn panic_is_recorded_and_resumed() {
    let payload = catch_unwind(panics).unwrap_err();
    assert_eq!(panic_message(&*payload), "boom");
    assert_eq!(events("sync::panics"), [Event::Entered, Event::Panicked]);
}

fn is_server_error(e: &Error) -> bool {
    matches!(e, Error::Server)
}

#[downgrade(point = "sync::is_exception", is_exception = is_server_error)]
fn classified(e: Error) -> Result<(), Error> {
    Err(e)
}

#[test]
fn is_exception_decides_which_errors_count() {
    assert_eq!(classified(Error::Client), Err(Error::Client));
    assert_eq!(classified(Error::Server), Err(Error::Server));
    assert_eq!(
        events("sync::is_exception"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::Exception
        ]
    );
}

#[downgrade(point = "sync::default_expr", default = vec![7])]
fn default_expr() -> Vec<u8> {
    vec![1]
}

#[downgrade(point = "sync::default_trait", default)]
fn default_trait() -> String {
    "ran".to_owned()
}

#[downgrade(point = "sync::unit", default)]
fn unit(out: &mut Vec<u8>) {
    out.push(1);
}

#[test]
fn default_values() {
    assert_eq!(default_expr(), [1]);
    reject("sync::default_expr");
    assert_eq!(default_expr(), [7]);

    assert_eq!(default_trait(), "ran");
    reject("sync::default_trait");
    assert_eq!(default_trait(), "");

    let mut out = Vec::new();
    unit(&mut out);
    reject("sync::unit");
    unit(&mut out);
    assert_eq!(out, [1]);
    // Not a `Result`: only panics are exceptions.
    assert_eq!(
        events("sync::unit"),
        [Event::Entered, Event::Success, Event::Rejected]
    );
}

#[downgrade(point = "sync::impl_display", default = 0)]
fn impl_display(n: i32) -> impl Display {
    n * 2
}

#[downgrade(point = "sync::impl_in_result")]
fn impl_in_result(n: i32) -> Result<impl Display, Error> {
    if n < 0 {
        return Err(Error::Client);
    }
    Ok(n)
}

#[test]
fn impl_trait_returns() {
    assert_eq!(impl_display(21).to_string(), "42");
    reject("sync::impl_display");
    assert_eq!(impl_display(21).to_string(), "0");
    assert_eq!(impl_in_result(3).unwrap().to_string(), "3");
    assert!(impl_in_result(-1).is_err());
}

fn never_fallback(code: u8) -> ! {
    panic!("fallback {code}")
}

#[downgrade(point = "sync::never", fallback = never_fallback)]
fn never(code: u8) -> ! {
    panic!("body {code}")
}

#[test]
fn never_returns() {
    let payload = catch_unwind(|| never(1)).unwrap_err();
    assert_eq!(panic_message(&*payload), "body 1");
    reject("sync::never");
    let payload = catch_unwind(|| never(2)).unwrap_err();
    assert_eq!(panic_message(&*payload), "fallback 2");
    assert_eq!(
        events("sync::never"),
        [Event::Entered, Event::Panicked, Event::Rejected]
    );
}

fn pattern_fallback((a, b): (i32, i32), skipped: u8, c: i32, Pair { x, y }: Pair) -> i32 {
    -(a + b + i32::from(skipped) + c + x + y)
}

struct Pair {
    x: i32,
    y: i32,
}

#[downgrade(point = "sync::patterns", fallback = pattern_fallback)]
fn patterns((a, b): (i32, i32), _: u8, mut c: i32, Pair { x, y }: Pair) -> i32 {
    c += 1;
    a + b + c + x + y
}

#[test]
fn patterns_are_passed_to_the_fallback() {
    assert_eq!(patterns((1, 2), 100, 3, Pair { x: 4, y: 5 }), 16);
    reject("sync::patterns");
    assert_eq!(patterns((1, 2), 100, 3, Pair { x: 4, y: 5 }), -115);
}

#[downgrade(point = "sync::generic", default)]
fn generic<T, U: Into<T>>(value: U, extra: impl Into<T>) -> Vec<T>
where
    T: Clone,
{
    vec![value.into(), extra.into()]
}

#[test]
fn generic_fns() {
    assert_eq!(generic::<u64, u32>(1, 2_u8), [1, 2]);
    reject("sync::generic");
    assert!(generic::<u64, u32>(1, 2_u8).is_empty());
}

#[downgrade(point = "sync::unsafe_fn", default)]
unsafe fn read(ptr: *const u8) -> u8 {
    // SAFETY: the caller passes a valid pointer.
    unsafe { *ptr }
}

#[test]
fn unsafe_fns() {
    let byte = 9;
    // SAFETY: `&byte` is valid.
    assert_eq!(unsafe { read(&raw const byte) }, 9);
}

/// Docs and other attributes are kept.
#[must_use]
#[inline]
#[downgrade(point = "sync::outer_attrs", default)]
fn outer_attrs() -> u8 {
    3
}

#[downgrade(point = "sync::inner_attrs", default)]
fn inner_attrs() -> u8 {
    #![allow(clippy::let_and_return)]
    //! An inner doc comment.
    let x = 3;
    x
}

#[test]
fn other_attributes_keep_working() {
    assert_eq!(outer_attrs(), 3);
    assert_eq!(inner_attrs(), 3);
}

mod shadowing {
    //! User code that would break unhygienic or relative paths.
    #![allow(dead_code, non_camel_case_types, clippy::pedantic)]

    use resilience_macros::downgrade;

    mod core {}
    mod std {}
    struct Option;
    struct Box;
    enum Result {
        Ok,
        Err,
    }
    use Result::{Err, Ok};

    #[downgrade(point = "sync::shadowing", default)]
    pub(super) fn shadowed(__resilience_permit: u8) -> u8 {
        let __resilience_point = 1;
        let __resilience_out = 2;
        let _ = (Ok, Err);
        __resilience_permit + __resilience_point + __resilience_out
    }
}

#[test]
fn user_names_cannot_interfere() {
    assert_eq!(shadowing::shadowed(3), 6);
    assert_eq!(events("sync::shadowing"), [Event::Entered, Event::Success]);
}

#[downgrade(crate = "crate::renamed", point = "sync::renamed")]
fn renamed_runtime() -> Result<(), Error> {
    Ok(())
}

#[test]
fn crate_argument() {
    renamed_runtime().unwrap();
    assert_eq!(events("sync::renamed"), [Event::Entered, Event::Success]);
}

// ---------------------------------------------------------------- methods

struct Service {
    name: String,
}

impl Service {
    #[downgrade(point = "method::by_ref", fallback = Self::cached)]
    fn get(&self, id: u64) -> Result<String, Error> {
        Ok(format!("{}:{id}", self.name))
    }

    // A fallback must return what the guarded fn returns, even if it never fails.
    #[allow(clippy::unnecessary_wraps)]
    fn cached(&self, id: u64) -> Result<String, Error> {
        Ok(format!("cached {}:{id}", self.name))
    }

    #[downgrade(point = "method::by_mut", default)]
    fn rename(&mut self, name: &str) -> usize {
        name.clone_into(&mut self.name);
        self.name.len()
    }

    #[downgrade(point = "method::by_value", fallback = Self::into_fallback)]
    fn into_name(mut self, suffix: &str) -> String {
        self.name.push_str(suffix);
        self.name
    }

    fn into_fallback(self, _: &str) -> String {
        format!("fallback {}", self.name)
    }

    #[downgrade(point = "method::boxed", default)]
    fn boxed(self: Box<Self>) -> String {
        self.name
    }

    #[downgrade(point = "method::borrowed", default)]
    fn name(&self) -> &str {
        &self.name
    }
}

#[test]
fn methods() {
    let mut service = Service {
        name: "svc".to_owned(),
    };
    assert_eq!(service.get(1).unwrap(), "svc:1");
    assert_eq!(service.rename("new"), 3);
    assert_eq!(service.name(), "new");
    reject("method::by_ref");
    assert_eq!(service.get(2).unwrap(), "cached new:2");
    assert_eq!(Box::new(Service { name: "b".into() }).boxed(), "b");

    let owned = Service { name: "v".into() };
    assert_eq!(owned.into_name("!"), "v!");
    reject("method::by_value");
    let owned = Service { name: "v".into() };
    assert_eq!(owned.into_name("!"), "fallback v");
}

trait Repository {
    fn find(&self, id: u32) -> Result<u32, Error>;

    #[downgrade(point = "trait::default_method", default = Ok(0))]
    fn find_or_zero(&self, id: u32) -> Result<u32, Error> {
        self.find(id)
    }
}

struct Repo;

impl Repository for Repo {
    #[breaker(point = "trait::impl_method")]
    fn find(&self, id: u32) -> Result<u32, Error> {
        Ok(id * 10)
    }
}

#[test]
fn trait_methods() {
    assert_eq!(Repo.find(1), Ok(10));
    assert_eq!(Repo.find_or_zero(2), Ok(20));
    assert_eq!(
        events("trait::impl_method"),
        [
            Event::BreakerEntered,
            Event::Success,
            Event::BreakerEntered,
            Event::Success
        ]
    );
    assert_eq!(
        events("trait::default_method"),
        [Event::Entered, Event::Success]
    );
}

// ---------------------------------------------------------------- stacking
//
// `#[a] #[b] fn`: `a` expands first and wraps the body; `b` then wraps what
// `a` produced. So on each call the attribute written closest to the `fn`
// is asked first.

#[downgrade(point = "stack::a_downgrade", default = Ok(1))]
#[breaker(point = "stack::a_breaker")]
fn downgrade_then_breaker(_: u8) -> Result<u32, Error> {
    Ok(2)
}

#[breaker(point = "stack::b_breaker", fallback = stacked_fallback)]
#[downgrade(point = "stack::b_downgrade", fallback = stacked_fallback)]
fn breaker_then_downgrade((a, b): (u32, u32)) -> Result<u32, Error> {
    Ok(a + b)
}

// A fallback must return what the guarded fn returns, even if it never fails.
#[allow(clippy::unnecessary_wraps)]
fn stacked_fallback((a, b): (u32, u32)) -> Result<u32, Error> {
    Ok(a * b)
}

#[test]
fn downgrade_stacked_over_breaker() {
    assert_eq!(downgrade_then_breaker(0), Ok(2));
    reject("stack::a_downgrade");
    assert_eq!(downgrade_then_breaker(0), Ok(1));
    reject("stack::a_breaker");
    assert_eq!(
        downgrade_then_breaker(0),
        Err(Error::Downgraded("stack::a_breaker"))
    );
    assert_eq!(
        events("stack::a_breaker"),
        [
            Event::BreakerEntered,
            Event::Success,
            Event::BreakerEntered,
            Event::Success,
            Event::Rejected
        ]
    );
    assert_eq!(
        events("stack::a_downgrade"),
        [Event::Entered, Event::Success, Event::Rejected]
    );
}

#[test]
fn breaker_stacked_over_downgrade() {
    assert_eq!(breaker_then_downgrade((2, 5)), Ok(7));
    reject("stack::b_breaker");
    assert_eq!(breaker_then_downgrade((2, 5)), Ok(10));
    reject("stack::b_downgrade");
    assert_eq!(breaker_then_downgrade((2, 5)), Ok(10));
    assert_eq!(
        events("stack::b_downgrade"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::Success,
            Event::Rejected
        ]
    );
    assert_eq!(
        events("stack::b_breaker"),
        [Event::BreakerEntered, Event::Success, Event::Rejected]
    );
}

// ---------------------------------------------------------------- async

#[breaker(point = "async::result")]
async fn async_result(ok: bool) -> Result<u32, Error> {
    YieldOnce(false).await;
    if ok {
        Ok(1)
    } else {
        Err(Error::Server)
    }
}

#[test]
fn async_records_outcomes() {
    assert_eq!(block_on(async_result(true)), Ok(1));
    assert_eq!(block_on(async_result(false)), Err(Error::Server));
    assert_eq!(
        events("async::result"),
        [
            Event::BreakerEntered,
            Event::Success,
            Event::BreakerEntered,
            Event::Exception
        ]
    );
}

#[test]
fn dropped_future_is_cancelled() {
    // Never polled: the body, and so the permit, never started.
    drop(async_cancelled());
    assert!(events("async::cancelled").is_empty());

    let mut future = Box::pin(async_cancelled());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(future.as_mut().poll(&mut cx).is_pending());
    drop(future);
    assert_eq!(
        events("async::cancelled"),
        [Event::Entered, Event::Cancelled]
    );
}

#[downgrade(point = "async::cancelled")]
async fn async_cancelled() -> Result<(), Error> {
    YieldOnce(false).await;
    Ok(())
}

struct Client {
    base: String,
}

impl Client {
    #[downgrade(point = "async::fallback", fallback = Self::cached)]
    async fn fetch(&self, path: &str, (retries, _): (u8, u8)) -> Result<String, Error> {
        YieldOnce(false).await;
        Ok(format!("{}{path} x{retries}", self.base))
    }

    async fn cached(&self, path: &str, _: (u8, u8)) -> Result<String, Error> {
        YieldOnce(true).await;
        Ok(format!("cached {}{path}", self.base))
    }

    #[downgrade(point = "async::borrowed", default)]
    async fn base(&self) -> &str {
        &self.base
    }
}

#[test]
fn async_fallback_is_awaited() {
    let client = Client {
        base: "http://x".into(),
    };
    assert_eq!(
        block_on(client.fetch("/a", (3, 0))).unwrap(),
        "http://x/a x3"
    );
    assert_eq!(block_on(client.base()), "http://x");
    reject("async::fallback");
    assert_eq!(
        block_on(client.fetch("/a", (3, 0))).unwrap(),
        "cached http://x/a"
    );
}

#[downgrade(point = "async::panics")]
async fn async_panics() -> Result<(), Error> {
    YieldOnce(false).await;
    panic!("async boom")
}

#[test]
fn async_panic_is_recorded_and_resumed() {
    let payload = catch_unwind(AssertUnwindSafe(|| block_on(async_panics()))).unwrap_err();
    assert_eq!(panic_message(&*payload), "async boom");
    assert_eq!(events("async::panics"), [Event::Entered, Event::Panicked]);
}

#[downgrade(point = "async::question_mark")]
async fn async_question_mark(input: &str) -> Result<u32, Error> {
    if input.is_empty() {
        return Ok(0);
    }
    let n: u32 = input.parse().map_err(|_| Error::Client)?;
    Ok(n)
}

#[downgrade(point = "async::impl_display", default = 0)]
async fn async_impl_display(n: i32) -> impl Display {
    n
}

async fn async_never_fallback() -> ! {
    YieldOnce(true).await;
    panic!("async never fallback")
}

#[downgrade(point = "async::never", fallback = async_never_fallback)]
async fn async_never() -> ! {
    YieldOnce(false).await;
    panic!("async never")
}

#[test]
fn async_return_shapes() {
    assert_eq!(block_on(async_question_mark("")), Ok(0));
    assert_eq!(block_on(async_question_mark("x")), Err(Error::Client));
    assert_eq!(block_on(async_question_mark("5")), Ok(5));
    assert_eq!(block_on(async_impl_display(4)).to_string(), "4");
    let payload = catch_unwind(|| block_on(async_never())).unwrap_err();
    assert_eq!(panic_message(&*payload), "async never");
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn async_fns_stay_send() {
    let client = Client {
        base: String::new(),
    };
    assert_send(&client.fetch("/", (0, 0)));
    assert_send(&async_result(true));
}

// ---------------------------------------------------------------- async-trait
//
// `#[async_trait]` sits on the impl, so it always expands before a
// `#[downgrade]` on one of its methods, and hands us a method of exactly this
// shape (written out here so the test needs no `async-trait` dependency).
// The guard must run inside the boxed future: around the call's execution,
// not around the creation of its future.

trait Store {
    fn load<'life0, 'async_trait>(
        &'life0 self,
        id: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<u32, Error>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait;
}

struct Db {
    base: u32,
}

impl Db {
    async fn cached(&self, id: u32) -> Result<u32, Error> {
        YieldOnce(true).await;
        Ok(self.base * 1000 + id)
    }
}

impl Store for Db {
    #[downgrade(point = "boxed::load", fallback = Self::cached)]
    fn load<'life0, 'async_trait>(
        &'life0 self,
        id: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<u32, Error>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let __self = self;
            let id = id;
            let __ret: Result<u32, Error> = {
                YieldOnce(false).await;
                if id == 0 {
                    return Err(Error::Server);
                }
                Ok(__self.base + id)
            };
            #[allow(unreachable_code)]
            __ret
        })
    }
}

#[test]
fn async_trait_methods_are_guarded_while_running() {
    let db = Db { base: 10 };
    // Creating the future does not enter the point; running it does.
    drop(db.load(1));
    assert!(events("boxed::load").is_empty());

    assert_eq!(block_on(db.load(1)), Ok(11));
    assert_eq!(block_on(db.load(0)), Err(Error::Server));

    let mut pending = db.load(2);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(pending.as_mut().poll(&mut cx).is_pending());
    drop(pending);

    reject("boxed::load");
    assert_eq!(block_on(db.load(3)), Ok(10_003));
    assert_eq!(
        events("boxed::load"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::Exception,
            Event::Entered,
            Event::Cancelled,
            Event::Rejected
        ]
    );
    assert_send(&db.load(1));
}

#[downgrade(point = "declared.stacked", default = Ok(T::default()))]
#[breaker(point = "declared.stacked")]
fn declared_stacked<T: Default>() -> Result<T, Error> {
    Ok(T::default())
}

#[test]
fn every_annotated_fn_is_declared_once_per_attribute_before_any_call() {
    // Link order is unspecified: sort.
    let mut stacked: Vec<_> = __private::DECLARED_POINTS
        .iter()
        .filter(|p| p.name == "declared.stacked")
        .map(|p| (p.breaker, p.has_fallback, p.function))
        .collect();
    stacked.sort_unstable();
    assert_eq!(
        stacked,
        [
            (false, true, "expand::declared_stacked"),
            (true, false, "expand::declared_stacked")
        ]
    );
    // The line of the fn's name, not of the attribute.
    let line = include_str!("expand.rs")
        .lines()
        .position(|l| l.starts_with("fn declared_stacked<"))
        .unwrap()
        + 1;
    assert!(__private::DECLARED_POINTS
        .iter()
        .filter(|p| p.name == "declared.stacked")
        .all(|p| p.line as usize == line));
    assert!(__private::DECLARED_POINTS
        .iter()
        .any(|p| p.name == "expand::default_name" && !p.has_fallback));
    assert_eq!(declared_stacked::<u8>(), Ok(0));
}

// ---------------------------------------------------------------- fallback_with_reason

fn why(id: u32, (a, b): (u8, u8), d: Downgraded) -> String {
    format!("{id} {a}{b} {} cut={}", d.point, d.cut)
}

#[downgrade(point = "reason::sync", fallback_with_reason = why)]
fn reason_sync(id: u32, (a, b): (u8, u8)) -> String {
    format!("{id} {}", a + b)
}

struct Shelf(u32);

impl Shelf {
    async fn stale(&self, n: u32, d: Downgraded) -> u32 {
        YieldOnce(false).await;
        assert!(!d.cut);
        self.0 + n + 100
    }

    #[breaker(point = "reason::method", fallback_with_reason = Self::stale)]
    async fn level(&self, n: u32) -> u32 {
        self.0 + n
    }
}

fn generic_why<T: Clone>(t: &T, _: Downgraded) -> T {
    t.clone()
}

#[downgrade(point = "reason::generic", fallback_with_reason = generic_why::<T>)]
fn reason_generic<T: Clone + Default + PartialEq>(t: &T) -> T {
    if *t == T::default() {
        t.clone()
    } else {
        T::default()
    }
}

#[test]
fn fallback_with_reason_gets_the_arguments_and_the_downgrade() {
    assert_eq!(reason_sync(1, (2, 3)), "1 5");
    reject("reason::sync");
    assert_eq!(reason_sync(1, (2, 3)), "1 23 reason::sync cut=false");
    let shelf = Shelf(1);
    assert_eq!(block_on(shelf.level(2)), 3);
    reject("reason::method");
    assert_eq!(block_on(shelf.level(2)), 103);
    assert_eq!(
        events("reason::method"),
        [Event::BreakerEntered, Event::Success, Event::Rejected]
    );
    assert_eq!(reason_generic(&7u8), 0);
    reject("reason::generic");
    assert_eq!(reason_generic(&7u8), 7);
}

// ---------------------------------------------------------------- timeout

async fn queued(id: u32, body: String, d: Downgraded) -> Result<String, Error> {
    YieldOnce(true).await;
    Ok(format!("queued {id} {body} cut={}", d.cut))
}

// The body borrows `body`: the fallback takes it after a cut.
#[downgrade(point = "timeout::reason", timeout = "200ms", fallback_with_reason = queued)]
async fn post(id: u32, body: String) -> Result<String, Error> {
    YieldOnce(false).await;
    Ok(format!("sent {id} {}", body.len()))
}

async fn cached(page: &str) -> String {
    YieldOnce(true).await;
    format!("cached {page}")
}

#[downgrade(point = "timeout::fallback", timeout = "1m 30s", fallback = cached)]
async fn render(page: &str) -> String {
    YieldOnce(false).await;
    page.to_owned()
}

#[downgrade(point = "timeout::default", timeout = "1.5s", default = 7)]
async fn count() -> u32 {
    YieldOnce(false).await;
    1
}

#[breaker(point = "timeout::err", timeout = "1ns")]
async fn fetch() -> Result<u32, Error> {
    YieldOnce(false).await;
    Ok(1)
}

// A body that moves an argument it never shares with a fallback: `async move`.
#[downgrade(point = "timeout::moves", timeout = "1s", default)]
async fn consume(body: String) -> usize {
    YieldOnce(false).await;
    let owned: String = body;
    owned.len()
}

#[test]
fn timeout_passes_the_attribute_deadline_and_a_cut_call_falls_back() {
    assert_eq!(block_on(post(1, "ab".into())).unwrap(), "sent 1 2");
    assert_eq!(block_on(render("/a")), "/a");
    assert_eq!(block_on(count()), 1);
    assert_eq!(block_on(fetch()), Ok(1));
    assert_eq!(block_on(consume("abc".into())), 3);
    assert_eq!(deadlines("timeout::reason"), [Duration::from_millis(200)]);
    assert_eq!(deadlines("timeout::fallback"), [Duration::from_secs(90)]);
    assert_eq!(deadlines("timeout::default"), [Duration::from_millis(1500)]);
    assert_eq!(deadlines("timeout::err"), [Duration::from_nanos(1)]);
    assert_eq!(events("timeout::default"), [Event::Entered, Event::Success]);
    assert_eq!(
        events("timeout::err"),
        [Event::BreakerEntered, Event::Success]
    );

    // Cut: a cut call returns what a downgraded one does (one test: the points are
    // shared).
    for point in [
        "timeout::reason",
        "timeout::fallback",
        "timeout::default",
        "timeout::err",
    ] {
        cut(point);
    }
    assert_eq!(
        block_on(post(1, "ab".into())).unwrap(),
        "queued 1 ab cut=true"
    );
    assert_eq!(block_on(render("/a")), "cached /a");
    assert_eq!(block_on(count()), 7);
    assert_eq!(block_on(fetch()), Err(Error::Downgraded("timeout::err")));
    // Entered, then cut: the runtime records the timeout and no other outcome.
    assert_eq!(
        events("timeout::reason"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::TimedOut
        ]
    );
    assert_eq!(
        events("timeout::err"),
        [
            Event::BreakerEntered,
            Event::Success,
            Event::BreakerEntered,
            Event::TimedOut
        ]
    );
    // A refusal still comes first, without a deadline.
    reject("timeout::reason");
    assert_eq!(
        block_on(post(2, "c".into())).unwrap(),
        "queued 2 c cut=false"
    );
}

#[test]
fn timed_fns_stay_send() {
    assert_send(&post(1, String::new()));
    assert_send(&render("/"));
    assert_send(&consume(String::new()));
}

// The `#[async_trait]` shape under a deadline.
impl Db {
    async fn slow_fallback(&self, id: u32, d: Downgraded) -> Result<u32, Error> {
        YieldOnce(true).await;
        assert!(d.cut);
        Ok(self.base + id + 500)
    }
}

trait SlowStore {
    fn slow<'life0, 'async_trait>(
        &'life0 self,
        id: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<u32, Error>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait;
}

impl SlowStore for Db {
    // `let id = id;` is `#[async_trait]`'s, whose spans clippy would skip.
    #[allow(clippy::redundant_locals)]
    #[downgrade(point = "timeout::boxed", timeout = "10ms", fallback_with_reason = Self::slow_fallback)]
    fn slow<'life0, 'async_trait>(
        &'life0 self,
        id: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<u32, Error>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let __self = self;
            let id = id;
            let __ret: Result<u32, Error> = {
                YieldOnce(false).await;
                Ok(__self.base + id)
            };
            #[allow(unreachable_code)]
            __ret
        })
    }
}

#[test]
fn async_trait_methods_can_be_cut() {
    let db = Db { base: 10 };
    assert_eq!(block_on(db.slow(1)), Ok(11));
    cut("timeout::boxed");
    assert_eq!(block_on(db.slow(1)), Ok(511));
    assert_eq!(
        events("timeout::boxed"),
        [
            Event::Entered,
            Event::Success,
            Event::Entered,
            Event::TimedOut
        ]
    );
    assert_eq!(deadlines("timeout::boxed"), [Duration::from_millis(10); 2]);
    assert_send(&db.slow(1));
}

// ---- waiting admission ----

#[downgrade(point = "wait::async", default = 0)]
async fn waits(x: u32) -> u32 {
    x + 1
}

#[test]
fn an_async_call_that_waits_is_entered_after_its_wait() {
    __private::wait("wait::async");
    let mut cx = Context::from_waker(Waker::noop());
    let mut call = pin!(waits(1));
    assert!(call.as_mut().poll(&mut cx).is_pending(), "waits one poll");
    assert_eq!(call.as_mut().poll(&mut cx), Poll::Ready(2));
    assert_eq!(
        __private::events("wait::async"),
        [Event::Waited, Event::Entered, Event::Success]
    );
    // Dropped while it waits: never entered, nothing recorded.
    let mut call = Box::pin(waits(1));
    assert!(call.as_mut().poll(&mut cx).is_pending());
    drop(call);
    assert_eq!(
        __private::events("wait::async"),
        [Event::Waited, Event::Entered, Event::Success, Event::Waited]
    );
}

#[downgrade(point = "priority::sync", default = 0)]
fn prioritised(vip: bool) -> u32 {
    u32::from(vip)
}

#[downgrade(point = "priority::async", default = 0)]
#[allow(clippy::unused_async)]
async fn prioritised_async(level: u8) -> u32 {
    u32::from(level)
}

#[test]
fn the_priority_is_set_for_the_entry_from_the_arguments() {
    // The attribute is on a wrapper so that the expression can use the argument.
    #[downgrade(point = "priority::args", default = 0, priority = if vip { 2 } else { 1 })]
    fn call(vip: bool) -> u32 {
        u32::from(vip)
    }
    #[downgrade(point = "priority::async_args", default = 0, priority = level)]
    async fn call_async(level: u8) -> u32 {
        u32::from(level)
    }
    assert_eq!(call(true), 1);
    assert_eq!(call(false), 0);
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = pin!(call_async(7));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(7));
    assert_eq!(
        __private::events("priority"),
        [
            Event::Prioritised(2),
            Event::Prioritised(1),
            Event::Prioritised(7)
        ]
    );
    let _ = (prioritised(true), prioritised_async(1));
}

// ---- `key = expr` ----

fn busy(tenant: &str, n: u32) -> Result<u32, Error> {
    if tenant == "hot" {
        Ok(n + 1000)
    } else {
        Err(Error::Server)
    }
}

#[downgrade(point = "key::sync", key = tenant, fallback = busy)]
fn keyed(tenant: &str, n: u32) -> Result<u32, Error> {
    Ok(n)
}

#[breaker(point = "key::breaker", default, key = id)]
fn breaker_keyed(id: u64) -> u64 {
    id
}

struct Shard {
    name: String,
    hits: u32,
}

impl Shard {
    // `&mut self`, keyed by a field; the body mutates `self` after the entry.
    #[downgrade(point = "key::mut_self", default, key = self.name)]
    fn hit(&mut self) -> u32 {
        self.hits += 1;
        self.hits
    }
}

// An owned key, borrowed for the entry (and through a wait), moved by the body.
#[downgrade(point = "key::async", default, key = body)]
async fn keyed_async(body: String) -> usize {
    YieldOnce(false).await;
    let moved = body;
    moved.len()
}

impl Shard {
    #[breaker(point = "key::breaker_async", default, key = self.name.as_str())]
    #[allow(clippy::unused_async)]
    async fn hits_async(&self) -> u32 {
        self.hits
    }
}

#[test]
fn a_key_is_passed_to_the_keyed_entry() {
    assert_eq!(keyed("cold", 1), Ok(1));
    __private::reject_key("key::sync", "hot");
    assert_eq!(keyed("hot", 2), Ok(1002));
    assert_eq!(keyed("cold", 3), Ok(3));
    assert_eq!(__private::keys("key::sync"), ["cold", "hot", "cold"]);
    assert_eq!(
        events("key::sync"),
        [
            Event::Entered,
            Event::Success,
            Event::Rejected,
            Event::Entered,
            Event::Success
        ]
    );
    assert_eq!(breaker_keyed(7), 7);
    assert_eq!(__private::keys("key::breaker"), ["7"]);
    assert_eq!(
        events("key::breaker"),
        [Event::BreakerEntered, Event::Success]
    );
    let mut shard = Shard {
        name: "s1".to_owned(),
        hits: 0,
    };
    assert_eq!((shard.hit(), shard.hit()), (1, 2));
    assert_eq!(__private::keys("key::mut_self"), ["s1", "s1"]);
}

#[test]
fn an_async_key_is_borrowed_through_a_wait() {
    assert_eq!(block_on(keyed_async("abc".to_owned())), 3);
    __private::wait("key::async");
    assert_eq!(block_on(keyed_async("de".to_owned())), 2);
    __private::reject_key("key::async", "x");
    assert_eq!(block_on(keyed_async("x".to_owned())), 0);
    assert_eq!(__private::keys("key::async"), ["abc", "de", "x"]);
    assert_eq!(
        events("key::async"),
        [
            Event::Entered,
            Event::Success,
            Event::Waited,
            Event::Entered,
            Event::Success,
            Event::Rejected
        ]
    );
    assert_send(&keyed_async(String::new()));
    let shard = Shard {
        name: "s2".to_owned(),
        hits: 4,
    };
    assert_eq!(block_on(shard.hits_async()), 4);
    assert_eq!(__private::keys("key::breaker_async"), ["s2"]);
    assert_eq!(
        events("key::breaker_async"),
        [Event::BreakerEntered, Event::Success]
    );
}

trait KeyedStore {
    fn get<'life0, 'async_trait>(
        &'life0 self,
        id: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = u32> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait;
}

impl KeyedStore for Db {
    // `#[async_trait]`'s shape: the key, over `self` and an argument, is evaluated
    // inside the boxed future, before the body rebinds them.
    #[allow(clippy::redundant_locals)]
    #[downgrade(point = "key::boxed", default, key = self.base + id)]
    fn get<'life0, 'async_trait>(
        &'life0 self,
        id: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = u32> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let __self = self;
            let id = id;
            let __ret: u32 = {
                YieldOnce(false).await;
                __self.base + id
            };
            #[allow(unreachable_code)]
            __ret
        })
    }
}

#[test]
fn async_trait_methods_are_keyed() {
    let db = Db { base: 10 };
    assert_eq!(block_on(db.get(1)), 11);
    __private::reject_key("key::boxed", "12");
    assert_eq!(block_on(db.get(2)), 0);
    assert_eq!(__private::keys("key::boxed"), ["11", "12"]);
    assert_send(&db.get(1));
}
