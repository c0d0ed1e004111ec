//! One lazily opened, self-healing multiplexed connection per Redis-backed object, with
//! a caller-side timeout around every call.

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Recover;
use crate::sync::{Mutex, MutexGuard};
use std::fmt;
use std::future::Future;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, RedisError};

use super::error::CallError;

/// The timeout of a limiter built without a `timeout(..)` call: 100 ms. A rate limiter
/// sits in front of every call it guards, so it should give up on Redis quickly.
pub const DEFAULT_LIMIT_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest expiry given to a Redis key: 10 years, in milliseconds. Redis accepts
/// far more, but a bucket that needs longer than this to fill is a configuration
/// mistake nobody will notice the difference on.
pub(crate) const MAX_TTL_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// A connection handed out by [`Connector::connection`], tagged with the id of the
/// cached connection it is a clone of.
pub(crate) struct Lease {
    id: u64,
    /// The connection; clones share one socket and one driver task.
    pub(crate) conn: MultiplexedConnection,
}

struct Cached {
    id: u64,
    conn: MultiplexedConnection,
}

/// Opens a multiplexed connection on first use, shares it between callers and opens
/// a new one after the old one fails.
///
/// The `redis` crate's multiplexed connection does not reconnect by itself: once the
/// server has gone away, every request on it fails. The connector therefore forgets a
/// connection as soon as a call on it fails with an I/O error (or times out), and the
/// next call dials again, so service resumes on the first call after Redis is back.
pub(crate) struct Connector {
    client: Client,
    timeout: Duration,
    cached: Mutex<Option<Cached>>,
    /// Held while dialling, so a burst of calls after an outage opens one connection,
    /// not one each.
    dialling: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

impl Connector {
    /// A connector for `client` whose calls give up after `timeout`. Does no I/O.
    pub(crate) fn new(client: Client, timeout: Duration) -> Self {
        Connector {
            client,
            timeout,
            cached: Mutex::new(None),
            dialling: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
        }
    }

    /// The timeout every call is bounded by.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    // Nothing in this module panics while holding the lock (it only moves an
    // `Option` in or out), so a poisoned lock still holds a consistent value.
    fn lock(&self) -> MutexGuard<'_, Option<Cached>> {
        self.cached.lock().recover()
    }

    fn current(&self) -> Option<Lease> {
        self.lock().as_ref().map(|c| Lease {
            id: c.id,
            conn: c.conn.clone(),
        })
    }

    /// The shared connection, dialling Redis if there is none.
    async fn connection(&self) -> Result<Lease, RedisError> {
        if let Some(lease) = self.current() {
            return Ok(lease);
        }
        let _dialling = self.dialling.lock().await;
        // Someone else may have dialled while we waited for the lock.
        if let Some(lease) = self.current() {
            return Ok(lease);
        }
        // The redis crate's own timeouts are off: `run` bounds the whole call (dialling,
        // the request, a script reload) with one deadline instead.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        *self.lock() = Some(Cached {
            id,
            conn: conn.clone(),
        });
        Ok(Lease { id, conn })
    }

    /// Forgets connection `id` if it is still the cached one (a newer connection
    /// dialled by another caller is kept).
    fn forget(&self, id: Option<u64>) {
        let mut cached = self.lock();
        if id.is_none() || cached.as_ref().map(|c| c.id) == id {
            // Dropping the last clone ends the connection's driver task.
            *cached = None;
        }
    }

    /// Runs `call` on the shared connection, bounded by the timeout.
    ///
    /// A failure that leaves the connection unusable (an I/O error, a dropped
    /// connection, a timeout) makes the connector dial again on the next call. An error
    /// reply from Redis (say `WRONGTYPE`) keeps the connection.
    pub(crate) async fn run<T, F, Fut>(&self, call: F) -> Result<T, CallError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let attempt = async {
            let lease = self.connection().await.map_err(CallError::Redis)?;
            let id = lease.id;
            call(lease.conn).await.map_err(|err| {
                if breaks_connection(&err) {
                    self.forget(Some(id));
                }
                CallError::Redis(err)
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_elapsed) => {
                // The socket may be stuck (a paused or unreachable server): start afresh
                // rather than queue more requests behind the unanswered one.
                self.forget(None);
                Err(CallError::Timeout(self.timeout))
            }
        }
    }
}

/// Whether `err` means the connection it came from cannot be used again.
fn breaks_connection(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's connection info may carry a password: leave it out.
        f.debug_struct("Connector")
            .field("timeout", &self.timeout)
            .field("connected", &self.lock().is_some())
            .finish_non_exhaustive()
    }
}
