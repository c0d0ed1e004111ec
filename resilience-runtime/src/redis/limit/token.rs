//! [`RedisTokenLimiter`]: one round trip per call, with its local fallback.

use super::*;

// ---------------------------------------------------------------------------------
// RedisTokenLimiter: one round trip per call
// ---------------------------------------------------------------------------------

/// Configures and builds a [`RedisTokenLimiter`]; start from
/// [`RedisTokenLimiter::builder`]. [`build`](Self::build) does no I/O.
#[must_use = "a builder does nothing until `build` is called"]
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
    #[must_use = "a setter returns the changed builder"]
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
        check_bucket_key(&self.key)?;
        check_rate_burst(self.rate, self.burst)?;
        self.common.check()?;
        let target = open_target(&self.url, self.common.timeout)?;
        let (tokens_key, ts_key) = token_keys(&self.key);
        let now = self.common.clock.clone().unwrap_or_default().now_ns();
        let fallback = Fallback::bucket(self.rate, self.burst, self.common.fallback_share, now);
        Ok(RedisTokenLimiter {
            inner: Arc::new(TokenInner {
                connector: Connector::new(target.clone(), self.common.timeout),
                target,
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
/// Two keys, `{key}.tokens` and `{key}.ts` (one hash tag, so both live on one Redis
/// Cluster slot, as in go-zero; hence no `key` starting with `}`), hold the tokens
/// left and the time of the last refill.
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
/// [`RejectedLocally`]: ClusterDecision::RefusedLocally
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
    target: Target,
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
            Ok(_) => inner.counters.count(ClusterDecision::Refused),
            Err(err) => {
                let err = RedisLimitError::from_call("allow", err);
                inner.switch.to_fallback(crate::util::error_chain(&err));
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
        let mut redis = SyncRedis::new(
            inner.target.clone(),
            inner.connector.timeout(),
            inner.tokens_key.clone(),
        );
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
        let decision = if self.fallback.try_take(n, &self.clock, self.clock.now_ns()) {
            ClusterDecision::AdmittedLocally
        } else {
            ClusterDecision::RefusedLocally
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
