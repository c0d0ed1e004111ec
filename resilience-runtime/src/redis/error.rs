//! The error types of the Redis-backed filter and limiters, and the failure of Redis
//! they share.

use crate::bloom::BloomError;
use ::redis::RedisError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a call through a [`Connector`](super::conn::Connector) failed, before it is given the caller's error type.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No answer within the connector's timeout (connecting included).
    Timeout(Duration),
    /// The client library reported an error: I/O, a Redis error reply, a bad reply.
    Redis(RedisError),
}

impl From<RedisError> for CallError {
    fn from(err: RedisError) -> Self {
        CallError::Redis(err)
    }
}

impl CallError {
    /// Sorts the failure of `operation`.
    pub(crate) fn failure(self, operation: &'static str) -> RedisFailure {
        match self {
            CallError::Timeout(after) => RedisFailure::Timeout { operation, after },
            CallError::Redis(err) => RedisFailure::of(operation, err),
        }
    }
}

/// A failure of Redis or of the way to it, as every Redis-backed type reports it
/// (inside [`RedisBloomError::Redis`] and [`RedisLimitError::Redis`]).
///
/// Each variant names the method that failed (`operation`, such as `"insert"` or
/// `"take"`). Where the client library reported the failure, its error is kept with
/// its type and is this one's [`source`](std::error::Error::source); the text of
/// this error never repeats it, so an error chain (anyhow, eyre) prints each once.
///
/// # Examples
///
/// ```
/// use resilience_runtime::redis::RedisFailure;
/// use std::time::Duration;
///
/// let failure = RedisFailure::Timeout { operation: "take", after: Duration::from_millis(100) };
/// assert_eq!(failure.operation(), "take");
/// assert_eq!(failure.to_string(), "`take`: no answer from Redis within 100ms");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum RedisFailure {
    /// Redis did not answer within the timeout (connecting included). The call may or
    /// may not have been carried out.
    Timeout {
        /// The method that timed out.
        operation: &'static str,
        /// The configured timeout.
        after: Duration,
    },
    /// Redis could not be reached, or the connection failed during the call.
    Connection {
        /// The method that failed.
        operation: &'static str,
        /// The client library's error.
        error: Arc<RedisError>,
    },
    /// Redis answered with an error, such as `WRONGTYPE` when the key holds a value of
    /// another type.
    Server {
        /// The method that failed.
        operation: &'static str,
        /// The error code Redis sent (`WRONGTYPE`, `ERR`, ...), if any.
        code: Option<String>,
        /// The client library's error, with Redis's description.
        error: Arc<RedisError>,
    },
    /// Redis answered with a reply of a shape the caller does not expect.
    UnexpectedReply {
        /// The method that received it.
        operation: &'static str,
        /// What was received, when this crate found it wrong (`None` when the client
        /// library did: its error is then in `error`).
        message: Option<String>,
        /// The client library's error, when it found the reply wrong.
        error: Option<Arc<RedisError>>,
    },
}

impl RedisFailure {
    /// The method that failed.
    pub fn operation(&self) -> &'static str {
        match self {
            RedisFailure::Timeout { operation, .. }
            | RedisFailure::Connection { operation, .. }
            | RedisFailure::Server { operation, .. }
            | RedisFailure::UnexpectedReply { operation, .. } => operation,
        }
    }

    /// The client library's error behind this failure, if it reported one.
    pub fn redis_error(&self) -> Option<&RedisError> {
        match self {
            RedisFailure::Connection { error, .. } | RedisFailure::Server { error, .. } => {
                Some(error)
            }
            RedisFailure::UnexpectedReply { error, .. } => error.as_deref(),
            RedisFailure::Timeout { .. } => None,
        }
    }

    /// A reply of the wrong shape, found by this crate: `message` says what came.
    pub(crate) fn unexpected(operation: &'static str, message: String) -> RedisFailure {
        RedisFailure::UnexpectedReply {
            operation,
            message: Some(message),
            error: None,
        }
    }

    /// Sorts an error of the client library met by `operation`.
    pub(crate) fn of(operation: &'static str, err: RedisError) -> RedisFailure {
        use ::redis::ErrorKind;
        match err.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension => RedisFailure::Server {
                operation,
                code: err.code().map(str::to_owned),
                error: Arc::new(err),
            },
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => RedisFailure::UnexpectedReply {
                operation,
                message: None,
                error: Some(Arc::new(err)),
            },
            _ => RedisFailure::Connection {
                operation,
                error: Arc::new(err),
            },
        }
    }
}

impl fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisFailure::Timeout { operation, after } => {
                write!(f, "`{operation}`: no answer from Redis within {after:?}")
            }
            RedisFailure::Connection { operation, .. } => {
                write!(f, "`{operation}`: connection to Redis failed")
            }
            RedisFailure::Server { operation, .. } => {
                write!(f, "`{operation}`: Redis answered with an error")
            }
            RedisFailure::UnexpectedReply {
                operation, message, ..
            } => {
                write!(f, "`{operation}`: unexpected reply from Redis")?;
                match message {
                    Some(message) => write!(f, ": {message}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for RedisFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.redis_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Failures are equal when they are of the same kind, for the same operation, and
/// the client library's errors (if any) have the same kind and text.
impl PartialEq for RedisFailure {
    fn eq(&self, other: &Self) -> bool {
        fn same(a: Option<&RedisError>, b: Option<&RedisError>) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => a.kind() == b.kind() && a.to_string() == b.to_string(),
                _ => false,
            }
        }
        let fields = match (self, other) {
            (RedisFailure::Timeout { after: a, .. }, RedisFailure::Timeout { after: b, .. }) => {
                a == b
            }
            (RedisFailure::Connection { .. }, RedisFailure::Connection { .. }) => true,
            (RedisFailure::Server { code: a, .. }, RedisFailure::Server { code: b, .. }) => a == b,
            (
                RedisFailure::UnexpectedReply { message: a, .. },
                RedisFailure::UnexpectedReply { message: b, .. },
            ) => a == b,
            _ => false,
        };
        fields
            && self.operation() == other.operation()
            && same(self.redis_error(), other.redis_error())
    }
}

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
/// use resilience_runtime::bloom::{BloomConfig, BloomError, HashScheme};
/// use resilience_runtime::redis::{RedisBloom, RedisBloomError};
///
/// // A zero-bit filter is refused when the configuration is built...
/// let zero = BloomConfig::builder().bits(0).scheme(HashScheme::GoZero).build();
/// assert_eq!(zero.unwrap_err(), BloomError::ZeroBits);
///
/// // ...and a filter larger than a Redis string is refused when the handle is built.
/// let config = BloomConfig::builder().bits(1 << 40).hashes(7).build()?;
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
    /// Redis failed, or the way to it did: unreachable, timed out, an error reply or a
    /// reply of the wrong shape.
    Redis(RedisFailure),
}

impl RedisBloomError {
    /// Whether this is a failure of Redis or of the way to it
    /// ([`Redis`](RedisBloomError::Redis)) rather than a mistake in the filter's
    /// configuration or arguments.
    pub fn is_redis_failure(&self) -> bool {
        matches!(self, RedisBloomError::Redis(_))
    }

    /// The failure of Redis, if this is one.
    pub fn redis_failure(&self) -> Option<&RedisFailure> {
        match self {
            RedisBloomError::Redis(failure) => Some(failure),
            _ => None,
        }
    }

    pub(crate) fn from_call(operation: &'static str, err: CallError) -> Self {
        RedisBloomError::Redis(err.failure(operation))
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
            // Transparent, as `Redis` below.
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
            // Transparent: the failure's own text, and its source is this one's.
            RedisBloomError::Redis(failure) => failure.fmt(f),
        }
    }
}

impl std::error::Error for RedisBloomError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisBloomError::Bloom(err) => std::error::Error::source(err),
            RedisBloomError::Redis(failure) => std::error::Error::source(failure),
            _ => None,
        }
    }
}

/// Why a Redis limiter could not be built or a call on it failed.
///
/// Configuration mistakes name the setting at fault and are found before anything is
/// sent to Redis. Failures of Redis itself are errors only where a limiter has no
/// fallback ([`RedisPeriodLimiter`](super::RedisPeriodLimiter)); the token limiter
/// and the lease answer from their local fallback instead.
///
/// # Examples
///
/// ```
/// use resilience_runtime::redis::{RedisLimitError, RedisTokenLimiter};
///
/// let err = RedisTokenLimiter::new("redis://127.0.0.1/", "api", 0.0, 10).unwrap_err();
/// assert!(matches!(err, RedisLimitError::InvalidConfig { field: "rate", .. }));
/// assert!(err.to_string().contains("`rate`"));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RedisLimitError {
    /// A setting is out of range; `field` names it (`rate`, `burst`, `batch`, ...).
    InvalidConfig {
        /// The setting at fault.
        field: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// `url` is not a valid Redis URL.
    InvalidUrl {
        /// Why it was refused (the URL itself is left out: it may hold a password).
        message: String,
    },
    /// Redis failed, or the way to it did: unreachable, timed out, an error reply or a
    /// reply of the wrong shape.
    Redis(RedisFailure),
    /// The background thread of a [`ClusterLease`](super::ClusterLease) could not be started.
    Thread {
        /// The operating system's description.
        message: String,
    },
}

impl RedisLimitError {
    /// Whether this is a failure of Redis or of the way to it
    /// ([`Redis`](RedisLimitError::Redis)) rather than a mistake in the configuration.
    pub fn is_redis_failure(&self) -> bool {
        matches!(self, RedisLimitError::Redis(_))
    }

    /// The failure of Redis, if this is one.
    pub fn redis_failure(&self) -> Option<&RedisFailure> {
        match self {
            RedisLimitError::Redis(failure) => Some(failure),
            _ => None,
        }
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        RedisLimitError::InvalidConfig {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn from_call(operation: &'static str, err: CallError) -> Self {
        RedisLimitError::Redis(err.failure(operation))
    }
}

impl fmt::Display for RedisLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisLimitError::InvalidConfig { field, reason } => {
                write!(f, "invalid `{field}`: {reason}")
            }
            RedisLimitError::InvalidUrl { message } => write!(f, "invalid `url`: {message}"),
            // Transparent: the failure's own text, and its source is this one's.
            RedisLimitError::Redis(failure) => failure.fmt(f),
            RedisLimitError::Thread { message } => {
                write!(f, "cannot start the lease refill thread: {message}")
            }
        }
    }
}

impl std::error::Error for RedisLimitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisLimitError::Redis(failure) => std::error::Error::source(failure),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    fn failures() -> Vec<RedisFailure> {
        vec![
            RedisFailure::Timeout {
                operation: "insert",
                after: Duration::from_millis(250),
            },
            RedisFailure::of(
                "contains",
                RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            ),
            RedisFailure::of(
                "take",
                RedisError::from((
                    ::redis::ErrorKind::Server(::redis::ServerErrorKind::ResponseError),
                    "WRONGTYPE",
                    "wrong kind of value".to_owned(),
                )),
            ),
            RedisFailure::unexpected("allow", "nil".into()),
        ]
    }

    #[test]
    fn both_errors_report_a_failure_of_redis_the_same_way() {
        let expected = [
            ("`insert`: no answer from Redis within 250ms", false),
            ("`contains`: connection to Redis failed", true),
            ("`take`: Redis answered with an error", true),
            ("`allow`: unexpected reply from Redis: nil", false),
        ];
        for (failure, (text, has_source)) in failures().into_iter().zip(expected) {
            assert_eq!(failure.to_string(), text);
            let op = failure.operation();
            assert!(text.starts_with(&format!("`{op}`")));
            // The client's error is the source, with its type, and is not repeated.
            let source = failure.source();
            assert_eq!(source.is_some(), has_source, "{failure:?}");
            if let Some(source) = source {
                assert!(source.downcast_ref::<RedisError>().is_some());
                assert!(!text.contains(&source.to_string()));
            }

            let bloom = RedisBloomError::Redis(failure.clone());
            assert!(bloom.is_redis_failure());
            assert_eq!(bloom.redis_failure(), Some(&failure));
            assert_eq!(bloom.to_string(), text);
            assert_eq!(bloom.source().is_some(), has_source);

            let limit = RedisLimitError::Redis(failure.clone());
            assert!(limit.is_redis_failure());
            assert_eq!(limit.redis_failure(), Some(&failure));
            assert_eq!(limit.to_string(), text);
            assert_eq!(limit.source().is_some(), has_source);
        }
    }

    #[test]
    fn configuration_mistakes_are_not_failures_of_redis() {
        let bloom = RedisBloomError::ZeroTimeout;
        assert!(!bloom.is_redis_failure());
        assert_eq!(bloom.redis_failure(), None);
        let limit = RedisLimitError::config("rate", "must be positive");
        assert!(!limit.is_redis_failure());
        assert_eq!(limit.redis_failure(), None);
        assert!(limit.source().is_none());
        assert_eq!(limit.to_string(), "invalid `rate`: must be positive");
    }

    #[test]
    fn a_timeout_of_the_caller_keeps_its_operation_and_limit() {
        let err = CallError::Timeout(Duration::from_millis(100)).failure("snapshot");
        assert_eq!(
            err,
            RedisFailure::Timeout {
                operation: "snapshot",
                after: Duration::from_millis(100)
            }
        );
    }
}
