//! Heartbeat client: reports every point's statistics to an admin server and pulls
//! the app's policies from it (feature `heartbeat`).
//!
//! It works like SDS's client, on a background thread of its own:
//!
//! - **Upload** at second 5 of every wall-clock 10-s cycle: the last closed cycle of
//!   every point (visits including downgraded ones, passes, downgrades by reason,
//!   exceptions, timeouts, peak concurrency), with the app group, app name, instance
//!   id and host, plus the names of every point (declared ones too, so a console can
//!   list points that had no traffic yet). Points with a policy report their
//!   [`CycleStats`](crate::CycleStats); points without one keep only totals and
//!   report how much their totals grew since the previous upload (their peak
//!   concurrency is not tracked: 0). In our JSON protocol a point with a `keys`
//!   section also sends its ten hottest keys ([`Point::hot_keys`](crate::Point::hot_keys):
//!   `"hot_keys": [{"key", "passes", "refused", "overridden"}]`, their counts since
//!   each was tracked; absent when empty) and its key table's totals
//!   ([`Point::key_stats`](crate::Point::key_stats): `"key_table": {"tracked",
//!   "untracked_passes", "untracked_refused", "evictions"}`; absent before the first
//!   call with a key). SDS's form carries neither; resilience-admin's `wire` module
//!   documents the whole body.
//! - **Pull** every 5 s with the policy version the client holds. When the server
//!   says the version changed, the console's layer ([`Source::Console`]) is replaced
//!   through the policy-file loader ([`Registry::apply_source`]): all or nothing, and
//!   points the previous version configured but the new one does not lose the
//!   console's layer. Files and code keep their own layers: the console overrides
//!   them section by section (by the registry's [`Precedence`](crate::sources::Precedence))
//!   and never clears them. A set the loader refuses is not applied; the client keeps
//!   its version and policies.
//! - **Peers**: in our JSON protocol a pull also carries the state of every classic
//!   breaker, and the answer the console's count of open breakers per point across
//!   the app's fresh instances ([`HeartbeatClient::fleet`]). A breaker with a
//!   [`Quorum`](crate::breaker::Quorum) opens or goes half-open when the count reaches
//!   it, from this thread, right after the pull; a failed pull forgets the counts
//!   (local rules only). See the guide's
//!   [fleet chapter](crate::guide::fleet#breakers-that-know-their-peers).
//! - **Failover**: the server list is tried in order; an error moves the client to
//!   the next address. A failed upload is retried once on the next server, then
//!   dropped and counted ([`HeartbeatStatus::uploads_dropped`]). Every request has a
//!   1-s connect and a 1-s I/O timeout (as SDS), and the whole answer must come
//!   within 3 s.
//!
//! Guarded calls never wait for any of this: the client only reads statistics, and
//! network trouble only delays its own thread. When the servers are down, the last
//! policies that were applied stay in force.
//!
//! # Protocols
//!
//! [`Protocol::Json`] (the default) speaks resilience-admin's JSON API
//! (`/api/v1/heartbeat`, `/api/v1/pull`); [`Protocol::Sds`] speaks SDS's form
//! protocol (`/sds/heartbeat/add`, `/sds/heartbeat/pullstrategy`, one form field
//! `client` holding the JSON request; answer `changed`, `version`, `strategies`,
//! `errorMsg`), which resilience-admin also serves, so the client can report to an
//! existing sds-admin. The app token goes in an `Authorization: Bearer` header in
//! both (SDS's admin ignores it).
//!
//! # https
//!
//! With the `heartbeat-tls` feature, a server may be `https://host:port`: the
//! client speaks TLS (rustls) and trusts Mozilla's roots, or only the CAs given to
//! `HeartbeatConfigBuilder::ca_file` / `ca_pem` (items of that feature).
//! A server whose certificate is not trusted is refused like one that is down (the
//! error says so, and what is trusted). Without the feature, an `https://` address
//! is a configuration error that names it.
//!
//! A token is never sent over plain `http://` to a host that is not loopback
//! (127.0.0.0/8, `::1`, `localhost`) unless
//! [`allow_plain_http(true)`](HeartbeatConfigBuilder::allow_plain_http) says so:
//! [`build`](HeartbeatConfigBuilder::build) refuses it, in both protocols.
//!
//! SDS strategies are translated into policies as follows (SDS's "-1 / null = rule
//! off" is kept). resilience-admin adds the full point settings under
//! `resiliencePolicy` to every strategy, and the client then uses those instead.
//!
//! | SDS field | policy |
//! |---|---|
//! | `visitThreshold` ≥ 0 | `max_visits` |
//! | `concurrentThreshold` ≥ 0 | `max_concurrency` |
//! | `exceptionThreshold` ≥ 0 | `max_exceptions` |
//! | `exceptionRateThreshold` 0..=100 and `exceptionRateStart` ≥ 0 | `exception_rate` (percent / 100, `min_visits`) |
//! | `timeoutThreshold` > 0 ms and `timeoutCountThreshold` ≥ 0 | `timeouts` |
//! | `tokenBucketGeneratedTokensInSecond` ≥ 0 | `token_bucket` with rate and capacity `max(rate, tokenBucketSize)`: SDS's bucket admits that many calls per second |
//! | `delayTime` ≥ 0 ms, `retryInterval` > 0 ms | `delay` |
//! | `downgradeRate` (null: 100) | `downgrade_percentage`, clamped to 0..=100 |
//!
//! # Examples
//!
//! ```no_run
//! use resilience_runtime::heartbeat::{self, HeartbeatConfig};
//!
//! let config = HeartbeatConfig::builder("shop", "orders", "http://127.0.0.1:7070")
//!     .token("app-token-0123456789")
//!     .build()?;
//! // Reports and pulls until the handle is dropped.
//! let handle = heartbeat::start(config)?;
//! println!("holding policy version {}", handle.client().status().policy_version);
//! # Ok::<(), heartbeat::HeartbeatError>(())
//! ```

mod cache;
mod config;
mod error;
mod failures;
mod fields;
mod http;
mod quorum;
#[cfg(feature = "heartbeat-tls")]
mod tls;
mod wire;

pub use config::{
    HeartbeatConfig, HeartbeatConfigBuilder, Protocol, ServerAddr, DEFAULT_MAX_BODY_BYTES,
};
pub use error::HeartbeatError;

use crate::registry::{registry, Registry};
use crate::sources::Source;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Recover;
use crate::sync::{mpsc, Arc, Mutex};
use failures::{FailureLog, Say};
use serde_json::Value;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};
use wire::{Collector, PullAnswer, CYCLE_MS};

/// Counters and the latest errors of a heartbeat client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeartbeatStatus {
    /// The policy version the client holds (0: none pulled yet).
    pub policy_version: u64,
    /// Cycles uploaded.
    pub uploads: u64,
    /// Uploads that failed on one server and were retried on the next.
    pub upload_retries: u64,
    /// Cycles dropped because their upload failed twice.
    pub uploads_dropped: u64,
    /// Pulls answered.
    pub pulls: u64,
    /// Pulls that failed (network, HTTP or protocol errors).
    pub pull_failures: u64,
    /// New policy versions applied.
    pub policy_updates: u64,
    /// Policy versions refused by the loader (the previous policies were kept).
    pub policies_rejected: u64,
    /// The error of the last upload, if it failed.
    pub last_upload_error: Option<String>,
    /// The error of the last pull, if it failed.
    pub last_pull_error: Option<String>,
    /// The policies held came from the cache file
    /// ([`HeartbeatConfigBuilder::cache_file`]) and no pull has succeeded since.
    pub from_cache: bool,
    /// The last error reading or writing the cache file, if any.
    pub cache_error: Option<String>,
    /// Breakers a fleet quorum opened or moved to half-open
    /// ([`ClassicConfig::quorum`](crate::breaker::ClassicConfig::quorum)).
    pub quorum_moves: u64,
}

/// What [`HeartbeatClient::upload_now`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UploadOutcome {
    /// The cycle was uploaded.
    Sent {
        /// Wall-clock start of the cycle, ms since the Unix epoch.
        cycle_start_ms: u64,
        /// Points with activity in it.
        points: usize,
        /// How many bodies it took ([`HeartbeatConfigBuilder::max_body_bytes`]).
        parts: usize,
        /// The server that took it.
        server: String,
        /// Whether the first server failed and the next one took it.
        retried: bool,
    },
    /// This cycle was already handled (uploaded or dropped).
    AlreadyHandled {
        /// Wall-clock start of the cycle.
        cycle_start_ms: u64,
    },
}

/// What [`HeartbeatClient::pull_now`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PullOutcome {
    /// The client already holds the server's version.
    Unchanged {
        /// The version.
        version: u64,
    },
    /// A new version was applied.
    Applied {
        /// The new version.
        version: u64,
        /// Points whose policy was set.
        applied: Vec<String>,
        /// Points whose policy was removed.
        cleared: Vec<String>,
    },
}

/// A heartbeat client for one registry. Cheap to clone (clones share everything).
///
/// [`start`] runs one in the background for the global registry; tests and programs
/// that drive it themselves call [`upload_now`](HeartbeatClient::upload_now) and
/// [`pull_now`](HeartbeatClient::pull_now).
#[derive(Clone)]
pub struct HeartbeatClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: HeartbeatConfig,
    registry: &'static Registry,
    upload: Mutex<UploadState>,
    pull_cursor: Mutex<usize>,
    version: AtomicU64,
    uploads: AtomicU64,
    upload_retries: AtomicU64,
    uploads_dropped: AtomicU64,
    pulls: AtomicU64,
    pull_failures: AtomicU64,
    policy_updates: AtomicU64,
    policies_rejected: AtomicU64,
    last_upload_error: Mutex<Option<String>>,
    last_pull_error: Mutex<Option<String>>,
    from_cache: std::sync::atomic::AtomicBool,
    cache_error: Mutex<Option<String>>,
    /// What was logged of failing uploads and pulls (see `failures`).
    upload_log: Mutex<FailureLog>,
    pull_log: Mutex<FailureLog>,
    /// The breakers' fleet quorum (see `quorum`).
    peers: quorum::Peers,
}

struct UploadState {
    collector: Collector,
    last_cycle: Option<u64>,
    cursor: usize,
}

impl fmt::Debug for HeartbeatClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeartbeatClient")
            .field("config", &self.inner.config)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// Every client made, weakly: the metrics module reports those still alive.
fn live_clients() -> &'static Mutex<Vec<std::sync::Weak<Inner>>> {
    static CLIENTS: crate::sync::OnceLock<Mutex<Vec<std::sync::Weak<Inner>>>> =
        crate::sync::OnceLock::new();
    CLIENTS.get_or_init(Mutex::default)
}

/// The `group/app` and status of every live client of `registry` (for metrics).
#[cfg(any(feature = "prometheus", feature = "metrics", feature = "opentelemetry"))]
pub(crate) fn statuses_of(registry: &Registry) -> Vec<(String, HeartbeatStatus)> {
    let mut clients = live_clients().lock().recover();
    clients.retain(|w| w.strong_count() > 0);
    clients
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .filter(|i| std::ptr::eq(i.registry, registry))
        .map(|inner| {
            let c = HeartbeatClient { inner };
            (c.app_key(), c.status())
        })
        .collect()
}

/// The error message a server put in its JSON answer, if any.
fn server_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("errorMsg"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.chars().take(200).collect())
}

impl HeartbeatClient {
    /// A client for `registry`. Its first upload counts the totals of points without
    /// a policy from now. With a [cache file](HeartbeatConfigBuilder::cache_file), the
    /// console's last policies are read from it and applied now, unless the registry
    /// already holds a console layer.
    pub fn new(config: HeartbeatConfig, registry: &'static Registry) -> HeartbeatClient {
        // The console charts the durations of every second.
        crate::measure_durations(true);
        let client = HeartbeatClient {
            inner: Arc::new(Inner {
                upload: Mutex::new(UploadState {
                    collector: Collector::new(registry),
                    last_cycle: None,
                    cursor: 0,
                }),
                config,
                registry,
                pull_cursor: Mutex::new(0),
                version: AtomicU64::new(0),
                uploads: AtomicU64::new(0),
                upload_retries: AtomicU64::new(0),
                uploads_dropped: AtomicU64::new(0),
                pulls: AtomicU64::new(0),
                pull_failures: AtomicU64::new(0),
                policy_updates: AtomicU64::new(0),
                policies_rejected: AtomicU64::new(0),
                last_upload_error: Mutex::new(None),
                last_pull_error: Mutex::new(None),
                from_cache: std::sync::atomic::AtomicBool::new(false),
                cache_error: Mutex::new(None),
                upload_log: Mutex::new(FailureLog::default()),
                pull_log: Mutex::new(FailureLog::default()),
                peers: quorum::Peers::default(),
            }),
        };
        client.restore_cache();
        let mut clients = live_clients().lock().recover();
        // Bounded by the clients alive, not by the clients ever made.
        clients.retain(|w| w.strong_count() > 0);
        clients.push(Arc::downgrade(&client.inner));
        drop(clients);
        client
    }

    fn app_key(&self) -> String {
        format!("{}/{}", self.inner.config.app_group, self.inner.config.app)
    }

    /// Applies the cache file's policies if the registry holds no console layer yet.
    fn restore_cache(&self) {
        let inner = &self.inner;
        let Some(path) = &inner.config.cache_file else {
            return;
        };
        if inner.registry.source_version(&Source::Console) != 0 {
            return;
        }
        let restored = cache::read(path, &self.app_key()).and_then(|cached| {
            let Some((version, file)) = cached else {
                return Ok(None);
            };
            inner
                .registry
                .apply_source_version(Source::Console, &file, version)
                .map(|report| Some((version, report.applied.len())))
                .map_err(|e| format!("policy cache {} ignored: {e}", path.display()))
        });
        match restored {
            Ok(None) => {}
            Ok(Some((version, points))) => {
                inner.version.store(version, Ordering::Release);
                inner.from_cache.store(true, Ordering::Release);
                #[cfg(feature = "tracing")]
                tracing::info!(
                    version,
                    points,
                    cache = %path.display(),
                    "resilience: enforcing the console's policies from the cache until the console answers"
                );
                #[cfg(not(feature = "tracing"))]
                let _ = points;
            }
            Err(e) => self.cache_failed(e),
        }
    }

    fn cache_failed(&self, error: String) {
        #[cfg(feature = "tracing")]
        tracing::warn!(cause = %error, "resilience: heartbeat policy cache");
        *self.inner.cache_error.lock().recover() = Some(error);
    }

    /// The configuration.
    pub fn config(&self) -> &HeartbeatConfig {
        &self.inner.config
    }

    /// The policy version the client holds.
    pub fn policy_version(&self) -> u64 {
        self.inner.version.load(Ordering::Acquire)
    }

    /// Counters and latest errors.
    pub fn status(&self) -> HeartbeatStatus {
        let i = &self.inner;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HeartbeatStatus {
            policy_version: self.policy_version(),
            uploads: get(&i.uploads),
            upload_retries: get(&i.upload_retries),
            uploads_dropped: get(&i.uploads_dropped),
            pulls: get(&i.pulls),
            pull_failures: get(&i.pull_failures),
            policy_updates: get(&i.policy_updates),
            policies_rejected: get(&i.policies_rejected),
            last_upload_error: i.last_upload_error.lock().recover().clone(),
            last_pull_error: i.last_pull_error.lock().recover().clone(),
            from_cache: i.from_cache.load(Ordering::Acquire),
            cache_error: i.cache_error.lock().recover().clone(),
            quorum_moves: get(&i.peers.moves),
        }
    }

    /// What the console counted in the last pull, per point with a classic breaker
    /// on some live instance: how many instances have it open by their own rules, out
    /// of how many have one. Empty when the last pull failed, or the console does not
    /// count (an older one, or SDS's protocol): then no quorum applies.
    pub fn fleet(&self) -> std::collections::BTreeMap<String, crate::breaker::FleetCount> {
        self.inner.peers.fleet()
    }

    /// The registry's wall clock, ms since the Unix epoch.
    fn wall_ms(&self) -> u64 {
        let c = self.inner.registry.clock();
        c.wall_nanos(c.now_ns()) / 1_000_000
    }

    fn request(&self, path: &'static str) -> http::Request<'_> {
        let c = &self.inner.config;
        http::Request {
            path,
            content_type: wire::content_type(c.protocol),
            token: c.token.as_deref(),
            connect_timeout: c.connect_timeout,
            io_timeout: c.io_timeout,
            plain_only_to_loopback: c.token.is_some() && !c.allow_plain_http,
            #[cfg(feature = "heartbeat-tls")]
            tls: c.tls.as_ref(),
        }
    }

    /// Sends one request; a non-2xx answer is an error.
    fn send(
        &self,
        server: &ServerAddr,
        path: &'static str,
        body: impl FnOnce(std::net::IpAddr) -> Vec<u8>,
    ) -> Result<Vec<u8>, HeartbeatError> {
        let response = http::post(server, &self.request(path), body)?;
        if (200..300).contains(&response.status) {
            Ok(response.body)
        } else {
            Err(HeartbeatError::Http {
                server: server.to_string(),
                status: response.status,
                message: server_message(&response.body),
            })
        }
    }

    /// Logs what `say` decided about a `request` (`upload` or `pull`) that failed with
    /// `error` or succeeded (`None`): with the `tracing` feature, a warning for the
    /// first failure of a run and then at most one a minute, and the recovery.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn say(&self, request: &'static str, say: Say, error: Option<&HeartbeatError>) {
        #[cfg(feature = "tracing")]
        {
            let app = self.inner.config.app.as_str();
            let cause = error
                .map(|e| crate::util::error_chain(e))
                .unwrap_or_default();
            match say {
                Say::Nothing => {}
                Say::Failing => {
                    tracing::warn!(request, app, cause, "resilience: heartbeat {request} failed")
                }
                Say::StillFailing { unlogged } => tracing::warn!(
                    request,
                    app,
                    cause,
                    unlogged,
                    "resilience: heartbeat {request} still failing ({unlogged} more since the last message)"
                ),
                Say::Recovered { failures } => tracing::info!(
                    request,
                    app,
                    failures,
                    "resilience: heartbeat {request} works again after {failures} failures"
                ),
            }
        }
    }

    /// Uploads the last closed cycle now (the background thread calls this at second
    /// 5 of every cycle). A cycle is handled once: calling again within the same
    /// cycle does nothing.
    ///
    /// # Errors
    ///
    /// The second server's error if the upload failed on two servers; the cycle is
    /// then dropped and counted.
    pub fn upload_now(&self) -> Result<UploadOutcome, HeartbeatError> {
        let inner = &self.inner;
        let mut state = inner.upload.lock().recover();
        let wall = self.wall_ms();
        let cycle = (wall - wall % CYCLE_MS).saturating_sub(CYCLE_MS);
        if state.last_cycle.is_some_and(|c| c >= cycle) {
            return Ok(UploadOutcome::AlreadyHandled {
                cycle_start_ms: cycle,
            });
        }
        state.last_cycle = Some(cycle);
        let report = state.collector.collect(inner.registry, cycle);
        let servers = &inner.config.servers;
        let version = self.policy_version();
        let health = self.status();
        let path = inner.config.protocol.upload_path();
        // The bodies are built once for the local address the connection uses (and
        // again only if another server is reached from another address).
        let built: Mutex<Option<(std::net::IpAddr, Vec<Vec<u8>>)>> = Mutex::new(None);
        let body = |ip: std::net::IpAddr, part: usize| {
            let mut built = built.lock().recover();
            if built.as_ref().is_none_or(|(at, _)| *at != ip) {
                let bodies = wire::upload_body(&inner.config, &report, version, &health, ip);
                *built = Some((ip, bodies));
            }
            built
                .as_ref()
                .and_then(|(_, b)| b.get(part).cloned())
                .unwrap_or_default()
        };
        // How many parts this cycle takes (the same for every local address, see `pack`).
        let parts = wire::upload_body(
            &inner.config,
            &report,
            version,
            &health,
            std::net::IpAddr::from([127, 0, 0, 1]),
        )
        .len();
        let attempt = |cursor: usize, part: usize| {
            let server = &servers[cursor % servers.len()];
            self.send(server, path, |ip| body(ip, part))
                .map(|_| server.to_string())
        };
        let mut retried = false;
        let mut result = Ok(String::new());
        for part in 0..parts {
            let first = state.cursor % servers.len();
            result = match attempt(first, part) {
                Ok(server) => Ok(server),
                Err(_) => {
                    inner.upload_retries.fetch_add(1, Ordering::Relaxed);
                    retried = true;
                    state.cursor = (first + 1) % servers.len();
                    attempt(state.cursor, part)
                }
            };
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(server) => {
                inner.uploads.fetch_add(1, Ordering::Relaxed);
                *inner.last_upload_error.lock().recover() = None;
                self.say(
                    "upload",
                    inner.upload_log.lock().recover().succeeded(),
                    None,
                );
                Ok(UploadOutcome::Sent {
                    cycle_start_ms: cycle,
                    points: report.points.len(),
                    parts,
                    server,
                    retried,
                })
            }
            Err(e) => {
                inner.uploads_dropped.fetch_add(1, Ordering::Relaxed);
                state.cursor = (state.cursor + 1) % servers.len();
                *inner.last_upload_error.lock().recover() = Some(crate::util::error_chain(&e));
                let say = inner.upload_log.lock().recover().failed(self.wall_ms());
                self.say("upload", say, Some(&e));
                Err(e)
            }
        }
    }

    /// Pulls the policies now (the background thread calls this every pull period)
    /// and applies them if the server's version differs from the one held.
    ///
    /// # Errors
    ///
    /// A network, HTTP or protocol error (the next pull goes to the next server), or
    /// [`HeartbeatError::Rejected`] if the loader refused the new policies. The
    /// current policies stay in force in every case.
    pub fn pull_now(&self) -> Result<PullOutcome, HeartbeatError> {
        let inner = &self.inner;
        let mut cursor = inner.pull_cursor.lock().recover();
        let server = &inner.config.servers[*cursor % inner.config.servers.len()];
        let version = self.policy_version();
        let points = inner.registry.point_names();
        let json = inner.config.protocol == Protocol::Json;
        // Half the body limit at most: the rest of the pull is small.
        let room = inner.config.max_body_bytes / 2;
        let breakers = json
            .then(|| inner.peers.report(inner.registry, &points, room))
            .flatten();
        let result = self
            .send(server, inner.config.protocol.pull_path(), |ip| {
                wire::pull_body(&inner.config, version, &points, breakers.as_ref(), ip)
            })
            .and_then(|body| {
                wire::read_pull_answer(inner.config.protocol, &body)
                    .map(|answer| (answer, body))
                    .map_err(|message| HeartbeatError::Protocol {
                        server: server.to_string(),
                        message,
                    })
            });
        let (answer, body) = match result {
            Ok(answered) => answered,
            Err(e) => {
                // No fresh count: local rules only until a pull succeeds.
                inner.peers.forget();
                inner.pull_failures.fetch_add(1, Ordering::Relaxed);
                *cursor = (*cursor + 1) % inner.config.servers.len();
                *inner.last_pull_error.lock().recover() = Some(crate::util::error_chain(&e));
                let say = inner.pull_log.lock().recover().failed(self.wall_ms());
                self.say("pull", say, Some(&e));
                return Err(e);
            }
        };
        drop(cursor);
        inner.pulls.fetch_add(1, Ordering::Relaxed);
        self.say("pull", inner.pull_log.lock().recover().succeeded(), None);
        inner.from_cache.store(false, Ordering::Release);
        let outcome = match answer {
            PullAnswer::Unchanged(v) if v == version => Ok(PullOutcome::Unchanged { version }),
            // The server said "unchanged" for another version: nothing to apply.
            PullAnswer::Unchanged(_) => Ok(PullOutcome::Unchanged { version }),
            PullAnswer::Changed(new, file) => {
                let applied = file.and_then(|f| {
                    let report = inner
                        .registry
                        .apply_source_version(Source::Console, &f, new)?;
                    Ok((report, f))
                });
                match applied {
                    Ok((report, file)) => {
                        inner.version.store(new, Ordering::Release);
                        if let Some(path) = &inner.config.cache_file {
                            match cache::write(path, &self.app_key(), new, &file) {
                                Ok(()) => *inner.cache_error.lock().recover() = None,
                                Err(e) => self.cache_failed(e),
                            }
                        }
                        inner.policy_updates.fetch_add(1, Ordering::Relaxed);
                        Ok(PullOutcome::Applied {
                            version: new,
                            applied: report.applied,
                            cleared: report.cleared,
                        })
                    }
                    Err(error) => {
                        inner.policies_rejected.fetch_add(1, Ordering::Relaxed);
                        Err(HeartbeatError::Rejected {
                            version: new,
                            error,
                        })
                    }
                }
            }
        };
        if json {
            // The counts are as fresh as this answer: applied now, once, after the
            // policies it brought (a quorum the new version sets counts already).
            let names = match &outcome {
                // The new version may have made points.
                Ok(PullOutcome::Applied { .. }) => inner.registry.point_names(),
                _ => points,
            };
            inner.peers.pulled(inner.registry, &names, &body);
        }
        *inner.last_pull_error.lock().recover() =
            outcome.as_ref().err().map(|e| crate::util::error_chain(e));
        outcome
    }

    /// Starts the background thread: a pull at once, then every pull period; an
    /// upload at the configured second of every 10-s cycle. It stops when the handle
    /// is dropped or [`stop`](HeartbeatHandle::stop)ped.
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] if the thread cannot be created.
    pub fn spawn(&self) -> Result<HeartbeatHandle, HeartbeatError> {
        let (tx, rx) = mpsc::channel::<()>();
        let client = self.clone();
        let thread = thread::Builder::new()
            .name("resilience-heartbeat".into())
            .spawn(move || client.run(&rx))
            .map_err(|e| HeartbeatError::Config {
                field: "thread",
                message: format!("cannot start the heartbeat thread: {e}"),
            })?;
        Ok(HeartbeatHandle {
            client: self.clone(),
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    fn next_upload(&self) -> Instant {
        let offset = self.inner.config.upload_offset.as_millis() as u64;
        Instant::now() + Duration::from_millis(config::until_next_upload(self.wall_ms(), offset))
    }

    fn run(&self, stop: &mpsc::Receiver<()>) {
        let period = self.inner.config.pull_period;
        let mut next_pull = Instant::now();
        let mut next_upload = self.next_upload();
        loop {
            let now = Instant::now();
            if now >= next_pull {
                // Errors are in the status; the thread keeps going.
                let _ = self.pull_now();
                next_pull = Instant::now() + period;
            }
            if now >= next_upload {
                let _ = self.upload_now();
                next_upload = self.next_upload();
            }
            let wake = next_pull.min(next_upload);
            match stop.recv_timeout(wake.saturating_duration_since(Instant::now())) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // A stop message, or the handle is gone.
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// Starts a heartbeat client for the global [`registry()`] in the background.
///
/// # Errors
///
/// [`HeartbeatError::Config`] if the thread cannot be created.
pub fn start(config: HeartbeatConfig) -> Result<HeartbeatHandle, HeartbeatError> {
    HeartbeatClient::new(config, registry()).spawn()
}

/// The background thread of a heartbeat client; dropping it stops the thread (after
/// the request in progress, if any: at most a few seconds).
#[derive(Debug)]
pub struct HeartbeatHandle {
    client: HeartbeatClient,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl HeartbeatHandle {
    /// The client the thread drives.
    pub fn client(&self) -> &HeartbeatClient {
        &self.client
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HeartbeatHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
