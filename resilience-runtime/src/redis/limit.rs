//! Cluster-wide limits kept in Redis: the per-call [`RedisTokenLimiter`], the leasing
//! [`ClusterLease`], their local fallback, and the types they share with the
//! [`RedisPeriodLimiter`](super::RedisPeriodLimiter).
//!
//! See [`RedisTokenLimiter`] for the bucket's layout in Redis and its fallback, and
//! [`ClusterLease`] for leasing and its over-admission bound.

use super::conn::Connector;
use super::error::RedisLimitError;
use super::period::{Alignment, LocalWindow, PERIOD_SCRIPT};
use crate::limit::{Gcra, GcraCell};
use crate::sync::mpsc;
use crate::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use crate::sync::{AtomicU64, AtomicU8, Ordering};
use crate::Clock;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use ::redis::{Client, ErrorKind, RedisError, Script};

/// The timeout of a limiter built without a `timeout(..)` call: 100 ms. A rate limiter
/// sits in front of every call it guards, so it should give up on Redis quickly.
pub const DEFAULT_LIMIT_TIMEOUT: Duration = Duration::from_millis(100);

/// How often a limiter in fallback mode pings Redis, unless set: every 100 ms.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The batch size of a [`ClusterLease`] built without [`ClusterLeaseBuilder::batch`]:
/// 10 tokens per round trip.
pub const DEFAULT_BATCH: u64 = 10;

/// The longest expiry given to a Redis key: 10 years, in milliseconds. Redis accepts
/// far more, but a bucket that needs longer than this to fill is a configuration
/// mistake nobody will notice the difference on.
pub(crate) const MAX_TTL_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

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
/// assert!(!ClusterDecision::Rejected.is_admitted());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterDecision {
    /// Admitted by the cluster-wide limit: a token taken from Redis by this call, or
    /// one leased from Redis earlier.
    Admitted,
    /// Rejected: the cluster-wide limit is used up.
    Rejected,
    /// Admitted by the local fallback limiter while Redis is unavailable.
    AdmittedLocally,
    /// Rejected by the local fallback limiter while Redis is unavailable.
    RejectedLocally,
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
            ClusterDecision::Admitted | ClusterDecision::Rejected => ClusterMode::Redis,
            ClusterDecision::AdmittedLocally | ClusterDecision::RejectedLocally => {
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
    /// Calls answered [`ClusterDecision::Rejected`].
    pub rejected: u64,
    /// Calls answered [`ClusterDecision::AdmittedLocally`].
    pub admitted_locally: u64,
    /// Calls answered [`ClusterDecision::RejectedLocally`].
    pub rejected_locally: u64,
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
    rejected: AtomicU64,
    admitted_locally: AtomicU64,
    rejected_locally: AtomicU64,
}

impl Counters {
    fn count(&self, decision: ClusterDecision) -> ClusterDecision {
        let counter = match decision {
            ClusterDecision::Admitted => &self.admitted,
            ClusterDecision::Rejected => &self.rejected,
            ClusterDecision::AdmittedLocally => &self.admitted_locally,
            ClusterDecision::RejectedLocally => &self.rejected_locally,
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
            rejected: self.rejected.load(Ordering::Relaxed),
            admitted_locally: self.admitted_locally.load(Ordering::Relaxed),
            rejected_locally: self.rejected_locally.load(Ordering::Relaxed),
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

fn open_client(url: &str) -> Result<Client, RedisLimitError> {
    Client::open(url).map_err(|e| RedisLimitError::InvalidUrl {
        message: e.to_string(),
    })
}

/// The longest a lease's batch may be reserved ahead, µs: `burst / rate`, at most
/// 1 s. With the keys' expiry of at least `2 x burst / rate`, a bucket left in debt
/// has refilled to full before its keys expire, so an expiry never hands out tokens
/// twice.
fn reservation_us(rate: f64, burst: u64) -> u64 {
    (burst as f64 / rate * 1e6).min(1e6) as u64
}

/// `{key}.tokens` and `{key}.ts`, as go-zero names them.
fn token_keys(key: &str) -> (String, String) {
    (format!("{{{key}}}.tokens"), format!("{{{key}}}.ts"))
}

/// The script's time argument: '' for the server's clock, else wall microseconds.
fn time_arg(refill: RefillClock, clock: &Clock) -> String {
    match refill {
        RefillClock::Server => String::new(),
        RefillClock::Local => (clock.wall_nanos(clock.now()) / 1000).to_string(),
    }
}

/// Builder methods every fallback-capable builder has.
macro_rules! common_setters {
    () => {
        /// The longest a call to Redis may take, connecting included (default
        /// [`DEFAULT_LIMIT_TIMEOUT`]). Past it, the limiter switches to its fallback.
        pub fn timeout(mut self, timeout: Duration) -> Self {
            self.common.timeout = timeout;
            self
        }

        /// How often Redis is pinged while in fallback mode (default
        /// [`DEFAULT_PROBE_INTERVAL`]).
        pub fn probe_interval(mut self, interval: Duration) -> Self {
            self.common.probe_interval = interval;
            self
        }

        /// The share of the cluster-wide limit the local fallback grants this
        /// instance, in `0.0..=1.0` (default 1: the full limit, as go-zero does).
        /// With `n` instances, `1.0 / n` keeps the cluster near its limit during an
        /// outage; `0.0` rejects every call while Redis is down (fail closed).
        pub fn fallback_share(mut self, share: f64) -> Self {
            self.common.fallback_share = share;
            self
        }

        /// The clock of local decisions (the fallback limiter, lease expiry, window
        /// alignment). Default: [`Clock::system`].
        pub fn clock(mut self, clock: Clock) -> Self {
            self.common.clock = Some(clock);
            self
        }

        /// Calls `hook` on every switch between Redis and the fallback. It runs on
        /// the thread that noticed the switch (a caller or the background thread):
        /// keep it short and do not block in it.
        pub fn on_switch(mut self, hook: impl Fn(&ModeSwitch) + Send + Sync + 'static) -> Self {
            self.common.hook = Some(Arc::new(hook));
            self
        }
    };
}

// ---------------------------------------------------------------------------------
// Background Redis access (probes and lease refills), on the sync client
// ---------------------------------------------------------------------------------

/// A blocking connection for background threads, reopened after it fails. Each read
/// and write is bounded by `timeout`.
struct SyncRedis {
    client: Client,
    timeout: Duration,
    conn: Option<::redis::Connection>,
}

impl SyncRedis {
    fn new(client: Client, timeout: Duration) -> Self {
        SyncRedis {
            client,
            timeout,
            conn: None,
        }
    }

    fn run<T>(
        &mut self,
        call: impl FnOnce(&mut ::redis::Connection) -> Result<T, RedisError>,
    ) -> Result<T, RedisError> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let conn = self.client.get_connection_with_timeout(self.timeout)?;
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
        result
    }

    fn ping(&mut self) -> Result<(), RedisError> {
        self.run(|conn| ::redis::cmd("PING").query::<String>(conn).map(drop))
    }
}

// ---------------------------------------------------------------------------------
// RedisTokenLimiter: one round trip per call
// ---------------------------------------------------------------------------------

/// Configures and builds a [`RedisTokenLimiter`]; start from
/// [`RedisTokenLimiter::builder`]. [`build`](Self::build) does no I/O.
pub struct RedisTokenLimiterBuilder {
    url: String,
    key: String,
    rate: f64,
    burst: u64,
    refill_clock: RefillClock,
    common: Common,
}

impl RedisTokenLimiterBuilder {
    common_setters!();

    /// Whose clock times the refill (default [`RefillClock::Server`]).
    pub fn refill_clock(mut self, refill: RefillClock) -> Self {
        self.refill_clock = refill;
        self
    }

    /// Checks the settings and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`RedisLimitError::InvalidConfig`] naming `key` (empty), `rate` (not finite
    /// and positive), `burst` (0), `timeout` or `probe_interval` (zero) or
    /// `fallback_share` (outside `0..=1`); [`RedisLimitError::InvalidUrl`].
    pub fn build(self) -> Result<RedisTokenLimiter, RedisLimitError> {
        check_key(&self.key)?;
        check_rate_burst(self.rate, self.burst)?;
        self.common.check()?;
        let client = open_client(&self.url)?;
        let (tokens_key, ts_key) = token_keys(&self.key);
        let now = self.common.clock.clone().unwrap_or_default().now();
        let fallback = Fallback::bucket(self.rate, self.burst, self.common.fallback_share, now);
        Ok(RedisTokenLimiter {
            inner: Arc::new(TokenInner {
                connector: Connector::new(client.clone(), self.common.timeout),
                client,
                key: self.key,
                tokens_key,
                ts_key,
                rate: self.rate,
                burst: self.burst,
                ttl_ms: token_ttl_ms(self.rate, self.burst),
                refill_clock: self.refill_clock,
                clock: self.common.clock.unwrap_or_default(),
                probe_interval: self.common.probe_interval,
                fallback,
                switch: Switch::new(self.common.hook),
                probing: AtomicU8::new(0),
                counters: Counters::default(),
            }),
        })
    }
}

impl fmt::Debug for RedisTokenLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: leave it out.
        f.debug_struct("RedisTokenLimiterBuilder")
            .field("key", &self.key)
            .field("rate", &self.rate)
            .field("burst", &self.burst)
            .field("refill_clock", &self.refill_clock)
            .field("common", &self.common)
            .finish_non_exhaustive()
    }
}

/// A token bucket shared through Redis, one round trip per call (go-zero's
/// `TokenLimiter`, without its quirks).
///
/// The bucket refills continuously at `rate` tokens per second up to `burst` tokens
/// and starts full; every process that builds a limiter on the same Redis and key
/// shares it.
///
/// # In Redis
///
/// Two keys, `{key}.tokens` and `{key}.ts` (one hash tag, so both live on one cluster
/// slot, as in go-zero), hold the tokens left and the time of the last refill.
/// [`allow`](Self::allow) runs one Lua script that refills the bucket for the time
/// elapsed since then (to the microsecond, on the Redis server's clock unless
/// [`RefillClock::Local`] is chosen; go-zero refills in whole seconds on the caller's
/// clock), takes the token and writes both keys back, so a take is atomic however
/// many processes share the bucket. Both keys expire after
/// `max(1 s, ceil(2 x burst / rate))` ([`ttl`](Self::ttl)): an idle bucket is full
/// again by then, and the expiry is never 0. (go-zero computes `floor(2 x burst /
/// rate)` seconds, which is 0 when `2 x burst < rate`; its `SETEX` then fails on
/// every call and its limiter flaps between Redis and its local rescue limiter.)
///
/// # Failures
///
/// No call waits longer than the [timeout](RedisTokenLimiterBuilder::timeout). When
/// Redis fails or times out, the call is answered by a local token bucket
/// ([`ClusterDecision::AdmittedLocally`] / [`RejectedLocally`]) of `rate x share`
/// tokens per second holding `burst x share` (rounded down, at least 1; see
/// [`fallback_share`](RedisTokenLimiterBuilder::fallback_share): by default the full
/// rate and burst, like go-zero's rescue limiter; it starts full and keeps its state
/// across outages), the limiter
/// switches to [`ClusterMode::Fallback`] and answers every call locally, without
/// touching Redis, while a background thread pings Redis every
/// [`probe_interval`](RedisTokenLimiterBuilder::probe_interval); the first answer
/// switches it back. Unlike go-zero, a timeout also switches (go-zero rejects the
/// call and stays on Redis).
///
/// # Runtime
///
/// The calls are `async` and need a tokio runtime with I/O and time enabled; the
/// probe runs on its own thread. Share the limiter with an `Arc`, or clone it (clones
/// share the bucket, the mode and the counters).
///
/// [`RejectedLocally`]: ClusterDecision::RejectedLocally
///
/// # Examples
///
/// ```no_run
/// use resilience_runtime::redis::{ClusterMode, RedisTokenLimiter};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 100 calls per second across the cluster, bursts of up to 20.
/// let limiter = RedisTokenLimiter::builder("redis://127.0.0.1:6379/", "api:search", 100.0, 20)
///     .timeout(Duration::from_millis(50))
///     .on_switch(|s| eprintln!("rate limiter now uses {:?}: {:?}", s.to, s.cause))
///     .build()?;
/// if limiter.allow().await.is_admitted() {
///     // serve the request
/// }
/// assert_eq!(limiter.mode(), ClusterMode::Redis);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisTokenLimiter {
    inner: Arc<TokenInner>,
}

struct TokenInner {
    connector: Connector,
    client: Client,
    key: String,
    tokens_key: String,
    ts_key: String,
    rate: f64,
    burst: u64,
    ttl_ms: u64,
    refill_clock: RefillClock,
    clock: Clock,
    probe_interval: Duration,
    fallback: Fallback,
    switch: Switch,
    /// 1 while a probe thread runs.
    probing: AtomicU8,
    counters: Counters,
}

impl RedisTokenLimiter {
    /// Starts configuring a limiter of `rate` tokens per second and `burst` tokens at
    /// Redis key `key` (keys `{key}.tokens` and `{key}.ts`) of the server at `url`.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::redis::RedisTokenLimiter;
    /// use std::time::Duration;
    ///
    /// let limiter = RedisTokenLimiter::builder("redis://127.0.0.1/", "api", 10.0, 1).build()?;
    /// // go-zero would give these keys an expiry of floor(2 x 1 / 10) = 0 s.
    /// assert_eq!(limiter.ttl(), Duration::from_secs(1));
    /// # Ok::<(), resilience_runtime::redis::RedisLimitError>(())
    /// ```
    pub fn builder(url: &str, key: &str, rate: f64, burst: u64) -> RedisTokenLimiterBuilder {
        RedisTokenLimiterBuilder {
            url: url.to_owned(),
            key: key.to_owned(),
            rate,
            burst,
            refill_clock: RefillClock::Server,
            common: Common::new(),
        }
    }

    /// A limiter with the default settings; see [`builder`](Self::builder).
    ///
    /// # Errors
    ///
    /// As [`RedisTokenLimiterBuilder::build`].
    pub fn new(url: &str, key: &str, rate: f64, burst: u64) -> Result<Self, RedisLimitError> {
        Self::builder(url, key, rate, burst).build()
    }

    /// Takes one token; see [`allow_n`](Self::allow_n).
    pub async fn allow(&self) -> ClusterDecision {
        self.allow_n(1).await
    }

    /// Takes `n` tokens if all of them are there (none are taken otherwise).
    ///
    /// `n == 0` is admitted without a round trip; `n > burst` is never admitted. In
    /// fallback mode the call is answered locally at once; otherwise it waits at most
    /// the timeout for Redis.
    pub async fn allow_n(&self, n: u64) -> ClusterDecision {
        let inner = &self.inner;
        if n == 0 {
            return inner.counters.count(ClusterDecision::Admitted);
        }
        if inner.switch.mode() == ClusterMode::Fallback {
            self.ensure_probe();
            return inner.local(n);
        }
        let invocation = {
            let mut inv = TOKEN_SCRIPT.key(inner.tokens_key.as_str());
            inv.key(inner.ts_key.as_str())
                .arg(inner.rate)
                .arg(inner.burst)
                .arg(n)
                .arg(0)
                .arg(inner.ttl_ms)
                .arg(time_arg(inner.refill_clock, &inner.clock));
            inv
        };
        inner.counters.redis_calls.fetch_add(1, Ordering::Relaxed);
        let result = inner
            .connector
            .run(|mut conn| async move { invocation.invoke_async::<(u64, u64)>(&mut conn).await })
            .await;
        match result {
            Ok((granted, _wait)) if granted == n => inner.counters.count(ClusterDecision::Admitted),
            Ok(_) => inner.counters.count(ClusterDecision::Rejected),
            Err(err) => {
                let err = RedisLimitError::from_call("allow", err);
                inner.switch.to_fallback(err.to_string());
                if inner.switch.mode() == ClusterMode::Fallback {
                    self.ensure_probe();
                }
                inner.local(n)
            }
        }
    }

    /// Starts the probe thread unless one is running. If the thread cannot be
    /// started, the next call in fallback mode tries again.
    fn ensure_probe(&self) {
        let inner = &self.inner;
        if inner.probing.load(Ordering::Acquire) == 1
            || inner.probing.swap(1, Ordering::AcqRel) == 1
        {
            return;
        }
        let weak: Weak<TokenInner> = Arc::downgrade(inner);
        let mut redis = SyncRedis::new(inner.client.clone(), inner.connector.timeout());
        let interval = inner.probe_interval;
        let spawned = thread::Builder::new()
            .name("resilience-redis-probe".into())
            .spawn(move || loop {
                thread::sleep(interval);
                // The limiter is gone: nobody needs the answer.
                let Some(inner) = weak.upgrade() else { return };
                inner.counters.redis_calls.fetch_add(1, Ordering::Relaxed);
                if redis.ping().is_ok() {
                    // Cleared first, so a failure right after the switch can start a
                    // new probe.
                    inner.probing.store(0, Ordering::Release);
                    inner.switch.to_redis();
                    return;
                }
            });
        if spawned.is_err() {
            inner.probing.store(0, Ordering::Release);
        }
    }

    /// The current mode.
    pub fn mode(&self) -> ClusterMode {
        self.inner.switch.mode()
    }

    /// The limiter's counters.
    pub fn status(&self) -> ClusterStatus {
        self.inner.counters.status(&self.inner.switch, 0)
    }

    /// The key the limiter was built with (the Redis keys are `{key}.tokens` and
    /// `{key}.ts`).
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        self.inner.rate
    }

    /// Bucket capacity.
    pub fn burst(&self) -> u64 {
        self.inner.burst
    }

    /// The expiry of the bucket's keys: `max(1 s, ceil(2 x burst / rate))`.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.inner.ttl_ms)
    }

    /// The longest a call waits for Redis.
    pub fn timeout(&self) -> Duration {
        self.inner.connector.timeout()
    }
}

impl TokenInner {
    fn local(&self, n: u64) -> ClusterDecision {
        let decision = if self.fallback.try_take(n, &self.clock, self.clock.now()) {
            ClusterDecision::AdmittedLocally
        } else {
            ClusterDecision::RejectedLocally
        };
        self.counters.count(decision)
    }
}

impl fmt::Debug for RedisTokenLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("RedisTokenLimiter")
            .field("key", &inner.key)
            .field("rate", &inner.rate)
            .field("burst", &inner.burst)
            .field("ttl_ms", &inner.ttl_ms)
            .field("mode", &inner.switch.mode())
            .field("fallback", &inner.fallback)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------
// ClusterLease: tokens taken from Redis in batches and spent locally
// ---------------------------------------------------------------------------------

/// What a lease takes its batches from.
#[derive(Clone, Debug)]
enum LeaseSource {
    /// A Redis token bucket (the same keys as [`RedisTokenLimiter`]).
    Tokens {
        tokens_key: String,
        ts_key: String,
        rate: f64,
        burst: u64,
        ttl_ms: u64,
        /// The longest reservation taken, µs: `burst / rate`, at most 1 s.
        max_wait_us: u64,
        refill_clock: RefillClock,
    },
    /// A Redis counter of visits per window (the same key as
    /// [`RedisPeriodLimiter`](super::RedisPeriodLimiter)).
    Visits {
        key: String,
        period_ms: u64,
        quota: u64,
        alignment: Alignment,
    },
}

/// One batch from Redis.
struct Grant {
    granted: u64,
    /// For a reserved batch: how long until it may be spent.
    ready_in: Duration,
    /// When nothing was granted: how long until asking again is worth it.
    retry_after: Duration,
    /// For a visits lease: how long the window still lasts (Redis `PTTL`).
    valid_for: Option<Duration>,
}

impl LeaseSource {
    fn take(&self, redis: &mut SyncRedis, want: u64, clock: &Clock) -> Result<Grant, RedisError> {
        match self {
            LeaseSource::Tokens {
                tokens_key,
                ts_key,
                rate,
                burst,
                ttl_ms,
                max_wait_us,
                refill_clock,
            } => {
                let now = time_arg(*refill_clock, clock);
                let (granted, wait): (u64, u64) = redis.run(|conn| {
                    TOKEN_SCRIPT
                        .key(tokens_key.as_str())
                        .key(ts_key.as_str())
                        .arg(*rate)
                        .arg(*burst)
                        .arg(want)
                        .arg(*max_wait_us)
                        .arg(*ttl_ms)
                        .arg(now)
                        .invoke(conn)
                })?;
                let wait = Duration::from_micros(wait);
                Ok(Grant {
                    granted,
                    ready_in: if granted > 0 { wait } else { Duration::ZERO },
                    retry_after: if granted > 0 { Duration::ZERO } else { wait },
                    valid_for: None,
                })
            }
            LeaseSource::Visits {
                key,
                period_ms,
                quota,
                alignment,
            } => {
                let wall_ms = clock.wall_nanos(clock.now()) / 1_000_000;
                let window = alignment.window_ms(*period_ms, wall_ms);
                let (count, pttl): (i64, i64) = redis.run(|conn| {
                    PERIOD_SCRIPT
                        .key(key.as_str())
                        .arg(want)
                        .arg(window)
                        .invoke(conn)
                })?;
                // Visits counted before this batch; the batch gets what is left.
                let before = u64::try_from(count).unwrap_or(0).saturating_sub(want);
                let granted = quota.saturating_sub(before).min(want);
                let ttl = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
                Ok(Grant {
                    granted,
                    ready_in: Duration::ZERO,
                    retry_after: ttl,
                    valid_for: Some(ttl),
                })
            }
        }
    }
}

/// Configures and builds a [`ClusterLease`]; start from [`ClusterLease::token_bucket`]
/// or [`ClusterLease::visits`].
pub struct ClusterLeaseBuilder {
    url: String,
    key: String,
    kind: LeaseKind,
    batch: u64,
    refill_at: Option<u64>,
    refill_clock: Option<RefillClock>,
    alignment: Option<Alignment>,
    common: Common,
    /// Whether `build` waits for the answer to the first batch request.
    wait_first: bool,
}

#[derive(Clone, Copy, Debug)]
enum LeaseKind {
    Tokens { rate: f64, burst: u64 },
    Visits { period: Duration, quota: u64 },
}

impl ClusterLeaseBuilder {
    common_setters!();

    /// How many tokens one round trip asks for (default [`DEFAULT_BATCH`]). For a
    /// token bucket it must not exceed `burst`.
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// Ask for the next batch once this many leased tokens are left (default
    /// `batch / 4`), so that the batch usually arrives before the lease runs dry.
    /// Must be below `batch`.
    pub fn refill_at(mut self, left: u64) -> Self {
        self.refill_at = Some(left);
        self
    }

    /// Whose clock times the Redis bucket's refill (token bucket leases only;
    /// default [`RefillClock::Server`]).
    pub fn refill_clock(mut self, refill: RefillClock) -> Self {
        self.refill_clock = Some(refill);
        self
    }

    /// Where windows start (visits leases only; default
    /// [`Alignment::FirstTake`]).
    pub fn alignment(mut self, alignment: Alignment) -> Self {
        self.alignment = Some(alignment);
        self
    }

    /// [`build`](Self::build) returns as soon as the refill thread is started, without
    /// waiting for the first batch: until it is answered ([`ClusterLease::answered`])
    /// the lease rejects every call in [`ClusterMode::Redis`]. For callers that must
    /// not wait (the keys' leases, built on the chores' thread).
    pub(crate) fn no_wait(mut self) -> Self {
        self.wait_first = false;
        self
    }

    /// Checks the settings, starts the refill thread and waits until Redis has
    /// answered the first batch request (or failed, or the timeout has passed), so
    /// that the first calls find tokens.
    ///
    /// # Errors
    ///
    /// [`RedisLimitError::InvalidConfig`] naming the setting at fault: `key`,
    /// `rate`, `burst`, `period`, `batch` (0, or above `burst`), `refill_at` (not
    /// below `batch`), `refill_clock` (on a visits lease), `alignment` (on a token
    /// lease), `timeout`, `probe_interval`, `fallback_share`;
    /// [`RedisLimitError::InvalidUrl`]; [`RedisLimitError::Thread`].
    pub fn build(self) -> Result<ClusterLease, RedisLimitError> {
        check_key(&self.key)?;
        self.common.check()?;
        if self.batch == 0 {
            return Err(RedisLimitError::config("batch", "must be at least 1"));
        }
        let refill_at = self.refill_at.unwrap_or(self.batch / 4);
        if refill_at >= self.batch {
            return Err(RedisLimitError::config(
                "refill_at",
                format!("must be below `batch` ({}), got {refill_at}", self.batch),
            ));
        }
        let share = self.common.fallback_share;
        let now = self.common.clock.clone().unwrap_or_default().now();
        let (source, fallback) = match self.kind {
            LeaseKind::Tokens { rate, burst } => {
                check_rate_burst(rate, burst)?;
                if self.batch > burst {
                    return Err(RedisLimitError::config(
                        "batch",
                        format!("must not exceed `burst` ({burst}), got {}", self.batch),
                    ));
                }
                if self.alignment.is_some() {
                    return Err(RedisLimitError::config(
                        "alignment",
                        "applies to visits leases only",
                    ));
                }
                let (tokens_key, ts_key) = token_keys(&self.key);
                let source = LeaseSource::Tokens {
                    tokens_key,
                    ts_key,
                    rate,
                    burst,
                    ttl_ms: token_ttl_ms(rate, burst),
                    max_wait_us: reservation_us(rate, burst),
                    refill_clock: self.refill_clock.unwrap_or_default(),
                };
                (source, Fallback::bucket(rate, burst, share, now))
            }
            LeaseKind::Visits { period, quota } => {
                let period_ms = super::period::check_period(period)?;
                if self.refill_clock.is_some() {
                    return Err(RedisLimitError::config(
                        "refill_clock",
                        "applies to token bucket leases only",
                    ));
                }
                let alignment = self.alignment.unwrap_or_default();
                let fallback = match LocalWindow::new(period_ms, quota, share, alignment) {
                    Some(w) => Fallback::Window(w),
                    None => Fallback::Closed,
                };
                let source = LeaseSource::Visits {
                    key: self.key.clone(),
                    period_ms,
                    quota,
                    alignment,
                };
                (source, fallback)
            }
        };
        let client = open_client(&self.url)?;
        let shared = Arc::new(LeaseShared {
            held: AtomicU64::new(0),
            valid_until: AtomicU64::new(match source {
                LeaseSource::Tokens { .. } => u64::MAX,
                LeaseSource::Visits { .. } => 0,
            }),
            wanted: AtomicU8::new(1),
            answered: AtomicU8::new(0),
            stop: AtomicU8::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            switch: Switch::new(self.common.hook),
            fallback,
            clock: self.common.clock.unwrap_or_default(),
            counters: Counters::default(),
            batch: self.batch,
            refill_at,
        });
        let (first_tx, first_rx) = mpsc::sync_channel(1);
        let refiller = Refiller {
            shared: Arc::clone(&shared),
            redis: SyncRedis::new(client, self.common.timeout),
            source: source.clone(),
            probe_interval: self.common.probe_interval,
            first: Some(first_tx),
        };
        let handle = thread::Builder::new()
            .name("resilience-lease-refill".into())
            .spawn(move || refiller.run())
            .map_err(|e| RedisLimitError::Thread {
                message: e.to_string(),
            })?;
        // The refiller answers within about one timeout (a reload of the script after
        // a restarted server costs one more round trip); do not wait longer than that.
        if self.wait_first {
            let _ = first_rx.recv_timeout(self.common.timeout * 3);
        }
        Ok(ClusterLease {
            shared,
            key: self.key,
            kind: self.kind,
            timeout: self.common.timeout,
            refiller: Mutex::new(Some(handle)),
        })
    }
}

impl fmt::Debug for ClusterLeaseBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterLeaseBuilder")
            .field("key", &self.key)
            .field("kind", &self.kind)
            .field("batch", &self.batch)
            .field("refill_at", &self.refill_at)
            .field("refill_clock", &self.refill_clock)
            .field("alignment", &self.alignment)
            .field("common", &self.common)
            .field("wait_first", &self.wait_first)
            .finish_non_exhaustive()
    }
}

/// A sync, non-blocking admission handle on a cluster-wide limit: tokens are taken
/// from Redis in batches by a background thread and spent locally.
///
/// go-zero's limiters cost one Redis round trip per call. A lease costs one round
/// trip per [`batch`](ClusterLeaseBuilder::batch) of calls, and
/// [`try_acquire`](Self::try_acquire) never waits: it only touches local atomics.
///
/// Two limits can be leased:
///
/// - [`ClusterLease::token_bucket`]: the Redis token bucket of [`RedisTokenLimiter`]
///   (same keys, so both kinds can share one bucket).
/// - [`ClusterLease::visits`]: at most `quota` calls per window across the cluster,
///   the counter of [`RedisPeriodLimiter`](super::RedisPeriodLimiter) (same key);
///   batches are taken with `INCRBY`.
///
/// # What `try_acquire` does
///
/// 1. If a leased token is on hand (and, for visits, its window has not ended), it
///    spends it: [`ClusterDecision::Admitted`]. When `refill_at` or fewer are left,
///    it wakes the refill thread.
/// 2. Otherwise it wakes the refill thread and, in [`ClusterMode::Redis`], answers
///    [`ClusterDecision::Rejected`]: either Redis has said the limit is used up, or a
///    batch is on its way and this call does not wait for it (at start-up
///    [`build`](ClusterLeaseBuilder::build) waits for the first batch, so this only
///    happens when the lease runs dry faster than one round trip; pick a larger
///    batch then).
/// 3. In [`ClusterMode::Fallback`] (Redis failed or timed out), it asks the local
///    fallback limiter: a token bucket of `rate x share` per second and
///    `burst x share` tokens, or a window of `quota x share` calls per period
///    (windows aligned as configured, or on the Unix epoch for
///    [`Alignment::FirstTake`]), see
///    [`fallback_share`](ClusterLeaseBuilder::fallback_share). Tokens leased before
///    the outage are spent first.
///
/// # The refill thread
///
/// One thread per lease owns a blocking Redis connection (each read and write
/// bounded by the timeout). It asks for `batch` tokens whenever `refill_at` or fewer
/// are left.
///
/// - A token bucket grants whole batches. If the bucket holds fewer than `batch`
///   tokens, the batch is *reserved*: taken at once (the bucket goes below zero, so
///   whoever asks next queues behind it) and added to the lease only when the bucket
///   would have held it, at most `min(burst / rate, 1 s)` later. So every round trip
///   brings a batch, even when several instances compete for a dry bucket (waiting
///   and asking again would cost about `instances - 1` empty round trips per batch).
///   A batch further away than that is refused and asked for again when it is not.
/// - A visits window grants what is left of its quota, up to `batch`; when nothing
///   is left the thread does not ask again before the window ends.
///
/// On a Redis failure or timeout it switches to the fallback and pings Redis every
/// [`probe_interval`](ClusterLeaseBuilder::probe_interval); on the first answer it
/// switches back and takes a new batch. Both switches go to the
/// [`on_switch`](ClusterLeaseBuilder::on_switch) hook. Dropping the lease stops the
/// thread (waiting for at most one call in flight); leased tokens not spent are lost.
///
/// # Over-admission bound
///
/// A token is always taken from Redis before it is spent, so leasing never lets the
/// cluster exceed the Redis limit over time; it only moves when tokens are spent:
///
/// - **Token bucket.** Each lease holds at most [`max_held`](Self::max_held) =
///   `batch + refill_at` spendable tokens. A reserved batch becomes spendable only
///   when the bucket would have held it, so since start the cluster admits at most
///   `burst + rate x t`, as with one round trip per call. Over any interval of length
///   `d` it admits at most `burst + rate x d + instances x max_held`: tokens leased
///   before the interval may be spent in it. That sum is the bound on over-admission:
///   the burst grows by at most `instances x max_held`.
/// - **Visits.** A batch is granted only from what is left of the window's quota, and
///   leased tokens are dropped when the window ends (measured from when the request
///   was sent, which is never later than Redis's expiry), so the cluster admits at
///   most `quota` calls per Redis window: no over-admission.
/// - **Under-admission** in both: up to `instances x max_held` tokens may sit unspent
///   in idle leases (and are dropped with the lease, or at the window's end).
/// - **Outages** are outside these bounds: each instance admits what its fallback
///   allows.
///
/// # Examples
///
/// ```no_run
/// use resilience_runtime::redis::{ClusterDecision, ClusterLease};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), resilience_runtime::redis::RedisLimitError> {
/// // 1000 calls per second across 4 instances, bursts of 200; 20 tokens per round trip.
/// let lease = ClusterLease::token_bucket("redis://127.0.0.1:6379/", "orders", 1000.0, 200)
///     .batch(20)
///     .fallback_share(0.25)
///     .on_switch(|s| eprintln!("cluster limit now uses {:?}", s.to))
///     .build()?;
/// match lease.try_acquire() {
///     d if d.is_admitted() => { /* serve */ }
///     ClusterDecision::Rejected => { /* the cluster-wide limit is used up */ }
///     _ => { /* rejected by the local fallback while Redis is down */ }
/// }
///
/// // At most 10 000 visits per minute across the cluster.
/// let visits = ClusterLease::visits("redis://127.0.0.1:6379/", "visits:search", Duration::from_secs(60), 10_000)
///     .batch(50)
///     .build()?;
/// let _ = visits.try_acquire();
/// # Ok(())
/// # }
/// ```
pub struct ClusterLease {
    shared: Arc<LeaseShared>,
    key: String,
    kind: LeaseKind,
    timeout: Duration,
    /// The refill thread, until [`stop`](Self::stop) joins it.
    refiller: Mutex<Option<thread::JoinHandle<()>>>,
}

struct LeaseShared {
    /// Leased tokens on hand.
    held: AtomicU64,
    /// Timeline reading (ns) at which the held tokens lapse; `u64::MAX` for a token
    /// bucket lease, whose tokens never lapse.
    valid_until: AtomicU64,
    /// 1 once a caller has asked for a batch and the refiller has not yet started on
    /// it.
    wanted: AtomicU8,
    /// 1 once the first batch request has been answered (or failed).
    answered: AtomicU8,
    stop: AtomicU8,
    /// Guards nothing but the condition variable's wait.
    lock: Mutex<()>,
    wake: Condvar,
    switch: Switch,
    fallback: Fallback,
    clock: Clock,
    counters: Counters,
    batch: u64,
    refill_at: u64,
}

impl ClusterLease {
    /// Starts configuring a lease on the Redis token bucket of `rate` tokens per
    /// second and `burst` tokens at `key` (keys `{key}.tokens` and `{key}.ts`, shared
    /// with any [`RedisTokenLimiter`] on the same key).
    pub fn token_bucket(url: &str, key: &str, rate: f64, burst: u64) -> ClusterLeaseBuilder {
        Self::builder(url, key, LeaseKind::Tokens { rate, burst })
    }

    /// Starts configuring a lease on a visits limit: at most `quota` calls per
    /// `period` (whole milliseconds, at least 1 ms) across the cluster, counted at Redis
    /// key `key` (shared with a [`RedisPeriodLimiter`](super::RedisPeriodLimiter) on
    /// the same key). `quota == 0` admits nothing.
    pub fn visits(url: &str, key: &str, period: Duration, quota: u64) -> ClusterLeaseBuilder {
        Self::builder(url, key, LeaseKind::Visits { period, quota })
    }

    fn builder(url: &str, key: &str, kind: LeaseKind) -> ClusterLeaseBuilder {
        ClusterLeaseBuilder {
            url: url.to_owned(),
            key: key.to_owned(),
            kind,
            batch: DEFAULT_BATCH,
            refill_at: None,
            refill_clock: None,
            alignment: None,
            common: Common::new(),
            wait_first: true,
        }
    }

    /// Decides one call without waiting; see the [type docs](Self) for exactly how.
    #[inline]
    pub fn try_acquire(&self) -> ClusterDecision {
        let s = &*self.shared;
        // A token bucket lease's tokens never lapse: skip the clock read.
        let valid_until = s.valid_until.load(Ordering::Acquire);
        if valid_until == u64::MAX || s.clock.now() < valid_until {
            if let Ok(before) = s
                .held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(1))
            {
                if before - 1 <= s.refill_at {
                    s.want_refill();
                }
                return s.counters.count(ClusterDecision::Admitted);
            }
        }
        if s.switch.mode() == ClusterMode::Fallback {
            let decision = if s.fallback.try_take(1, &s.clock, s.clock.now()) {
                ClusterDecision::AdmittedLocally
            } else {
                ClusterDecision::RejectedLocally
            };
            return s.counters.count(decision);
        }
        s.want_refill();
        s.counters.count(ClusterDecision::Rejected)
    }

    /// The current mode.
    pub fn mode(&self) -> ClusterMode {
        self.shared.switch.mode()
    }

    /// The lease's counters, including the tokens held now.
    pub fn status(&self) -> ClusterStatus {
        let s = &*self.shared;
        s.counters.status(&s.switch, s.held_at(s.clock.now()))
    }

    /// The most tokens this lease can hold at once: `batch + refill_at`. The
    /// cluster's over-admission is bounded by the sum of this over all instances.
    pub fn max_held(&self) -> u64 {
        self.shared.batch + self.shared.refill_at
    }

    /// Tokens asked for per round trip.
    pub fn batch(&self) -> u64 {
        self.shared.batch
    }

    /// The key the lease was built with.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The bound on each Redis call of the refill thread.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the first batch request has been answered (or failed): always true
    /// once [`build`](ClusterLeaseBuilder::build) returned, unless it was built
    /// with `no_wait` or Redis took longer than its wait.
    pub(crate) fn answered(&self) -> bool {
        self.shared.answered.load(Ordering::Acquire) == 1
    }

    /// Spends up to `n` leased tokens on hand (none in fallback mode beyond those
    /// held), counted as admitted; returns how many. Wakes the refill thread when
    /// `refill_at` or fewer are left. For paying, at once, for calls admitted before
    /// the lease had its first batch.
    pub(crate) fn take_up_to(&self, n: u64) -> u64 {
        let s = &*self.shared;
        let valid_until = s.valid_until.load(Ordering::Acquire);
        if n == 0 || (valid_until != u64::MAX && s.clock.now() >= valid_until) {
            return 0;
        }
        let before = s
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| Some(h - h.min(n)))
            .unwrap_or(0);
        let taken = before.min(n);
        if before - taken <= s.refill_at {
            s.want_refill();
        }
        s.counters.admitted.fetch_add(taken, Ordering::Relaxed);
        taken
    }
}

impl LeaseShared {
    fn want_refill(&self) {
        if self.wanted.load(Ordering::Acquire) == 0 && self.wanted.swap(1, Ordering::AcqRel) == 0 {
            // Taking the lock orders this notification after the refiller's check of
            // `wanted`, so the wake-up cannot be lost. It happens once per batch.
            let _guard = self.guard();
            self.wake.notify_one();
        }
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) == 1
    }

    /// Tokens on hand that have not lapsed at `now`.
    fn held_at(&self, now: u64) -> u64 {
        if now < self.valid_until.load(Ordering::Acquire) {
            self.held.load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// Adds a batch sent at `sent`.
    fn apply(&self, grant: &Grant, sent: u64) {
        let Some(valid_for) = grant.valid_for else {
            self.held.fetch_add(grant.granted, Ordering::AcqRel);
            return;
        };
        let now = self.clock.now();
        if now < self.valid_until.load(Ordering::Acquire) {
            // The window we hold tokens of has not ended by our (early) reckoning, so
            // the batch most likely comes from it too. Keeping the earlier end is
            // safe either way: tokens can only lapse too early.
            self.held.fetch_add(grant.granted, Ordering::AcqRel);
        } else {
            // A new window: drop what is left of the old one first, so no caller can
            // spend an old token under the new window's end.
            self.held.store(0, Ordering::Release);
            let end = sent.saturating_add(u64::try_from(valid_for.as_nanos()).unwrap_or(u64::MAX));
            self.valid_until.store(end, Ordering::Release);
            self.held.fetch_add(grant.granted, Ordering::AcqRel);
        }
    }

    /// Waits until `wanted` is set (and `not_before` has passed), or the lease is
    /// dropped. Returns `false` on drop.
    fn wait_for_demand(&self, not_before: Option<Instant>) -> bool {
        let mut guard = self.guard();
        loop {
            if self.stopped() {
                return false;
            }
            let now = Instant::now();
            let wait = match not_before {
                Some(t) if now < t => t - now,
                _ if self.wanted.load(Ordering::Acquire) == 1 => return true,
                // Nothing to do; the timeout only guards against surprises.
                _ => Duration::from_secs(1),
            };
            guard = self
                .wake
                .wait_timeout(guard, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until the lease's clock has advanced by `d` (so a manual clock in tests
    /// decides when a reserved batch is ready), unless the lease is dropped first.
    /// Returns `false` on drop.
    fn wait_on_clock(&self, d: Duration) -> bool {
        let ready = self
            .clock
            .now()
            .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        loop {
            let now = self.clock.now();
            if now >= ready {
                return true;
            }
            // The system clock is read at a few milliseconds' resolution: sleep the
            // rest, then check again; a manual clock is polled every 10 ms.
            let rest = Duration::from_nanos(ready - now).min(Duration::from_millis(10));
            if !self.sleep(rest) {
                return false;
            }
        }
    }

    /// Sleeps for `d` unless the lease is dropped first. Returns `false` on drop.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut guard = self.guard();
        loop {
            if self.stopped() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            guard = self
                .wake
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The refill thread's state.
struct Refiller {
    shared: Arc<LeaseShared>,
    redis: SyncRedis,
    source: LeaseSource,
    probe_interval: Duration,
    /// Told when the first batch request has been answered (or failed).
    first: Option<mpsc::SyncSender<()>>,
}

impl Refiller {
    fn run(mut self) {
        let mut not_before: Option<Instant> = None;
        loop {
            if self.shared.stopped() {
                return;
            }
            if self.shared.switch.mode() == ClusterMode::Fallback {
                if !self.shared.sleep(self.probe_interval) {
                    return;
                }
                self.shared
                    .counters
                    .redis_calls
                    .fetch_add(1, Ordering::Relaxed);
                if self.redis.ping().is_ok() {
                    self.shared.switch.to_redis();
                    // Take a fresh batch at once.
                    self.shared.wanted.store(1, Ordering::Release);
                    not_before = None;
                }
                continue;
            }
            if !self.shared.wait_for_demand(not_before) {
                return;
            }
            not_before = None;
            self.shared.wanted.store(0, Ordering::Release);
            let s = &*self.shared;
            if s.held_at(s.clock.now()) > s.refill_at {
                continue;
            }
            let sent = s.clock.now();
            s.counters.redis_calls.fetch_add(1, Ordering::Relaxed);
            match self.source.take(&mut self.redis, s.batch, &s.clock) {
                Ok(grant) => {
                    // A reserved batch is spent only once the bucket would have
                    // held it.
                    if !grant.ready_in.is_zero() && !s.wait_on_clock(grant.ready_in) {
                        return;
                    }
                    s.apply(&grant, sent);
                    if grant.granted == 0 {
                        // Nothing until a reservation is possible or the window ends;
                        // callers keep asking meanwhile, but Redis is not asked sooner.
                        not_before =
                            Some(Instant::now() + grant.retry_after.max(Duration::from_millis(1)));
                    }
                }
                Err(err) => {
                    let err = RedisLimitError::from_redis("refill", &err);
                    s.switch.to_fallback(err.to_string());
                }
            }
            if let Some(first) = self.first.take() {
                self.shared.answered.store(1, Ordering::Release);
                let _ = first.send(());
            }
        }
    }
}

impl ClusterLease {
    /// Stops the refill thread and waits for it (within one Redis call, bounded by the
    /// timeout). The lease stays usable: it hands out the tokens it still holds, then
    /// answers as its mode says without asking Redis again.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(1, Ordering::Release);
        {
            let _guard = self.shared.guard();
            self.shared.wake.notify_all();
        }
        let handle = self
            .refiller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            // The thread notices within one Redis call (bounded by the timeout).
            let _ = handle.join();
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.refiller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}

impl Drop for ClusterLease {
    fn drop(&mut self) {
        self.stop();
    }
}

impl fmt::Debug for ClusterLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &*self.shared;
        f.debug_struct("ClusterLease")
            .field("key", &self.key)
            .field("kind", &self.kind)
            .field("batch", &s.batch)
            .field("refill_at", &s.refill_at)
            .field("mode", &s.switch.mode())
            .field("held", &s.held_at(s.clock.now()))
            .field("fallback", &s.fallback)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_never_zero() {
        // go-zero: floor(2 x 1 / 10) = 0 s, and SETEX fails on every call.
        assert_eq!(token_ttl_ms(10.0, 1), 1000);
        assert_eq!(token_ttl_ms(1000.0, 3), 1000);
        // Otherwise 2 x burst / rate, rounded up.
        assert_eq!(token_ttl_ms(10.0, 100), 20_000);
        assert_eq!(token_ttl_ms(3.0, 10), 6667);
        assert_eq!(token_ttl_ms(1e-12, 1), MAX_TTL_MS);
    }

    #[test]
    fn local_bucket_bursts_then_refills_at_rate() {
        let t0 = 5_000_000_000;
        let b = LocalBucket::new(10.0, 3, t0);
        assert!((0..3).all(|_| b.try_take(1, t0)));
        assert!(!b.try_take(1, t0));
        // One token every 100 ms.
        assert!(!b.try_take(1, t0 + 99_000_000));
        assert!(b.try_take(1, t0 + 100_000_000));
        assert!(!b.try_take(1, t0 + 100_000_000));
        // Idle for a long time: no more than the burst is saved.
        let later = t0 + 60_000_000_000;
        assert!(b.try_take(3, later));
        assert!(!b.try_take(1, later));
        // A take larger than the burst never passes.
        assert!(!b.try_take(4, later + 3_600_000_000_000));
    }

    #[test]
    fn fallback_share_scales_rate_and_burst() {
        let Fallback::Bucket(b) = Fallback::bucket(90.0, 30, 1.0 / 3.0, 1_000_000_000) else {
            panic!("expected a bucket");
        };
        // 30 tokens per second, 10 at once.
        let t0 = 1_000_000_000;
        assert_eq!((0..20).filter(|_| b.try_take(1, t0)).count(), 10);
        assert_eq!(
            (0..40)
                .filter(|_| b.try_take(1, t0 + 1_000_000_000))
                .count(),
            10,
            "after 1 s the bucket is full again, not over-full"
        );
        assert!(matches!(
            Fallback::bucket(90.0, 30, 0.0, 0),
            Fallback::Closed
        ));
        // A tiny share still leaves one token of burst.
        let Fallback::Bucket(b) = Fallback::bucket(1.0, 2, 0.1, 0) else {
            panic!("expected a bucket");
        };
        assert!(b.try_take(1, t0));
        assert!(!b.try_take(1, t0));
    }

    #[test]
    fn settings_are_checked_before_any_io() {
        let url = "redis://127.0.0.1:1/";
        let field = |r: Result<RedisTokenLimiter, RedisLimitError>| match r.unwrap_err() {
            RedisLimitError::InvalidConfig { field, .. } => field,
            e => panic!("expected InvalidConfig, got {e:?}"),
        };
        assert_eq!(field(RedisTokenLimiter::new(url, "", 1.0, 1)), "key");
        assert_eq!(field(RedisTokenLimiter::new(url, "k", f64::NAN, 1)), "rate");
        assert_eq!(field(RedisTokenLimiter::new(url, "k", -1.0, 1)), "rate");
        assert_eq!(field(RedisTokenLimiter::new(url, "k", 1.0, 0)), "burst");
        let b = || RedisTokenLimiter::builder(url, "k", 1.0, 1);
        assert_eq!(field(b().timeout(Duration::ZERO).build()), "timeout");
        assert_eq!(
            field(b().probe_interval(Duration::ZERO).build()),
            "probe_interval"
        );
        assert_eq!(field(b().fallback_share(1.5).build()), "fallback_share");
        assert!(matches!(
            RedisTokenLimiter::new("http://nope", "k", 1.0, 1),
            Err(RedisLimitError::InvalidUrl { .. })
        ));

        let lease_field = |r: Result<ClusterLease, RedisLimitError>| match r.unwrap_err() {
            RedisLimitError::InvalidConfig { field, .. } => field,
            e => panic!("expected InvalidConfig, got {e:?}"),
        };
        let t = || ClusterLease::token_bucket(url, "k", 10.0, 5);
        assert_eq!(lease_field(t().batch(0).build()), "batch");
        assert_eq!(lease_field(t().batch(6).build()), "batch");
        assert_eq!(lease_field(t().batch(4).refill_at(4).build()), "refill_at");
        assert_eq!(
            lease_field(t().batch(5).alignment(Alignment::Utc).build()),
            "alignment"
        );
        let v = || ClusterLease::visits(url, "k", Duration::from_secs(1), 5);
        assert_eq!(
            lease_field(v().refill_clock(RefillClock::Local).build()),
            "refill_clock"
        );
        assert_eq!(
            lease_field(ClusterLease::visits(url, "k", Duration::ZERO, 5).build()),
            "period"
        );
    }

    #[test]
    fn handles_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<ClusterLease>();
        shareable::<RedisTokenLimiter>();
        shareable::<super::super::RedisPeriodLimiter>();
    }

    #[test]
    fn decisions_report_admission_and_mode() {
        use ClusterDecision::*;
        assert_eq!(
            [Admitted, Rejected, AdmittedLocally, RejectedLocally]
                .map(|d| (d.is_admitted(), d.mode())),
            [
                (true, ClusterMode::Redis),
                (false, ClusterMode::Redis),
                (true, ClusterMode::Fallback),
                (false, ClusterMode::Fallback)
            ]
        );
    }
}
