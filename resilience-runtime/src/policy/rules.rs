//! The parameters of the individual rules of a [`Policy`](super::Policy).

use std::time::Duration;

/// The exception-rate rule: downgrade when `exceptions / (visits - downgrades) >= rate`
/// in the window, evaluated only once `visits > min_visits`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ExceptionRate {
    /// The rate in `0.0..=1.0` (SDS uses a percentage; 0.5 here is SDS's 50).
    pub rate: f64,
    /// The minimum-visits floor: the rule applies from visit `min_visits + 1` on.
    pub min_visits: u64,
}

/// The queue of the concurrency rule (a bulkhead): when every slot is taken, up to
/// `max_waiting` calls wait, at most `max_wait` each, for a slot, served in `order`
/// (see [`PolicyBuilder::queue`](super::PolicyBuilder::queue) and
/// [`PolicyBuilder::queue_order`](super::PolicyBuilder::queue_order)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueConfig {
    /// Calls that may wait at once (1 ..= 1 000 000); one more is refused at once
    /// ([`Reason::QueueFull`](crate::Reason::QueueFull)), or, newest first, takes
    /// the place of the oldest waiter.
    pub max_waiting: u64,
    /// The longest a call waits (> 0, at most an hour); then it is refused
    /// ([`Reason::QueueTimeout`](crate::Reason::QueueTimeout)).
    pub max_wait: Duration,
    /// Which waiter a freed slot goes to within a tier (oldest first unless set).
    pub order: QueueOrder,
}

/// Which waiter of the queue a freed slot goes to, within a priority tier (a higher
/// tier is always served first). Policy-file key `queue.order`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueOrder {
    /// First in first out (`"oldest_first"`, the default): a call finding the queue
    /// full is refused ([`Reason::QueueFull`](crate::Reason::QueueFull)), unless a
    /// waiter of a lower tier makes room.
    #[default]
    OldestFirst,
    /// Last in first out (`"newest_first"`): the call that came last is served first,
    /// and a call finding the queue full takes the place of the oldest waiter of its
    /// own or a lower tier, which is refused
    /// ([`Reason::QueueFull`](crate::Reason::QueueFull), counted as evicted).
    ///
    /// Under sustained overload a first-in-first-out queue stays full and every call
    /// waits nearly its whole length; newest first serves most calls at once and lets
    /// the oldest, which are the likeliest to be late for their callers already, run
    /// out (Facebook's "adaptive LIFO" for the same reason). The bounds are those of
    /// the queue: at most `max_waiting` waiting, each at most `max_wait`.
    NewestFirst,
}

impl QueueOrder {
    /// The name of the order in policy files: `"oldest_first"` or `"newest_first"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            QueueOrder::OldestFirst => "oldest_first",
            QueueOrder::NewestFirst => "newest_first",
        }
    }

    /// The order named `name` in policy files (see [`as_str`](Self::as_str)).
    pub fn from_name(name: &str) -> Option<QueueOrder> {
        [QueueOrder::OldestFirst, QueueOrder::NewestFirst]
            .into_iter()
            .find(|o| o.as_str() == name)
    }
}

/// Sentinel's warm-up for the token bucket (see [`PolicyBuilder::warm_up`](super::PolicyBuilder::warm_up)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct WarmUpConfig {
    /// How long sustained traffic takes to bring a cold point to the full rate
    /// (1 s ..= 1 h).
    pub period: Duration,
    /// A cold point starts at `rate / cold_factor` (a number in (1, 100]; Sentinel's
    /// default is 3).
    pub cold_factor: f64,
}

/// The most calls a queue may hold.
pub const MAX_QUEUE: u64 = 1_000_000;

/// The timeout rule: a call slower than `threshold` is a timeout; the point is
/// downgraded once the window holds `max_count` timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// A call taking longer than this is counted as a timeout.
    pub threshold: Duration,
    /// Downgrade once this many timeouts are in the window (pass while fewer).
    pub max_count: u64,
}

/// A token bucket refilled continuously at `rate` tokens per second, holding at most
/// `capacity` tokens, full at start. Each admitted call takes one token.
///
/// SDS's "token bucket" is a per-calendar-second counter that lets `max(rate, size)` calls
/// through each second and never carries unused tokens over; this one is a real bucket:
/// an idle point saves up to `capacity` tokens for a burst, and refill is smooth.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct TokenBucketConfig {
    /// Tokens added per second; `0.0` admits nothing (a kill switch, as in SDS).
    pub rate: f64,
    /// Bucket capacity, at least 1.
    pub capacity: u64,
}

/// Sticky downgrade: once a rule trips, the point stays downgraded for `duration`,
/// letting one probe call through every `retry_interval`. A failing probe schedules the
/// next one; a succeeding probe ends the delay early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delay {
    /// How long the point stays downgraded after a trip.
    pub duration: Duration,
    /// The interval between probe calls, or `None` for no probes.
    pub retry_interval: Option<Duration>,
}

/// The sliding window: `buckets` buckets of `bucket_width` each (SDS: 10 x 1 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct WindowConfig {
    /// Number of buckets, 1..=[`MAX_WINDOW_BUCKETS`](super::MAX_WINDOW_BUCKETS).
    pub buckets: u64,
    /// Width of one bucket.
    pub bucket_width: Duration,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            buckets: 10,
            bucket_width: Duration::from_secs(1),
        }
    }
}
