//! The Redis bloom filter's error type.

use super::conn::{CallError, Failure};
use crate::bloom::BloomError;
use std::fmt;
use std::time::Duration;

/// Why a [`RedisBloom`](super::RedisBloom) could not be built or a call on it failed.
///
/// Configuration mistakes name the setting at fault and are found before anything is
/// sent to Redis. Failures of Redis itself (unreachable, timed out, an error reply)
/// are errors too, never an "absent" answer: a caller guarding a database with the
/// filter decides for itself what an outage means.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::{BloomConfig, BloomError};
/// use resilience_runtime::redis::{RedisBloom, RedisBloomError};
///
/// // A zero-bit filter is refused when the configuration is built...
/// assert_eq!(BloomConfig::go_zero(0).unwrap_err(), BloomError::ZeroBits);
///
/// // ...and a filter larger than a Redis string is refused when the handle is built.
/// let config = BloomConfig::new(1 << 40, 7)?;
/// let err = RedisBloom::builder("redis://127.0.0.1/", "k", config).build().unwrap_err();
/// assert!(matches!(err, RedisBloomError::TooManyBits { .. }));
/// assert!(err.to_string().contains("`bits`"));
/// # Ok::<(), BloomError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RedisBloomError {
    /// The in-memory side refused the shape or the bitmap: zero `bits` or `hashes`
    /// (from [`RedisBloom::with_rate`](super::RedisBloom::with_rate) and friends), or a
    /// stored bitmap that belongs to a larger filter (from
    /// [`snapshot`](super::RedisBloom::snapshot)).
    Bloom(BloomError),
    /// `bits` exceeds what a Redis bitmap can address (`SETBIT` offsets are below 2^32).
    TooManyBits {
        /// The number of bits asked for.
        bits: u64,
        /// The largest number of bits allowed, [`MAX_BITS`](super::MAX_BITS).
        max: u64,
    },
    /// An offset given to [`insert_positions`](super::RedisBloom::insert_positions) or
    /// [`contains_positions`](super::RedisBloom::contains_positions) is not below the
    /// filter's `bits`. Nothing was sent to Redis.
    OffsetOutOfRange {
        /// The first offending offset.
        offset: u64,
        /// The number of bits of the filter.
        bits: u64,
    },
    /// `expiry` is shorter than one millisecond (Redis expiries are whole
    /// milliseconds) or longer than Redis accepts.
    InvalidExpiry(Duration),
    /// `timeout` was zero.
    ZeroTimeout,
    /// `url` is not a valid Redis URL.
    InvalidUrl {
        /// Why it was refused (the URL itself is left out: it may hold a password).
        message: String,
    },
    /// Redis did not answer within the timeout (connecting included). The call may
    /// or may not have been carried out.
    Timeout {
        /// The method that timed out, such as `"insert"`.
        operation: &'static str,
        /// The configured timeout.
        after: Duration,
    },
    /// Redis could not be reached, or the connection failed during the call.
    Connection {
        /// The method that failed, such as `"contains"`.
        operation: &'static str,
        /// The client library's description.
        message: String,
    },
    /// Redis answered with an error, such as `WRONGTYPE` when the key holds something
    /// other than a string.
    Server {
        /// The method that failed.
        operation: &'static str,
        /// The error code Redis sent (`WRONGTYPE`, `ERR`, ...), if any.
        code: Option<String>,
        /// The full description.
        message: String,
    },
    /// Redis answered with a reply of a shape the filter does not expect.
    UnexpectedReply {
        /// The method that received it.
        operation: &'static str,
        /// What was received.
        message: String,
    },
}

impl RedisBloomError {
    /// Whether this is a failure of Redis or of the way to it ([`Timeout`],
    /// [`Connection`], [`Server`], [`UnexpectedReply`]) rather than a mistake in the
    /// filter's configuration or arguments.
    ///
    /// [`Timeout`]: RedisBloomError::Timeout
    /// [`Connection`]: RedisBloomError::Connection
    /// [`Server`]: RedisBloomError::Server
    /// [`UnexpectedReply`]: RedisBloomError::UnexpectedReply
    pub fn is_redis_failure(&self) -> bool {
        matches!(
            self,
            RedisBloomError::Timeout { .. }
                | RedisBloomError::Connection { .. }
                | RedisBloomError::Server { .. }
                | RedisBloomError::UnexpectedReply { .. }
        )
    }

    pub(crate) fn from_call(operation: &'static str, err: CallError) -> Self {
        match err.failure() {
            Failure::Timeout(after) => RedisBloomError::Timeout { operation, after },
            Failure::Connection(message) => RedisBloomError::Connection { operation, message },
            Failure::Server { code, message } => RedisBloomError::Server {
                operation,
                code,
                message,
            },
            Failure::UnexpectedReply(message) => {
                RedisBloomError::UnexpectedReply { operation, message }
            }
        }
    }
}

impl From<BloomError> for RedisBloomError {
    fn from(err: BloomError) -> Self {
        RedisBloomError::Bloom(err)
    }
}

impl fmt::Display for RedisBloomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisBloomError::Bloom(err) => err.fmt(f),
            RedisBloomError::TooManyBits { bits, max } => write!(
                f,
                "`bits` is {bits}, more than the {max} a Redis bitmap can hold"
            ),
            RedisBloomError::OffsetOutOfRange { offset, bits } => write!(
                f,
                "offset {offset} is outside the filter's {bits} bits (`bits`)"
            ),
            RedisBloomError::InvalidExpiry(d) => write!(
                f,
                "`expiry` must be between 1 ms and {} ms, got {d:?}",
                i64::MAX
            ),
            RedisBloomError::ZeroTimeout => f.write_str("`timeout` must be greater than zero"),
            RedisBloomError::InvalidUrl { message } => write!(f, "invalid `url`: {message}"),
            RedisBloomError::Timeout { operation, after } => write!(
                f,
                "redis bloom `{operation}`: no answer from Redis within {after:?}"
            ),
            RedisBloomError::Connection { operation, message } => write!(
                f,
                "redis bloom `{operation}`: connection to Redis failed: {message}"
            ),
            RedisBloomError::Server {
                operation, message, ..
            } => write!(f, "redis bloom `{operation}`: Redis error: {message}"),
            RedisBloomError::UnexpectedReply { operation, message } => write!(
                f,
                "redis bloom `{operation}`: unexpected reply from Redis: {message}"
            ),
        }
    }
}

impl std::error::Error for RedisBloomError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisBloomError::Bloom(err) => Some(err),
            _ => None,
        }
    }
}
