//! The runtime of the resilience toolkit: protect a Rust service from overload and
//! failing dependencies by annotating functions.
//!
//! `#[downgrade]` asks a process-wide registry, before every call, whether the call
//! may run; `#[breaker]` adds a circuit breaker, `#[retry]` retries with backoff and
//! budgets. The rules (visit limits, token buckets, concurrency limits with queues,
//! exception counts and rates, slow calls, timeouts that cancel, sticky delays with
//! probes, limits per key, cluster-wide limits) are data, a [`Policy`] per named
//! point, that you set and change while the program runs: from code, from a policy
//! file, or from an admin console. It is the Rust take on didi's SDS, Alibaba
//! Sentinel, Resilience4j and go-zero's governance kit, built to cost a few
//! nanoseconds on the pass path.
//!
//! ```
//! use resilience_runtime::{downgrade, registry, Policy};
//!
//! #[downgrade(point = "order.create", fallback = create_fallback)]
//! fn create_order(id: u64) -> Result<String, std::io::Error> {
//!     Ok(format!("order {id} created"))
//! }
//!
//! // Runs only when the call is downgraded, never for business errors.
//! fn create_fallback(id: u64) -> Result<String, std::io::Error> {
//!     Ok(format!("order {id} queued for later"))
//! }
//!
//! let policy = Policy::builder().max_visits(2).build()?;
//! registry().set_policy("order.create", policy)?;
//!
//! assert_eq!(create_order(1)?, "order 1 created");
//! assert_eq!(create_order(2)?, "order 2 created");
//! // the third visit inside the sliding 10 s window is downgraded
//! assert_eq!(create_order(3)?, "order 3 queued for later");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The guide
//!
//! The [`guide`] explains the toolkit one concern a chapter, every example tested:
//! [getting started](guide::getting_started), [fallbacks](guide::fallbacks),
//! [rate limiting](guide::rate_limits),
//! [concurrency limits and bulkheads](guide::concurrency_limits),
//! [circuit breakers](guide::circuit_breakers), [retries](guide::retries),
//! [timeouts](guide::timeouts), [axum and tower](guide::axum_and_tower),
//! [limits per user or tenant](guide::per_key_limits),
//! [policies at runtime](guide::runtime_policies),
//! [policy files](guide::policy_files),
//! [metrics, logs and traces](guide::observability),
//! [statistics and listeners](guide::statistics),
//! [a fleet with the console](guide::fleet),
//! [testing your own code](guide::testing) and [how it works](guide::how_it_works).
//!
//! # Where things are
//!
#![cfg_attr(
    feature = "macros",
    doc = "- The attributes: [`downgrade`](macro@downgrade), [`breaker`](macro@breaker), \
           [`retry`](macro@retry) (each argument, with an example)."
)]
//! - The registry: [`registry()`], [`Registry`] (policies, breakers, statistics,
//!   listeners), and a [`Point`] for guarding code by hand.
//! - The rules: [`policy`] (the table of every rule and its bounds),
//!   [`breaker`](mod@breaker) (the breakers' algorithms), [`retry`](mod@retry)
//!   (backoff, budgets, hedging), [`keys`] (limits per key), [`adaptive`] (adaptive
//!   concurrency limits), [`priority`], [`sources`] (where settings come from and
//!   which wins).
//! - Building blocks: [`rolling`] (go-zero's rolling window), [`bloom`] (bloom
//!   filters), [`wheel`] (a timing wheel), [`declared`] (the points the binary has).
#![cfg_attr(
    feature = "config",
    doc = "- [`config`]: policy files in TOML or JSON, with hot reload, and their format."
)]
#![cfg_attr(
    any(feature = "prometheus", feature = "metrics", feature = "opentelemetry"),
    doc = "- [`metrics`](mod@metrics): every point's statistics for Prometheus, the \
           `metrics` facade or OpenTelemetry."
)]
#![cfg_attr(
    feature = "tracing",
    doc = "- [`call_span`]: the `tracing` span around each guarded call."
)]
#![cfg_attr(
    feature = "tower",
    doc = "- [`tower`](mod@tower): tower and axum middleware."
)]
#![cfg_attr(
    feature = "heartbeat",
    doc = "- [`heartbeat`]: the admin console's client."
)]
#![cfg_attr(
    feature = "redis",
    doc = "- [`redis`](mod@redis): limits and bloom filters shared through Redis."
)]
#![cfg_attr(
    feature = "testing",
    doc = "- [`testing`]: testing your own code (a registry per test, forced states)."
)]
//!
//! # Features
//!
#![doc = include_str!("guide/features.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link to the items of every feature. A build without some feature cannot
// resolve those links, so the check is relaxed there; with every feature (docs.rs, and
// the README test command's doc build) every link is checked.
#![cfg_attr(
    not(all(
        feature = "macros",
        feature = "redis",
        feature = "tower",
        feature = "config",
        feature = "prometheus",
        feature = "metrics",
        feature = "opentelemetry",
        feature = "heartbeat",
        feature = "tracing",
        feature = "testing",
        feature = "tokio"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod adaptive;
pub mod bloom;
pub mod breaker;
mod builder;
#[cfg(feature = "tracing")]
pub mod call_span;
mod clock;
#[cfg(feature = "config")]
pub mod config;
pub mod declared;
mod error;
pub mod guide;
#[cfg(feature = "heartbeat")]
pub mod heartbeat;
pub mod keys;
mod lane;
mod limit;
mod listener;
mod lock;
#[cfg(any(feature = "prometheus", feature = "metrics", feature = "opentelemetry"))]
pub mod metrics;
mod name;
mod point;
pub mod policy;
pub mod priority;
mod rand;
#[cfg(feature = "redis")]
pub mod redis;
mod registry;
pub mod retry;
pub mod rolling;
pub mod sources;
mod stats;
mod sync;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod ticker;
#[cfg(feature = "tower")]
pub mod tower;
mod unwind;
mod util;
pub mod wheel;
mod window;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use clock::{Clock, Instant, ManualClock};
pub use declared::{DeclaredPoint, MacroKind};
pub use error::{
    check_point_name, AlreadyInitialized, Downgraded, FieldError, FromDowngraded, PointNameError,
    Reason, MAX_POINT_NAME_LEN,
};
pub use listener::{
    BreakerChange, BreakerEvent, DowngradeEvent, Event, EventKind, ListenerId, EVENT_QUEUE_CAPACITY,
};
pub use name::NameProblem;
pub use point::admit::permit::Permit;
pub use point::state::durations::{measure_durations, measuring_durations};
pub use point::Point;
pub use policy::{
    AdaptiveLimit, BreakerError, BreakerPolicy, ClusterLimit, Delay, ExceptionRate, Policy,
    PolicyBuilder, PolicyError, QueueConfig, QueueOrder, Timeouts, TokenBucketConfig, WarmUpConfig,
    WindowConfig, MAX_CALL_TIMEOUT, MAX_CONCURRENCY, MAX_QUEUE, MAX_WINDOW_BUCKETS,
};
pub use registry::{init_registry, registry, Registry, RetireError, DEFAULT_MAX_UNDECLARED_POINTS};
pub use stats::{
    BreakerState, BreakerStats, CycleStats, PointStats, QueueStats, ReasonCounts, SecondStats,
    Totals, WindowCounts, CYCLE,
};

#[cfg(feature = "macros")]
pub use resilience_macros::{breaker, downgrade, retry};
