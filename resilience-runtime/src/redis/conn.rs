//! Where a Redis-backed object's keys live (one server or a Redis Cluster), and one
//! lazily opened, self-healing connection per object, with a caller-side timeout
//! around every call.

use crate::policy::{parse_redis_url, RedisUrl};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Recover;
use crate::sync::{LazyLock, Mutex, MutexGuard};
use std::fmt;
use std::future::Future;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::cluster::{ClusterClient, ClusterConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisFuture, Script, Value,
};

use super::error::CallError;

/// The timeout of a limiter built without a `timeout(..)` call: 100 ms. A rate limiter
/// sits in front of every call it guards, so it should give up on Redis quickly.
pub const DEFAULT_LIMIT_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest expiry given to a Redis key: 10 years, in milliseconds. Redis accepts
/// far more, but a bucket that needs longer than this to fill is a configuration
/// mistake nobody will notice the difference on.
pub(crate) const MAX_TTL_MS: u64 = crate::policy::MAX_PERIOD_MS;

/// How often the cluster client retries one request itself (after `MOVED`, `ASK`, a
/// reconnect): enough for a slot that moved, while the caller's timeout bounds the
/// whole call anyway. Its default (16 retries, the first after 1.28 s) would keep a
/// request the caller gave up on running in the background for minutes.
const CLUSTER_RETRIES: u32 = 3;
/// The cluster client's wait before retrying a request that failed, in ms (at least,
/// and at most with the caller's timeout; the backoff doubles in between).
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 10;

/// Where a Redis-backed object keeps its keys: one server, or a Redis Cluster whose
/// client follows slots as they move (`MOVED`, `ASK`, failovers).
///
/// Both clients are boxed: their sizes differ a lot, and which is larger depends on
/// the features (TLS settings make a `Client` grow).
#[derive(Clone)]
pub(crate) enum Target {
    /// One server (or a proxy in front of several).
    Node(Box<Client>),
    /// A Redis Cluster (or a Valkey cluster), known from its seed nodes.
    Cluster(Box<ClusterClient>),
}

impl Target {
    /// The target `url` names (see [`parse_redis_url`] for the forms), for calls
    /// bounded by `timeout`; does no I/O. The error says why the URL was refused,
    /// without repeating it (it may hold a password).
    pub(crate) fn open(url: &str, timeout: Duration) -> Result<Target, String> {
        let target = match parse_redis_url(url)? {
            RedisUrl::Node(url) => Client::open(url).map(|c| Target::Node(Box::new(c))),
            RedisUrl::Cluster(seeds) => {
                let max_wait = u64::try_from(timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(CLUSTER_MIN_RETRY_WAIT_MS + 1);
                ClusterClient::builder(seeds)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
                    .max_retry_wait(max_wait)
                    .build()
                    .map(|c| Target::Cluster(Box::new(c)))
            }
        };
        let target = target.map_err(|e| e.to_string())?;
        #[cfg(feature = "redis-tls")]
        if url.starts_with("rediss") {
            install_crypto_provider();
        }
        Ok(target)
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// Opens a connection. The client's own timeouts are `timeout` (per node
    /// connection and per reply); the caller bounds the whole call as well.
    async fn connect(&self, timeout: Duration) -> Result<Conn, RedisError> {
        match self {
            Target::Node(client) => {
                // The redis crate's own timeouts are off: `Connector::run` bounds the
                // whole call (dialling, the request, a script reload) with one deadline.
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(None)
                    .set_response_timeout(None);
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Conn::Node(conn))
            }
            Target::Cluster(client) => {
                // Per node: a dead node must not hold a request (or a slot refresh)
                // longer than the caller waits.
                let config = ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                // Connects in a task of its own: a call that gives up at its timeout
                // leaves the connecting (a few nodes, the slot map) to go on, and a
                // later call finds it done.
                Ok(Conn::Cluster(
                    client.get_pending_async_connection_with_config(config),
                ))
            }
        }
    }

    /// Whether a connection of this target that failed with `err` must be replaced.
    ///
    /// One server's multiplexed connection is dead after an I/O error. A cluster
    /// connection heals itself (it reconnects to nodes and follows the slots through a
    /// failover); it is replaced only once its own task is gone (the tokio runtime it
    /// was opened on has shut down), which it reports as a broken pipe.
    fn must_replace(&self, err: &RedisError) -> bool {
        match self {
            Target::Node(_) => {
                err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
            }
            Target::Cluster(_) => std::error::Error::source(err)
                .and_then(|e| e.downcast_ref::<std::io::Error>())
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's connection info may carry a password: leave it out.
        f.write_str(match self {
            Target::Node(_) => "Node",
            Target::Cluster(_) => "Cluster",
        })
    }
}

/// The crypto of TLS connections: rustls needs one provider per process. If the
/// program installed none, ring's (this crate's) becomes the process default; one the
/// program installed is kept.
#[cfg(feature = "redis-tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one in between: theirs stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A connection to a [`Target`]: clones share its sockets and driver task.
#[derive(Clone)]
pub(crate) enum Conn {
    /// To one server.
    Node(MultiplexedConnection),
    /// To every node of a cluster, each command routed by its key's slot.
    Cluster(ClusterConnection),
}

/// The probe of a cluster: a script that does nothing, run on `KEYS[1]` (see
/// [`Conn::probe`]).
static PROBE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("return 1"));

impl Conn {
    /// Whether the server that holds `key` answers: `PING` to one server; for a
    /// cluster, a script that does nothing, run on `key`, so that it reaches the
    /// master of `key`'s slot (following `MOVED`) or fails. (A `PING` would go to
    /// every node and fail while any one is down; a `PING` routed to the slot's master
    /// goes to another node when the client has no connection to that master.) It
    /// needs no permission the limits' own scripts do not need.
    pub(crate) async fn probe(&mut self, key: &[u8]) -> Result<(), RedisError> {
        match self {
            Conn::Node(conn) => ::redis::cmd("PING")
                .query_async::<String>(conn)
                .await
                .map(drop),
            Conn::Cluster(_) => PROBE_SCRIPT
                .key(key)
                .invoke_async::<i64>(self)
                .await
                .map(drop),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A connection handed out by [`Connector::connection`], tagged with the id of the
/// cached connection it is a clone of.
pub(crate) struct Lease {
    id: u64,
    /// The connection; clones share its sockets and driver task.
    pub(crate) conn: Conn,
}

struct Cached {
    id: u64,
    conn: Conn,
}

/// Opens a connection on first use, shares it between callers and opens a new one
/// after the old one fails.
///
/// The `redis` crate's multiplexed connection does not reconnect by itself: once the
/// server has gone away, every request on it fails. The connector therefore forgets a
/// connection as soon as a call on it fails with an I/O error (or times out), and the
/// next call dials again, so service resumes on the first call after Redis is back.
/// A cluster connection is kept through failures and timeouts: its client reconnects
/// to nodes, follows slots that moved (`MOVED`, `ASK`) and, after a failover, learns
/// the promoted replica by itself (see [`Target::must_replace`]).
pub(crate) struct Connector {
    target: Target,
    timeout: Duration,
    cached: Mutex<Option<Cached>>,
    /// Held while dialling, so a burst of calls after an outage opens one connection,
    /// not one each.
    dialling: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

impl Connector {
    /// A connector to `target` whose calls give up after `timeout`. Does no I/O.
    pub(crate) fn new(target: Target, timeout: Duration) -> Self {
        Connector {
            target,
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
        let conn = self.target.connect(self.timeout).await?;
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
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let attempt = async {
            let lease = self.connection().await.map_err(CallError::Redis)?;
            let id = lease.id;
            call(lease.conn).await.map_err(|err| {
                if self.target.must_replace(&err) {
                    self.forget(Some(id));
                }
                CallError::Redis(err)
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_elapsed) => {
                // One server's socket may be stuck (a paused or unreachable server):
                // start afresh rather than queue more requests behind the unanswered
                // one. A cluster's client times out a stuck node itself.
                if !self.target.is_cluster() {
                    self.forget(None);
                }
                Err(CallError::Timeout(self.timeout))
            }
        }
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's connection info may carry a password: leave it out.
        f.debug_struct("Connector")
            .field("target", &self.target)
            .field("timeout", &self.timeout)
            .field("connected", &self.lock().is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_server_or_a_cluster() {
        let t = Duration::from_millis(100);
        assert!(!Target::open("redis://127.0.0.1:6379/", t)
            .unwrap()
            .is_cluster());
        assert!(Target::open("redis+cluster://127.0.0.1:7000", t)
            .unwrap()
            .is_cluster());
        assert!(
            Target::open("redis+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001/0", t)
                .unwrap()
                .is_cluster()
        );
        let err = Target::open("redis://h:1,h:2/", t).unwrap_err();
        assert!(err.contains("redis+cluster://"), "{err}");
        // The message never repeats the URL (it may hold a password).
        let err = Target::open("redis+cluster://u:hunter2@h:7000/3", t).unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
