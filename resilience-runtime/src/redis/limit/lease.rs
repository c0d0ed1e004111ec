//! [`ClusterLease`]: tokens taken from Redis in batches and spent locally, with its
//! over-admission bound.

use super::*;
use crate::point::form::shared::{KeyBucket, Shared, SharedLimit, SharedLimits};
use crate::policy::ClusterLimit;
use crate::sync::Recover;

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
    /// [`RedisPeriodLimiter`](crate::redis::RedisPeriodLimiter)).
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
    /// The key whose server answers for this lease (a probe pings it).
    fn probe_key(&self) -> &str {
        match self {
            LeaseSource::Tokens { tokens_key, .. } => tokens_key,
            LeaseSource::Visits { key, .. } => key,
        }
    }

    fn take(&self, redis: &mut SyncRedis, want: u64, clock: &Clock) -> Result<Grant, CallError> {
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
                let mut invocation = TOKEN_SCRIPT.key(tokens_key.as_str());
                invocation
                    .key(ts_key.as_str())
                    .arg(*rate)
                    .arg(*burst)
                    .arg(want)
                    .arg(*max_wait_us)
                    .arg(*ttl_ms)
                    .arg(now);
                let (granted, wait): (u64, u64) = redis.script(&invocation)?;
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
                let wall_ms = clock.wall_nanos(clock.now_ns()) / 1_000_000;
                let window = alignment.window_ms(*period_ms, wall_ms);
                let mut invocation = PERIOD_SCRIPT.key(key.as_str());
                invocation.arg(want).arg(window);
                let (count, pttl): (i64, i64) = redis.script(&invocation)?;
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
#[must_use = "a builder does nothing until `build` is called"]
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
    #[must_use = "a setter returns the changed builder"]
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// Ask for the next batch once this many leased tokens are left (default
    /// `batch / 4`), so that the batch usually arrives before the lease runs dry.
    /// Must be below `batch`.
    #[must_use = "a setter returns the changed builder"]
    pub fn refill_at(mut self, left: u64) -> Self {
        self.refill_at = Some(left);
        self
    }

    /// Whose clock times the Redis bucket's refill (token bucket leases only;
    /// default [`RefillClock::Server`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn refill_clock(mut self, refill: RefillClock) -> Self {
        self.refill_clock = Some(refill);
        self
    }

    /// Where windows start (visits leases only; default
    /// [`Alignment::FirstTake`]).
    #[must_use = "a setter returns the changed builder"]
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
        match self.kind {
            LeaseKind::Tokens { .. } => check_bucket_key(&self.key)?,
            LeaseKind::Visits { .. } => check_key(&self.key)?,
        }
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
        let now = self.common.clock.clone().unwrap_or_default().now_ns();
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
                let period_ms = crate::redis::check_period(period)?;
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
        let target = open_target(&self.url, self.common.timeout)?;
        let probe_key = source.probe_key().to_owned();
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
            redis: SyncRedis::new(target, self.common.timeout, probe_key),
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
///   the counter of [`RedisPeriodLimiter`](crate::redis::RedisPeriodLimiter) (same key);
///   batches are taken with `INCRBY`.
///
/// # What `try_acquire` does
///
/// 1. If a leased token is on hand (and, for visits, its window has not ended), it
///    spends it: [`ClusterDecision::Admitted`]. When `refill_at` or fewer are left,
///    it wakes the refill thread.
/// 2. Otherwise it wakes the refill thread and, in [`ClusterMode::Redis`], answers
///    [`ClusterDecision::Refused`]: either Redis has said the limit is used up, or a
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
///     ClusterDecision::Refused => { /* the cluster-wide limit is used up */ }
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
    /// key `key` (shared with a [`RedisPeriodLimiter`](crate::redis::RedisPeriodLimiter) on
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
        if valid_until == u64::MAX || s.clock.now_ns() < valid_until {
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
            let decision = if s.fallback.try_take(1, &s.clock, s.clock.now_ns()) {
                ClusterDecision::AdmittedLocally
            } else {
                ClusterDecision::RefusedLocally
            };
            return s.counters.count(decision);
        }
        s.want_refill();
        s.counters.count(ClusterDecision::Refused)
    }

    /// The current mode.
    pub fn mode(&self) -> ClusterMode {
        self.shared.switch.mode()
    }

    /// The lease's counters, including the tokens held now.
    pub fn status(&self) -> ClusterStatus {
        let s = &*self.shared;
        s.counters.status(&s.switch, s.held_at(s.clock.now_ns()))
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
        if n == 0 || (valid_until != u64::MAX && s.clock.now_ns() >= valid_until) {
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
        self.lock.lock().recover()
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
        let now = self.clock.now_ns();
        if now < self.valid_until.load(Ordering::Acquire) {
            // The window we hold tokens of has not ended by our (early) reckoning, so
            // the batch most likely comes from it too. Keeping the earlier end is
            // safe either way: tokens can only lapse too early.
            self.held.fetch_add(grant.granted, Ordering::AcqRel);
        } else {
            // A new window: drop what is left of the old one first, so no caller can
            // spend an old token under the new window's end.
            self.held.store(0, Ordering::Release);
            let end = sent.saturating_add(crate::clock::nanos(valid_for));
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
            guard = self.wake.wait_timeout(guard, wait).recover().0;
        }
    }

    /// Waits until the lease's clock has advanced by `d` (so a manual clock in tests
    /// decides when a reserved batch is ready), unless the lease is dropped first.
    /// Returns `false` on drop.
    fn wait_on_clock(&self, d: Duration) -> bool {
        let ready = self.clock.now_ns().saturating_add(crate::clock::nanos(d));
        loop {
            let now = self.clock.now_ns();
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
            guard = self.wake.wait_timeout(guard, deadline - now).recover().0;
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
            if s.held_at(s.clock.now_ns()) > s.refill_at {
                continue;
            }
            let sent = s.clock.now_ns();
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
                    let err = RedisLimitError::from_call("refill", err);
                    s.switch.to_fallback(crate::util::error_chain(&err));
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
        let handle = self.refiller.lock().recover().take();
        if let Some(handle) = handle {
            // The thread notices within one Redis call (bounded by the timeout).
            let _ = handle.join();
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.refiller.lock().recover().is_none()
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
            .field("held", &s.held_at(s.clock.now_ns()))
            .field("fallback", &s.fallback)
            .finish_non_exhaustive()
    }
}

/// The engine's side of a shared limit: a lease is what a point (its `cluster`
/// section) or a hot key (its `keys` section's) asks (see `point::shared`).
impl SharedLimit for ClusterLease {
    #[inline]
    fn decide(&self) -> Shared {
        match self.try_acquire() {
            ClusterDecision::Admitted => Shared::Admitted,
            ClusterDecision::Refused => Shared::Refused,
            ClusterDecision::AdmittedLocally => Shared::Local(true),
            ClusterDecision::RefusedLocally => Shared::Local(false),
        }
    }

    fn answered(&self) -> bool {
        ClusterLease::answered(self)
    }

    fn take_up_to(&self, n: u64) -> u64 {
        ClusterLease::take_up_to(self, n)
    }

    fn in_fallback(&self) -> bool {
        self.mode() == ClusterMode::Fallback
    }

    fn stop(&self) {
        ClusterLease::stop(self);
    }

    fn is_stopped(&self) -> bool {
        ClusterLease::is_stopped(self)
    }
}

/// Makes the lease of a policy's `cluster` section.
fn lease_of_cluster(limit: &ClusterLimit) -> Result<Box<dyn SharedLimit>, String> {
    let builder = match limit {
        ClusterLimit::Visits {
            url,
            key,
            period,
            quota,
            batch,
        } => ClusterLease::visits(url, key, *period, *quota).batch(*batch),
        ClusterLimit::TokenBucket {
            url,
            key,
            rate,
            burst,
            batch,
        } => ClusterLease::token_bucket(url, key, *rate, *burst).batch(*batch),
    };
    started(builder)
}

/// Makes the lease of one hot key, started without waiting for Redis.
fn lease_of_key(b: &KeyBucket<'_>) -> Result<Box<dyn SharedLimit>, String> {
    started(
        ClusterLease::token_bucket(b.url, b.name, b.rate, b.burst)
            .batch(b.batch)
            .no_wait(),
    )
}

fn started(builder: ClusterLeaseBuilder) -> Result<Box<dyn SharedLimit>, String> {
    match builder.build() {
        Ok(lease) => Ok(Box::new(lease)),
        Err(e) => Err(crate::util::error_chain(&e)),
    }
}

/// The `redis` feature's shared limits, found by the engine at link time.
#[linkme::distributed_slice(crate::point::form::shared::SHARED_LIMITS)]
static REDIS_LEASES: SharedLimits = SharedLimits {
    of_cluster: lease_of_cluster,
    of_key: lease_of_key,
};
