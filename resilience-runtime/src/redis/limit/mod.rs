//! Cluster-wide limits kept in Redis: the per-call [`RedisTokenLimiter`], the leasing
//! [`ClusterLease`], their local fallback, and the types they share with the
//! [`RedisPeriodLimiter`](super::RedisPeriodLimiter).
//!
//! See [`RedisTokenLimiter`] for the bucket's layout in Redis and its fallback, and
//! [`ClusterLease`] for leasing and its over-admission bound.
//!
//! # Reading order
//!
//! This file holds what both limiters share: the token bucket's script, the mode
//! switch between Redis and the local fallback, the fallback buckets and windows,
//! the settings every builder has, and the blocking connection of background
//! threads. Then `token` (the per-call limiter) and `lease` (leasing, its refill
//! thread and its bound), each importing only from here; `tests`.

use super::conn::{Conn, Connector, Target, DEFAULT_LIMIT_TIMEOUT, MAX_TTL_MS};
use super::error::{CallError, RedisLimitError};
use super::period::{Alignment, LocalWindow, PERIOD_SCRIPT};
use crate::limit::{Gcra, GcraCell};
use crate::sync::mpsc;
use crate::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak};
use crate::sync::{AtomicU64, AtomicU8, Ordering};
use crate::Clock;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use ::redis::{ErrorKind, FromRedisValue, RedisError, Script, ScriptInvocation};

/// How often a limiter in fallback mode pings Redis, unless set: every 100 ms.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(100);

pub use crate::policy::DEFAULT_BATCH;

/// Refills a token bucket and takes `n` tokens from it, all or none, now or reserved.
///
/// KEYS[1]: tokens left (a float; negative while reservations are outstanding).
/// KEYS[2]: time of the last refill, microseconds. ARGV[1]: rate (tokens per second).
/// ARGV[2]: burst (capacity). ARGV[3]: `n`. ARGV[4]: the longest reservation the
/// caller accepts, µs (0: take now or not at all). ARGV[5]: expiry of both keys, ms.
/// ARGV[6]: the time in microseconds, or '' for the server's clock.
///
/// If `n` tokens are there they are taken. Otherwise, if they will be there within
/// ARGV[4], they are reserved: taken now (the bucket goes below zero, so later takes
/// queue behind this one) and usable only once the bucket would have held them.
/// Returns `{granted, wait}`: `{n, 0}` taken; `{n, µs}` reserved, usable after `µs`;
/// `{0, µs}` refused, worth asking again after `µs`; `{0, 0}` never (`n > burst`).
const TOKEN_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tokens = tonumber(redis.call('GET', KEYS[1]))
local last = tonumber(redis.call('GET', KEYS[2]))
if not tokens or not last then
  tokens = burst
  last = now
end
if now > last then
  tokens = math.min(burst, tokens + (now - last) * rate / 1000000)
  last = now
end
local granted = 0
local wait = 0
if n <= burst then
  if tokens >= n then
    granted = n
  else
    wait = math.ceil((n - tokens) * 1000000 / rate)
    if wait <= max_wait then
      granted = n
    else
      wait = wait - max_wait
    end
  end
  tokens = tokens - granted
end
redis.call('SET', KEYS[1], tokens, 'PX', ttl)
redis.call('SET', KEYS[2], last, 'PX', ttl)
return {granted, wait}
";

static TOKEN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TOKEN_LUA));

/// The expiry of a token bucket's keys, in ms: `ceil(2 x burst / rate)` seconds, at
/// least 1 s (go-zero's `floor` gives 0 for `2 x burst < rate`) and at most
/// [`MAX_TTL_MS`].
pub(crate) fn token_ttl_ms(rate: f64, burst: u64) -> u64 {
    let ms = (2000.0 * burst as f64 / rate).ceil();
    if ms.is_nan() || ms >= MAX_TTL_MS as f64 {
        MAX_TTL_MS
    } else {
        (ms as u64).max(1000)
    }
}

// ---------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------
// Decisions, modes, events, status
// ---------------------------------------------------------------------------------

/// Where a limiter takes its decisions from right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterMode {
    /// From Redis: the limit is shared by every instance.
    Redis,
    /// From the local fallback limiter, because Redis failed or timed out; a
    /// background thread probes Redis until it answers.
    Fallback,
}

/// The answer of a [`RedisTokenLimiter`] or a [`ClusterLease`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::redis::{ClusterDecision, ClusterMode};
///
/// let d = ClusterDecision::AdmittedLocally;
/// assert!(d.is_admitted());
/// assert_eq!(d.mode(), ClusterMode::Fallback);
/// assert!(!ClusterDecision::Refused.is_admitted());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterDecision {
    /// Admitted by the cluster-wide limit: a token taken from Redis by this call, or
    /// one leased from Redis earlier.
    Admitted,
    /// Refused: the cluster-wide limit is used up.
    Refused,
    /// Admitted by the local fallback limiter while Redis is unavailable.
    AdmittedLocally,
    /// Refused by the local fallback limiter while Redis is unavailable.
    RefusedLocally,
}

impl ClusterDecision {
    /// Whether the call may go ahead.
    pub fn is_admitted(self) -> bool {
        matches!(
            self,
            ClusterDecision::Admitted | ClusterDecision::AdmittedLocally
        )
    }

    /// Which limiter decided: Redis (or a lease from it) or the local fallback.
    pub fn mode(self) -> ClusterMode {
        match self {
            ClusterDecision::Admitted | ClusterDecision::Refused => ClusterMode::Redis,
            ClusterDecision::AdmittedLocally | ClusterDecision::RefusedLocally => {
                ClusterMode::Fallback
            }
        }
    }
}

/// A switch between Redis and the local fallback, passed to the `on_switch` hook.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModeSwitch {
    /// The mode switched to.
    pub to: ClusterMode,
    /// For a switch to [`ClusterMode::Fallback`], the failure that caused it.
    pub cause: Option<String>,
}

/// Counters of a [`RedisTokenLimiter`] or a [`ClusterLease`], for monitoring and tests.
///
/// Read with [`RedisTokenLimiter::status`] or [`ClusterLease::status`]; every count
/// is since the limiter was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStatus {
    /// The current mode.
    pub mode: ClusterMode,
    /// Switches from Redis to the fallback.
    pub to_fallback: u64,
    /// Switches from the fallback back to Redis.
    pub to_redis: u64,
    /// Requests sent to Redis: scripts run (one round trip each, two if the server had
    /// to be sent the script first) and probe pings.
    pub redis_calls: u64,
    /// Calls answered [`ClusterDecision::Admitted`].
    pub admitted: u64,
    /// Calls answered [`ClusterDecision::Refused`].
    pub refused: u64,
    /// Calls answered [`ClusterDecision::AdmittedLocally`].
    pub admitted_locally: u64,
    /// Calls answered [`ClusterDecision::RefusedLocally`].
    pub refused_locally: u64,
    /// Tokens leased from Redis and not yet spent (always 0 for a
    /// [`RedisTokenLimiter`]).
    pub held: u64,
}

type SwitchHook = Arc<dyn Fn(&ModeSwitch) + Send + Sync>;

const MODE_REDIS: u8 = 0;
const MODE_FALLBACK: u8 = 1;

/// The mode flag, its switch counters and the hook.
struct Switch {
    mode: AtomicU8,
    to_fallback: AtomicU64,
    to_redis: AtomicU64,
    hook: Option<SwitchHook>,
}

impl Switch {
    fn new(hook: Option<SwitchHook>) -> Self {
        Switch {
            mode: AtomicU8::new(MODE_REDIS),
            to_fallback: AtomicU64::new(0),
            to_redis: AtomicU64::new(0),
            hook,
        }
    }

    fn mode(&self) -> ClusterMode {
        if self.mode.load(Ordering::Acquire) == MODE_FALLBACK {
            ClusterMode::Fallback
        } else {
            ClusterMode::Redis
        }
    }

    /// Switches to the fallback; `false` if it already was there.
    fn to_fallback(&self, cause: String) -> bool {
        self.flip(MODE_REDIS, MODE_FALLBACK, &self.to_fallback, Some(cause))
    }

    /// Switches back to Redis; `false` if it already was there.
    fn to_redis(&self) -> bool {
        self.flip(MODE_FALLBACK, MODE_REDIS, &self.to_redis, None)
    }

    fn flip(&self, from: u8, to: u8, counter: &AtomicU64, cause: Option<String>) -> bool {
        if self
            .mode
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(hook) = &self.hook {
            let to = if to == MODE_FALLBACK {
                ClusterMode::Fallback
            } else {
                ClusterMode::Redis
            };
            hook(&ModeSwitch { to, cause });
        }
        true
    }
}

#[derive(Default)]
struct Counters {
    redis_calls: AtomicU64,
    admitted: AtomicU64,
    refused: AtomicU64,
    admitted_locally: AtomicU64,
    refused_locally: AtomicU64,
}

impl Counters {
    fn count(&self, decision: ClusterDecision) -> ClusterDecision {
        let counter = match decision {
            ClusterDecision::Admitted => &self.admitted,
            ClusterDecision::Refused => &self.refused,
            ClusterDecision::AdmittedLocally => &self.admitted_locally,
            ClusterDecision::RefusedLocally => &self.refused_locally,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        decision
    }

    fn status(&self, switch: &Switch, held: u64) -> ClusterStatus {
        ClusterStatus {
            mode: switch.mode(),
            to_fallback: switch.to_fallback.load(Ordering::Relaxed),
            to_redis: switch.to_redis.load(Ordering::Relaxed),
            redis_calls: self.redis_calls.load(Ordering::Relaxed),
            admitted: self.admitted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            admitted_locally: self.admitted_locally.load(Ordering::Relaxed),
            refused_locally: self.refused_locally.load(Ordering::Relaxed),
            held,
        }
    }
}

// ---------------------------------------------------------------------------------
// Local fallback limiters
// ---------------------------------------------------------------------------------

/// A lock-free token bucket of `rate` tokens per second holding `burst`, full at
/// start: the engine's own GCRA ([`crate::limit`]) on the limiter's timeline, so the
/// fallback refills exactly like a point's bucket.
pub(crate) struct LocalBucket {
    gcra: Gcra,
    cell: GcraCell,
}

impl LocalBucket {
    /// A bucket of `rate` tokens per second holding `burst` tokens, full at `now` (ns
    /// on the timeline later calls pass); `rate` must be finite and positive, `burst`
    /// at least 1.
    pub(crate) fn new(rate: f64, burst: u64, now: u64) -> Self {
        let gcra = Gcra::per_second(rate, burst);
        LocalBucket {
            cell: GcraCell::new(&gcra, gcra.scaled(now)),
            gcra,
        }
    }

    /// Takes `n` tokens at `now` if they are there.
    pub(crate) fn try_take(&self, n: u64, now: u64) -> bool {
        self.cell.try_take(&self.gcra, self.gcra.scaled(now), n)
    }
}

/// The fallback of a limiter: a bucket, a fixed window, or nothing admitted at all
/// (`fallback_share(0.0)`).
enum Fallback {
    Bucket(LocalBucket),
    Window(LocalWindow),
    Closed,
}

impl Fallback {
    fn bucket(rate: f64, burst: u64, share: f64, now: u64) -> Self {
        if share <= 0.0 {
            return Fallback::Closed;
        }
        let burst = ((burst as f64 * share).floor() as u64).max(1);
        Fallback::Bucket(LocalBucket::new(rate * share, burst, now))
    }

    fn try_take(&self, n: u64, clock: &Clock, now: u64) -> bool {
        match self {
            Fallback::Bucket(b) => b.try_take(n, now),
            Fallback::Window(w) => w.try_take(n, clock.wall_nanos(now) / 1_000_000),
            Fallback::Closed => false,
        }
    }
}

impl fmt::Debug for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::Bucket(b) => f.debug_struct("Bucket").field("gcra", &b.gcra).finish(),
            Fallback::Window(w) => w.fmt(f),
            Fallback::Closed => f.write_str("Closed"),
        }
    }
}

// ---------------------------------------------------------------------------------
// Settings shared by the builders
// ---------------------------------------------------------------------------------

/// Whose clock times the refill of a Redis token bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RefillClock {
    /// The Redis server's clock (`TIME` inside the script): one clock for every
    /// instance, however far their own clocks drift. The default.
    #[default]
    Server,
    /// This limiter's [`Clock`] (its wall time, sent with every call). Every instance
    /// sharing the bucket must then keep good time; meant for tests driven by a
    /// [`ManualClock`](crate::ManualClock).
    Local,
}

struct Common {
    timeout: Duration,
    probe_interval: Duration,
    fallback_share: f64,
    clock: Option<Clock>,
    hook: Option<SwitchHook>,
}

impl Common {
    fn new() -> Self {
        Common {
            timeout: DEFAULT_LIMIT_TIMEOUT,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            fallback_share: 1.0,
            clock: None,
            hook: None,
        }
    }

    fn check(&self) -> Result<(), RedisLimitError> {
        if self.timeout.is_zero() {
            return Err(RedisLimitError::config(
                "timeout",
                "must be greater than zero",
            ));
        }
        if self.probe_interval.is_zero() {
            return Err(RedisLimitError::config(
                "probe_interval",
                "must be greater than zero",
            ));
        }
        if !(0.0..=1.0).contains(&self.fallback_share) {
            return Err(RedisLimitError::config(
                "fallback_share",
                format!("must be between 0 and 1, got {}", self.fallback_share),
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for Common {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Common")
            .field("timeout", &self.timeout)
            .field("probe_interval", &self.probe_interval)
            .field("fallback_share", &self.fallback_share)
            .field("clock", &self.clock)
            .field("on_switch", &self.hook.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

fn check_key(key: &str) -> Result<(), RedisLimitError> {
    if key.is_empty() {
        return Err(RedisLimitError::config("key", "must not be empty"));
    }
    Ok(())
}

/// [`check_key`] for a token bucket, whose keys `{key}.tokens` and `{key}.ts` must
/// share a Redis Cluster slot: no leading `}`.
fn check_bucket_key(key: &str) -> Result<(), RedisLimitError> {
    check_key(key)?;
    crate::policy::check_bucket_name(key).map_err(|reason| RedisLimitError::config("key", reason))
}

fn check_rate_burst(rate: f64, burst: u64) -> Result<(), RedisLimitError> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(RedisLimitError::config(
            "rate",
            format!("must be a finite number of tokens per second above zero, got {rate}"),
        ));
    }
    if burst == 0 {
        return Err(RedisLimitError::config("burst", "must be at least 1"));
    }
    Ok(())
}

fn open_target(url: &str, timeout: Duration) -> Result<Target, RedisLimitError> {
    Target::open(url, timeout).map_err(|message| RedisLimitError::InvalidUrl { message })
}

/// The longest a lease's batch may be reserved ahead, µs: `burst / rate`, at most
/// 1 s. With the keys' expiry of at least `2 x burst / rate`, a bucket left in debt
/// has refilled to full before its keys expire, so an expiry never hands out tokens
/// twice.
fn reservation_us(rate: f64, burst: u64) -> u64 {
    (burst as f64 / rate * 1e6).min(1e6) as u64
}

/// `{key}.tokens` and `{key}.ts`, as go-zero names them: the braces make `key` their
/// hash tag, so a Redis Cluster keeps both in one slot (see [`check_bucket_key`]).
fn token_keys(key: &str) -> (String, String) {
    (format!("{{{key}}}.tokens"), format!("{{{key}}}.ts"))
}

/// The script's time argument: '' for the server's clock, else wall microseconds.
fn time_arg(refill: RefillClock, clock: &Clock) -> String {
    match refill {
        RefillClock::Server => String::new(),
        RefillClock::Local => (clock.wall_nanos(clock.now_ns()) / 1000).to_string(),
    }
}

/// Builder methods every fallback-capable builder has.
macro_rules! common_setters {
    () => {
        /// The longest a call to Redis may take, connecting included (default
        /// [`DEFAULT_LIMIT_TIMEOUT`]). Past it, the limiter switches to its fallback.
        #[must_use = "a setter returns the changed builder"]
        pub fn timeout(mut self, timeout: Duration) -> Self {
            self.common.timeout = timeout;
            self
        }

        /// How often Redis is pinged while in fallback mode (default
        /// [`DEFAULT_PROBE_INTERVAL`]).
        #[must_use = "a setter returns the changed builder"]
        pub fn probe_interval(mut self, interval: Duration) -> Self {
            self.common.probe_interval = interval;
            self
        }

        /// The share of the cluster-wide limit the local fallback grants this
        /// instance, in `0.0..=1.0` (default 1: the full limit, as go-zero does).
        /// With `n` instances, `1.0 / n` keeps the cluster near its limit during an
        /// outage; `0.0` rejects every call while Redis is down (fail closed).
        #[must_use = "a setter returns the changed builder"]
        pub fn fallback_share(mut self, share: f64) -> Self {
            self.common.fallback_share = share;
            self
        }

        /// The clock of local decisions (the fallback limiter, lease expiry, window
        /// alignment). Default: [`Clock::system`].
        #[must_use = "a setter returns the changed builder"]
        pub fn clock(mut self, clock: Clock) -> Self {
            self.common.clock = Some(clock);
            self
        }

        /// Calls `hook` on every switch between Redis and the fallback. It runs on
        /// the thread that noticed the switch (a caller or the background thread):
        /// keep it short and do not block in it.
        #[must_use = "a setter returns the changed builder"]
        pub fn on_switch(mut self, hook: impl Fn(&ModeSwitch) + Send + Sync + 'static) -> Self {
            self.common.hook = Some(Arc::new(hook));
            self
        }
    };
}

// ---------------------------------------------------------------------------------
// Background Redis access (probes and lease refills)
// ---------------------------------------------------------------------------------

/// Redis access for a background thread, each call bounded by `timeout`: a blocking
/// connection to one server, reopened after it fails; for a Redis Cluster, the async
/// cluster client (blocking cluster calls would retry far past the timeout) driven by
/// a single-threaded runtime of the thread's own.
struct SyncRedis {
    target: Target,
    timeout: Duration,
    /// The key whose server a probe asks (for a cluster, the master of its slot).
    probe_key: String,
    conn: Option<::redis::Connection>,
    cluster: Option<(tokio::runtime::Runtime, Connector)>,
}

impl SyncRedis {
    fn new(target: Target, timeout: Duration, probe_key: String) -> Self {
        SyncRedis {
            target,
            timeout,
            probe_key,
            conn: None,
            cluster: None,
        }
    }

    /// Runs a script (loading it first if the server does not have it).
    fn script<T: FromRedisValue>(
        &mut self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, CallError> {
        if self.target.is_cluster() {
            self.on_cluster(|mut conn| async move { invocation.invoke_async(&mut conn).await })
        } else {
            self.on_node(|conn| invocation.invoke(conn))
        }
    }

    /// Whether the server holding the probe key answers (see [`Conn::probe`]).
    fn ping(&mut self) -> Result<(), CallError> {
        if self.target.is_cluster() {
            let key = self.probe_key.clone();
            self.on_cluster(|mut conn| async move { conn.probe(key.as_bytes()).await })
        } else {
            self.on_node(|conn| ::redis::cmd("PING").query::<String>(conn).map(drop))
        }
    }

    fn on_node<T>(
        &mut self,
        call: impl FnOnce(&mut ::redis::Connection) -> Result<T, RedisError>,
    ) -> Result<T, CallError> {
        let Target::Node(client) = &self.target else {
            unreachable!("a cluster's calls go through `on_cluster`")
        };
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let conn = client.get_connection_with_timeout(self.timeout)?;
                conn.set_read_timeout(Some(self.timeout))?;
                conn.set_write_timeout(Some(self.timeout))?;
                conn
            }
        };
        let conn = self.conn.insert(conn);
        let result = call(conn);
        if let Err(err) = &result {
            // After a timeout the reply may still arrive and would be read as the
            // answer to the next request: start afresh unless Redis itself answered.
            if !matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension) {
                self.conn = None;
            }
        }
        Ok(result?)
    }

    fn on_cluster<T, F, Fut>(&mut self, call: F) -> Result<T, CallError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        if self.cluster.is_none() {
            // I/O and time only: the connection's driver tasks run while a call does.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CallError::Redis(RedisError::from(e)))?;
            let connector = Connector::new(self.target.clone(), self.timeout);
            self.cluster = Some((runtime, connector));
        }
        let Some((runtime, connector)) = &self.cluster else {
            unreachable!("set just above")
        };
        runtime.block_on(connector.run(call))
    }
}

mod lease;
#[cfg(test)]
mod tests;
mod token;

pub use lease::{ClusterLease, ClusterLeaseBuilder};
pub use token::{RedisTokenLimiter, RedisTokenLimiterBuilder};
