//! Redis-backed state shared between processes: the [`RedisBloom`] filter (feature
//! `redis`).
//!
//! [`RedisBloom`] keeps a bloom filter in one Redis string with the same bit layout as
//! the in-memory [`BloomFilter`](crate::bloom::BloomFilter): the bit positions come
//! from [`BloomConfig::positions`](crate::bloom::BloomConfig::positions) and bit `j` is
//! Redis offset `j`. With [`HashScheme::GoZero`](crate::bloom::HashScheme::GoZero)
//! the stored bits are exactly those go-zero's `core/bloom` writes, so Rust and Go
//! services can share one filter.
//!
//! - [`RedisBloom::insert`] and [`RedisBloom::contains`] are one round trip each (a Lua
//!   script run with `EVALSHA`, loaded automatically on `NOSCRIPT`).
//! - An optional [`Expiry`] is applied on insert; [`RedisBloom::delete`] drops the key.
//! - Every call is bounded by a caller-side timeout ([`DEFAULT_TIMEOUT`] unless set).
//! - Failures are typed errors ([`RedisBloomError`]), never a silent "absent"; bad
//!   settings and out-of-range offsets are refused before anything is sent.
//!
//! The client is the `redis` crate's multiplexed tokio connection, opened on first use
//! and reopened after it fails, so a filter recovers by itself when Redis comes back.
//!
//! # URLs: one server or a cluster
//!
//! Every type here takes a URL: `redis://[user:password@]host[:port][/db]` for one
//! server, `redis+cluster://[user:password@]host:port[,host:port...]/` for a Redis
//! Cluster (its hosts are seeds; slots that move and failovers are followed by the
//! client), and the same with `rediss` for TLS (feature `redis-tls`). The keys a
//! script touches always share a cluster slot. See the guide's
//! [Redis Cluster, ACL users and TLS](crate::guide::fleet#redis-cluster-acl-users-and-tls).
//!
//! # Examples
//!
//! ```no_run
//! use resilience_runtime::bloom::BloomConfig;
//! use resilience_runtime::redis::RedisBloom;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // go-zero's sizing: 20 bits per expected item, 14 hashes.
//! let users = RedisBloom::go_zero("redis://127.0.0.1:6379/", "bloom:users", 20 * 100_000)?;
//! users.insert("alice").await?;
//! assert!(users.contains("alice").await?);
//!
//! // The same bits, in memory, for local lookups.
//! let local = users.snapshot().await?;
//! assert!(local.contains("alice"));
//! # Ok(())
//! # }
//! ```

// Each file imports only from those above it: `error` (the error types), `conn` (the
// connection, its timeouts and limits), `period`, `limit` (the token limiter and the
// lease), `bloom`.
mod bloom;
mod conn;
mod error;
mod limit;
mod period;

pub use bloom::{Expiry, RedisBloom, RedisBloomBuilder, DEFAULT_TIMEOUT, MAX_BITS};
pub use conn::DEFAULT_LIMIT_TIMEOUT;
pub use error::{RedisBloomError, RedisFailure, RedisLimitError};
pub use limit::{
    ClusterDecision, ClusterLease, ClusterLeaseBuilder, ClusterMode, ClusterStatus, ModeSwitch,
    RedisTokenLimiter, RedisTokenLimiterBuilder, RefillClock, DEFAULT_BATCH,
    DEFAULT_PROBE_INTERVAL,
};
pub(crate) use period::check_period;
pub use period::{Alignment, PeriodDecision, RedisPeriodLimiter, RedisPeriodLimiterBuilder};
