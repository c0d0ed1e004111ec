#![doc = include_str!("../README.md")]

mod args;
mod errors;
mod expand;
mod item;
// The point-name rule, shared with the runtime and the admin console: a copy of the
// runtime's `src/name.rs` (a proc-macro crate cannot depend on the runtime, which
// depends on it; the workspace's `checks` crate tests that the copies are equal).
#[allow(dead_code, unreachable_pub)]
mod name;
mod paths;
mod shape;
mod validate;

use proc_macro::TokenStream;

/// Guards a function with a downgrade point: on every call the runtime
/// decides whether to run the function or to downgrade it.
///
/// A downgraded call does not run the body; it returns the [`fallback`](#fallback)'s
/// result, the [`default`](#default) value, or, when neither is given, an
/// `Err` built from the runtime's `Downgraded`. Whether and when calls are
/// downgraded is policy, configured at run time for the point's name
/// through `resilience_runtime::policy`; the attribute only names the point
/// and says what to return.
///
/// A call that runs reports its outcome to the runtime: an `Err` return
/// counts as an exception (see [`is_exception`](#is_exception)), as does a
/// panic, which is recorded and then resumed. For an `async fn`, dropping the
/// future before it completes reports a cancelled call, not an exception.
///
/// ```ignore
/// use resilience_runtime::{downgrade, Downgraded};
///
/// #[derive(Debug)]
/// enum Error {
///     Downgraded(Downgraded),
///     Io(std::io::Error),
/// }
///
/// impl From<Downgraded> for Error {
///     fn from(d: Downgraded) -> Self {
///         Error::Downgraded(d)
///     }
/// }
///
/// // No fallback: a downgraded call returns `Err(Error::Downgraded(..))`.
/// #[downgrade]
/// fn load_profile(user: u64) -> Result<Profile, Error> {
///     fetch_profile(user).map_err(Error::Io)
/// }
/// ```
///
/// The signature is left as written (generics, `where` clauses, receivers,
/// `unsafe`, `async`, other attributes and doc comments); only the body is
/// wrapped. It works on free functions, inherent methods, methods in trait
/// impls and trait methods with a default body.
///
/// It can be stacked with `#[breaker]` in either order. The attribute
/// written closest to the `fn` is asked first on each call (attributes
/// expand top to bottom, and each wraps the body the previous one produced):
///
/// ```ignore
/// // Each call asks the breaker first; if it lets the call through, the
/// // downgrade point decides whether the body runs.
/// #[downgrade(default)]
/// #[breaker]
/// fn score(user: u64) -> u32 { /* ... */ }
/// ```
///
/// # Arguments
///
/// All arguments are optional and may come in any order, each at most once.
///
/// ## `point`
///
/// The name of the point, a non-empty string literal. Policies are attached
/// to this name. Defaults to the function's path,
/// `concat!(module_path!(), "::", "<fn name>")`, e.g. `"my_crate::orders::get"`.
/// Two methods with the same name in one module (say `get` in two impls)
/// share that default, so give at least one of them a `point`.
///
/// ```ignore
/// #[downgrade(point = "orders::get")]
/// fn get_order(id: u64) -> Result<Order, Error> { /* ... */ }
/// ```
///
/// ## `fallback`
///
/// A path to a function (`name`, `Self::name`, `module::name`) called
/// instead of the body when the call is downgraded. It receives the same
/// arguments by value, the receiver first (`Self::cached(self, id)`), and
/// must return the same type; for an `async fn` it must be `async` too, and
/// it is awaited. Errors about its signature point at the path in the attribute.
///
/// ```ignore
/// impl Catalog {
///     #[downgrade(fallback = Self::cached_price)]
///     async fn price(&self, sku: &str) -> Result<Price, Error> {
///         self.pricing_service.quote(sku).await
///     }
///
///     async fn cached_price(&self, sku: &str) -> Result<Price, Error> {
///         self.cache.price(sku).ok_or(Error::NoPrice)
///     }
/// }
/// ```
///
/// Parameters written as patterns (`(a, b): (i32, i32)`, `_: u8`) are given
/// a hidden name in the signature so that they can be passed on, and
/// destructured again at the start of the body. Cannot be combined with
/// `default` or `fallback_with_reason`.
///
/// ## `fallback_with_reason`
///
/// Like [`fallback`](#fallback), with one more, last argument: the
/// `resilience_runtime::Downgraded` that says why the call did not run, its
/// `reason()` (the rule that refused it, `Reason::BreakerOpen`, or
/// `Reason::Deadline` for a call cut by [`timeout`](#timeout)) and its
/// `point()`. Its signature is checked by the compiler like `fallback`'s, and
/// errors point at the path. Cannot be combined with `fallback` or `default`.
///
/// ```ignore
/// async fn stale_price(sku: &str, why: Downgraded) -> Result<Price, Error> {
///     tracing::warn!(sku, reason = %why.reason(), "serving a stale price");
///     cache().price(sku).ok_or(Error::NoPrice)
/// }
///
/// #[downgrade(timeout = "300ms", fallback_with_reason = stale_price)]
/// async fn price(sku: &str) -> Result<Price, Error> { /* ... */ }
/// ```
///
/// ## `default`
///
/// The value returned when the call is downgraded: `default = expr`
/// evaluates `expr` (only on a downgraded call); a bare `default` returns
/// `Default::default()`. Cannot be combined with `fallback` or
/// `fallback_with_reason`.
///
/// ```ignore
/// #[downgrade(default = Vec::new())]
/// fn recommendations(user: u64) -> Vec<Item> { /* ... */ }
///
/// #[downgrade(default)]
/// fn badge_count(user: u64) -> u32 { /* ... */ }
/// ```
///
/// Without `fallback` or `default`, the function must return a
/// `Result<T, E>` where `E: From<Downgraded>`; the compiler says so at the
/// return type otherwise.
///
/// ## `is_exception`
///
/// A path to a predicate `fn(&E) -> bool` that decides which `Err(e)` values
/// count as exceptions for the point's statistics. Without it, every `Err`
/// counts (and a function that does not return a `Result` never reports
/// one, only panics). The function must return a `Result`.
///
/// ```ignore
/// fn is_server_error(e: &HttpError) -> bool {
///     e.status() >= 500
/// }
///
/// // A 404 is a normal answer, not a sign that the backend is failing.
/// #[downgrade(is_exception = is_server_error)]
/// fn get(url: &str) -> Result<Response, HttpError> { /* ... */ }
/// ```
///
/// ## `timeout`
///
/// A deadline for each call of an `async fn`, a string literal checked at
/// compile time: a number and a unit (`"200ms"`, `"1.5s"`, `"1m 30s"`; units
/// `ns`, `us`, `ms`, `s`, `m`, `h`), more than zero and at most `"24h"`. A call
/// still running at its deadline is cut: its future is dropped, the runtime
/// counts a pass and a timeout (and a breaker failure), and the function
/// returns what a downgraded call returns, the `Downgraded` saying
/// `Reason::Deadline`. The point's policy can change the deadline at run time
/// (`call_timeout`), which then replaces this one. Needs the runtime's `tokio`
/// feature (a compile error says so otherwise) and a tokio runtime with its
/// time driver.
///
/// Only on an `async fn` (or an `#[async_trait]` method): a sync body cannot
/// be cancelled once it runs, so `timeout` there is a compile error; count
/// slow calls with the policy's `timeouts(threshold, n)` rule instead. With a
/// `fallback` or `fallback_with_reason`, which take the arguments after a
/// cut, the body borrows the arguments instead of taking them: a body that
/// consumes one is a "use of moved value" error (borrow or clone it). An
/// `#[async_trait]` body takes every argument (`let id = id;`), so there a
/// fallback after a cut works with `Copy` arguments (references included)
/// only; use `default` otherwise.
///
/// ```ignore
/// #[downgrade(timeout = "200ms", default = Vec::new())]
/// async fn suggestions(query: &str) -> Vec<String> { /* ... */ }
/// ```
///
/// ## `priority`
///
/// The call's `resilience_runtime::priority::Priority`, an expression over the
/// arguments (evaluated once per call, before its entry). It is set for the
/// entry only (a wait in the point's queue keeps it; the body does not see it):
/// under overload the queue serves higher tiers first and evicts lower ones, the
/// gradient limit keeps its `critical_reserve` for critical calls, and the SRE
/// breaker drops the lowest tier first. A value of another type is a type error
/// at the expression.
///
/// ```ignore
/// #[downgrade(priority = if user.is_paying() { Priority::Critical } else { Priority::Default })]
/// async fn checkout(user: &User, cart: Cart) -> Result<Order, Error> { /* ... */ }
/// ```
///
/// ## `key`
///
/// The call's hot key, an expression over the arguments: `key = user_id`,
/// `key = req.tenant`, `key = req.tenant()`, `key = self.shard`, `key = &*name`.
/// When the point's policy has a `keys` section
/// (`resilience_runtime::keys::KeyPolicy`), every value of the key has limits of
/// its own (calls per period, calls in flight, overrides for chosen values) and a
/// call whose key has used them up is downgraded with `Reason::HotKey`: it gets
/// the fallback, the default or the `Err` as any refused call, and its listener
/// event names the key (`DowngradeEvent::key`). Without a `keys` section the key
/// is not looked at.
///
/// The key is evaluated once per call, before the entry, and only borrowed
/// (`&(expr)`): nothing is moved, cloned or allocated for a `&str`, `String` or
/// integer key, and the body (or the fallback) still takes the arguments the key
/// borrowed. Its type must implement `resilience_runtime::keys::HotKey`, that is
/// `Hash` and `Display` (every string and integer type does); a key of another
/// type is a compile error at the expression. A key held by an async call that
/// waits in the point's queue is copied as text, so the call's future stays `Send`
/// (with a `Sync` key type).
///
/// A key that starts from a name which is no argument (`key = usr_id` on
/// `fn get(user_id: u64)`) is a compile error at that name. With `fallback` or
/// `fallback_with_reason` a parameter written as a pattern (`(a, b): (u64, u64)`)
/// is destructured only inside the body, after the entry, so a key naming `a` is a
/// compile error there: name the parameter (`pair: (u64, u64)`) and write
/// `key = pair.0`. `#[retry]` takes no `key`: put it on the `#[downgrade]` or
/// `#[breaker]` stacked with it (below a `#[retry]`, every attempt is a call of the
/// key).
///
/// ```ignore
/// // At most 100 calls a minute per user, 5 in flight; "batch" gets 1000.
/// // keys = KeyPolicy::builder().limit(100, Duration::from_secs(60))
/// //     .max_concurrency(5).override_limit("batch", 1000).build()?
/// #[downgrade(point = "profiles.get", key = user_id, fallback_with_reason = busy)]
/// fn get_profile(user_id: &str) -> Result<Profile, Error> { /* ... */ }
///
/// fn busy(user_id: &str, why: Downgraded) -> Result<Profile, Error> {
///     // why.reason() == Reason::HotKey when `user_id` used up its limits
///     Err(Error::Busy(why))
/// }
/// ```
///
/// The runtime's `keys` module has the same example, compiled.
///
/// ## `crate`
///
/// The path to the runtime crate, as a string, for when it is renamed in
/// `Cargo.toml` or re-exported from another crate. Defaults to
/// `"::resilience_runtime"`.
///
/// ```ignore
/// // Cargo.toml: rt = { package = "resilience-runtime", version = "0.1" }
/// #[rt::downgrade(crate = "::rt")]
/// fn get(id: u64) -> Result<Item, Error> { /* ... */ }
/// ```
///
/// # Errors
///
/// Compile errors, all reported in one build, for: an unknown or duplicate
/// argument, an empty `point`, two of `fallback`, `fallback_with_reason` and
/// `default` together, a `timeout` that is not a duration string, is zero or
/// longer than a day, or is on a sync fn, a `key` that names no argument, and
/// use on anything but a function with a body, or on a `const fn`, an `extern`
/// fn or a variadic fn.
///
/// ```text
/// error: unknown argument `fallbak`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `priority`, `key`, `crate`; did you mean `fallback`?
///  --> src/orders.rs:3:13
///   |
/// 3 | #[downgrade(fallbak = cached)]
///   |             ^^^^^^^
/// ```
///
/// # `#[async_trait]`
///
/// Inside an `#[async_trait]` impl or trait, `#[async_trait]` expands first
/// and turns the method into a fn returning
/// `Pin<Box<dyn Future<Output = R> + Send + '_>>` with a body of
/// `Box::pin(async move { .. })`. That shape is recognised: the guard runs
/// inside the boxed future, exactly as for an `async fn .. -> R`, and a
/// `fallback` is awaited. Any fn with that return type and exactly that body
/// is treated the same way.
///
/// # Limitations
///
/// A sync body runs inside a closure, so `Location::caller()` in a
/// `#[track_caller]` function sees the wrapper, not the caller.
#[proc_macro_attribute]
pub fn downgrade(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::downgrade::expand(args.into(), item.into()).into()
}

/// Guards a function with a circuit breaker: while the point's breaker is
/// open, calls are rejected without running the body.
///
/// The breaker counts exceptions (an `Err` return, see
/// [`is_exception`](#is_exception), or a panic) over a sliding window and
/// opens when the point's policy says so; after a cool-down it lets trial
/// calls through (half-open) and closes again once they succeed. The
/// thresholds are policy, configured at run time for the point's name
/// through `resilience_runtime::policy`. For an `async fn`, dropping the
/// future before it completes counts as a cancelled call, neither success
/// nor exception.
///
/// A rejected call returns the [`fallback`](#fallback)'s result, the
/// [`default`](#default) value, or, when neither is given, an `Err` built
/// from the runtime's `Downgraded`.
///
/// ```ignore
/// use resilience_runtime::breaker;
///
/// #[breaker(point = "payments::charge")]
/// async fn charge(card: &Card, cents: u64) -> Result<Receipt, PaymentError> {
///     gateway().charge(card, cents).await
/// }
/// ```
///
/// The signature is left as written; only the body is wrapped. It works on
/// free functions, inherent methods, methods in trait impls and trait
/// methods with a default body, and can be stacked with `#[downgrade]` in
/// either order: the attribute written closest to the `fn` is asked first
/// on each call.
///
/// # Arguments
///
/// All arguments are optional and may come in any order, each at most once.
///
/// ## `point`
///
/// The name of the point, a non-empty string literal; the breaker policy is
/// attached to it. Defaults to `concat!(module_path!(), "::", "<fn name>")`.
/// Two methods with the same name in one module share that default, so give
/// at least one of them a `point`.
///
/// ```ignore
/// #[breaker(point = "inventory::reserve")]
/// fn reserve(sku: &str, n: u32) -> Result<Reservation, Error> { /* ... */ }
/// ```
///
/// ## `fallback`
///
/// A path to a function called instead of the body while the breaker
/// rejects calls. It receives the same arguments by value, the receiver first
/// (`Self::stale(self, sku)`), and must return the same type; for an
/// `async fn` it must be `async` too. Errors about its signature point at the
/// path in the attribute. Cannot be combined with `default`.
///
/// ```ignore
/// impl Stock {
///     #[breaker(fallback = Self::stale_level)]
///     fn level(&self, sku: &str) -> Result<u32, Error> {
///         self.warehouse.level(sku)
///     }
///
///     fn stale_level(&self, sku: &str) -> Result<u32, Error> {
///         Ok(self.snapshot.level(sku))
///     }
/// }
/// ```
///
/// ## `fallback_with_reason`
///
/// Like `fallback`, with the `Downgraded` as one more, last argument: its
/// `reason()` is `Reason::BreakerOpen` while the breaker rejects calls (or a
/// policy rule's reason, if the point has a policy too), and
/// `Reason::Deadline` for a call cut by `timeout`. Cannot be combined with
/// `fallback` or `default`. See `#[downgrade]`.
///
/// ## `default`
///
/// The value returned while the breaker rejects calls: `default = expr`
/// (evaluated only then), or a bare `default` for `Default::default()`.
/// Cannot be combined with `fallback` or `fallback_with_reason`.
///
/// ```ignore
/// #[breaker(default = Suggestions::none())]
/// fn suggestions(query: &str) -> Suggestions { /* ... */ }
///
/// #[breaker(default)]
/// fn unread(user: u64) -> u32 { /* ... */ }
/// ```
///
/// Without `fallback` or `default`, the function must return a
/// `Result<T, E>` where `E: From<Downgraded>`.
///
/// ## `is_exception`
///
/// A path to a predicate `fn(&E) -> bool` that decides which `Err(e)`
/// values count towards opening the breaker. Without it, every `Err` counts.
/// The function must return a `Result`.
///
/// ```ignore
/// fn is_transient(e: &DbError) -> bool {
///     matches!(e, DbError::Timeout | DbError::ConnectionLost)
/// }
///
/// // A constraint violation is the caller's fault: it must not open the breaker.
/// #[breaker(is_exception = is_transient)]
/// fn insert(row: &Row) -> Result<(), DbError> { /* ... */ }
/// ```
///
/// ## `timeout`
///
/// A deadline for each call of an `async fn`, as for `#[downgrade]`: a call
/// still running then is cut, counts as a failure for the breaker (and as a
/// timeout), and returns what a rejected call returns. Only on an `async fn`;
/// the point's `call_timeout` overrides it; needs the runtime's `tokio`
/// feature.
///
/// ```ignore
/// // Three calls in a row cut at 500 ms open a breaker with
/// // `consecutive_failures: Some(3)`.
/// #[breaker(timeout = "500ms", default)]
/// async fn recommendations(user: u64) -> Vec<Item> { /* ... */ }
/// ```
///
/// ## `key`
///
/// The call's hot key, an expression over the arguments, as for `#[downgrade]`:
/// with a `keys` section in the point's policy, each value of the key has limits
/// of its own, checked after the point's rules and its breaker; a call whose key
/// used them up is rejected with `Reason::HotKey`, which is never a failure for the
/// breaker. The key is evaluated once, before the entry, and borrowed; it must be
/// `Hash` and `Display`.
///
/// ```ignore
/// // One slow tenant cannot take every call in flight of the shared backend.
/// #[breaker(point = "search.query", key = req.tenant, default = Hits::none())]
/// async fn search(req: &Query) -> Hits { /* ... */ }
/// ```
///
/// ## `crate`
///
/// The path to the runtime crate, as a string, for when it is renamed or
/// re-exported. Defaults to `"::resilience_runtime"`.
///
/// ```ignore
/// #[my_platform::breaker(crate = "::my_platform::resilience")]
/// fn call() -> Result<(), Error> { /* ... */ }
/// ```
///
/// # Errors
///
/// The same compile errors as `#[downgrade]`, naming `#[breaker]`: an
/// unknown or duplicate argument, an empty `point`, two of `fallback`,
/// `fallback_with_reason` and `default` together, a bad `timeout` or one on a
/// sync fn, a `key` that names no argument, and use on anything but a function with a body, or on a
/// `const fn`, an `extern` fn or a variadic fn.
///
/// ```text
/// error: duplicate argument `point`
///  --> src/payments.rs:1:30
///   |
/// 1 | #[breaker(point = "a", point = "b")]
///   |                        ^^^^^
/// ```
///
/// # Limitations
///
/// The same as `#[downgrade]`'s: `#[track_caller]` does not see through the
/// wrapper of a sync body. Methods in an `#[async_trait]` impl or trait are
/// supported the same way too: the breaker guards the boxed future's
/// execution, as for an `async fn`.
#[proc_macro_attribute]
pub fn breaker(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::breaker::expand(args.into(), item.into()).into()
}

/// Retries a function that returns a `Result`: an `Err` that `retry_if` chooses
/// (every `Err` by default) is retried up to `attempts` times in all, with a backoff
/// between attempts and, with `budget`, only while that retry budget allows. A panic
/// is never retried. Stacked above a `#[downgrade]` / `#[breaker]`, every attempt is a
/// call of that point, and a refused (or cut) attempt ends the call at once with the
/// fallback's answer. See the runtime's guide, chapter
/// `resilience_runtime::guide::retries`.
///
/// # Errors
///
/// Besides a bad argument: a function that does not return a `Result` (an alias such
/// as `io::Result<T>` is one) is refused at its return type, a `retry_if` that is not
/// a `fn(&E) -> bool` (`E` the function's error type) at `retry_if = ...`, and an
/// owned argument that is not `Clone` at that argument, each saying what to write.
///
/// ```text
/// error[E0277]: `#[retry]` needs a function that returns `Result<T, E>`, not `u32`
///  --> src/stock.rs:2:15
///   |
/// 2 | fn count() -> u32 {
///   |               ^^^ only an `Err` can be retried
/// ```
#[proc_macro_attribute]
pub fn retry(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::retry::expand(args.into(), item.into()).into()
}
