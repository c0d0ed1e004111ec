//! Redis for integration tests: the shared server's address, and private
//! `redis-server` processes for tests that stop, pause or restart Redis.
//!
//! Use it from a test file with
//!
//! ```ignore
//! #[path = "support/redis_server.rs"]
//! mod redis_server;
//! ```
//!
//! - [`shared_url`] is the server `scripts/test.sh` starts (`RESILIENCE_REDIS_URL`).
//!   Tests that only read and write keys use it, each under its own key
//!   ([`unique_key`]), so they can run in parallel.
//! - [`RedisServer::start`] runs a private `redis-server` on a free loopback port, for
//!   tests that must kill it ([`RedisServer::stop`]), freeze it
//!   ([`RedisServer::pause`]) or bring it back on the same port
//!   ([`RedisServer::restart`]). It is killed when dropped.
//!
//! Everything here panics with a message saying what to do, because a test that
//! cannot reach Redis must fail, not skip.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The environment variable holding the shared test server's URL.
pub(crate) const URL_VAR: &str = "RESILIENCE_REDIS_URL";

/// The environment variable that may name the `redis-server` binary (default: the one
/// on `PATH`).
pub(crate) const SERVER_VAR: &str = "RESILIENCE_REDIS_SERVER";

/// How long a starting server may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL of the shared test server, from `RESILIENCE_REDIS_URL`.
///
/// # Panics
///
/// If the variable is unset or empty, with instructions: these tests need a real
/// Redis and must not pass without one.
pub(crate) fn shared_url() -> String {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{URL_VAR} is not set, and the Redis tests need a real redis-server. \
             Run them with `scripts/test.sh` (it installs and starts one), or start one \
             yourself (`redis-server --port 6391 --save '' --appendonly no`) and run \
             `{URL_VAR}=redis://127.0.0.1:6391/ cargo test -p resilience-runtime --features redis`"
        ),
    }
}

/// A Redis key no other test (or earlier run) uses: `resilience-test:{name}:{pid}:{n}`.
pub(crate) fn unique_key(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "resilience-test:{name}:{}:{nanos}:{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("cannot read the bound port: {e}"))
        .port()
}

/// Sends `PING` to `port` and waits up to `wait` for `+PONG`.
pub(crate) fn answers_ping(port: u16, wait: Duration) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, wait) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(wait));
    let _ = stream.set_write_timeout(Some(wait));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// A private `redis-server` on a loopback port, without persistence, killed on drop.
/// Live refill threads of cluster leases in this process (Linux only). Tests that
/// count them must be the only ones in their test binary that start leases.
#[cfg(target_os = "linux")]
pub(crate) fn lease_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists this process's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        // Thread names are cut to 15 bytes: "resilience-lease-refill".
        .filter(|name| name.trim_end() == "resilience-leas")
        .count()
}

/// Polls `cond` every 10 ms for up to `limit` (then panics naming `what`); returns how
/// long it took.
pub(crate) fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not true after {limit:?}");
        thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

/// A registry of its own on a manual clock, and a key prefix no other run uses (keys
/// of earlier runs may hold spent quotas).
pub(crate) fn manual_registry(
    name: &str,
) -> (
    resilience_runtime::ManualClock,
    &'static resilience_runtime::Registry,
    String,
) {
    let manual = resilience_runtime::ManualClock::new();
    let clock = resilience_runtime::Clock::manual(&manual);
    let registry = Box::leak(Box::new(resilience_runtime::Registry::with_clock(clock)));
    (manual, registry, unique_key(name))
}

/// A plain connection for inspecting keys behind the backs of the types under test.
pub(crate) async fn raw(url: &str) -> ::redis::aio::MultiplexedConnection {
    let client =
        ::redis::Client::open(url).unwrap_or_else(|e| panic!("bad Redis URL {url:?}: {e}"));
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to Redis at {url}: {e}"))
}

/// Runs a raw command on a [`raw`] connection; panics if it fails.
pub(crate) async fn query<T: ::redis::FromRedisValue>(
    conn: &mut ::redis::aio::MultiplexedConnection,
    cmd: &mut ::redis::Cmd,
) -> T {
    cmd.query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("raw Redis command failed: {e}"))
}

#[derive(Debug)]
pub(crate) struct RedisServer {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    /// More arguments for `redis-server` (TLS settings, say).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// If `redis-server` is missing or does not come up within 10 s.
    pub(crate) fn start() -> Self {
        Self::start_with(Vec::new())
    }

    /// [`start`](Self::start) with `extra` arguments for `redis-server` (the plain
    /// port stays, for the readiness check).
    pub(crate) fn start_with(extra: Vec<String>) -> Self {
        let mut last = String::new();
        // Another process may grab the free port between our check and Redis binding
        // it; try a few ports before giving up.
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                child: None,
                port,
                log: std::env::temp_dir().join(format!("resilience-redis-{port}.log")),
                extra: extra.clone(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last = e,
            }
        }
        panic!("could not start a private redis-server: {last}");
    }

    /// The server's port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL, `redis://127.0.0.1:{port}/`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether the process is running (it may be paused).
    pub(crate) fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server at once (`SIGKILL`, like a crash) and waits for it to exit.
    /// Every key is lost: the server keeps nothing on disk.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A paused process still dies on SIGKILL.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty) and waits until it answers.
    ///
    /// # Panics
    ///
    /// If it does not come up within 10 s.
    pub(crate) fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return,
                // The old socket can linger for a moment; retry until the deadline.
                Err(e) if Instant::now() >= deadline => {
                    panic!("could not restart redis-server on port {}: {e}", self.port)
                }
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Freezes the server (`SIGSTOP`): connections stay open but nothing is answered,
    /// as with a hung or overloaded server.
    pub(crate) fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused server run again (`SIGCONT`).
    pub(crate) fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let child = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("redis-server on port {} is not running", self.port));
        let pid = libc::pid_t::try_from(child.id())
            .unwrap_or_else(|_| panic!("pid {} does not fit pid_t", child.id()));
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is
        // our own child, not yet waited for, so the id cannot have been reused.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {signal}) failed: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Spawns `redis-server` on `self.port` and waits for `PING`.
    fn spawn(&mut self) -> Result<(), String> {
        let binary = std::env::var(SERVER_VAR).unwrap_or_else(|_| "redis-server".to_owned());
        let mut child = Command::new(&binary)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--loglevel", "warning"])
            .arg("--logfile")
            .arg(&self.log)
            .arg("--dir")
            .arg(std::env::temp_dir())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run `{binary}` ({e}): install it (`apt-get install redis-server`), \
                     set {SERVER_VAR} to its path, or run `scripts/test.sh`, which installs it"
                )
            })?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "redis-server on port {} exited with {status}; log {}:\n{}",
                    self.port,
                    self.log.display(),
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                ));
            }
            if answers_ping(self.port, Duration::from_millis(200)) {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "redis-server on port {} did not answer PING within {START_TIMEOUT:?}",
                    self.port
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}
