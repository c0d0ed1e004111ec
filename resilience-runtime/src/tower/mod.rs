//! tower middleware (feature `tower`): guard a [`Service`](tower::Service) with a point of the
//! registry ([`PointLayer`], every rule of its policy) or an adaptive limit
//! ([`AdmissionLayer`]), retry or hedge it with a point's retry settings
//! ([`RetryLayer`]), and turn a refusal into an error, an HTTP response or (feature
//! `tonic`) a gRPC status; give requests a priority from a header ([`PriorityLayer`]).
//!
//! The guide's [axum and tower](crate::guide::axum_and_tower) chapter walks through
//! them with axum and tonic.
//!
//! # Shared state
//!
//! A layer and every service it makes share one limit, however often they are cloned:
//! [`PointLayer`] holds the `&'static` [`Point`](crate::Point) of the registry, [`AdmissionLayer`] an
//! `Arc` of its limit. This matters behind axum, which clones the service for every
//! request. (tower 0.5's own `ConcurrencyLimit` shares its semaphore between clones
//! too; its `RateLimit` keeps a limit per clone, so behind axum it limits nothing.)
//!
//! # The policy, rule by rule
//!
//! A [`PointLayer`] call enters its point as an `async fn` under `#[downgrade]` does
//! ([`Point::enter_async`](crate::Point::enter_async)), so every rule of the policy
//! applies, in the same order and with the same bounds:
//!
//! - a call that must wait (the concurrency rule's `queue`, the token bucket's
//!   `token_wait` and `pacing`, a key's `max_wait`) waits in the response future, on
//!   tokio's timer (a manual clock is advanced instead), and calls the inner service
//!   once admitted; it is refused (`queue_full`, `queue_timeout`, `token_bucket`,
//!   `hot_key`) exactly when the macros' call would be;
//! - the policy's [`call_timeout`](crate::PolicyBuilder::call_timeout), read when the
//!   call is admitted, cuts the inner future: dropped, counted as a pass and a timeout
//!   and a failure for the breaker (never a downgrade), its slot released, and
//!   answered as a refusal with [`Reason::Deadline`](crate::Reason::Deadline) (HTTP
//!   504, gRPC `DEADLINE_EXCEEDED`), as `timeout = "..."` does for the macros;
//! - every other rule (visits, concurrency, health rules, delay, adaptive limit,
//!   cluster limits, keys, the breaker) decides at once, in `call`.
//!
//! Waiting and deadlines need a tokio runtime with its time driver (`enable_time` or
//! `enable_all`), as axum, hyper and tonic servers have. The `tower` feature turns on
//! the `tokio` feature for this.
//!
//! # Readiness
//!
//! `poll_ready` only forwards to the inner service: nothing of the point is taken there.
//! Reserving a slot, a token or a queue place at readiness would hold it between
//! readiness and the call, and forever for a service made ready and then dropped
//! without a call (axum's per-request clones, load balancers probing readiness),
//! which tower's contract allows; and a full limit answered with `Pending` would make
//! every caller queue, even where the policy has no queue. So every decision is taken
//! in `call` and its response future: a refused call is answered by a future ready at
//! once, an admitted one calls the inner service in `call`, and a call that must wait
//! takes the service made ready with it into its future (a clone of the inner service
//! takes its place, as tower advises; hence `S: Clone`).
//!
//! # Outcomes and cancellation
//!
//! The call's guard lives in the response future: an `Ok` ends the call as a success,
//! an `Err` as a failure, a panic while polling the inner future as a panic. A future
//! dropped before it completes (a client that went away, a timeout around it) gives
//! back what it holds, as the macros' calls do: while it waits it leaves the queue and
//! never begins (counted in the queue's `cancelled`), while it runs it releases its
//! slot and counts as a cancelled call ([`Totals::cancelled`](crate::Totals::cancelled)).
//! With [`respond`](PointLayer::respond), HTTP responses with a 5xx status also count
//! as failures; with `grpc` (feature `tonic`), also gRPC statuses that say the server
//! failed.
//!
//! # Retries and hedging
//!
//! [`RetryLayer`], above a [`PointLayer`] of the same point, retries with the point's
//! `retry` section and budget (else its own settings), counted in the point's
//! [`retry_stats`](crate::Point::retry_stats) as `#[retry]` counts; with
//! [`hedge`](RetryLayer::hedge) it hedges slow attempts. Requests are copied by a
//! [`Retryable`] policy; one it cannot copy is sent once and never retried. An attempt
//! the point refuses or cuts is not retried.
//!
//! # HTTP
//!
//! [`Refused::status`] maps every limit (queue refusals included) to `429 Too Many
//! Requests`, an open breaker to `503 Service Unavailable` (the server's own state,
//! not the client's rate) and a call cut at its deadline to `504 Gateway Timeout`; a
//! rejection carries `Retry-After` when the layer was given a wait
//! ([`retry_after`](PointLayer::retry_after)). A [`PointLayer`] refusing a call for
//! an open breaker reports the breaker's own wait instead: the time until it may
//! admit a probe (classic breaker: until its open wait ends; SRE breaker: its
//! `force_pass_interval`), in whole seconds rounded up, at least 1.
//!
//! # gRPC
//!
//! With the `tonic` feature, `Refused::grpc_code` maps the same cases to
//! `RESOURCE_EXHAUSTED`, `UNAVAILABLE` and `DEADLINE_EXCEEDED`, `Refused::to_status`
//! makes a `tonic::Status` (with the wait as `grpc-retry-pushback-ms`), and
//! `PointLayer::grpc` (the `AsStatus` mode) answers refused calls with it, in tonic's
//! `Server::builder().layer(..)` or around a client's `Channel`.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::tower::{PointLayer, Refused};
//! use resilience_runtime::{registry, Policy};
//! use std::convert::Infallible;
//! use tower::{Layer, Service};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! registry().set_policy("docs.tower.echo", Policy::builder().max_visits(0).build()?)?;
//! let layer = PointLayer::new("docs.tower.echo")?.respond();
//! let mut svc = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//! }));
//! let res = futures_executor::block_on(svc.call(http::Request::new(())))?;
//! assert_eq!(res.status(), 429);
//! # Ok(()) }
//! ```

mod admission;
mod error;
mod future;
#[cfg(feature = "tonic")]
mod grpc;
mod keyed;
mod point;
mod priority;
mod respond;
mod retry;

pub use admission::{Admission, AdmissionLayer, AdmissionService};
pub use error::{GuardError, Refused};
pub use future::{Finish, PointFuture, ResponseFuture};
#[cfg(feature = "tonic")]
pub use grpc::{AsStatus, RETRY_PUSHBACK};
pub use keyed::{KeyedPointLayer, KeyedPointService};
pub use point::{PointLayer, PointService};
pub use priority::{PriorityLayer, PriorityService};
pub use respond::{AsError, AsResponse, RefusalMode};
pub use retry::{RetryErrors, RetryFuture, RetryHttp, RetryLayer, RetryService, Retryable};
