//! `key = expr` on `#[downgrade]` / `#[breaker]` end to end on the global registry:
//! each call is counted under its key by the policy's `keys` section and refused with
//! `Reason::HotKey` once its key's limit is used up. Every test has points of its own.

use resilience_runtime::keys::KeyPolicy;
use resilience_runtime::{
    breaker, downgrade, registry, retry, DowngradeEvent, Downgraded, Policy, Reason,
};
use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const MINUTE: Duration = Duration::from_secs(60);

/// Sets a policy on `point` with only a `keys` section.
fn keys(point: &str, keys: resilience_runtime::keys::KeyPolicyBuilder) {
    let policy = Policy::builder()
        .keys(keys.build().unwrap())
        .build()
        .unwrap();
    registry().set_policy(point, policy).unwrap();
}

/// At most `n` calls of each key per minute.
fn limit(point: &str, n: u64) {
    keys(point, KeyPolicy::builder().limit(n, MINUTE));
}

/// (passes, downgrades, downgrades for a hot key, calls in flight) of `point`.
fn counts(point: &str) -> (u64, u64, u64, u64) {
    let s = registry().stats(point).unwrap();
    (
        s.totals.passes,
        s.totals.downgrades,
        s.totals.downgrades_by_reason.get(Reason::HotKey),
        s.concurrency,
    )
}

/// (passes, refused) of `key` on `point`, as `Point::hot_keys` reports it.
fn key_counts(point: &str, key: &str) -> (u64, u64) {
    let hot = registry().point(point).unwrap().hot_keys(100);
    let k = hot
        .iter()
        .find(|k| k.key == key)
        .unwrap_or_else(|| panic!("{key} not tracked: {hot:?}"));
    (k.passes, k.refused)
}

// ---- sync free fns ----

#[downgrade(point = "km.str", default = 0, key = tenant)]
fn by_tenant(tenant: &str) -> u32 {
    u32::try_from(tenant.len()).unwrap()
}

#[test]
fn a_str_key_is_limited_per_value() {
    limit("km.str", 2);
    assert_eq!(by_tenant("alice"), 5);
    assert_eq!(by_tenant("alice"), 5);
    assert_eq!(by_tenant("alice"), 0, "alice's third call in the minute");
    assert_eq!(by_tenant("bob"), 3, "every key has its own limit");
    assert_eq!(counts("km.str"), (3, 1, 1, 0));
    assert_eq!(key_counts("km.str", "alice"), (2, 1));
    assert_eq!(key_counts("km.str", "bob"), (1, 0));
}

#[downgrade(point = "km.u64", key = user_id)]
fn by_user(user_id: u64) -> Result<u64, Downgraded> {
    Ok(user_id * 10)
}

#[test]
fn an_integer_key_is_limited_per_value() {
    limit("km.u64", 1);
    assert_eq!(by_user(7), Ok(70));
    let refused = by_user(7).unwrap_err();
    assert_eq!(refused.reason(), Reason::HotKey);
    assert_eq!(refused.point(), "km.u64");
    assert_eq!(by_user(8), Ok(80));
    assert_eq!(counts("km.u64"), (2, 1, 1, 0));
    // An integer key is shown by its decimal text.
    assert_eq!(key_counts("km.u64", "7"), (1, 1));
}

/// The key is a field, a method call and `&*` of the arguments.
struct Request {
    tenant: String,
}

impl Request {
    fn tenant(&self) -> &str {
        &self.tenant
    }
}

#[downgrade(point = "km.field", default = "refused", key = req.tenant)]
fn by_field(req: &Request) -> &'static str {
    let _ = req;
    "ran"
}

#[downgrade(point = "km.method_call", default = "refused", key = req.tenant())]
fn by_method_call(req: Request) -> &'static str {
    drop(req);
    "ran"
}

#[downgrade(point = "km.deref", default = 0, key = &*name)]
fn by_deref(name: Box<str>) -> usize {
    name.len()
}

#[test]
fn keys_from_fields_method_calls_and_derefs() {
    for point in ["km.field", "km.method_call", "km.deref"] {
        limit(point, 1);
    }
    let req = |t: &str| Request { tenant: t.into() };
    assert_eq!(by_field(&req("a")), "ran");
    assert_eq!(by_field(&req("a")), "refused");
    assert_eq!(by_field(&req("b")), "ran");
    assert_eq!(by_method_call(req("a")), "ran");
    assert_eq!(by_method_call(req("a")), "refused");
    assert_eq!(by_deref("xyz".into()), 3);
    assert_eq!(by_deref("xyz".into()), 0);
    assert_eq!(by_deref("xy".into()), 2);
    assert_eq!(counts("km.field"), (2, 1, 1, 0));
    assert_eq!(counts("km.method_call"), (1, 1, 1, 0));
    assert_eq!(counts("km.deref"), (2, 1, 1, 0));
    assert_eq!(key_counts("km.method_call", "a"), (1, 1));
}

// An owned `String` key borrowed for the entry, then moved by the body (and, when
// refused, by the fallback).
fn owned_refused(name: String, why: Downgraded) -> String {
    format!("{name} refused: {}", why.reason())
}

#[downgrade(point = "km.owned", key = name, fallback_with_reason = owned_refused)]
fn owned(name: String) -> String {
    let moved = name;
    moved + " ran"
}

#[test]
fn an_owned_key_is_moved_by_the_body_and_the_fallback_after_its_entry() {
    limit("km.owned", 1);
    assert_eq!(owned("ann".into()), "ann ran");
    assert_eq!(owned("ann".into()), "ann refused: hot_key");
    assert_eq!(owned("bo".into()), "bo ran");
    assert_eq!(counts("km.owned"), (2, 1, 1, 0));
}

// ---- methods ----

struct Account {
    id: u64,
    tenant: String,
    calls: u32,
}

impl Account {
    #[downgrade(point = "km.self", default = u32::MAX, key = self.id)]
    fn balance(&self) -> u32 {
        u32::try_from(self.id).unwrap()
    }

    // `&mut self`: the key borrows a field for the entry; the body then mutates.
    #[downgrade(point = "km.mut_self", fallback = Self::busy, key = self.tenant)]
    fn record(&mut self, n: u32) -> u32 {
        self.calls += n;
        self.calls
    }

    fn busy(&mut self, n: u32) -> u32 {
        let _ = n;
        0
    }
}

#[test]
fn methods_are_keyed_by_a_field_of_self() {
    limit("km.self", 1);
    limit("km.mut_self", 2);
    let account = |id: u64, tenant: &str| Account {
        id,
        tenant: tenant.into(),
        calls: 0,
    };
    let (mut a, b) = (account(1, "t"), account(2, "t"));
    assert_eq!(a.balance(), 1);
    assert_eq!(a.balance(), u32::MAX);
    assert_eq!(b.balance(), 2);
    assert_eq!(counts("km.self"), (2, 1, 1, 0));

    let mut c = account(3, "u");
    assert_eq!(a.record(5), 5);
    assert_eq!(a.record(5), 10);
    assert_eq!(a.record(1), 0, "tenant t's third call: the fallback");
    assert_eq!(c.record(1), 1, "tenant u");
    assert_eq!(a.calls, 10);
    assert_eq!(counts("km.mut_self"), (3, 1, 1, 0));
    assert_eq!(key_counts("km.mut_self", "t"), (2, 1));
}

// ---- generics ----

#[downgrade(point = "km.generic", default = None, key = key)]
fn generic<K: Hash + Display + Clone>(key: K) -> Option<K> {
    Some(key)
}

#[downgrade(point = "km.as_ref", default = 0, key = name.as_ref())]
fn as_ref<S: AsRef<str>>(name: S) -> usize {
    name.as_ref().len()
}

#[test]
fn generic_keys() {
    limit("km.generic", 1);
    limit("km.as_ref", 1);
    assert_eq!(generic(3u8), Some(3));
    assert_eq!(generic(3u8), None);
    assert_eq!(generic("x"), Some("x"));
    assert_eq!(generic(String::from("x")), None, "a `String` is its `str`");
    assert_eq!(counts("km.generic"), (2, 2, 2, 0));
    assert_eq!(as_ref("abc"), 3);
    assert_eq!(as_ref(String::from("abc")), 0);
    assert_eq!(counts("km.as_ref"), (1, 1, 1, 0));
}

// ---- `#[breaker(key = ...)]` ----

#[breaker(point = "km.breaker", default = -1, key = shard)]
fn breaker_keyed(shard: u32) -> i64 {
    i64::from(shard)
}

#[test]
fn breaker_calls_are_keyed_too() {
    limit("km.breaker", 2);
    assert_eq!(breaker_keyed(1), 1);
    assert_eq!(breaker_keyed(1), 1);
    assert_eq!(breaker_keyed(1), -1);
    assert_eq!(breaker_keyed(2), 2);
    assert_eq!(counts("km.breaker"), (3, 1, 1, 0));
    // The breaker was installed as for any `#[breaker]`.
    assert!(registry().stats("km.breaker").unwrap().breaker.is_some());
}

// ---- overrides ----

#[downgrade(point = "km.overrides", default = false, key = user)]
fn overridden(user: &str) -> bool {
    let _ = user;
    true
}

#[test]
fn overrides_raise_and_close_a_key() {
    keys(
        "km.overrides",
        KeyPolicy::builder()
            .limit(1, MINUTE)
            .override_limit("vip", 100)
            .override_limit("blocked", 0),
    );
    let runs = |user: &str, n: usize| (0..n).filter(|_| overridden(user)).count();
    assert_eq!(runs("vip", 50), 50);
    assert_eq!(runs("blocked", 3), 0);
    assert_eq!(runs("someone", 3), 1);
    assert_eq!(counts("km.overrides"), (51, 5, 5, 0));
    assert_eq!(key_counts("km.overrides", "vip"), (50, 0));
    assert_eq!(key_counts("km.overrides", "blocked"), (0, 3));
}

// ---- calls in flight per key ----

static DEPTH: AtomicU32 = AtomicU32::new(0);

/// Calls itself once with the same key while it runs, and once with another.
#[downgrade(point = "km.in_flight", default = "refused".to_owned(), key = key)]
fn reentrant(key: &str, inner: bool) -> String {
    if inner {
        let same = reentrant(key, false);
        let other = reentrant("other", false);
        format!("ran, same: {same}, other: {other}")
    } else {
        "ran".to_owned()
    }
}

#[downgrade(point = "km.in_flight_panic", default = 0, key = key)]
fn panics(key: u64, panic: bool) -> u64 {
    DEPTH.fetch_add(1, Ordering::SeqCst);
    assert!(!panic, "the body panics");
    key
}

#[test]
fn a_key_in_flight_holds_its_slot_until_the_call_ends() {
    keys("km.in_flight", KeyPolicy::builder().max_concurrency(1));
    assert_eq!(
        reentrant("k", true),
        "ran, same: refused, other: ran",
        "k has its one call in flight"
    );
    // Released when the call returned.
    assert_eq!(reentrant("k", false), "ran");
    assert_eq!(counts("km.in_flight"), (3, 1, 1, 0));
}

#[test]
fn a_panicking_call_releases_its_key() {
    keys(
        "km.in_flight_panic",
        KeyPolicy::builder().max_concurrency(1),
    );
    let caught = std::panic::catch_unwind(|| panics(9, true));
    assert!(caught.is_err());
    assert_eq!(panics(9, false), 9, "the panic released key 9");
    assert_eq!(DEPTH.load(Ordering::SeqCst), 2);
    let s = registry().stats("km.in_flight_panic").unwrap();
    assert_eq!((s.totals.passes, s.totals.exceptions), (2, 1));
    assert_eq!(counts("km.in_flight_panic"), (2, 0, 0, 0));
}

// ---- listener events ----

#[downgrade(point = "km.events", default, key = user)]
fn evented(user: &str) -> u32 {
    let _ = user;
    1
}

#[test]
fn a_refusal_event_names_the_key() {
    let seen: Arc<Mutex<Vec<DowngradeEvent>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let id = registry().add_listener(move |e| {
        if e.point == "km.events" {
            sink.lock().unwrap().push(e.clone());
        }
    });
    limit("km.events", 1);
    let long = "a-rather-long-user-name-of-forty-bytes!!";
    assert_eq!(evented("carol"), 1);
    assert_eq!(evented("carol"), 0);
    assert_eq!(evented(long), 1);
    assert_eq!(evented(long), 0);
    assert!(registry().flush_listeners(Duration::from_secs(20)));
    registry().remove_listener(id);
    let seen = seen.lock().unwrap();
    let keys: Vec<_> = seen.iter().map(|e| (e.reason, e.key.clone())).collect();
    assert_eq!(
        keys,
        [
            (Reason::HotKey, Some("carol".to_owned())),
            // Cut at `KEY_TEXT_MAX` bytes.
            (Reason::HotKey, Some(format!("{}…", &long[..30]))),
        ]
    );
    assert_eq!(counts("km.events"), (2, 2, 2, 0));
}

// ---- stacking ----

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, PartialEq)]
enum AppError {
    Busy,
    Down(Reason),
}

impl From<Downgraded> for AppError {
    fn from(d: Downgraded) -> Self {
        AppError::Down(d.reason())
    }
}

// Every attempt is a call of the key: the third is refused and ends the call.
#[retry(attempts = 5, backoff = "fixed", base = "1ms", jitter = "none")]
#[downgrade(point = "km.retry", key = id)]
fn retried(id: u64) -> Result<u64, AppError> {
    ATTEMPTS.fetch_add(1, Ordering::SeqCst);
    let _ = id;
    Err(AppError::Busy)
}

#[test]
fn under_retry_every_attempt_counts_for_the_key() {
    limit("km.retry", 2);
    assert_eq!(retried(4), Err(AppError::Down(Reason::HotKey)));
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 2);
    assert_eq!(counts("km.retry"), (2, 1, 1, 0));
    assert_eq!(key_counts("km.retry", "4"), (2, 1));
}

// Two attributes, two keys; the one closest to the fn is asked first.
#[downgrade(point = "km.stack_second", default = 0, key = tenant)]
#[breaker(point = "km.stack_first", default = 0, key = user)]
fn stacked(tenant: &str, user: u64) -> u64 {
    let _ = tenant;
    user
}

#[test]
fn stacked_attributes_each_count_their_own_key() {
    limit("km.stack_first", 1);
    limit("km.stack_second", 3);
    assert_eq!(stacked("t", 1), 1);
    assert_eq!(stacked("t", 1), 0, "user 1 refused by the breaker's point");
    assert_eq!(stacked("t", 2), 2);
    assert_eq!(stacked("t", 3), 3);
    assert_eq!(
        stacked("t", 4),
        0,
        "tenant t's fourth call, refused by the second"
    );
    assert_eq!(counts("km.stack_first"), (4, 1, 1, 0));
    assert_eq!(counts("km.stack_second"), (3, 1, 1, 0));
}

// Patterns are destructured before the entry without a fallback.
#[downgrade(point = "km.pattern", default = 0, key = a)]
fn pattern((a, b): (u64, u64)) -> u64 {
    a + b
}

#[test]
fn a_key_from_a_pattern_argument() {
    limit("km.pattern", 1);
    assert_eq!(pattern((1, 2)), 3);
    assert_eq!(pattern((1, 5)), 0);
    assert_eq!(pattern((2, 5)), 7);
    assert_eq!(counts("km.pattern"), (2, 1, 1, 0));
}

// With `priority`: both are expressions over the arguments.
#[downgrade(
    point = "km.priority",
    default = 0,
    key = user,
    priority = if user == 1 { resilience_runtime::priority::Priority::Critical } else { resilience_runtime::priority::Priority::Default }
)]
fn prioritised(user: u64) -> u64 {
    user
}

#[test]
fn key_and_priority_together() {
    limit("km.priority", 1);
    assert_eq!(prioritised(1), 1);
    assert_eq!(prioritised(1), 0);
    assert_eq!(prioritised(2), 2);
    assert_eq!(counts("km.priority"), (2, 1, 1, 0));
}

// ---- async ----

/// Pending on its first poll, ready on the next.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(Waker::noop())).is_ready()
}

async fn fetch_refused(user: String, why: Downgraded) -> Result<String, Downgraded> {
    assert_eq!(user, "dee", "the fallback gets the argument");
    Err(why)
}

/// Keyed by an owned `String`, which the body then moves.
#[downgrade(point = "km.async", key = user, fallback_with_reason = fetch_refused)]
async fn fetch(user: String) -> Result<String, Downgraded> {
    YieldOnce(false).await;
    let moved = user;
    Ok(moved + "!")
}

#[tokio::test]
async fn an_async_fn_keyed_by_a_string() {
    limit("km.async", 2);
    assert_eq!(fetch("dee".into()).await.unwrap(), "dee!");
    assert_eq!(fetch("dee".into()).await.unwrap(), "dee!");
    let refused = fetch("dee".into()).await.unwrap_err();
    assert_eq!(refused.reason(), Reason::HotKey);
    assert_eq!(fetch("eve".into()).await.unwrap(), "eve!");
    assert_eq!(counts("km.async"), (3, 1, 1, 0));
    assert_eq!(key_counts("km.async", "dee"), (2, 1));
}

#[downgrade(point = "km.async_in_flight", default = 0, key = user)]
async fn slow(user: u64) -> u64 {
    YieldOnce(false).await;
    user
}

#[tokio::test]
async fn a_dropped_async_call_releases_its_key() {
    keys(
        "km.async_in_flight",
        KeyPolicy::builder().max_concurrency(1),
    );
    {
        let mut first = pin!(slow(5));
        assert!(!poll_once(first.as_mut()), "waits in its body, key 5 held");
        assert_eq!(slow(5).await, 0, "key 5 has its one call in flight");
        assert_eq!(slow(6).await, 6);
        // Per-key limits alone keep no count of the point's calls in flight (the key
        // counts its own): the point pays for what its policy uses.
        assert_eq!(
            registry().stats("km.async_in_flight").unwrap().concurrency,
            0
        );
    }
    // Dropped mid-await: a cancelled call, key 5 released.
    assert_eq!(slow(5).await, 5);
    let s = registry().stats("km.async_in_flight").unwrap();
    assert_eq!(s.totals.cancelled, 1);
    assert_eq!(counts("km.async_in_flight"), (3, 1, 1, 0));
}

#[tokio::test]
async fn a_panicking_async_call_releases_its_key() {
    keys("km.async_panic", KeyPolicy::builder().max_concurrency(1));
    let caught = tokio::spawn(async_panics(3, true)).await;
    assert!(caught.unwrap_err().is_panic());
    assert_eq!(async_panics(3, false).await, 3);
    assert_eq!(counts("km.async_panic"), (2, 0, 0, 0));
}

#[downgrade(point = "km.async_panic", default = 0, key = key)]
async fn async_panics(key: u64, panic: bool) -> u64 {
    YieldOnce(false).await;
    assert!(!panic, "the body panics");
    key
}

// `&mut self`, a field as key, a deadline and a fallback: the body borrows `self`
// (the fallback takes it after a cut), the key borrowed it before.
struct Client {
    tenant: String,
    sent: u32,
}

impl Client {
    #[breaker(
        point = "km.async_mut",
        timeout = "10s",
        fallback_with_reason = Self::refused,
        key = self.tenant
    )]
    async fn send(&mut self, msg: &str) -> Result<u32, Downgraded> {
        YieldOnce(false).await;
        self.sent += u32::try_from(msg.len()).unwrap();
        Ok(self.sent)
    }

    async fn refused(&mut self, msg: &str, why: Downgraded) -> Result<u32, Downgraded> {
        assert_eq!(msg, "hi");
        self.sent += 100;
        Err(why)
    }
}

#[tokio::test]
async fn an_async_mut_self_method_keyed_by_a_field() {
    limit("km.async_mut", 1);
    let mut c = Client {
        tenant: "acme".into(),
        sent: 0,
    };
    assert_eq!(c.send("hi").await, Ok(2));
    assert_eq!(c.send("hi").await.unwrap_err().reason(), Reason::HotKey);
    assert_eq!(c.sent, 102, "the fallback had `&mut self`");
    c.tenant = "other".into();
    assert_eq!(c.send("hi").await, Ok(104));
    assert_eq!(counts("km.async_mut"), (2, 1, 1, 0));
}

/// A keyed async call is `Send`: it can be spawned on a multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_async_calls_are_send() {
    fn assert_send<T: Send>(t: T) -> T {
        t
    }
    keys("km.async_send", KeyPolicy::builder().limit(3, MINUTE));
    let calls: Vec<_> = (0..4)
        .map(|_| tokio::spawn(assert_send(sent("k".to_owned()))))
        .collect();
    let mut ran = 0;
    for call in calls {
        ran += call.await.unwrap();
    }
    assert_eq!(ran, 3);
    assert_eq!(counts("km.async_send"), (3, 1, 1, 0));
}

#[downgrade(point = "km.async_send", default = 0, key = key)]
async fn sent(key: String) -> u32 {
    YieldOnce(false).await;
    drop(key);
    1
}

#[downgrade(point = "km.queued", default = 0, key = key)]
async fn queued(key: &str) -> usize {
    YieldOnce(false).await;
    key.len()
}

#[tokio::test]
async fn a_keyed_call_that_waits_in_the_queue_keeps_its_key() {
    let keys = KeyPolicy::builder().limit(1, MINUTE).build().unwrap();
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(8, Duration::from_secs(30))
        .keys(keys)
        .build()
        .unwrap();
    registry().set_policy("km.queued", policy).unwrap();
    let long = "k".repeat(40);
    let mut waiting_x = Box::pin(queued("x"));
    let mut waiting_long = Box::pin(queued(&long));
    {
        let mut running = pin!(queued("x"));
        assert!(!poll_once(running.as_mut()), "runs, holding the one slot");
        assert!(!poll_once(waiting_x.as_mut()));
        assert!(!poll_once(waiting_long.as_mut()));
        let q = registry().stats("km.queued").unwrap().queue.unwrap();
        assert_eq!(q.waiting, 2);
    }
    // The slot is free again: the oldest waiter meets key x's limit, used by the call
    // dropped above; the next one runs under its own key.
    assert_eq!(waiting_x.await, 0);
    assert_eq!(waiting_long.await, 40);
    assert_eq!(key_counts("km.queued", "x"), (1, 1));
    assert_eq!(
        key_counts("km.queued", &format!("{}…", &long[..30])),
        (1, 0)
    );
    let s = registry().stats("km.queued").unwrap();
    assert_eq!(s.totals.downgrades_by_reason.get(Reason::HotKey), 1);
    assert_eq!((s.totals.passes, s.totals.cancelled), (2, 1));
}
