//! `#[downgrade]` end to end on the global registry, driven by a manual clock.

use resilience_runtime::{
    downgrade, init_registry, registry, Clock, Downgraded, ManualClock, Policy, Reason,
};
use std::sync::OnceLock;
use std::time::Duration;

fn clock() -> &'static ManualClock {
    static CLOCK: OnceLock<ManualClock> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let c = ManualClock::new();
        init_registry(Clock::manual(&c)).expect("first use of the registry in this binary");
        c
    })
}

fn set(name: &str, policy: Policy) {
    clock();
    registry().set_policy(name, policy).unwrap();
}

fn kill(name: &str) {
    set(name, Policy::builder().max_visits(0).build().unwrap());
}

#[derive(Debug, PartialEq)]
enum AppError {
    Business(u32),
    Down(Reason),
}

impl From<Downgraded> for AppError {
    fn from(d: Downgraded) -> Self {
        AppError::Down(d.reason())
    }
}

#[downgrade(point = "t.result")]
fn no_fallback(x: u32) -> Result<u32, AppError> {
    if x == 0 {
        return Err(AppError::Business(0));
    }
    Ok(x * 2)
}

#[test]
fn without_fallback_a_downgrade_becomes_the_error() {
    set("t.result", Policy::builder().max_visits(2).build().unwrap());
    assert_eq!(no_fallback(1), Ok(2));
    // a business error is returned unchanged and counted as an exception
    assert_eq!(no_fallback(0), Err(AppError::Business(0)));
    assert_eq!(no_fallback(1), Err(AppError::Down(Reason::Visits)));
    let s = registry().stats("t.result").unwrap();
    assert_eq!(
        (s.totals.visits, s.totals.downgrades, s.totals.exceptions),
        (3, 1, 1)
    );
}

fn fb(x: u32, label: &str) -> Result<String, AppError> {
    Ok(format!("fallback {x} {label}"))
}

#[downgrade(point = "t.fallback", fallback = fb)]
fn with_fallback(x: u32, label: &str) -> Result<String, AppError> {
    if x == 0 {
        return Err(AppError::Business(x));
    }
    Ok(format!("real {x} {label}"))
}

#[test]
fn fallback_runs_only_for_downgrades() {
    set(
        "t.fallback",
        Policy::builder().max_exceptions(1).build().unwrap(),
    );
    assert_eq!(with_fallback(1, "a").unwrap(), "real 1 a");
    // a business error never reaches the fallback
    assert_eq!(with_fallback(0, "b"), Err(AppError::Business(0)));
    // now the exception rule trips
    assert_eq!(with_fallback(2, "c").unwrap(), "fallback 2 c");
}

#[downgrade(point = "t.default", default)]
fn with_default() -> Vec<u8> {
    vec![1, 2, 3]
}

#[downgrade(point = "t.default_expr", default = 42)]
fn with_default_expr() -> u32 {
    7
}

#[test]
fn defaults() {
    assert_eq!(with_default(), [1, 2, 3]);
    kill("t.default");
    assert!(with_default().is_empty());
    kill("t.default_expr");
    assert_eq!(with_default_expr(), 42);
}

fn not_found(e: &AppError) -> bool {
    !matches!(e, AppError::Business(404))
}

#[downgrade(point = "t.is_exception", default = Ok(0), is_exception = not_found)]
fn selective(code: u32) -> Result<u32, AppError> {
    Err(AppError::Business(code))
}

#[test]
fn is_exception_selects_counted_errors() {
    set("t.is_exception", Policy::observe());
    let _ = selective(404);
    let _ = selective(404);
    let _ = selective(500);
    assert_eq!(
        registry()
            .stats("t.is_exception")
            .unwrap()
            .totals
            .exceptions,
        1
    );
}

/// A family of guarded functions made by a declarative macro: its fragments reach the
/// attribute wrapped in invisible groups, and read as if written by hand.
macro_rules! guarded_lookup {
    (
        $vis:vis fn $name:ident($($arg:ident: $t:ty),*) -> $ret:ty $body:block,
        $point:literal,
        $fallback:path
    ) => {
        #[downgrade(point = $point, fallback = $fallback)]
        $vis fn $name($($arg: $t),*) -> $ret $body
    };
}

guarded_lookup!(
    fn lookup_a(x: u32, label: &str) -> Result<String, AppError> {
        Ok(format!("real {x} {label}"))
    },
    "t.macro_rules.a",
    fb
);
guarded_lookup!(
    pub(crate) fn lookup_b(x: u32, label: &str) -> Result<String, AppError> {
        Ok(format!("real {x} {label}"))
    },
    "t.macro_rules.b",
    self::fb
);

#[test]
fn an_attribute_inside_a_declarative_macro_works_as_written_by_hand() {
    set("t.macro_rules.a", Policy::observe());
    kill("t.macro_rules.b");
    assert_eq!(lookup_a(1, "a").unwrap(), "real 1 a");
    assert_eq!(lookup_b(2, "b").unwrap(), "fallback 2 b");
    assert_eq!(
        registry().stats("t.macro_rules.a").unwrap().totals.visits,
        1
    );
    assert_eq!(
        registry()
            .stats("t.macro_rules.b")
            .unwrap()
            .totals
            .downgrades,
        1
    );
}

#[downgrade(point = "t.panics", default)]
fn panics(flag: bool) -> u32 {
    if flag {
        panic!("boom");
    }
    1
}

#[test]
fn a_panic_is_an_exception_and_keeps_unwinding() {
    set(
        "t.panics",
        Policy::builder().max_concurrency(1).build().unwrap(),
    );
    assert!(std::panic::catch_unwind(|| panics(true)).is_err());
    assert!(std::panic::catch_unwind(|| panics(true)).is_err());
    assert_eq!(panics(false), 1, "the permit came back after the panics");
    let s = registry().stats("t.panics").unwrap();
    assert_eq!((s.totals.exceptions, s.concurrency), (2, 0));
}

struct Service {
    calls: u32,
}

impl Service {
    fn cached(&self, id: u32) -> String {
        format!("cached {id}")
    }

    #[downgrade(point = "t.method", fallback = Self::cached)]
    fn get(&self, id: u32) -> String {
        format!("fresh {id}")
    }

    fn bump_fallback(&mut self, by: u32) -> u32 {
        self.calls += 100 * by;
        self.calls
    }

    #[downgrade(point = "t.method_mut", fallback = Self::bump_fallback)]
    fn bump(&mut self, by: u32) -> u32 {
        self.calls += by;
        self.calls
    }

    fn into_fallback(self) -> u32 {
        self.calls + 1000
    }

    #[downgrade(point = "t.method_self", fallback = Self::into_fallback)]
    fn into_calls(self) -> u32 {
        self.calls
    }

    #[downgrade(point = "t.method_async", fallback = Self::async_fallback)]
    async fn fetch(&self, id: u32) -> String {
        format!("fetched {id}")
    }

    async fn async_fallback(&self, id: u32) -> String {
        format!("async fallback {id}")
    }
}

#[test]
fn methods_with_every_receiver() {
    let mut s = Service { calls: 0 };
    assert_eq!(s.get(1), "fresh 1");
    kill("t.method");
    assert_eq!(s.get(1), "cached 1");

    assert_eq!(s.bump(1), 1);
    kill("t.method_mut");
    assert_eq!(s.bump(1), 101);

    kill("t.method_self");
    assert_eq!(s.into_calls(), 1101);

    let s = Service { calls: 0 };
    assert_eq!(futures_executor::block_on(s.fetch(3)), "fetched 3");
    kill("t.method_async");
    assert_eq!(futures_executor::block_on(s.fetch(3)), "async fallback 3");
}

#[downgrade(point = "t.generic", default)]
fn generic<T: Clone + Default>(x: &T) -> T {
    x.clone()
}

#[downgrade(point = "t.impl_trait", fallback = impl_fallback)]
fn impl_trait(x: impl Into<u64>) -> impl std::fmt::Display {
    x.into()
}

// With `-> impl Trait` both paths must produce the same concrete type.
fn impl_fallback(_x: impl Into<u64>) -> u64 {
    0
}

#[downgrade(point = "t.pattern", fallback = pattern_fallback)]
fn pattern((a, b): (u32, u32), _: u8) -> u32 {
    a + b
}

fn pattern_fallback(pair: (u32, u32), _x: u8) -> u32 {
    pair.0 * pair.1
}

#[test]
fn generics_impl_trait_and_patterns() {
    assert_eq!(generic(&"x".to_owned()), "x");
    kill("t.generic");
    assert_eq!(generic(&"x".to_owned()), "");
    assert_eq!(impl_trait(7u32).to_string(), "7");
    kill("t.impl_trait");
    assert_eq!(impl_trait(7u32).to_string(), "0");
    assert_eq!(pattern((3, 4), 0), 7);
    kill("t.pattern");
    assert_eq!(pattern((3, 4), 0), 12);
}

trait Repo {
    fn load(&self, id: u32) -> Result<u32, AppError>;
}

struct Db;

impl Repo for Db {
    #[downgrade(point = "t.trait_impl")]
    fn load(&self, id: u32) -> Result<u32, AppError> {
        Ok(id)
    }
}

#[test]
fn trait_impls() {
    assert_eq!(Db.load(5), Ok(5));
    kill("t.trait_impl");
    assert_eq!(Db.load(5), Err(AppError::Down(Reason::Visits)));
}

mod nested {
    #[resilience_runtime::downgrade(default)]
    pub(super) fn default_name() -> u8 {
        1
    }
}

#[test]
fn default_point_name_is_the_module_path() {
    assert_eq!(nested::default_name(), 1);
    assert!(registry()
        .stats("downgrade_macro::nested::default_name")
        .is_some());
}

#[downgrade(point = "t.async_slow", default = 0)]
async fn async_slow(signal: tokio::sync::oneshot::Receiver<()>) -> u32 {
    let _ = signal.await;
    1
}

#[test]
fn a_dropped_future_releases_its_slot_and_counts_nothing() {
    set(
        "t.async_slow",
        Policy::builder().max_concurrency(1).build().unwrap(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_tx, rx) = tokio::sync::oneshot::channel();
        let fut = async_slow(rx);
        let r = tokio::time::timeout(Duration::from_millis(5), fut).await;
        assert!(r.is_err());
        let s = registry().stats("t.async_slow").unwrap();
        assert_eq!((s.concurrency, s.totals.exceptions), (0, 0));
        let (tx, rx) = tokio::sync::oneshot::channel();
        tx.send(()).unwrap();
        assert_eq!(async_slow(rx).await, 1);
    });
}

#[downgrade(point = "t.async_panic", default = 0)]
async fn async_panic() -> u32 {
    panic!("async boom")
}

#[test]
fn an_async_panic_is_an_exception() {
    set(
        "t.async_panic",
        Policy::builder().max_concurrency(1).build().unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let joined = rt.block_on(rt.spawn(async_panic()));
    assert!(joined.unwrap_err().is_panic());
    let s = registry().stats("t.async_panic").unwrap();
    assert_eq!((s.concurrency, s.totals.exceptions), (0, 1));
}

#[downgrade(point = "t.slow", default = 0)]
fn slow(ms: u64) -> u32 {
    clock().advance(Duration::from_millis(ms));
    1
}

fn slow_fallback(_ms: u64) -> u32 {
    // time spent in a fallback must never count as a timeout
    clock().advance(Duration::from_secs(5));
    0
}

#[downgrade(point = "t.slow_fb", fallback = slow_fallback)]
fn slow_with_fallback(ms: u64) -> u32 {
    clock().advance(Duration::from_millis(ms));
    1
}

#[test]
fn timeouts_measure_the_call_not_the_fallback() {
    set(
        "t.slow",
        Policy::builder()
            .timeouts(Duration::from_millis(100), 5)
            .window(10, Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let results: Vec<u32> = (0..10).map(|_| slow(150)).collect();
    assert_eq!(results, [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
    assert_eq!(registry().stats("t.slow").unwrap().totals.timeouts, 5);

    set(
        "t.slow_fb",
        Policy::builder()
            .max_visits(0)
            .timeouts(Duration::from_millis(100), 1)
            .window(10, Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    assert_eq!(slow_with_fallback(1), 0);
    assert_eq!(registry().stats("t.slow_fb").unwrap().totals.timeouts, 0);
}

#[downgrade(point = "t.stack.inner", default = 0)]
#[downgrade(point = "t.stack.outer", default = 1)]
fn stacked() -> u32 {
    2
}

#[test]
fn attributes_stack() {
    assert_eq!(stacked(), 2);
    kill("t.stack.inner");
    assert_eq!(stacked(), 0);
    // Attributes expand top to bottom, each wrapping what is below it, so the one
    // nearest the `fn` is the outermost guard and decides first.
    kill("t.stack.outer");
    assert_eq!(stacked(), 1);
    let inner = registry().stats("t.stack.inner").unwrap().totals.visits;
    assert_eq!(stacked(), 1);
    assert_eq!(
        registry().stats("t.stack.inner").unwrap().totals.visits,
        inner
    );
}

/// Doc comments and other attributes stay on the function.
#[must_use]
#[inline]
#[downgrade(point = "t.attrs", default)]
fn with_attrs() -> u8 {
    #![allow(unused_variables)]
    let unused = 1;
    3
}

#[test]
fn other_attributes_are_kept() {
    assert_eq!(with_attrs(), 3);
}
