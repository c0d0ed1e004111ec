//! The cluster-wide [`RedisPeriodLimiter`]: at most `quota` takes per period, counted in
//! one Redis key (go-zero's `PeriodLimit`), and the window arithmetic the visits
//! [`ClusterLease`](super::ClusterLease) shares with it.

use super::conn::{Connector, Target, DEFAULT_LIMIT_TIMEOUT};
use super::error::{RedisFailure, RedisLimitError};
use crate::sync::LazyLock;
use crate::sync::{AtomicU64, Ordering};
use crate::Clock;
use std::fmt;
use std::time::Duration;

use ::redis::Script;

/// Counts `n` takes and makes sure the counter expires.
///
/// KEYS[1]: the counter. ARGV[1]: takes to count. ARGV[2]: the window in ms, applied
/// when the counter has no expiry (it was just created, or an expiry was lost: go-zero
/// sets it only when the count is 1, so a counter created by anything else would
/// never expire). Returns `{count after this take, ms left in the window}`.
const PERIOD_LUA: &str = r"
local count = redis.call('INCRBY', KEYS[1], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  ttl = tonumber(ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {count, ttl}
";

pub(crate) static PERIOD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PERIOD_LUA));

/// Where the windows of a period limit start.
///
/// # Examples
///
/// ```
/// use resilience_runtime::redis::Alignment;
///
/// const DAY_MS: u64 = 24 * 3600 * 1000;
/// // 2026-01-01T15:59:59Z is 23:59:59 in UTC+8: one second left of the local day.
/// let wall_ms = 1_767_283_199_000;
/// assert_eq!(Alignment::UtcOffset(8 * 3600).window_ms(DAY_MS, wall_ms), 1000);
/// assert_eq!(Alignment::Utc.window_ms(DAY_MS, wall_ms), 8 * 3600 * 1000 + 1000);
/// assert_eq!(Alignment::FirstTake.window_ms(DAY_MS, wall_ms), DAY_MS);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Alignment {
    /// A window starts at the first take after the previous one ended and lasts one
    /// period (go-zero without `Align()`). The default.
    #[default]
    FirstTake,
    /// Windows are aligned on multiples of the period since the Unix epoch (UTC
    /// midnight for a daily period).
    Utc,
    /// Windows are aligned on local-time boundaries: the machine's time zone offset
    /// (as `localtime_r` reports it at the time of the take) is added before
    /// aligning, so a daily quota resets at local midnight (go-zero's `Align()`). On
    /// targets without `localtime_r` this is [`Alignment::Utc`].
    Local,
    /// Windows are aligned on the boundaries of a fixed UTC offset, in seconds
    /// (`8 * 3600` for UTC+8).
    UtcOffset(i32),
}

impl Alignment {
    /// The length of the window that holds wall time `wall_ms` (ms since the Unix
    /// epoch), from `wall_ms` to the window's end: `period - ((wall + offset) mod
    /// period)` when aligned, the whole period for [`Alignment::FirstTake`]. Always
    /// between 1 and `period_ms` (for a non-zero period).
    pub fn window_ms(self, period_ms: u64, wall_ms: u64) -> u64 {
        let offset_ms: i64 = match self {
            Alignment::FirstTake => return period_ms,
            Alignment::Utc => 0,
            Alignment::Local => i64::from(local_offset_secs(wall_ms / 1000)) * 1000,
            Alignment::UtcOffset(secs) => i64::from(secs) * 1000,
        };
        if period_ms == 0 {
            return 0;
        }
        let into = (i128::from(wall_ms) + i128::from(offset_ms)).rem_euclid(i128::from(period_ms));
        // 0 <= into < period_ms, so the result fits and is at least 1.
        period_ms - into as u64
    }

    /// The index of the window holding `wall_ms`, for the local fallback window
    /// (which has no first take to anchor [`Alignment::FirstTake`] on, so it aligns
    /// those on the epoch).
    fn window_index(self, period_ms: u64, wall_ms: u64) -> u64 {
        let end = wall_ms.saturating_add(self.window_ms(period_ms, wall_ms));
        match self {
            Alignment::FirstTake => wall_ms / period_ms,
            _ => end.div_ceil(period_ms),
        }
    }
}

/// The machine's UTC offset at `unix_secs`, in seconds.
#[cfg(unix)]
fn local_offset_secs(unix_secs: u64) -> i32 {
    let Ok(t) = libc::time_t::try_from(unix_secs) else {
        return 0;
    };
    // SAFETY: an all-zero `tm` is a valid value (integers and, on some targets, a
    // null `tm_zone` pointer), and `localtime_r` only writes into it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; `localtime_r` is the thread-safe
    // variant and keeps no pointer to them.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if ok {
        i32::try_from(tm.tm_gmtoff).unwrap_or(0)
    } else {
        0
    }
}

#[cfg(not(unix))]
fn local_offset_secs(_unix_secs: u64) -> i32 {
    0
}

/// The period in whole milliseconds, checked: at least 1 ms, at most 10 years.
pub(crate) fn check_period(period: Duration) -> Result<u64, RedisLimitError> {
    crate::policy::cluster_period(period)
        .map_err(|reason| RedisLimitError::config("period", reason))
}

/// A fixed-window counter for the local fallback of a visits lease: at most `quota`
/// takes per window. State is one `AtomicU64`: the window index (low 32 bits of it)
/// and the count.
pub(crate) struct LocalWindow {
    period_ms: u64,
    quota: u64,
    alignment: Alignment,
    state: AtomicU64,
}

impl LocalWindow {
    /// A window of `quota x share` takes (rounded down, at least 1 if `quota > 0`)
    /// per period; `None` if that admits nothing.
    pub(crate) fn new(
        period_ms: u64,
        quota: u64,
        share: f64,
        alignment: Alignment,
    ) -> Option<Self> {
        if share <= 0.0 || quota == 0 {
            return None;
        }
        let quota = ((quota as f64 * share).floor() as u64).clamp(1, u64::from(u32::MAX));
        Some(LocalWindow {
            period_ms,
            quota,
            alignment,
            state: AtomicU64::new(0),
        })
    }

    /// Counts `n` takes at wall time `wall_ms` if the window has room for them.
    pub(crate) fn try_take(&self, n: u64, wall_ms: u64) -> bool {
        // Index 0 never occurs in practice (it is the first period after 1970), so a
        // zero state reads as "no window yet" either way.
        let index = self.alignment.window_index(self.period_ms, wall_ms) & 0xFFFF_FFFF;
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let count = if s >> 32 == index { s & 0xFFFF_FFFF } else { 0 };
                let next = count.checked_add(n)?;
                (next <= self.quota).then_some((index << 32) | next)
            })
            .is_ok()
    }
}

impl fmt::Debug for LocalWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("period_ms", &self.period_ms)
            .field("quota", &self.quota)
            .field("alignment", &self.alignment)
            .finish()
    }
}

/// The answer of a [`RedisPeriodLimiter`], with go-zero's three outcomes.
///
/// # Examples
///
/// ```
/// use resilience_runtime::redis::PeriodDecision;
///
/// assert!(PeriodDecision::Allowed.is_admitted());
/// assert!(PeriodDecision::HitQuota.is_admitted()); // the last take that fits
/// assert!(!PeriodDecision::OverQuota.is_admitted());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeriodDecision {
    /// Admitted, and the quota is not reached yet.
    Allowed,
    /// Admitted, and this take used the last of the quota.
    HitQuota,
    /// Rejected: the quota of the window is used up.
    OverQuota,
}

impl PeriodDecision {
    /// Whether the call may go ahead ([`Allowed`](Self::Allowed) or
    /// [`HitQuota`](Self::HitQuota)).
    pub fn is_admitted(self) -> bool {
        !matches!(self, PeriodDecision::OverQuota)
    }

    /// The decision for the take that brought the counter to `count`.
    pub(crate) fn from_count(count: u64, quota: u64) -> Self {
        match count.cmp(&quota) {
            std::cmp::Ordering::Less => PeriodDecision::Allowed,
            std::cmp::Ordering::Equal => PeriodDecision::HitQuota,
            std::cmp::Ordering::Greater => PeriodDecision::OverQuota,
        }
    }
}

/// Configures and builds a [`RedisPeriodLimiter`]; start from
/// [`RedisPeriodLimiter::builder`]. [`build`](Self::build) does no I/O.
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisPeriodLimiterBuilder {
    url: String,
    key: String,
    period: Duration,
    quota: u64,
    alignment: Alignment,
    timeout: Duration,
    clock: Option<Clock>,
}

impl RedisPeriodLimiterBuilder {
    /// Where windows start (default [`Alignment::FirstTake`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn alignment(mut self, alignment: Alignment) -> Self {
        self.alignment = alignment;
        self
    }

    /// The longest a take may take, connecting included (default
    /// [`DEFAULT_LIMIT_TIMEOUT`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The clock whose wall time aligns windows (default [`Clock::system`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Checks the settings and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`RedisLimitError::InvalidConfig`] naming `key` (empty), `period` (under
    /// 1 ms or over 10 years) or `timeout` (zero); [`RedisLimitError::InvalidUrl`].
    pub fn build(self) -> Result<RedisPeriodLimiter, RedisLimitError> {
        if self.key.is_empty() {
            return Err(RedisLimitError::config("key", "must not be empty"));
        }
        let period_ms = check_period(self.period)?;
        if self.timeout.is_zero() {
            return Err(RedisLimitError::config(
                "timeout",
                "must be greater than zero",
            ));
        }
        let target = Target::open(&self.url, self.timeout)
            .map_err(|message| RedisLimitError::InvalidUrl { message })?;
        Ok(RedisPeriodLimiter {
            connector: Connector::new(target, self.timeout),
            key: self.key,
            period_ms,
            quota: self.quota,
            alignment: self.alignment,
            clock: self.clock.unwrap_or_default(),
        })
    }
}

impl fmt::Debug for RedisPeriodLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: leave it out.
        f.debug_struct("RedisPeriodLimiterBuilder")
            .field("key", &self.key)
            .field("period", &self.period)
            .field("quota", &self.quota)
            .field("alignment", &self.alignment)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// At most `quota` takes per period across every process sharing a Redis key
/// (go-zero's `PeriodLimit`), one round trip per take.
///
/// A take runs `INCRBY key 1` and, if the counter has no expiry, `PEXPIRE key
/// window` in one Lua script, and answers from the new count `c`:
/// [`Allowed`](PeriodDecision::Allowed) if `c < quota`,
/// [`HitQuota`](PeriodDecision::HitQuota) if `c == quota`,
/// [`OverQuota`](PeriodDecision::OverQuota) after. So with quota 5, 100 takes give
/// 4 `Allowed`, 1 `HitQuota` and 95 `OverQuota`, and with quota 1 the first take
/// is `HitQuota`, as in go-zero. The window is the period, or with an
/// [`Alignment`] the rest of the current aligned period.
///
/// Failures of Redis are errors (there is no local fallback, as in go-zero); every
/// take is bounded by the [timeout](RedisPeriodLimiterBuilder::timeout). For a
/// sync, non-blocking visits limit with a fallback, lease the same key with
/// [`ClusterLease::visits`](super::ClusterLease::visits).
///
/// # Examples
///
/// ```no_run
/// use resilience_runtime::redis::{Alignment, PeriodDecision, RedisPeriodLimiter};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Five text messages per phone number per local day.
/// let sms = RedisPeriodLimiter::builder("redis://127.0.0.1:6379/", "sms:", Duration::from_secs(86_400), 5)
///     .alignment(Alignment::Local)
///     .build()?;
/// match sms.take_for("+15550100").await? {
///     PeriodDecision::Allowed => println!("sent"),
///     PeriodDecision::HitQuota => println!("sent; that was the last one today"),
///     PeriodDecision::OverQuota => println!("try again tomorrow"),
/// }
/// # Ok(())
/// # }
/// ```
pub struct RedisPeriodLimiter {
    connector: Connector,
    key: String,
    period_ms: u64,
    quota: u64,
    alignment: Alignment,
    clock: Clock,
}

impl RedisPeriodLimiter {
    /// Starts configuring a limit of `quota` takes per `period` (whole milliseconds,
    /// at least 1 ms) at Redis key `key` of the server at `url`. `quota == 0`
    /// rejects every take.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::redis::{RedisLimitError, RedisPeriodLimiter};
    /// use std::time::Duration;
    ///
    /// let limiter = RedisPeriodLimiter::builder("redis://127.0.0.1/", "logins", Duration::from_secs(60), 10)
    ///     .build()?; // no I/O yet
    /// assert_eq!(limiter.quota(), 10);
    ///
    /// let err = RedisPeriodLimiter::new("redis://127.0.0.1/", "logins", Duration::ZERO, 10).unwrap_err();
    /// assert!(matches!(err, RedisLimitError::InvalidConfig { field: "period", .. }));
    /// # Ok::<(), RedisLimitError>(())
    /// ```
    pub fn builder(
        url: &str,
        key: &str,
        period: Duration,
        quota: u64,
    ) -> RedisPeriodLimiterBuilder {
        RedisPeriodLimiterBuilder {
            url: url.to_owned(),
            key: key.to_owned(),
            period,
            quota,
            alignment: Alignment::FirstTake,
            timeout: DEFAULT_LIMIT_TIMEOUT,
            clock: None,
        }
    }

    /// A limiter with the default settings; see [`builder`](Self::builder).
    ///
    /// # Errors
    ///
    /// As [`RedisPeriodLimiterBuilder::build`].
    pub fn new(
        url: &str,
        key: &str,
        period: Duration,
        quota: u64,
    ) -> Result<Self, RedisLimitError> {
        Self::builder(url, key, period, quota).build()
    }

    /// Counts one take at the limiter's key.
    ///
    /// # Errors
    ///
    /// A Redis failure ([`RedisLimitError::is_redis_failure`]): unreachable, timed
    /// out, or an error reply such as `WRONGTYPE`.
    pub async fn take(&self) -> Result<PeriodDecision, RedisLimitError> {
        self.take_at_key(self.key.clone()).await
    }

    /// Counts one take at key `{key}{id}` (go-zero's `Take(key)` with `key` as the
    /// prefix): one limit per user, phone number, ...
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    pub async fn take_for(&self, id: &str) -> Result<PeriodDecision, RedisLimitError> {
        self.take_at_key(format!("{}{id}", self.key)).await
    }

    async fn take_at_key(&self, key: String) -> Result<PeriodDecision, RedisLimitError> {
        let wall_ms = self.clock.wall_nanos(self.clock.now_ns()) / 1_000_000;
        let window = self.alignment.window_ms(self.period_ms, wall_ms);
        let (count, _ttl): (i64, i64) = self
            .connector
            .run(|mut conn| async move {
                PERIOD_SCRIPT
                    .key(key)
                    .arg(1)
                    .arg(window)
                    .invoke_async(&mut conn)
                    .await
            })
            .await
            .map_err(|e| RedisLimitError::from_call("take", e))?;
        let count = u64::try_from(count).map_err(|_| {
            RedisLimitError::Redis(RedisFailure::unexpected(
                "take",
                format!("negative count {count}"),
            ))
        })?;
        Ok(PeriodDecision::from_count(count, self.quota))
    }

    /// The key (or key prefix, for [`take_for`](Self::take_for)).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }

    /// Takes admitted per window.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// Where windows start.
    pub fn alignment(&self) -> Alignment {
        self.alignment
    }

    /// The longest a take waits for Redis.
    pub fn timeout(&self) -> Duration {
        self.connector.timeout()
    }
}

impl fmt::Debug for RedisPeriodLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPeriodLimiter")
            .field("key", &self.key)
            .field("period_ms", &self.period_ms)
            .field("quota", &self.quota)
            .field("alignment", &self.alignment)
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    #[test]
    fn go_zero_codes_from_counts() {
        // Quota 5 over 100 takes: 4 Allowed, 1 HitQuota, 95 OverQuota.
        let d: Vec<_> = (1..=100)
            .map(|c| PeriodDecision::from_count(c, 5))
            .collect();
        assert_eq!(
            d.iter().filter(|d| **d == PeriodDecision::Allowed).count(),
            4
        );
        assert_eq!(d[4], PeriodDecision::HitQuota);
        assert!(d[5..].iter().all(|d| *d == PeriodDecision::OverQuota));
        assert_eq!(PeriodDecision::from_count(1, 1), PeriodDecision::HitQuota);
        assert_eq!(PeriodDecision::from_count(1, 0), PeriodDecision::OverQuota);
    }

    #[test]
    fn aligned_windows_end_on_boundaries() {
        // 2026-01-01T00:00:00Z.
        let midnight = 1_767_225_600_000;
        assert_eq!(Alignment::Utc.window_ms(DAY, midnight), DAY);
        assert_eq!(Alignment::Utc.window_ms(DAY, midnight + 1), DAY - 1);
        assert_eq!(Alignment::Utc.window_ms(DAY, midnight - 1), 1);
        // UTC+8: local midnight is 16:00Z.
        let east = Alignment::UtcOffset(8 * 3600);
        assert_eq!(east.window_ms(DAY, midnight), 16 * 3_600_000);
        assert_eq!(east.window_ms(DAY, midnight + 16 * 3_600_000), DAY);
        // UTC-5: local midnight is 05:00Z.
        let west = Alignment::UtcOffset(-5 * 3600);
        assert_eq!(west.window_ms(DAY, midnight), 5 * 3_600_000);
        // Sub-second periods align too.
        assert_eq!(Alignment::Utc.window_ms(250, midnight + 1_100), 150);
        assert_eq!(Alignment::FirstTake.window_ms(250, midnight + 1_100), 250);
    }

    #[test]
    fn local_alignment_matches_the_offset_of_the_machine() {
        let now_ms = 1_767_225_600_000 + 12_345_678;
        let offset = local_offset_secs(now_ms / 1000);
        assert_eq!(
            Alignment::Local.window_ms(DAY, now_ms),
            Alignment::UtcOffset(offset).window_ms(DAY, now_ms)
        );
    }

    #[test]
    fn local_window_counts_per_window() {
        let w = LocalWindow::new(1000, 10, 0.5, Alignment::Utc).expect("a window");
        let t = 1_767_225_600_000;
        assert_eq!((0..10).filter(|_| w.try_take(1, t + 10)).count(), 5);
        assert!(!w.try_take(1, t + 999));
        assert!(w.try_take(5, t + 1000), "a new window starts empty");
        assert!(!w.try_take(1, t + 1500));
        assert!(LocalWindow::new(1000, 10, 0.0, Alignment::Utc).is_none());
        assert!(LocalWindow::new(1000, 0, 1.0, Alignment::Utc).is_none());
        // First-take windows fall back to epoch-aligned ones.
        let f = LocalWindow::new(1000, 1, 1.0, Alignment::FirstTake).expect("a window");
        assert!(f.try_take(1, t + 999));
        assert!(!f.try_take(1, t + 999));
        assert!(f.try_take(1, t + 1000));
    }
}
