#![doc = include_str!("../../README.md")]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod bloom;
pub mod breaker;
mod clock;
mod error;
mod listener;
mod point;
mod policy;
mod rand;
mod registry;
pub mod rolling;
mod stats;
mod sync;
pub mod wheel;
mod window;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
pub(crate) use crate::__private as private;

pub use clock::{Clock, ManualClock};
pub use error::{AlreadyInitialized, Downgraded, PointNameError, Reason};
pub use listener::{DowngradeEvent, ListenerId, EVENT_QUEUE_CAPACITY};
pub use point::{Permit, Point};
pub use policy::{
    Delay, ExceptionRate, FieldError, Policy, PolicyBuilder, PolicyError, Timeouts,
    TokenBucketConfig, WindowConfig, MAX_WINDOW_BUCKETS,
};
pub use registry::{init_registry, registry, Registry};
pub use stats::{CycleStats, PointStats, ReasonCounts, Totals, WindowCounts};

#[cfg(feature = "macros")]
pub use resilience_macros::downgrade;
