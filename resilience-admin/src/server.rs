//! Configuration, start-up and shutdown of the server.

use crate::api::{router, AdminState};
use crate::auth::{AppToken, Auth, Token};
use crate::store::{SqliteStore, Store, StoreError};
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
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// How long statistics are kept.
    pub retention: Duration,
    /// How long the 1-second buckets are kept (at most [`retention`](Self::retention)).
    pub seconds_retention: Duration,
    /// How often old statistics are deleted.
    pub prune_interval: Duration,
    /// The server's clock (a manual one in tests).
    pub clock: Clock,
}

impl AdminConfig {
    /// A configuration with defaults: loopback, 256 KiB bodies, 7 days of
    /// statistics and 20 minutes of 1-second buckets, pruned every minute, the system clock, no app token yet.
    pub fn new(storage: StorageConfig, admin_token: Token) -> AdminConfig {
        AdminConfig {
            bind: DEFAULT_BIND,
            storage,
            admin_token,
            read_token: None,
            app_tokens: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            retention: DEFAULT_RETENTION,
            seconds_retention: DEFAULT_SECONDS_RETENTION,
            prune_interval: Duration::from_secs(60),
            clock: Clock::system(),
        }
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
}

impl Server {
    /// Opens the store and prepares the routes.
    ///
    /// # Errors
    ///
    /// [`AdminError`] if the store cannot be opened.
    pub fn new(config: &AdminConfig) -> Result<Server, AdminError> {
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
        }
    }

    /// The shared state (for embedding the routes in another app).
    pub fn state(&self) -> &AdminState {
        &self.state
    }

    /// Serves on `listener` until `shutdown` completes, then lets the requests in
    /// progress finish. Old statistics are pruned in the background meanwhile.
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
        let app = router(self.state, self.max_body_bytes);
        let result = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await;
        pruner.abort();
        result
    }
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
        let pruned = tokio::task::spawn_blocking(move || {
            store.prune(before)?;
            store.prune_seconds(seconds_before)
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
/// let mut config = AdminConfig::new(StorageConfig::Memory, Token::new("admin-token-0123456789")?);
/// config.bind = "127.0.0.1:0".parse()?;
/// config.app_tokens.push(AppToken::parse("app-token-0123456789")?);
/// let server = RunningServer::start(config)?;
/// assert!(server.addr().ip().is_loopback());
/// server.stop();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
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
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    server
                        .serve(listener, async {
                            let _ = rx.await;
                        })
                        .await
                })
            })?;
        Ok(RunningServer {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
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
