#![doc = include_str!("../../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod adaptive;
pub mod bloom;
pub mod breaker;
#[cfg(feature = "tracing")]
pub mod call_span;
mod clock;
#[cfg(feature = "config")]
pub mod config;
pub mod declared;
mod error;
#[cfg(feature = "heartbeat")]
pub mod heartbeat;
pub mod keys;
mod lane;
pub mod layers;
mod limit;
mod listener;
pub mod lock;
#[cfg(any(
    feature = "metrics",
    feature = "metrics-facade",
    feature = "opentelemetry"
))]
pub mod metrics;
mod name;
mod point;
mod policy;
pub mod priority;
mod rand;
#[cfg(feature = "redis")]
pub mod redis;
mod registry;
pub mod retry;
pub mod rolling;
mod stats;
mod sync;
mod ticker;
#[cfg(feature = "tower")]
pub mod tower;
mod unwind;
mod util;
pub mod wheel;
mod window;
pub mod wire_fields;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use clock::{Clock, Instant, ManualClock};
pub use declared::{DeclaredPoint, MacroKind};
pub use error::{
    check_point_name, AlreadyInitialized, Downgraded, FieldError, PointNameError, Reason,
    MAX_POINT_NAME_LEN,
};
pub use listener::{
    BreakerChange, BreakerEvent, DowngradeEvent, Event, EventKind, ListenerId, EVENT_QUEUE_CAPACITY,
};
pub use name::NameProblem;
pub use point::durations::{measure_durations, measuring_durations};
pub use point::permit::Permit;
pub use point::queue::QueueStats;
pub use point::Point;
#[cfg(feature = "redis")]
pub use policy::ClusterLimit;
pub use policy::{
    AdaptiveLimit, BreakerError, BreakerPolicy, Delay, ExceptionRate, Policy, PolicyBuilder,
    PolicyError, QueueConfig, Timeouts, TokenBucketConfig, WarmUpConfig, WindowConfig,
    MAX_CALL_TIMEOUT, MAX_CONCURRENCY, MAX_QUEUE, MAX_WINDOW_BUCKETS,
};
pub use registry::{init_registry, registry, Registry, RetireError, DEFAULT_MAX_UNDECLARED_POINTS};
pub use stats::{
    BreakerState, BreakerStats, CycleStats, PointStats, ReasonCounts, SecondStats, Totals,
    WindowCounts, CYCLE,
};

#[cfg(feature = "macros")]
pub use resilience_macros::{breaker, downgrade, retry};
