//! Configuration, start-up and shutdown of the server.

use crate::api::{router, AdminState};
use crate::auth::{AppToken, Auth, Token};
use crate::store::{SqliteStore, Store, StoreError};
use crate::tls::TlsConfig;
use resilience_runtime::Clock;
use std::fmt;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// The default address: loopback only, so nothing is exposed unless asked for.
pub const DEFAULT_BIND: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7070);

/// The default request body limit: 256 KiB, far above a heartbeat of a few hundred
/// points.
pub const DEFAULT_MAX_BODY_BYTES: usize = 256 * 1024;

/// How long statistics are kept by default: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long the live view's 1-second buckets are kept by default: 20 minutes, so
/// that the dashboard's 15-minute range at 1-second resolution is always whole.
pub const DEFAULT_SECONDS_RETENTION: Duration = Duration::from_secs(20 * 60);

/// The default cap on open connections: beyond it a new connection is answered
/// `503 Service Unavailable` with `Retry-After` and closed.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The default header read timeout: a connection that has not sent a whole
/// request head this long after it opened (or after its previous answer, for a
/// kept-alive one) is closed.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection beyond the cap is kept to deliver its 503, and one whose TLS
/// handshake failed to deliver its alert.
const OVERFLOW_LINGER: Duration = Duration::from_millis(500);

/// Connections beyond the cap being answered 503 at once: as many as the cap, and
/// at least this many; beyond them a connection is closed without an answer.
const OVERFLOW_MIN: usize = 256;

/// Where the server keeps its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageConfig {
    /// An SQLite database file (created if missing).
    Sqlite(PathBuf),
    /// An SQLite database in memory: everything is lost when the server stops.
    Memory,
    /// A PostgreSQL database, by connection string
    /// (`postgresql://user:password@host:port/db` or `host=... user=...`); needs the
    /// `postgres` feature.
    Postgres(String),
}

/// Everything the server needs to start.
///
/// Build one with [`AdminConfig::builder`]; the fields are public for reading.
///
/// # Examples
///
/// ```
/// use resilience_admin::auth::Token;
/// use resilience_admin::server::{AdminConfig, StorageConfig, DEFAULT_MAX_CONNECTIONS};
/// use std::time::Duration;
///
/// let config = AdminConfig::builder(StorageConfig::Memory, Token::new("admin-token-0123456789")?)
///     .bind("127.0.0.1:0".parse()?)
///     .retention(Duration::from_secs(24 * 3600))
///     .build()?;
/// assert_eq!(config.max_connections, DEFAULT_MAX_CONNECTIONS);
///
/// let bad = AdminConfig::builder(StorageConfig::Memory, Token::new("admin-token-0123456789")?)
///     .max_connections(0)
///     .build();
/// assert!(bad.unwrap_err().to_string().contains("max_connections"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AdminConfig {
    /// The address to listen on (default [`DEFAULT_BIND`], loopback).
    pub bind: SocketAddr,
    /// Storage.
    pub storage: StorageConfig,
    /// The token that allows policy changes.
    pub admin_token: Token,
    /// If set, reads need this token (or the admin token).
    pub read_token: Option<Token>,
    /// Tokens accepted for heartbeats and pulls.
    pub app_tokens: Vec<AppToken>,
    /// Largest request body accepted (at least 1 KiB); larger ones get 413.
    pub max_body_bytes: usize,
    /// How long statistics are kept (at least a second).
    pub retention: Duration,
    /// How long the 1-second buckets are kept (at least a second; beyond
    /// [`retention`](Self::retention) they are kept for the retention).
    pub seconds_retention: Duration,
    /// How often old statistics, and the instances, points and apps silent for the
    /// whole retention, are deleted (at least 10 ms).
    pub prune_interval: Duration,
    /// Most connections served at once (at least 1); a connection beyond them is
    /// answered 503 with `Retry-After` and closed.
    pub max_connections: usize,
    /// How long a client may take to send a request head (after connecting, or
    /// after its previous answer on a kept-alive connection) before it is
    /// disconnected (at least 10 ms).
    pub header_read_timeout: Duration,
    /// The server's clock (a manual one in tests).
    pub clock: Clock,
    /// If set, the server serves https only, with this certificate (default: plain
    /// http, fine on loopback; anywhere else app and admin tokens would travel
    /// unencrypted).
    pub tls: Option<TlsConfig>,
}

impl AdminConfig {
    /// A builder with defaults: loopback ([`DEFAULT_BIND`]), 256 KiB bodies, 7 days
    /// of statistics and 20 minutes of 1-second buckets, pruned every minute, 1024
    /// connections, a 10 s header timeout, the system clock, plain http, no app
    /// token yet.
    pub fn builder(storage: StorageConfig, admin_token: Token) -> AdminConfigBuilder {
        AdminConfigBuilder {
            config: AdminConfig {
                bind: DEFAULT_BIND,
                storage,
                admin_token,
                read_token: None,
                app_tokens: Vec::new(),
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                retention: DEFAULT_RETENTION,
                seconds_retention: DEFAULT_SECONDS_RETENTION,
                prune_interval: Duration::from_secs(60),
                max_connections: DEFAULT_MAX_CONNECTIONS,
                header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
                clock: Clock::system(),
                tls: None,
            },
        }
    }

    /// Checks every field's bound (the ones the fields' docs state).
    ///
    /// # Errors
    ///
    /// [`AdminError::Config`] naming the first field out of its bounds.
    pub(crate) fn check(&self) -> Result<(), AdminError> {
        let bad = |field: &str, why: &str| Err(AdminError::Config(format!("{field}: {why}")));
        if self.max_body_bytes < 1024 {
            return bad("max_body_bytes", "must be at least 1024 bytes");
        }
        if self.retention < Duration::from_secs(1) {
            return bad("retention", "must be at least 1 s");
        }
        if self.seconds_retention < Duration::from_secs(1) {
            return bad("seconds_retention", "must be at least 1 s");
        }
        if self.prune_interval < Duration::from_millis(10) {
            return bad("prune_interval", "must be at least 10 ms");
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.header_read_timeout < Duration::from_millis(10) {
            return bad("header_read_timeout", "must be at least 10 ms");
        }
        Ok(())
    }
}

/// Builds an [`AdminConfig`]: start from [`AdminConfig::builder`], change what
/// differs from the defaults, then [`build`](Self::build).
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct AdminConfigBuilder {
    config: AdminConfig,
}

macro_rules! setters {
    ($($(#[$m:meta])* $field:ident: $t:ty),* $(,)?) => {
        $(
            $(#[$m])*
            #[must_use = "a setter returns the changed builder"]
            pub fn $field(mut self, $field: $t) -> Self {
                self.config.$field = $field;
                self
            }
        )*
    };
}

impl AdminConfigBuilder {
    setters! {
        /// The address to listen on ([`AdminConfig::bind`]).
        bind: SocketAddr,
        /// Largest request body accepted ([`AdminConfig::max_body_bytes`]).
        max_body_bytes: usize,
        /// How long statistics are kept ([`AdminConfig::retention`]).
        retention: Duration,
        /// How long the 1-second buckets are kept ([`AdminConfig::seconds_retention`]).
        seconds_retention: Duration,
        /// How often old data is deleted ([`AdminConfig::prune_interval`]).
        prune_interval: Duration,
        /// Most connections served at once ([`AdminConfig::max_connections`]).
        max_connections: usize,
        /// The request head deadline ([`AdminConfig::header_read_timeout`]).
        header_read_timeout: Duration,
        /// The server's clock ([`AdminConfig::clock`]).
        clock: Clock,
    }

    /// Reads need this token (or the admin token) ([`AdminConfig::read_token`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn read_token(mut self, token: Token) -> Self {
        self.config.read_token = Some(token);
        self
    }

    /// Accepts this token for heartbeats and pulls, beside those added before
    /// ([`AdminConfig::app_tokens`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn app_token(mut self, token: AppToken) -> Self {
        self.config.app_tokens.push(token);
        self
    }

    /// Serves https only, with this certificate ([`AdminConfig::tls`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.config.tls = Some(tls);
        self
    }

    /// The configuration, once every field is within the bounds its docs state.
    ///
    /// # Errors
    ///
    /// [`AdminError::Config`] naming the first field out of its bounds.
    pub fn build(self) -> Result<AdminConfig, AdminError> {
        self.config.check()?;
        Ok(self.config)
    }
}

/// The server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum AdminError {
    /// The configuration is unusable.
    Config(String),
    /// The store could not be opened.
    Store(StoreError),
    /// The address could not be bound, or the runtime not started.
    Io(std::io::Error),
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::Config(m) => write!(f, "configuration: {m}"),
            AdminError::Store(e) => e.fmt(f),
            AdminError::Io(e) => write!(f, "I/O: {e}"),
        }
    }
}

impl std::error::Error for AdminError {}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        AdminError::Store(e)
    }
}

impl From<std::io::Error> for AdminError {
    fn from(e: std::io::Error) -> Self {
        AdminError::Io(e)
    }
}

/// Opens the configured store (creating the schema if needed).
///
/// # Errors
///
/// [`AdminError::Store`] if the database cannot be opened, [`AdminError::Config`]
/// for PostgreSQL in a build without the `postgres` feature.
pub fn open_store(storage: &StorageConfig) -> Result<Arc<dyn Store>, AdminError> {
    Ok(match storage {
        StorageConfig::Sqlite(path) => Arc::new(SqliteStore::open(path)?),
        StorageConfig::Memory => Arc::new(SqliteStore::open_in_memory()?),
        #[cfg(feature = "postgres")]
        StorageConfig::Postgres(url) => Arc::new(crate::store::PostgresStore::connect(url)?),
        #[cfg(not(feature = "postgres"))]
        StorageConfig::Postgres(_) => {
            return Err(AdminError::Config(
                "this build has no PostgreSQL support: rebuild with `--features postgres`".into(),
            ))
        }
    })
}

/// A configured server with its store open, ready to serve.
#[derive(Debug)]
pub struct Server {
    state: AdminState,
    max_body_bytes: usize,
    prune_interval: Duration,
    max_connections: usize,
    header_read_timeout: Duration,
    tls: Option<TlsConfig>,
}

impl Server {
    /// Opens the store and prepares the routes.
    ///
    /// # Errors
    ///
    /// [`AdminError`] if a field is out of its bounds or the store cannot be opened.
    pub fn new(config: &AdminConfig) -> Result<Server, AdminError> {
        config.check()?;
        let store = open_store(&config.storage)?;
        Ok(Server::with_store(config, store))
    }

    /// A server over an already opened store.
    pub fn with_store(config: &AdminConfig, store: Arc<dyn Store>) -> Server {
        let auth = Auth {
            admin: config.admin_token.clone(),
            read: config.read_token.clone(),
            apps: config.app_tokens.clone(),
        };
        let retention_ms = i64::try_from(config.retention.as_millis()).unwrap_or(i64::MAX);
        let seconds_ms = i64::try_from(config.seconds_retention.as_millis())
            .unwrap_or(i64::MAX)
            .min(retention_ms);
        Server {
            state: AdminState::new(store, auth, config.clock.clone(), retention_ms)
                .with_seconds_retention_ms(seconds_ms),
            max_body_bytes: config.max_body_bytes,
            prune_interval: config.prune_interval.max(Duration::from_millis(10)),
            max_connections: config.max_connections.clamp(
                1,
                tokio::sync::Semaphore::MAX_PERMITS.min(u32::MAX as usize),
            ),
            header_read_timeout: config.header_read_timeout.max(Duration::from_millis(10)),
            tls: config.tls.clone(),
        }
    }

    /// The shared state (for embedding the routes in another app).
    pub fn state(&self) -> &AdminState {
        &self.state
    }

    /// Whether it serves https ([`AdminConfig::tls`]).
    pub fn is_https(&self) -> bool {
        self.tls.is_some()
    }

    /// Serves on `listener` until `shutdown` completes, then lets the requests in
    /// progress finish. Old statistics are pruned in the background meanwhile.
    ///
    /// At most [`AdminConfig::max_connections`] connections are served at once; a
    /// connection beyond them is answered `503` with `Retry-After: 1` and closed
    /// (beyond as many again, and at least 256, closed at once). A client that does not send a
    /// whole request head within [`AdminConfig::header_read_timeout`] is
    /// disconnected. With [`AdminConfig::tls`], every connection is TLS: the
    /// handshake must end within the header read timeout too, and a connection that
    /// fails it (a plain-http client, an untrusted certificate) is closed with TLS's
    /// alert, without an HTTP answer.
    ///
    /// # Errors
    ///
    /// If the listener fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let pruner = tokio::spawn(prune_loop(self.state.clone(), self.prune_interval));
        let acceptor = self.tls.as_ref().map(TlsConfig::acceptor);
        let handshake_timeout = self.header_read_timeout;
        let app = router(self.state, self.max_body_bytes);
        let cap = self.max_connections;
        let permits = Arc::new(tokio::sync::Semaphore::new(cap));
        let overflow = Arc::new(tokio::sync::Semaphore::new(cap.max(OVERFLOW_MIN)));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors or a connection reset before it was
                        // accepted: wait a little rather than spin.
                        if !is_connection_error(&e) {
                            eprintln!("resilience-admin: accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        continue;
                    }
                },
            };
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                if let Ok(p) = Arc::clone(&overflow).try_acquire_owned() {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        match acceptor {
                            None => answer_overloaded(stream).await,
                            // The 503 goes in TLS, within the same linger.
                            Some(acceptor) => {
                                if let Ok(Ok(tls)) =
                                    tokio::time::timeout(OVERFLOW_LINGER, acceptor.accept(stream))
                                        .await
                                {
                                    answer_overloaded(tls).await;
                                }
                            }
                        }
                        drop(p);
                    });
                }
                continue;
            };
            let _ = stream.set_nodelay(true);
            let app = app.clone();
            let service = hyper::service::service_fn(move |mut request| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                tower::Service::call(&mut app.clone(), request)
            });
            let http = http.clone();
            let mut stop = stop_rx.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                match acceptor {
                    None => serve_connection(&http, stream, service, &mut stop).await,
                    Some(acceptor) => {
                        // A client that never finishes its handshake holds a permit
                        // no longer than one that never sends a request head.
                        let accept = acceptor.accept(stream).into_fallible();
                        let handshake = tokio::select! {
                            done = tokio::time::timeout(handshake_timeout, accept) => done,
                            _ = stop.wait_for(|s| *s) => {
                                drop(permit);
                                return;
                            }
                        };
                        match handshake {
                            Ok(Ok(tls)) => serve_connection(&http, tls, service, &mut stop).await,
                            // A failed handshake (a plain-http client, say) sent its
                            // alert: closed with the request unread, the connection
                            // would be reset and the client could lose the alert
                            // that says why.
                            Ok(Err((_, mut stream))) => {
                                let _ = tokio::time::timeout(
                                    OVERFLOW_LINGER,
                                    linger_close(&mut stream),
                                )
                                .await;
                            }
                            Err(_) => {}
                        }
                    }
                }
                // The connection (and its clone of the routes) is gone before the
                // server, which waits for every permit, may return.
                drop(permit);
            });
        }
        drop(listener);
        let _ = stop_tx.send(true);
        // Every connection holds a permit until it is done.
        let _ = permits.acquire_many(cap as u32).await;
        pruner.abort();
        let _ = pruner.await;
        Ok(())
    }
}

/// Serves one connection (plain or TLS) until it ends or the server stops; then lets
/// its request in progress finish.
async fn serve_connection<I, S>(
    http: &hyper::server::conn::http1::Builder,
    io: I,
    service: S,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = http
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let stopping = tokio::select! {
        _ = conn.as_mut() => false,
        stopped = stop.wait_for(|s| *s) => stopped.is_ok(),
    };
    if stopping {
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
    }
}

/// Errors of one connection, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Answers a connection beyond the cap: `503` with `Retry-After`, then closes it
/// once the client has read it (or after [`OVERFLOW_LINGER`]).
async fn answer_overloaded<S>(mut stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    const BODY: &str = "{\"error\":{\"code\":\"overloaded\",\"message\":\
        \"the server has too many connections open; retry shortly\"}}";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nCache-Control: no-store\r\n\
         Content-Length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(OVERFLOW_LINGER, async {
        if stream.write_all(answer.as_bytes()).await.is_ok() {
            linger_close(&mut stream).await;
        }
    })
    .await;
}

/// Shuts the write side of `stream` and reads what the client sent until it closes,
/// so that closing does not reset the connection before the client has read what it
/// was sent last. Callers bound it in time ([`OVERFLOW_LINGER`]).
async fn linger_close<S>(stream: &mut S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let mut buf = [0u8; 4096];
    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
}

async fn prune_loop(state: AdminState, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now = state.now_ms();
        let before = now.saturating_sub(state.retention_ms());
        let seconds_before = now.saturating_sub(state.seconds_retention_ms());
        let store = Arc::clone(state.store());
        // Old cycles and seconds, then the instances, points and apps that sent
        // nothing within the retention (they have no cycle left).
        let pruned = tokio::task::spawn_blocking(move || {
            store.prune(before)?;
            store.prune_seconds(seconds_before)?;
            store.prune_silent(before)
        });
        match pruned.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("resilience-admin: pruning old statistics failed: {e}"),
            Err(e) => eprintln!("resilience-admin: pruning task failed: {e}"),
        }
    }
}

/// A server running on its own thread and tokio runtime; stopped by
/// [`stop`](RunningServer::stop) or when dropped.
///
/// # Examples
///
/// ```
/// use resilience_admin::auth::{AppToken, Token};
/// use resilience_admin::server::{AdminConfig, RunningServer, StorageConfig};
///
/// let config = AdminConfig::builder(StorageConfig::Memory, Token::new("admin-token-0123456789")?)
///     .bind("127.0.0.1:0".parse()?)
///     .app_token(AppToken::parse("app-token-0123456789")?)
///     .build()?;
/// let server = RunningServer::start(config)?;
/// assert!(server.addr().ip().is_loopback());
/// server.stop();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    https: bool,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<std::io::Result<()>>>,
}

impl RunningServer {
    /// Opens the store, binds the address and starts serving.
    ///
    /// # Errors
    ///
    /// [`AdminError`] if the store cannot be opened or the address bound.
    pub fn start(config: AdminConfig) -> Result<RunningServer, AdminError> {
        let server = Server::new(&config)?;
        let https = server.is_https();
        let listener = TcpListener::bind(config.bind)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("resilience-admin")
            .enable_all()
            .build()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name("resilience-admin".into())
            .spawn(move || {
                // The store is closed here, outside the runtime, once every task is
                // gone: a blocking client (PostgreSQL's) cannot be closed inside it.
                let store = Arc::clone(server.state().store());
                let result = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    server
                        .serve(listener, async {
                            let _ = rx.await;
                        })
                        .await
                });
                drop(runtime);
                drop(store);
                result
            })?;
        Ok(RunningServer {
            addr,
            https,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://ADDR`, or `https://ADDR` when it serves https.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting connections, waits for requests in progress, and closes the
    /// store.
    pub fn stop(mut self) {
        self.shutdown_and_join();
    }

    fn shutdown_and_join(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("resilience-admin: server error: {e}"),
                Err(_) => eprintln!("resilience-admin: server thread panicked"),
            }
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.shutdown_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> AdminConfigBuilder {
        AdminConfig::builder(
            StorageConfig::Memory,
            Token::new("admin-token-0123456789").unwrap(),
        )
    }

    fn refused(b: AdminConfigBuilder) -> String {
        match b.build() {
            Err(AdminError::Config(m)) => m,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn each_bound_is_refused_naming_its_field() {
        let ms = Duration::from_millis;
        let cases = [
            (builder().max_body_bytes(1023), "max_body_bytes"),
            (builder().retention(ms(999)), "retention"),
            (builder().seconds_retention(ms(999)), "seconds_retention"),
            (builder().prune_interval(ms(9)), "prune_interval"),
            (builder().max_connections(0), "max_connections"),
            (builder().header_read_timeout(ms(9)), "header_read_timeout"),
        ];
        for (b, field) in cases {
            let m = refused(b);
            assert!(m.starts_with(&format!("{field}: ")), "{m}");
        }
    }

    #[test]
    fn the_bounds_themselves_are_accepted_and_setters_stick() {
        let ms = Duration::from_millis;
        let c = builder()
            .max_body_bytes(1024)
            .retention(ms(1000))
            .seconds_retention(Duration::from_secs(3600))
            .prune_interval(ms(10))
            .max_connections(1)
            .header_read_timeout(ms(10))
            .read_token(Token::new("read-token-0123456789").unwrap())
            .app_token(AppToken::parse("app-token-0123456789").unwrap())
            .app_token(AppToken::parse("shop/orders=orders-token-0123456789").unwrap())
            .build()
            .unwrap();
        assert_eq!(c.max_body_bytes, 1024);
        assert_eq!(c.max_connections, 1);
        assert_eq!(c.app_tokens.len(), 2);
        assert!(c.read_token.is_some());
        // A field changed after `build` is checked again when the server starts.
        let mut c = c;
        c.max_connections = 0;
        let err = Server::new(&c).unwrap_err();
        assert!(err.to_string().contains("max_connections"), "{err}");
    }
}
