//! Policies: the runtime configuration of a point, built with [`Policy::builder`] and
//! validated before it can be applied.
//!
//! A policy is set with [`Registry::set_policy`](crate::Registry::set_policy), removed
//! with [`clear_policy`](crate::Registry::clear_policy) and read with
//! [`policy`](crate::Registry::policy); a policy file or the admin console set the
//! same rules (see [`config`](crate::config) for the file's keys, and
//! [`sources`](crate::sources) for which setting wins). Every rule is optional; they
//! combine. Rules are checked in SDS order, and the first that trips is the reported
//! reason ([`Reason::ALL`](crate::Reason::ALL) lists the reasons in check order). The
//! guide's chapters on [rate limiting](crate::guide::rate_limits),
//! [concurrency limits](crate::guide::concurrency_limits),
//! [circuit breakers and health rules](crate::guide::circuit_breakers) and
//! [timeouts](crate::guide::timeouts) explain each with examples.
//!
//! # The rules
//!
//! | builder method | policy-file key | trips when | accepted values | SDS field |
//! |---|---|---|---|---|
//! | [`max_visits(n)`](PolicyBuilder::max_visits) | `max_visits` | `n` calls already passed in the window | any; `0` = kill switch | `visitThreshold` |
//! | [`token_bucket(rate, capacity)`](PolicyBuilder::token_bucket) | `token_bucket.rate`, `token_bucket.capacity` | no token left; refills continuously at `rate`/s, holds `capacity`, starts full | `rate` finite, 0..=1e9 (`0` = kill switch); `capacity` 1..=1e9 | `tokenBucketGeneratedTokensInSecond`, `tokenBucketSize` |
//! | [`token_wait(max_wait)`](PolicyBuilder::token_wait) | `token_bucket.max_wait` | with `token_bucket`: a call finding no token reserves the next one and waits for it if it is due within `max_wait`, else is refused at once | more than zero, at most 1 h; needs `token_bucket` | none |
//! | [`pacing(rate, max_wait)`](PolicyBuilder::pacing) | `token_bucket` with `capacity = 1` and `max_wait` | `token_bucket(rate, 1).token_wait(max_wait)`: calls spaced uniformly at `1/rate` (Sentinel's rate limiter) | as those | none |
//! | [`warm_up(period, cold_factor)`](PolicyBuilder::warm_up) | `warm_up.period`, `warm_up.cold_factor` | with `token_bucket`: a cold point admits `rate / cold_factor` calls a second at first, climbing to `rate` over about `period` of sustained traffic (Sentinel's `WarmUpController`); idle time makes it cold again; refused as `token_bucket`, never waits | `period` 1 s..=1 h; `cold_factor` in (1, 100] (files: default 3); needs `token_bucket` | none |
//! | [`max_concurrency(n)`](PolicyBuilder::max_concurrency) | `max_concurrency` | `n` calls already in flight; never waits | 0..=[`MAX_CONCURRENCY`] (4 194 304); `0` = kill switch | `concurrentThreshold` |
//! | [`queue(max_waiting, max_wait)`](PolicyBuilder::queue) | `queue.max_waiting`, `queue.max_wait` | with `max_concurrency` or `adaptive`: a call finding every slot taken (or the adaptive limit reached) waits, first in first out, for at most `max_wait`; refused with `queue_full` when `max_waiting` already wait, `queue_timeout` when its wait runs out | `max_waiting` 1..=[`MAX_QUEUE`] (1 000 000); `max_wait` more than zero, at most 1 h; needs `max_concurrency` or `adaptive` | none |
//! | [`queue_order(order)`](PolicyBuilder::queue_order) | `queue.order` | not a rule: the queue serves its waiters oldest first (default) or [newest first](QueueOrder::NewestFirst), a full queue then refusing its oldest waiter (`queue_full`) to make room | `"oldest_first"`, `"newest_first"`; needs `queue` | none |
//! | [`timeouts(threshold, n)`](PolicyBuilder::timeouts) | `timeouts.threshold`, `timeouts.max_count` | the window holds `n` calls slower than `threshold` | `threshold` more than zero | `timeoutThreshold`, `timeoutCountThreshold` |
//! | [`max_exceptions(n)`](PolicyBuilder::max_exceptions) | `max_exceptions` | the window holds `n` exceptions | any | `exceptionThreshold` |
//! | [`exception_rate(rate, min_visits)`](PolicyBuilder::exception_rate) | `exception_rate.rate`, `exception_rate.min_visits` | `exceptions / (visits - downgrades) >= rate` once `visits > min_visits` (the asking call counted) | `rate` 0.0..=1.0; `min_visits` any (files: default 0) | `exceptionRateThreshold` (as a fraction), `exceptionRateStart` |
//! | [`downgrade_percentage(p)`](PolicyBuilder::downgrade_percentage) | `downgrade_percentage` | not a rule: a tripped rule downgrades with probability `p`% (default 100; 0 never), except the concurrency rule, which always does | 0..=100 | `downgradeRate` |
//! | [`delay(d, retry)`](PolicyBuilder::delay) | `delay.duration`, `delay.retry_interval` | after a trip the point stays downgraded for `d`, letting one probe through every `retry`; a failing probe schedules the next, a succeeding probe ends the delay | `d` more than zero; `retry` optional, more than zero, at most `d` | `delayTime`, `retryInterval` |
//! | [`window(buckets, width)`](PolicyBuilder::window) | `window.buckets`, `window.bucket_width` | not a rule: the sliding window the rules count in (default 10 x 1 s) | `buckets` 1..=[`MAX_WINDOW_BUCKETS`] (3600); `width` more than zero | fixed in SDS |
//! | [`call_timeout(d)`](PolicyBuilder::call_timeout) | `call_timeout` | not a rule: the deadline of each call of an `async fn` with `timeout = "..."`, in place of the attribute's, and of each call through a tower `PointLayer`; a call still running then is cut | more than zero, at most [`MAX_CALL_TIMEOUT`] (24 h) | none |
//! | [`shadow(true)`](PolicyBuilder::shadow) | `shadow` | not a rule: a dry run, every rule evaluated and counted, no call ever downgraded (the delay is not simulated) | `true` / `false` (default) | none |
//! | [`adaptive(limit)`](PolicyBuilder::adaptive) | `[points."x".adaptive]` | the adaptive concurrency limit ([`AdaptiveLimit`]: gradient or go-zero's shedder) is reached: `overloaded` (with a `queue`, the call waits for room instead) | the limiter's own checks (reported under `adaptive`) | none |
//! | `cluster(limit)` (feature `redis`) | `[points."x".cluster]` | the limit shared by every instance through Redis (`ClusterLimit`) is used up: `cluster_visits`, `cluster_token_bucket` | `period` 1 ms..=10 years, `quota` >= 1; `rate` finite > 0, `burst` >= 1, `batch` 1..=`burst`; a valid Redis URL, a non-empty key | none |
//! | [`keys(section)`](PolicyBuilder::keys) | `[points."x".keys]` | the call's key used up its own limit ([`KeyPolicy`]): `hot_key` | see [`KeyPolicy`] | none (Sentinel's hot-parameter rule) |
//!
//! [`build`](PolicyBuilder::build) rejects bad values with a [`PolicyError`] naming
//! every offending field, with the names a policy file uses
//! (`exception_rate.rate`, `downgrade_percentage`, `window.buckets`, ...).
//!
//! # The bounds
//!
//! Each bound holds under any number of threads and while the policy changes; the
//! runtime's `tests/exactness/` checks each one with 1 to 64 threads (the guide's
//! [how it works](crate::guide::how_it_works#exact-under-concurrency) says how).
//!
//! | rule | bound kept |
//! |---|---|
//! | visits | passes (calls no rule downgraded) in a window <= `n`, exactly; `0` admits nothing, ever |
//! | token bucket | admitted over any interval `t` <= `capacity + rate * t`, exactly for rates in whole thousandths of a token per second (15/s for 200 ms refills 3 tokens, not 2.99); other rates have their interval rounded up; on the registry's clock (against the OS clock, a bucket with a burst of 200 ms or more that is full when `t` begins may admit `rate` x the cached timeline's lag more, about a millisecond's worth: see [`PolicyBuilder::token_bucket`]) |
//! | token bucket, waiting | the bound `capacity + rate * t` holds over the times calls run; waiting calls run in arrival order (the reservation is the take's compare-and-swap) |
//! | warm-up | the passes of each second never exceed that second's warm-up limit, exactly (one compare-and-swap counts and checks); the bucket's bound holds as well |
//! | concurrency | at most `n` in flight, always: probes, calls spared by `downgrade_percentage` and calls admitted during a policy change included |
//! | queue | still at most `n` in flight, exactly (a waiter takes its slot by the same compare-and-swap); at most `max_waiting` waiting; a freed slot wakes one waiter, the oldest (newest first: the newest) of the highest tier; a new call never passes a waiting one (newest first: it passes those of its tier); a cancelled or timed-out waiter never takes a slot |
//! | timeouts | no call is admitted once the window holds `n`; calls already admitted add at most their own; a hung call counts once, as soon as its threshold passes |
//! | exceptions | as for timeouts: at most `n - 1 + m` exceptions when at most `m` calls can be between their check and their end |
//! | exception rate | as for timeouts |
//! | downgrade percentage | the bounds above hold at 100; below it, calls tripped by other rules run by design |
//! | delay | one probe at a time, none before its time; a probe obeys every limit (visits, tokens, concurrency, cluster, adaptive, breaker) but not the health rule that started the delay, and a probe a limit refuses goes back for the next call |
//! | call timeout | a cut call is never refused, so it counts as a pass and a timeout (and a breaker failure), never as a downgrade |
//! | keys | a tracked key is admitted at most `burst + limit * t / period` times over any interval `t`, with at most `max_concurrency` in flight; an untracked key never beyond its limits either |
//!
//! Calls that started before a point had any policy are not counted in flight; shadow
//! policies enforce nothing by design.
//!
//! # Changing a policy
//!
//! A change is seen by the next call on every thread. It never resets counters, never
//! hands out fresh concurrency permits while calls are in flight, and keeps the delay
//! state. A policy with no rule ([`Policy::observe`]) makes a point track its window,
//! cycle and concurrency without ever downgrading; a point with no policy only counts
//! totals, which is its cheapest path.
//!
//! # The breaker
//!
//! A point's circuit breaker is a setting beside its policy, not one of its rules:
//! [`BreakerPolicy`] (go-zero's SRE breaker, the classic three-state breaker, or none),
//! set with [`Registry::set_breaker`](crate::Registry::set_breaker) and checked after
//! every rule of the policy. See the guide's
//! [circuit breakers](crate::guide::circuit_breakers).

mod breaker;
mod cluster;
mod rules;

use crate::error::FieldError;
pub use crate::error::PolicyError;
pub use breaker::{BreakerError, BreakerPolicy};
pub(crate) use cluster::{check_bucket_name, check_redis_url};
#[cfg(feature = "redis")]
pub(crate) use cluster::{check_period as cluster_period, MAX_PERIOD_MS};
#[cfg(feature = "redis")]
pub(crate) use cluster::{parse_redis_url, RedisUrl};
pub use cluster::{ClusterLimit, DEFAULT_BATCH};
pub use rules::{
    Delay, ExceptionRate, QueueConfig, QueueOrder, Timeouts, TokenBucketConfig, WarmUpConfig,
    WindowConfig, MAX_QUEUE,
};

use crate::adaptive::{AdaptiveConfig, GradientConfig};
use crate::keys::KeyPolicy;
use std::time::Duration;

/// Largest number of buckets a window may have (one hour of one-second buckets).
pub const MAX_WINDOW_BUCKETS: u64 = 3600;

/// The longest [`call_timeout`](PolicyBuilder::call_timeout) a policy accepts: one day
/// (the `timeout = "..."` argument of the macros has the same limit).
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The downgrade policy of a point: which rules apply and with which thresholds.
///
/// Every rule is optional and rules combine. A policy with no rule still makes the point
/// track its sliding window, its last cycle and its concurrency (an "observe" policy);
/// a point with no policy at all only counts totals, which is the cheapest path.
///
/// Build one with [`Policy::builder`]; apply it with
/// [`Registry::set_policy`](crate::Registry::set_policy). A change is seen by the next
/// call on every thread, and never resets counters, in-flight permits or delay state.
///
/// # Examples
///
/// ```
/// use resilience_runtime::Policy;
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .max_visits(100)
///     .max_concurrency(8)
///     .timeouts(Duration::from_millis(200), 5)
///     .token_bucket(50.0, 100)
///     .delay(Duration::from_secs(10), Some(Duration::from_secs(1)))
///     .build()?;
/// assert_eq!(policy.max_concurrency(), Some(8));
/// # Ok::<(), resilience_runtime::PolicyError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub(crate) max_visits: Option<u64>,
    pub(crate) max_concurrency: Option<u64>,
    pub(crate) queue: Option<QueueConfig>,
    pub(crate) max_exceptions: Option<u64>,
    pub(crate) exception_rate: Option<ExceptionRate>,
    pub(crate) timeouts: Option<Timeouts>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) token_bucket: Option<TokenBucketConfig>,
    pub(crate) token_wait: Option<Duration>,
    pub(crate) warm_up: Option<WarmUpConfig>,
    pub(crate) downgrade_percentage: u8,
    pub(crate) delay: Option<Delay>,
    pub(crate) window: WindowConfig,
    pub(crate) shadow: bool,
    // The sections few points have are boxed: a policy is copied into each layer of a
    // point and its effective settings, so these would otherwise cost 350 bytes a copy.
    pub(crate) adaptive: Option<Box<AdaptiveLimit>>,
    pub(crate) cluster: Option<Box<ClusterLimit>>,
    pub(crate) keys: Option<Box<KeyPolicy>>,
}

/// An adaptive concurrency limit: the limit follows the measured capacity of the
/// service instead of a fixed number. Checked after SDS's rules; a rejection is
/// [`Reason::Overloaded`](crate::Reason::Overloaded).
///
/// The gradient limiter (Netflix `Gradient2` style, against the no-load latency)
/// held goodput near capacity with a bounded p99 in our overload simulation
/// (`examples/adaptive_sim.rs`) and over real HTTP (the guide's
/// [real overload](crate::guide::overload)), and is the recommended choice; go-zero's shedder acts only while the CPU is hot, so it fits
/// CPU-bound services under gradual overload.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum AdaptiveLimit {
    /// Limit from the gradient of the no-load over the short-term latency.
    Gradient(GradientConfig),
    /// go-zero's shedder: max passes per bucket x min latency, while CPU is hot.
    Shedder(AdaptiveConfig),
}

impl Policy {
    /// Starts building a policy with no rules, downgrade percentage 100 and the default
    /// window of 10 one-second buckets.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder {
            policy: Policy {
                max_visits: None,
                max_concurrency: None,
                queue: None,
                max_exceptions: None,
                exception_rate: None,
                timeouts: None,
                call_timeout: None,
                token_bucket: None,
                token_wait: None,
                warm_up: None,
                downgrade_percentage: 100,
                delay: None,
                window: WindowConfig::default(),
                shadow: false,
                adaptive: None,
                cluster: None,
                keys: None,
            },
            queue_order: None,
        }
    }

    /// Copies one section of `from` into this policy (nothing for the breaker, which
    /// is not part of a policy).
    pub(crate) fn take_section(&mut self, from: &Policy, section: crate::sources::Section) {
        use crate::sources::Section;
        match section {
            Section::Rules => {
                self.max_visits = from.max_visits;
                self.max_concurrency = from.max_concurrency;
                self.queue = from.queue;
                self.max_exceptions = from.max_exceptions;
                self.exception_rate = from.exception_rate;
                self.timeouts = from.timeouts;
                self.call_timeout = from.call_timeout;
                self.token_bucket = from.token_bucket;
                self.token_wait = from.token_wait;
                self.warm_up = from.warm_up;
                self.downgrade_percentage = from.downgrade_percentage;
                self.delay = from.delay;
            }
            Section::Window => self.window = from.window,
            Section::Shadow => self.shadow = from.shadow,
            Section::Adaptive => self.adaptive = from.adaptive.clone(),
            Section::Cluster => self.cluster = from.cluster.clone(),
            Section::Keys => self.keys = from.keys.clone(),
            Section::Breaker | Section::Retry => {}
        }
    }

    /// Whether the policy has a cluster-wide limit.
    pub(crate) fn has_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// A policy with no rule: the point tracks its window, cycle and concurrency but
    /// never downgrades.
    pub fn observe() -> Policy {
        Policy::builder().policy
    }

    /// The visits limit, if set.
    pub fn max_visits(&self) -> Option<u64> {
        self.max_visits
    }
    /// The concurrency limit, if set.
    pub fn max_concurrency(&self) -> Option<u64> {
        self.max_concurrency
    }
    /// The exception-count limit, if set.
    pub fn max_exceptions(&self) -> Option<u64> {
        self.max_exceptions
    }
    /// The exception-rate rule, if set.
    pub fn exception_rate(&self) -> Option<ExceptionRate> {
        self.exception_rate
    }
    /// The timeout rule, if set.
    pub fn timeouts(&self) -> Option<Timeouts> {
        self.timeouts
    }
    /// The queue of the concurrency rule, if any.
    pub fn queue(&self) -> Option<QueueConfig> {
        self.queue
    }
    /// The deadline of a call of an `async fn` with `timeout = "..."`, if set: it
    /// overrides the attribute's (see [`PolicyBuilder::call_timeout`]).
    pub fn call_timeout(&self) -> Option<Duration> {
        self.call_timeout
    }
    /// The token bucket, if set.
    pub fn token_bucket(&self) -> Option<TokenBucketConfig> {
        self.token_bucket
    }
    /// How long a call may wait for its token, if the token bucket waits (see
    /// [`PolicyBuilder::token_wait`]).
    pub fn token_wait(&self) -> Option<Duration> {
        self.token_wait
    }
    /// The token bucket's warm-up, if any (see [`PolicyBuilder::warm_up`]).
    pub fn warm_up(&self) -> Option<WarmUpConfig> {
        self.warm_up
    }
    /// The probability, in percent, that a tripped rule really downgrades.
    pub fn downgrade_percentage(&self) -> u8 {
        self.downgrade_percentage
    }
    /// The delay rule, if set.
    pub fn delay(&self) -> Option<Delay> {
        self.delay
    }
    /// The sliding window.
    pub fn window(&self) -> WindowConfig {
        self.window
    }
    /// The adaptive concurrency limit, if set.
    pub fn adaptive(&self) -> Option<AdaptiveLimit> {
        self.adaptive.as_deref().copied()
    }
    /// Whether this is a shadow (dry-run) policy.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }
    /// The cluster-wide limit, if set (only a runtime built with the `redis` feature
    /// accepts a policy with one; see [`ClusterLimit`]).
    pub fn cluster(&self) -> Option<&ClusterLimit> {
        self.cluster.as_deref()
    }

    /// The per-key limits, if set (see [`KeyPolicy`]).
    pub fn keys(&self) -> Option<&KeyPolicy> {
        self.keys.as_deref()
    }
}

/// Builds a [`Policy`]; [`build`](PolicyBuilder::build) validates every field.
#[derive(Clone, Debug)]
#[must_use]
pub struct PolicyBuilder {
    policy: Policy,
    /// The order [`queue_order`](Self::queue_order) asked for, applied to the queue by
    /// [`build`](Self::build) (which rejects it without a queue).
    queue_order: Option<QueueOrder>,
}

pub use crate::limit::MAX_CONCURRENCY;

impl PolicyBuilder {
    /// Visits rule: a call passes only while fewer than `max` calls have passed in the
    /// window (SDS's `visits - downgrades`); `0` downgrades every call (a kill switch).
    ///
    /// Bound: passes in any window <= `max`, exactly, under any number of threads, and
    /// kept across a policy change that keeps the window (the count is the window's).
    #[must_use = "a setter returns the changed builder"]
    pub fn max_visits(mut self, max: u64) -> Self {
        self.policy.max_visits = Some(max);
        self
    }

    /// Concurrency rule: at most `max` calls in flight; never waits. `0` downgrades every
    /// call; at most [`MAX_CONCURRENCY`] (4 194 304).
    ///
    /// Bound: at most `max` calls in flight at any instant, under any number of threads,
    /// delay probes and calls spared by
    /// [`downgrade_percentage`](Self::downgrade_percentage) included (a concurrency
    /// refusal is never spared). Calls that began before the point had a policy are not
    /// counted.
    #[must_use = "a setter returns the changed builder"]
    pub fn max_concurrency(mut self, max: u64) -> Self {
        self.policy.max_concurrency = Some(max);
        self
    }

    /// A queue for the concurrency rule (a bulkhead that waits): when all
    /// `max_concurrency` slots are taken, up to `max_waiting` calls wait for one, first
    /// in first out, for at most `max_wait`. A call that finds the queue full is
    /// downgraded at once ([`Reason::QueueFull`](crate::Reason::QueueFull)); one whose
    /// wait runs out is downgraded then ([`Reason::QueueTimeout`](crate::Reason::QueueTimeout)).
    /// Needs [`max_concurrency`](Self::max_concurrency) or an
    /// [`adaptive`](Self::adaptive) limit.
    ///
    /// With an adaptive limit, a call the limit has no room for waits in the same
    /// queue instead of being refused
    /// ([`Reason::Overloaded`](crate::Reason::Overloaded)), and asks the limit again
    /// when a call ends (the limit's room is given back before the call's end wakes a
    /// waiter, so a waiter never misses it). The waiting happens outside the guarded
    /// code: the limit keeps the calls in the service near its capacity while a short
    /// queue keeps it busy through bursts (see the guide's
    /// [overload](crate::guide::overload) chapter). The bound is the limit's: never
    /// more calls in flight than it admits.
    ///
    /// A sync caller waits on its thread (parked, woken by the call that frees a
    /// slot); the code an `async fn` gets from `#[downgrade]` / `#[breaker]` waits
    /// without blocking (a waker per waiter; `tokio` feature for the deadline, without
    /// it an async call never waits and is refused at once as before).
    /// [`Point::enter`](crate::Point::enter) waits like a sync caller;
    /// [`Point::enter_async`](crate::Point::enter_async) like an async one.
    ///
    /// Bounds: at most `max_concurrency` calls in flight, exactly, as without a queue
    /// (a waiter is admitted by the same compare-and-swap as any call); at most
    /// `max_waiting` calls waiting; a freed slot wakes one waiter, the oldest, and a
    /// new call never passes a waiting one (while calls wait, a new call queues behind
    /// them; [`queue_order`](Self::queue_order) can serve the newest first instead); a
    /// waiter that is cancelled or times out leaves the queue and never takes a slot.
    /// A woken waiter asks every rule again, as a new call would (a token bucket is
    /// asked only once a slot is free).
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy, Reason};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .max_concurrency(1)
    ///     .queue(8, Duration::from_millis(50))
    ///     .build()?;
    /// registry().set_policy("docs.queue", policy)?;
    /// let point = registry().point("docs.queue")?;
    /// let first = point.enter()?;
    /// let waiter = std::thread::spawn(move || point.enter().map(|p| p.finish(false)));
    /// std::thread::sleep(Duration::from_millis(5));
    /// first.finish(false); // wakes the waiter, which takes the slot
    /// assert!(waiter.join().unwrap().is_ok());
    /// // Nobody frees the slot now: a waiter gives up after 50 ms.
    /// let held = point.enter()?;
    /// assert_eq!(point.enter().unwrap_err().reason(), Reason::QueueTimeout);
    /// held.finish(false);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn queue(mut self, max_waiting: u64, max_wait: Duration) -> Self {
        self.policy.queue = Some(QueueConfig {
            max_waiting,
            max_wait,
            order: QueueOrder::OldestFirst,
        });
        self
    }

    /// The order in which the [`queue`](Self::queue)'s waiters get a freed slot,
    /// within a priority tier: [`QueueOrder::OldestFirst`] (the default, first in
    /// first out) or [`QueueOrder::NewestFirst`] (last in first out, a full queue
    /// dropping its oldest waiter for a new call). Policy-file key `queue.order`.
    /// [`build`](Self::build) rejects an order without a queue (field `queue.order`).
    ///
    /// Under sustained overload, newest first keeps the latency of the calls served
    /// near the service time where first in first out makes every call wait nearly
    /// the whole queue (the guide's [overload](crate::guide::overload) chapter
    /// measures both). Its bounds are the queue's, but not its order: a new call may
    /// pass every waiter of its tier, and a waiter may be refused
    /// ([`Reason::QueueFull`](crate::Reason::QueueFull)) before its `max_wait` when
    /// newer calls fill the queue.
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy, QueueOrder, Reason};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .max_concurrency(1)
    ///     .queue(1, Duration::from_secs(5))
    ///     .queue_order(QueueOrder::NewestFirst)
    ///     .build()?;
    /// registry().set_policy("docs.queue_order", policy)?;
    /// let point = registry().point("docs.queue_order")?;
    /// let held = point.enter()?;
    /// let old = std::thread::spawn(move || point.enter().map(|p| p.finish(false)));
    /// while point.stats().queue.map_or(0, |q| q.waiting) == 0 {
    ///     std::thread::yield_now();
    /// }
    /// // The queue is full: a new call takes the oldest waiter's place.
    /// let new = std::thread::spawn(move || point.enter().map(|p| p.finish(false)));
    /// assert_eq!(old.join().unwrap().unwrap_err().reason(), Reason::QueueFull);
    /// held.finish(false); // the newest waiter gets the slot
    /// assert!(new.join().unwrap().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn queue_order(mut self, order: QueueOrder) -> Self {
        self.queue_order = Some(order);
        self
    }

    /// Exception rule: downgrade once the window holds `max` exceptions (pass while fewer).
    ///
    /// Bound: no call is admitted once the window holds `max`; calls already admitted may
    /// still fail, so the window holds at most `max - 1 + n` exceptions when at most `n`
    /// calls can be between their check and their end (threads, or the concurrency
    /// limit).
    #[must_use = "a setter returns the changed builder"]
    pub fn max_exceptions(mut self, max: u64) -> Self {
        self.policy.max_exceptions = Some(max);
        self
    }

    /// Exception-rate rule: downgrade when `exceptions / (visits - downgrades) >= rate`,
    /// once `visits > min_visits` (the asking call's own visit counted). `rate` is a
    /// fraction in `0.0..=1.0`. Bound: as for [`max_exceptions`](Self::max_exceptions),
    /// no call is admitted once the rate is reached.
    #[must_use = "a setter returns the changed builder"]
    pub fn exception_rate(mut self, rate: f64, min_visits: u64) -> Self {
        self.policy.exception_rate = Some(ExceptionRate { rate, min_visits });
        self
    }

    /// Timeout rule: a call slower than `threshold` is a timeout; downgrade once the
    /// window holds `max_count` of them. Time spent in a fallback is never measured.
    /// Bound: as for [`max_exceptions`](Self::max_exceptions); a hung call counts once,
    /// as soon as its deadline passes.
    #[must_use = "a setter returns the changed builder"]
    pub fn timeouts(mut self, threshold: Duration, max_count: u64) -> Self {
        self.policy.timeouts = Some(Timeouts {
            threshold,
            max_count,
        });
        self
    }

    /// The deadline of each call of an `async fn` whose attribute has
    /// `timeout = "..."`: it replaces the attribute's duration, which is the default
    /// when the policy has none. More than zero and at most [`MAX_CALL_TIMEOUT`].
    ///
    /// Unlike [`timeouts`](Self::timeouts), which counts slow calls and lets them run,
    /// a call still running at its deadline is cut: its future is dropped, the call
    /// counts as a pass and a timeout (and as a failure for a breaker), and the
    /// function's fallback (or default, or `Err(From<Downgraded>)`) takes over with
    /// [`Reason::Deadline`](crate::Reason::Deadline). A function without `timeout` is
    /// never cut (a sync body cannot be). It is part of the rules section of the
    /// layered sources (`call_timeout = "200ms"` in a policy file), read by each call
    /// from the compiled policy (one load), and enforced in shadow mode too: it is a
    /// deadline, not a rule that downgrades.
    ///
    /// ```
    /// use resilience_runtime::{Policy, MAX_CALL_TIMEOUT};
    /// use std::time::Duration;
    ///
    /// let p = Policy::builder().call_timeout(Duration::from_millis(200)).build()?;
    /// assert_eq!(p.call_timeout(), Some(Duration::from_millis(200)));
    /// let err = Policy::builder().call_timeout(MAX_CALL_TIMEOUT * 2).build().unwrap_err();
    /// assert_eq!(err.fields(), ["call_timeout"]);
    /// # Ok::<(), resilience_runtime::PolicyError>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn call_timeout(mut self, deadline: Duration) -> Self {
        self.policy.call_timeout = Some(deadline);
        self
    }

    /// Token bucket: `rate` tokens per second, `capacity` tokens at most, full at start.
    ///
    /// Bound: over any interval of length `t`, at most `capacity + rate * t` calls are
    /// admitted, under any number of threads. The arithmetic is exact (integers in
    /// scaled time, no drift) for rates that are whole thousandths of a token per
    /// second; other rates have their interval rounded up, never refilling faster than
    /// asked. A changed rate or capacity applies from the next call: the new bucket takes
    /// over the deficit of the old one (tokens taken and not yet refilled, at most the
    /// new capacity), so a raised capacity is available at once and a lowered one clamps.
    ///
    /// The bound is kept on the registry's clock. A bucket made or changed reads the
    /// operating system's clock, so it never credits time before it existed. A bucket
    /// whose burst (`capacity / rate`) is under 200 ms refills on the CPU's tick
    /// counter; a longer one on the cached timeline (see [`Clock`](crate::Clock)),
    /// which trails the OS clock by up to about a millisecond while its thread keeps
    /// up: measured against the OS clock, such a bucket that is already full when an
    /// interval begins may admit up to `rate` x that lag more in the interval (50
    /// tokens at 50 000/s for 1 ms, 0.25 % of a 20 000-token burst).
    #[must_use = "a setter returns the changed builder"]
    pub fn token_bucket(mut self, rate: f64, capacity: u64) -> Self {
        self.policy.token_bucket = Some(TokenBucketConfig { rate, capacity });
        self
    }

    /// Lets a call that finds the token bucket empty wait for its token, if its
    /// token's time is at most `max_wait` away; a call whose token is further off is
    /// refused at once, without waiting (as without `token_wait`). Needs
    /// [`token_bucket`](Self::token_bucket); `max_wait` is at most an hour. Errors
    /// name the field `token_bucket.max_wait`, as a policy file writes it.
    ///
    /// A waiting call reserves its token when it arrives (one compare-and-swap of the
    /// bucket's arrival time, as a take), so waiting calls run in arrival order and
    /// the bound still holds over the times calls run: at most
    /// `capacity + rate * t` over any interval `t`. A sync call sleeps on its thread
    /// (a manual clock is advanced instead, as retries do); an `async fn` under
    /// `#[downgrade]` / `#[breaker]` or [`Point::enter_async`](crate::Point::enter_async)
    /// awaits a tokio timer (`tokio` feature; without it an async call is refused at
    /// once instead of waiting). After its wait the call asks the other rules
    /// (its token already held).
    ///
    /// ```
    /// use resilience_runtime::{Clock, ManualClock, Policy, Registry};
    /// use std::time::Duration;
    ///
    /// let manual = ManualClock::new();
    /// let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    /// let policy = Policy::builder()
    ///     .token_bucket(10.0, 1)
    ///     .token_wait(Duration::from_millis(250))
    ///     .build()?;
    /// registry.set_policy("docs.token_wait", policy)?;
    /// let point = registry.point("docs.token_wait")?;
    /// let t0 = manual.now();
    /// for _ in 0..3 {
    ///     point.enter()?.finish(false); // the 2nd and 3rd wait 100 ms each
    /// }
    /// assert_eq!(manual.now() - t0, Duration::from_millis(200));
    /// // Now the next token is 100 ms away; with two calls already reserved ahead it
    /// // would be 300 ms: past the 250 ms allowed, refused at once.
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn token_wait(mut self, max_wait: Duration) -> Self {
        self.policy.token_wait = Some(max_wait);
        self
    }

    /// Warm-up (Sentinel's `WarmUpController`) for the token bucket: a point that has
    /// been cold (little traffic) admits at first `rate / cold_factor` calls a second,
    /// climbing to the bucket's `rate` over about `period` of sustained traffic; idle
    /// time makes it cold again. Checked before the bucket's token, once per second
    /// as Sentinel does (the passes of each calendar second of the point's timeline,
    /// exactly: the second's pass count and its check are one compare-and-swap).
    /// Needs [`token_bucket`](Self::token_bucket); a warm-up refusal is
    /// [`Reason::TokenBucket`](crate::Reason::TokenBucket) and never waits. Errors
    /// name `warm_up.period`, `warm_up.cold_factor`.
    ///
    /// With `rate` 10, `period` 10 s and `cold_factor` 3, a point under steady
    /// overload admits 3, 3, 3, 3, 3, 4, 4, 4, 5, 5, 6, 7 calls in its first twelve
    /// seconds, then 10 a second.
    ///
    /// ```
    /// use resilience_runtime::{Clock, ManualClock, Policy, Registry};
    /// use std::time::Duration;
    ///
    /// let manual = ManualClock::new();
    /// let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    /// let policy = Policy::builder()
    ///     .token_bucket(10.0, 10)
    ///     .warm_up(Duration::from_secs(10), 3.0)
    ///     .build()?;
    /// registry.set_policy("docs.warm_up", policy)?;
    /// let point = registry.point("docs.warm_up")?;
    /// let mut admitted = Vec::new();
    /// for _ in 0..14 {
    ///     let n = (0..100).filter(|_| point.enter().map(|p| p.finish(false)).is_ok()).count();
    ///     admitted.push(n);
    ///     manual.advance(Duration::from_secs(1));
    /// }
    /// assert_eq!(admitted, [3, 3, 3, 3, 3, 4, 4, 4, 5, 5, 6, 7, 10, 10]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn warm_up(mut self, period: Duration, cold_factor: f64) -> Self {
        self.policy.warm_up = Some(WarmUpConfig {
            period,
            cold_factor,
        });
        self
    }

    /// Pacing (Sentinel's rate limiter behaviour): calls are spaced uniformly, one
    /// every `1 / rate` seconds, each waiting for its turn at most `max_wait` (a call
    /// whose turn is further off is refused at once). The same as
    /// `token_bucket(rate, 1).token_wait(max_wait)`: a bucket of one token never
    /// lets a burst through, so a dependency that cannot take bursts sees a steady
    /// stream.
    #[must_use = "a setter returns the changed builder"]
    pub fn pacing(self, rate: f64, max_wait: Duration) -> Self {
        self.token_bucket(rate, 1).token_wait(max_wait)
    }

    /// The probability, 0–100, that a tripped rule really downgrades (default 100;
    /// 0 never downgrades and emits no event). The concurrency rule always downgrades:
    /// a spared call still needs a free slot. The other rules' bounds hold at 100.
    #[must_use = "a setter returns the changed builder"]
    pub fn downgrade_percentage(mut self, percent: u8) -> Self {
        self.policy.downgrade_percentage = percent;
        self
    }

    /// Delay rule: stay downgraded for `duration` after a trip, letting one probe
    /// through every `retry_interval` (or none).
    ///
    /// Bound: one probe at a time, none before its time. A probe obeys every limit
    /// (visits, token bucket, concurrency, cluster, adaptive, breaker) but not the
    /// health rules (exceptions, exception rate, timeouts) whose trip the delay stands
    /// for; a probe that a limit refuses goes back for the next call.
    #[must_use = "a setter returns the changed builder"]
    pub fn delay(mut self, duration: Duration, retry_interval: Option<Duration>) -> Self {
        self.policy.delay = Some(Delay {
            duration,
            retry_interval,
        });
        self
    }

    /// The sliding window: `buckets` buckets of `bucket_width` (default 10 x 1 s).
    #[must_use = "a setter returns the changed builder"]
    pub fn window(mut self, buckets: u64, bucket_width: Duration) -> Self {
        self.policy.window = WindowConfig {
            buckets,
            bucket_width,
        };
        self
    }

    /// Dry run: rules are evaluated and counted (stats'
    /// `shadow_downgrades_by_reason`, events with `shadow: true`) but no call is ever
    /// downgraded, so a new threshold can be tried on live traffic. The delay rule is
    /// not simulated in shadow mode.
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy, Reason};
    ///
    /// let shadow = Policy::builder().max_visits(1).shadow(true).build()?;
    /// registry().set_policy("docs.shadow", shadow)?;
    /// let point = registry().point("docs.shadow")?;
    /// for _ in 0..3 {
    ///     point.enter().expect("a shadow policy never downgrades").finish(false);
    /// }
    /// let stats = point.stats();
    /// assert_eq!(stats.totals.downgrades, 0);
    /// assert_eq!(stats.shadow_downgrades_by_reason.get(Reason::Visits), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.policy.shadow = shadow;
        self
    }

    /// A cluster-wide limit through Redis (see [`ClusterLimit`]; `redis` feature).
    #[must_use = "a setter returns the changed builder"]
    #[cfg(feature = "redis")]
    pub fn cluster(self, limit: ClusterLimit) -> Self {
        self.cluster_section(limit)
    }

    /// Sets the cluster-wide limit whatever the features: what a policy file read for
    /// the whole fleet holds ([`PolicyFile::parse_with_every_feature`](crate::config::PolicyFile::parse_with_every_feature)).
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn cluster_section(mut self, limit: ClusterLimit) -> Self {
        self.policy.cluster = Some(Box::new(limit));
        self
    }

    /// Per-key limits (Sentinel's hot-parameter rules; see [`KeyPolicy`]), checked
    /// after the point's other rules on calls that name a key.
    #[must_use = "a setter returns the changed builder"]
    pub fn keys(mut self, keys: KeyPolicy) -> Self {
        self.policy.keys = Some(Box::new(keys));
        self
    }

    /// Adaptive concurrency limit (see [`AdaptiveLimit`]). A call over the limit is
    /// refused ([`Reason::Overloaded`](crate::Reason::Overloaded)), or waits for room
    /// with a [`queue`](Self::queue).
    ///
    /// ```
    /// use resilience_runtime::adaptive::GradientConfig;
    /// use resilience_runtime::{registry, AdaptiveLimit, Policy, Reason};
    /// use std::time::Duration;
    ///
    /// // A limit of one call (pinned, for the example), and a queue of 4.
    /// let gradient = GradientConfig::builder()
    ///     .initial_limit(1)
    ///     .min_limit(1)
    ///     .max_limit(1)
    ///     .build()?;
    /// let p = Policy::builder()
    ///     .adaptive(AdaptiveLimit::Gradient(gradient))
    ///     .queue(4, Duration::from_secs(5))
    ///     .build()?;
    /// assert!(p.adaptive().is_some());
    /// registry().set_policy("docs.adaptive", p)?;
    /// let point = registry().point("docs.adaptive")?;
    /// let first = point.enter()?;
    /// // `try_enter` never waits: the limit has no room.
    /// assert_eq!(point.try_enter().unwrap_err().reason(), Reason::Overloaded);
    /// let waiter = std::thread::spawn(move || point.enter().map(|p| p.finish(false)));
    /// std::thread::sleep(Duration::from_millis(5));
    /// first.finish(false); // gives the room back and wakes the waiter
    /// assert!(waiter.join().unwrap().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn adaptive(mut self, limit: AdaptiveLimit) -> Self {
        self.policy.adaptive = Some(Box::new(limit));
        self
    }

    /// Validates the policy.
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] listing every invalid field: a NaN or out-of-range rate, a
    /// percentage over 100, a zero window, a zero timeout threshold, a token bucket of
    /// capacity 0, a delay shorter than its retry interval, and so on.
    ///
    /// ```
    /// use resilience_runtime::Policy;
    ///
    /// let err = Policy::builder().exception_rate(f64::NAN, 5).build().unwrap_err();
    /// assert_eq!(err.fields(), ["exception_rate.rate"]);
    /// ```
    pub fn build(self) -> Result<Policy, PolicyError> {
        let mut p = self.policy;
        let mut errors = Vec::new();
        let mut fail = |field: &'static str, message: String| {
            errors.push(FieldError { field, message });
        };
        if let Some(max) = p.max_concurrency {
            if max > MAX_CONCURRENCY {
                fail(
                    "max_concurrency",
                    format!("must be at most {MAX_CONCURRENCY}, got {max}"),
                );
            }
        }
        match (self.queue_order, &mut p.queue) {
            (Some(order), Some(q)) => q.order = order,
            (Some(_), None) => fail(
                "queue.order",
                "needs `queue`: the order is that of the queue's waiters".into(),
            ),
            (None, _) => {}
        }
        if let Some(q) = p.queue {
            if p.max_concurrency.is_none() && p.adaptive.is_none() {
                fail(
                    "queue",
                    "needs `max_concurrency` or an adaptive limit: the queue holds calls \
                     waiting for room under one of them"
                        .into(),
                );
            }
            if !(1..=MAX_QUEUE).contains(&q.max_waiting) {
                fail(
                    "queue.max_waiting",
                    format!("must be in 1..={MAX_QUEUE}, got {}", q.max_waiting),
                );
            }
            if q.max_wait.is_zero() || q.max_wait > Duration::from_secs(3600) {
                fail(
                    "queue.max_wait",
                    format!(
                        "must be greater than zero and at most 1h, got {:?}",
                        q.max_wait
                    ),
                );
            }
        }
        if let Some(r) = p.exception_rate {
            if r.rate.is_nan() {
                fail("exception_rate.rate", "must be a number, not NaN".into());
            } else if !(0.0..=1.0).contains(&r.rate) {
                fail(
                    "exception_rate.rate",
                    format!("must be within 0.0..=1.0, got {}", r.rate),
                );
            }
        }
        if let Some(t) = p.timeouts {
            if t.threshold.is_zero() {
                fail("timeouts.threshold", "must be greater than zero".into());
            }
        }
        if let Some(d) = p.call_timeout {
            if d.is_zero() {
                fail("call_timeout", "must be greater than zero".into());
            } else if d > MAX_CALL_TIMEOUT {
                fail(
                    "call_timeout",
                    format!("must be at most {MAX_CALL_TIMEOUT:?} (one day), got {d:?}"),
                );
            }
        }
        if let Some(tb) = p.token_bucket {
            if !tb.rate.is_finite() || tb.rate < 0.0 {
                fail(
                    "token_bucket.rate",
                    format!("must be a finite number >= 0, got {}", tb.rate),
                );
            } else if tb.rate > 0.0 && 1e9 / tb.rate < 1.0 {
                fail(
                    "token_bucket.rate",
                    format!("must be at most 1e9 tokens per second, got {}", tb.rate),
                );
            }
            if tb.capacity == 0 {
                fail("token_bucket.capacity", "must be at least 1".into());
            } else if tb.capacity > 1_000_000_000 {
                fail(
                    "token_bucket.capacity",
                    format!("must be at most 1e9, got {}", tb.capacity),
                );
            }
        }
        if let Some(d) = p.token_wait {
            if p.token_bucket.is_none() {
                fail(
                    "token_bucket.max_wait",
                    "needs `token_bucket`: calls wait for the bucket's tokens".into(),
                );
            }
            if d.is_zero() || d > Duration::from_secs(3600) {
                fail(
                    "token_bucket.max_wait",
                    format!("must be greater than zero and at most 1h, got {d:?}"),
                );
            }
        }
        if let Some(w) = p.warm_up {
            match p.token_bucket {
                None => fail(
                    "warm_up",
                    "needs `token_bucket`: the warm-up climbs to the bucket's rate".into(),
                ),
                Some(tb) => {
                    let rate = if tb.rate > 0.0 { tb.rate } else { 1.0 };
                    if let Err(e) = crate::limit::warmup::WarmUp::new(rate, w.period, w.cold_factor)
                    {
                        fail(e.field, e.message);
                    }
                }
            }
        }
        if p.downgrade_percentage > 100 {
            fail(
                "downgrade_percentage",
                format!("must be within 0..=100, got {}", p.downgrade_percentage),
            );
        }
        if let Some(d) = p.delay {
            if d.duration.is_zero() {
                fail("delay.duration", "must be greater than zero".into());
            }
            if let Some(r) = d.retry_interval {
                if r.is_zero() {
                    fail(
                        "delay.retry_interval",
                        "must be greater than zero (use None for no probes)".into(),
                    );
                } else if r > d.duration {
                    fail(
                        "delay.retry_interval",
                        format!(
                            "must not exceed delay.duration ({:?}), got {:?}",
                            d.duration, r
                        ),
                    );
                }
            }
        }
        if let Some(a) = p.adaptive() {
            let checked = match a {
                AdaptiveLimit::Gradient(c) => c.validate(),
                AdaptiveLimit::Shedder(c) => c.validate(),
            };
            if let Err(e) = checked {
                fail("adaptive", format!("`{}` {}", e.field, e.message));
            }
        }
        if let Some(c) = p.cluster() {
            c.check(&mut fail);
        }
        if p.window.buckets == 0 {
            fail("window.buckets", "must be at least 1".into());
        } else if p.window.buckets > MAX_WINDOW_BUCKETS {
            fail(
                "window.buckets",
                format!(
                    "must be at most {MAX_WINDOW_BUCKETS}, got {}",
                    p.window.buckets
                ),
            );
        }
        if p.window.bucket_width.is_zero() {
            fail("window.bucket_width", "must be greater than zero".into());
        } else if p.window.bucket_width.as_nanos() > u128::from(u64::MAX / 4) {
            fail("window.bucket_width", "is too large".into());
        }
        if let Some(k) = &p.keys {
            // A section from `KeyPolicyBuilder::build` is valid; one changed since (a
            // policy file's, field by field) is checked here again.
            k.check(&mut errors);
        }
        if errors.is_empty() {
            Ok(p)
        } else {
            Err(PolicyError { errors })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_builder_is_an_observe_policy() {
        let p = Policy::builder().build().unwrap();
        assert_eq!(p, Policy::observe());
        assert_eq!(p.downgrade_percentage(), 100);
        assert_eq!(p.window(), WindowConfig::default());
    }

    #[test]
    fn every_invalid_field_is_named() {
        let err = Policy::builder()
            .max_concurrency(MAX_CONCURRENCY + 1)
            .exception_rate(1.5, 0)
            .timeouts(Duration::ZERO, 3)
            .call_timeout(Duration::ZERO)
            .token_bucket(f64::INFINITY, 0)
            .downgrade_percentage(101)
            .delay(Duration::from_secs(1), Some(Duration::from_secs(2)))
            .window(0, Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(
            err.fields(),
            [
                "max_concurrency",
                "exception_rate.rate",
                "timeouts.threshold",
                "call_timeout",
                "token_bucket.rate",
                "token_bucket.capacity",
                "downgrade_percentage",
                "delay.retry_interval",
                "window.buckets",
                "window.bucket_width",
            ]
        );
        let text = err.to_string();
        assert!(text.contains("`downgrade_percentage`: must be within 0..=100, got 101"));
        assert!(text.contains("`max_concurrency`: must be at most 4194304, got 4194305"));
    }

    #[test]
    fn edge_values_are_accepted() {
        Policy::builder()
            .exception_rate(0.0, 0)
            .exception_rate(1.0, 0)
            .token_bucket(0.0, 1)
            .downgrade_percentage(0)
            .max_concurrency(MAX_CONCURRENCY)
            .call_timeout(MAX_CALL_TIMEOUT)
            .window(MAX_WINDOW_BUCKETS, Duration::from_nanos(1))
            .build()
            .unwrap();
        Policy::builder()
            .call_timeout(Duration::from_nanos(1))
            .build()
            .unwrap();
        let err = Policy::builder()
            .call_timeout(MAX_CALL_TIMEOUT + Duration::from_nanos(1))
            .build()
            .unwrap_err();
        assert_eq!(err.fields(), ["call_timeout"]);
        assert!(
            err.to_string().contains("must be at most 86400s (one day)"),
            "{err}"
        );
        assert!(Policy::builder()
            .window(MAX_WINDOW_BUCKETS + 1, Duration::from_secs(1))
            .build()
            .is_err());
        assert!(Policy::builder().exception_rate(-0.1, 0).build().is_err());
        assert!(Policy::builder()
            .delay(Duration::ZERO, None)
            .build()
            .is_err());
        assert!(Policy::builder()
            .delay(Duration::from_secs(1), Some(Duration::ZERO))
            .build()
            .is_err());
    }
}
