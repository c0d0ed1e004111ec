//! [`RedisBloom`]: a bloom filter kept in a Redis string, with the in-memory filter's
//! bit layout.

use super::conn::{Connector, Target};
use super::error::{RedisBloomError, RedisFailure};
use crate::bloom::{BloomConfig, BloomFilter};
use crate::sync::LazyLock;
use std::fmt;
use std::time::Duration;

use ::redis::{Script, Value};

/// The largest filter a Redis bitmap can hold: 2^32 bits (512 MiB), since `SETBIT`
/// takes offsets below 2^32.
pub const MAX_BITS: u64 = 1 << 32;

/// The timeout of a [`RedisBloom`] built without
/// [`RedisBloomBuilder::timeout`]: one second.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// Sets every offset, counts the bits that were 0, then applies the expiry.
///
/// KEYS[1]: the bitmap. ARGV[1]: expiry in ms, 0 for none. ARGV[2]: "1" to reset the
/// expiry on every insert, "0" to set it only while the key has none. ARGV[3..]: bit
/// offsets. Returns how many bits went from 0 to 1.
const INSERT_LUA: &str = r"
local key = KEYS[1]
local added = 0
for i = 3, #ARGV do
  if redis.call('SETBIT', key, ARGV[i], 1) == 0 then
    added = added + 1
  end
end
local ttl = tonumber(ARGV[1])
if ttl > 0 and (ARGV[2] == '1' or redis.call('PTTL', key) < 0) then
  redis.call('PEXPIRE', key, ttl)
end
return added
";

/// Reads the offsets until the first 0. KEYS[1]: the bitmap; ARGV: bit offsets.
/// Returns 1 if all are set, else 0.
const CONTAINS_LUA: &str = r"
for i = 1, #ARGV do
  if redis.call('GETBIT', KEYS[1], ARGV[i]) == 0 then
    return 0
  end
end
return 1
";

// Hashing the script text once; every call then sends only its SHA (EVALSHA), and
// `Script` loads the text on the server's `NOSCRIPT` reply (a fresh or restarted
// server) and retries.
static INSERT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSERT_LUA));
static CONTAINS_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CONTAINS_LUA));

/// When a [`RedisBloom`]'s key expires.
///
/// Redis expiries are whole milliseconds: a duration is rounded down, and one under a
/// millisecond is refused with [`RedisBloomError::InvalidExpiry`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::redis::Expiry;
/// use std::time::Duration;
///
/// // A de-duplication window that restarts with every new item:
/// let sliding = Expiry::AfterLastInsert(Duration::from_secs(600));
/// // A filter of "seen today" that goes away a day after it was started:
/// let fixed = Expiry::AfterFirstInsert(Duration::from_secs(24 * 3600));
/// assert_ne!(sliding, fixed);
/// assert_eq!(Expiry::default(), Expiry::Never);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Expiry {
    /// The key never expires (the default); call [`RedisBloom::delete`] to drop it.
    #[default]
    Never,
    /// Every insert (re)sets the key's time to live, so the filter lives this long
    /// after its most recent insert.
    AfterLastInsert(Duration),
    /// An insert sets the time to live only if the key has none, so the filter lives
    /// this long after the insert that created it. (A `PERSIST` on the key re-arms it
    /// at the next insert.)
    AfterFirstInsert(Duration),
}

impl Expiry {
    /// (milliseconds, refresh on every insert); (0, _) for none.
    fn to_args(self) -> Result<(u64, bool), RedisBloomError> {
        let (d, refresh) = match self {
            Expiry::Never => return Ok((0, false)),
            Expiry::AfterLastInsert(d) => (d, true),
            Expiry::AfterFirstInsert(d) => (d, false),
        };
        let ms = d.as_millis();
        if ms == 0 || ms > i64::MAX as u128 {
            return Err(RedisBloomError::InvalidExpiry(d));
        }
        // Checked just above: 1 <= ms <= i64::MAX.
        Ok((ms as u64, refresh))
    }
}

/// Configures and builds a [`RedisBloom`]; start from [`RedisBloom::builder`].
///
/// Nothing is checked or sent until [`build`](Self::build), which does no I/O either:
/// the connection is opened by the first call.
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisBloomBuilder {
    url: String,
    key: Vec<u8>,
    config: BloomConfig,
    expiry: Expiry,
    timeout: Duration,
}

impl RedisBloomBuilder {
    /// When the key expires (default [`Expiry::Never`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// The longest any call may take, connecting included (default
    /// [`DEFAULT_TIMEOUT`]). A call that takes longer returns
    /// [`RedisBloomError::Redis`] with [`RedisFailure::Timeout`].
    #[must_use = "a setter returns the changed builder"]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Checks the settings and builds the filter handle.
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::TooManyBits`] if the configuration has more than
    /// [`MAX_BITS`] bits, [`RedisBloomError::InvalidExpiry`],
    /// [`RedisBloomError::ZeroTimeout`] or [`RedisBloomError::InvalidUrl`].
    pub fn build(self) -> Result<RedisBloom, RedisBloomError> {
        let bits = self.config.bits();
        if bits > MAX_BITS {
            return Err(RedisBloomError::TooManyBits {
                bits,
                max: MAX_BITS,
            });
        }
        let (expiry_ms, refresh) = self.expiry.to_args()?;
        if self.timeout.is_zero() {
            return Err(RedisBloomError::ZeroTimeout);
        }
        let target = Target::open(&self.url, self.timeout)
            .map_err(|message| RedisBloomError::InvalidUrl { message })?;
        Ok(RedisBloom {
            connector: Connector::new(target, self.timeout),
            key: self.key,
            config: self.config,
            expiry: self.expiry,
            expiry_ms,
            refresh,
        })
    }
}

impl fmt::Debug for RedisBloomBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: leave it out.
        f.debug_struct("RedisBloomBuilder")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("config", &self.config)
            .field("expiry", &self.expiry)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A bloom filter stored in one Redis string, shared by every process that opens the
/// same key.
///
/// The bits are exactly those of an in-memory [`BloomFilter`] of the same
/// [`BloomConfig`]: bit `j` of the filter is Redis bit offset `j` (`SETBIT key j 1`),
/// so `GET key` returns what [`BloomFilter::to_bitmap_bytes`] returns for the same
/// items, [`snapshot`](Self::snapshot) loads the Redis filter into memory, and with
/// [`HashScheme::GoZero`](crate::bloom::HashScheme::GoZero) the key can be shared with
/// go-zero services.
///
/// # Calls
///
/// [`insert`](Self::insert) and [`contains`](Self::contains) are one round trip each:
/// a Lua script (`EVALSHA`, loaded on first use) sets or reads all of the item's bits,
/// so an insert is atomic and a lookup stops at the first unset bit. Each call is
/// bounded by the timeout ([`RedisBloomBuilder::timeout`]), connecting included.
///
/// # Failures
///
/// A Redis failure is an `Err` ([`RedisBloomError::is_redis_failure`]), never an
/// "absent" answer. The connection is opened on the first call and shared by all
/// calls (one multiplexed socket); after a connection error or a timeout it is
/// dropped and the next call dials again, so calls succeed again as soon as Redis is
/// back.
///
/// # Runtime
///
/// The calls are `async` and need a tokio runtime with I/O and time enabled (as
/// `#[tokio::main]` builds); they panic if called outside one, as tokio does. The
/// handle is `Send + Sync`: share it with an `Arc`.
///
/// # Examples
///
/// ```no_run
/// use resilience_runtime::bloom::BloomConfig;
/// use resilience_runtime::redis::{Expiry, RedisBloom};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = BloomConfig::builder().expected_items(1_000_000).false_positive_rate(0.01).build()?;
/// let seen = RedisBloom::builder("redis://127.0.0.1:6379/", "bloom:orders", config)
///     .expiry(Expiry::AfterFirstInsert(Duration::from_secs(24 * 3600)))
///     .timeout(Duration::from_millis(200))
///     .build()?;
///
/// assert!(seen.insert("order:1").await?); // new bits were set
/// assert!(seen.contains("order:1").await?);
/// match seen.contains("order:2").await {
///     Ok(maybe) => println!("order:2 may be present: {maybe}"),
///     Err(e) if e.is_redis_failure() => println!("Redis is unavailable: {e}"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
pub struct RedisBloom {
    connector: Connector,
    key: Vec<u8>,
    config: BloomConfig,
    expiry: Expiry,
    expiry_ms: u64,
    refresh: bool,
}

impl RedisBloom {
    /// Starts configuring a filter of shape `config` at Redis key `key` of the server
    /// at `url` (such as `redis://127.0.0.1:6379/0`).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::bloom::{BloomConfig, HashScheme};
    /// use resilience_runtime::redis::{Expiry, RedisBloom};
    /// use std::time::Duration;
    ///
    /// let config = BloomConfig::builder().bits(1 << 20).scheme(HashScheme::GoZero).build()?;
    /// let filter = RedisBloom::builder("redis://127.0.0.1/", "bloom:users", config)
    ///     .expiry(Expiry::AfterLastInsert(Duration::from_secs(3600)))
    ///     .timeout(Duration::from_millis(250))
    ///     .build()?; // no I/O yet
    /// assert_eq!(filter.key(), b"bloom:users");
    /// assert_eq!(filter.timeout(), Duration::from_millis(250));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(url: &str, key: impl Into<Vec<u8>>, config: BloomConfig) -> RedisBloomBuilder {
        RedisBloomBuilder {
            url: url.to_owned(),
            key: key.into(),
            config,
            expiry: Expiry::Never,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// A filter of shape `config` at `key`, never expiring, with the default timeout.
    ///
    /// # Errors
    ///
    /// As [`RedisBloomBuilder::build`].
    pub fn new(
        url: &str,
        key: impl Into<Vec<u8>>,
        config: BloomConfig,
    ) -> Result<Self, RedisBloomError> {
        Self::builder(url, key, config).build()
    }

    /// A filter at `key` sized for `expected_items` at `false_positive_rate`; see
    /// [`BloomConfigBuilder::expected_items`](crate::bloom::BloomConfigBuilder::expected_items).
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::Bloom`] for a zero `expected_items` or a rate outside
    /// `(0, 1)`, else as [`RedisBloomBuilder::build`].
    pub fn with_rate(
        url: &str,
        key: impl Into<Vec<u8>>,
        expected_items: u64,
        false_positive_rate: f64,
    ) -> Result<Self, RedisBloomError> {
        let config = BloomConfig::with_rate(expected_items, false_positive_rate)?;
        Self::new(url, key, config)
    }

    /// A go-zero compatible filter of `bits` bits at `key`; see
    /// [`HashScheme::GoZero`](crate::bloom::HashScheme::GoZero).
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::Bloom`] for zero `bits`, else as
    /// [`RedisBloomBuilder::build`].
    pub fn go_zero(url: &str, key: impl Into<Vec<u8>>, bits: u64) -> Result<Self, RedisBloomError> {
        Self::new(url, key, BloomConfig::go_zero(bits)?)
    }

    /// The Redis key holding the bits.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The filter's shape.
    pub fn config(&self) -> &BloomConfig {
        &self.config
    }

    /// When the key expires.
    pub fn expiry(&self) -> Expiry {
        self.expiry
    }

    /// The longest a call may take.
    pub fn timeout(&self) -> Duration {
        self.connector.timeout()
    }

    /// Adds `item`: sets its bits in one atomic script, then applies the
    /// [`Expiry`]. Returns `true` if at least one bit was new (the item was certainly
    /// absent before), like [`BloomFilter::insert`].
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::Redis`]: a timeout, a broken connection or an error reply
    /// (for instance `WRONGTYPE` if the key holds a list).
    pub async fn insert<K: AsRef<[u8]>>(&self, item: K) -> Result<bool, RedisBloomError> {
        let offsets: Vec<u64> = self.config.positions(item.as_ref()).collect();
        self.set_bits("insert", &offsets).await
    }

    /// Whether `item` may have been inserted: `false` means certainly not, `true`
    /// means it was or is a false positive.
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert). An error is never reported as `false`.
    pub async fn contains<K: AsRef<[u8]>>(&self, item: K) -> Result<bool, RedisBloomError> {
        let offsets: Vec<u64> = self.config.positions(item.as_ref()).collect();
        self.get_bits("contains", &offsets).await
    }

    /// Sets the bits at `offsets` (computed elsewhere, for instance by
    /// [`BloomConfig::positions`] in another process), as one atomic script, and
    /// applies the [`Expiry`]. Returns `true` if at least one bit was new. An empty
    /// slice changes nothing but still applies the expiry.
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::OffsetOutOfRange`] if an offset is not below the filter's
    /// bits, before anything is sent; otherwise as [`insert`](Self::insert).
    pub async fn insert_positions(&self, offsets: &[u64]) -> Result<bool, RedisBloomError> {
        self.check_offsets(offsets)?;
        self.set_bits("insert_positions", offsets).await
    }

    /// Whether every bit at `offsets` is set (`true` for an empty slice).
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::OffsetOutOfRange`] if an offset is not below the filter's
    /// bits, before anything is sent; otherwise as [`contains`](Self::contains).
    pub async fn contains_positions(&self, offsets: &[u64]) -> Result<bool, RedisBloomError> {
        self.check_offsets(offsets)?;
        self.get_bits("contains_positions", offsets).await
    }

    /// Deletes the key, emptying the filter for every process that shares it. Returns
    /// whether the key existed.
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::Redis`]: a timeout, a broken connection or an error reply.
    pub async fn delete(&self) -> Result<bool, RedisBloomError> {
        let key = self.key.as_slice();
        let removed: i64 = self
            .connector
            .run(
                |mut conn| async move { ::redis::cmd("DEL").arg(key).query_async(&mut conn).await },
            )
            .await
            .map_err(|e| RedisBloomError::from_call("delete", e))?;
        Ok(removed > 0)
    }

    /// Reads the whole bitmap (`GET`) into an in-memory [`BloomFilter`] of the same
    /// shape, for local lookups without a round trip or to inspect the bits. A missing
    /// key gives an empty filter.
    ///
    /// # Errors
    ///
    /// [`RedisBloomError::Bloom`] if the stored bitmap is longer than this filter or
    /// sets a bit beyond it (the key belongs to a larger filter), or if the bits cannot
    /// be allocated; otherwise as [`delete`](Self::delete).
    pub async fn snapshot(&self) -> Result<BloomFilter, RedisBloomError> {
        let key = self.key.as_slice();
        let bytes: Option<Vec<u8>> = self
            .connector
            .run(
                |mut conn| async move { ::redis::cmd("GET").arg(key).query_async(&mut conn).await },
            )
            .await
            .map_err(|e| RedisBloomError::from_call("snapshot", e))?;
        let filter = match bytes {
            Some(bytes) => BloomFilter::from_bitmap_bytes(self.config, &bytes)?,
            None => BloomFilter::new(self.config)?,
        };
        Ok(filter)
    }

    fn check_offsets(&self, offsets: &[u64]) -> Result<(), RedisBloomError> {
        let bits = self.config.bits();
        match offsets.iter().find(|&&o| o >= bits) {
            Some(&offset) => Err(RedisBloomError::OffsetOutOfRange { offset, bits }),
            None => Ok(()),
        }
    }

    async fn set_bits(
        &self,
        operation: &'static str,
        offsets: &[u64],
    ) -> Result<bool, RedisBloomError> {
        let mut invocation = INSERT_SCRIPT.prepare_invoke();
        invocation
            .key(self.key.as_slice())
            .arg(self.expiry_ms)
            .arg(if self.refresh { "1" } else { "0" });
        for &offset in offsets {
            invocation.arg(offset);
        }
        let reply = self
            .connector
            .run(|mut conn| async move { invocation.invoke_async::<Value>(&mut conn).await })
            .await
            .map_err(|e| RedisBloomError::from_call(operation, e))?;
        match reply {
            Value::Int(added) if added >= 0 => Ok(added > 0),
            other => Err(unexpected(operation, &other)),
        }
    }

    async fn get_bits(
        &self,
        operation: &'static str,
        offsets: &[u64],
    ) -> Result<bool, RedisBloomError> {
        if offsets.is_empty() {
            return Ok(true);
        }
        let mut invocation = CONTAINS_SCRIPT.prepare_invoke();
        invocation.key(self.key.as_slice());
        for &offset in offsets {
            invocation.arg(offset);
        }
        let reply = self
            .connector
            .run(|mut conn| async move { invocation.invoke_async::<Value>(&mut conn).await })
            .await
            .map_err(|e| RedisBloomError::from_call(operation, e))?;
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(operation, &other)),
        }
    }
}

fn unexpected(operation: &'static str, reply: &Value) -> RedisBloomError {
    RedisBloomError::Redis(RedisFailure::unexpected(operation, format!("{reply:?}")))
}

impl fmt::Debug for RedisBloom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBloom")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("config", &self.config)
            .field("expiry", &self.expiry)
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(config: BloomConfig) -> RedisBloomBuilder {
        RedisBloom::builder("redis://127.0.0.1:1/", "k", config)
    }

    #[test]
    fn settings_are_checked_before_any_io() {
        let ok = BloomConfig::new(64, 3).unwrap();
        assert_eq!(
            builder(BloomConfig::new(MAX_BITS + 1, 3).unwrap())
                .build()
                .unwrap_err(),
            RedisBloomError::TooManyBits {
                bits: MAX_BITS + 1,
                max: MAX_BITS
            }
        );
        assert!(builder(BloomConfig::new(MAX_BITS, 3).unwrap())
            .build()
            .is_ok());
        for d in [Duration::ZERO, Duration::from_micros(999)] {
            assert_eq!(
                builder(ok)
                    .expiry(Expiry::AfterLastInsert(d))
                    .build()
                    .unwrap_err(),
                RedisBloomError::InvalidExpiry(d)
            );
        }
        assert_eq!(
            builder(ok).timeout(Duration::ZERO).build().unwrap_err(),
            RedisBloomError::ZeroTimeout
        );
        let err = RedisBloom::new("http://127.0.0.1/", "k", ok).unwrap_err();
        assert!(matches!(err, RedisBloomError::InvalidUrl { .. }), "{err:?}");
        assert!(err.to_string().contains("`url`"), "{err}");
        assert!(!err.is_redis_failure());
    }

    #[test]
    fn expiry_arguments() {
        assert_eq!(Expiry::Never.to_args(), Ok((0, false)));
        assert_eq!(
            Expiry::AfterLastInsert(Duration::from_micros(2_500)).to_args(),
            Ok((2, true))
        );
        assert_eq!(
            Expiry::AfterFirstInsert(Duration::from_secs(3)).to_args(),
            Ok((3_000, false))
        );
        let huge = Duration::from_secs(u64::MAX);
        assert_eq!(
            Expiry::AfterFirstInsert(huge).to_args(),
            Err(RedisBloomError::InvalidExpiry(huge))
        );
    }

    #[test]
    fn debug_leaves_out_the_url() {
        let filter = RedisBloom::new(
            "redis://user:hunter2@127.0.0.1/",
            "k",
            BloomConfig::new(8, 1).unwrap(),
        )
        .unwrap();
        let text = format!("{filter:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("RedisBloom"), "{text}");
    }
}
