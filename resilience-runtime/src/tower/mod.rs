//! tower middleware (feature `tower`): guard a [`Service`](tower::Service) with a point of the
//! registry ([`PointLayer`]) or an adaptive limit ([`AdmissionLayer`]), and turn a
//! refusal into an error or an HTTP response; give requests a priority from a header
//! ([`PriorityLayer`]).
//!
//! # Shared state
//!
//! A layer and every service it makes share one limit, however often they are cloned:
//! [`PointLayer`] holds the `&'static` [`Point`](crate::Point) of the registry, [`AdmissionLayer`] an
//! `Arc` of its limit. This matters behind axum, which clones the service for every
//! request; a limit kept per clone (as tower's own `ConcurrencyLimit` and `RateLimit`
//! do) is never enforced there.
//!
//! # Readiness
//!
//! `poll_ready` only forwards to the inner service; the decision is taken in `call`.
//! Reserving a slot in `poll_ready` would hold it between readiness and the call, and
//! forever for a service that is made ready and then dropped without a call (axum's
//! per-request clones, load balancers probing readiness); and a full limit answered
//! with `Pending` would make callers queue, which is what fail-fast admission is meant
//! to prevent. A refused call is answered at once with a ready future. For the same
//! reason a [`PointLayer`] never waits: a point with a queue or a token bucket that
//! waits refuses at once in the layer ([`Point::try_enter`](crate::Point::try_enter)).
//!
//! # Outcomes
//!
//! The guard ([`Permit`](crate::Permit) or an adaptive permit) lives in the response future: an
//! `Ok` ends the call as a success, an `Err` as a failure, a panic while polling the
//! inner future as a panic, and dropping the future before it completes (a client
//! that went away, a timeout around it) as a cancelled call. With
//! [`respond`](PointLayer::respond), HTTP responses with a 5xx status also count as
//! failures.
//!
//! # HTTP
//!
//! [`Rejected::status`] maps every limit to `429 Too Many Requests` and an open
//! breaker to `503 Service Unavailable` (the server's own state, not the client's
//! rate); a rejection carries `Retry-After` when the layer was given a wait
//! ([`retry_after`](PointLayer::retry_after)). A [`PointLayer`] refusing a call for
//! an open breaker reports the breaker's own wait instead: the time until it may
//! admit a probe (classic breaker: until its open wait ends; SRE breaker: its
//! `force_pass_interval`), in whole seconds rounded up, at least 1.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::tower::{PointLayer, Rejected};
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
mod keyed;
mod point;
mod priority;
mod respond;

pub use admission::{Admission, AdmissionLayer, AdmissionService};
pub use error::{GuardError, RejectReason, Rejected};
pub use future::{CallGuard, ResponseFuture};
pub use keyed::{KeyedPointLayer, KeyedPointService};
pub use point::{PointLayer, PointService};
pub use priority::{PriorityLayer, PriorityService};
pub use respond::{AsError, AsResponse, RejectMode};
