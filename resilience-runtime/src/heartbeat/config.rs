//! Configuration of the heartbeat client: the app, the servers, the protocol and the
//! timings.

use super::error::HeartbeatError;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wire protocol the client speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The admin server's JSON API: `POST /api/v1/heartbeat` and `POST /api/v1/pull`
    /// with JSON bodies. The default.
    #[default]
    Json,
    /// SDS's protocol: `POST /sds/heartbeat/add` and `/sds/heartbeat/pullstrategy`,
    /// form-encoded with one field `client` holding the JSON request, so the client
    /// can report to an existing sds-admin too.
    Sds,
}

impl Protocol {
    pub(crate) fn upload_path(self) -> &'static str {
        match self {
            Protocol::Json => "/api/v1/heartbeat",
            Protocol::Sds => "/sds/heartbeat/add",
        }
    }

    pub(crate) fn pull_path(self) -> &'static str {
        match self {
            Protocol::Json => "/api/v1/pull",
            Protocol::Sds => "/sds/heartbeat/pullstrategy",
        }
    }
}

/// One admin server: `http://host:port` with an optional path prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddr {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) prefix: String,
}

impl ServerAddr {
    /// Parses `http://host:port[/prefix]`, `host:port` or `http://host` (port 80).
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] for another scheme (`https` is not supported by the
    /// built-in client: put a local TLS proxy in front), a missing host or a bad port.
    pub fn parse(text: &str) -> Result<ServerAddr, HeartbeatError> {
        let bad = |message: String| HeartbeatError::Config {
            field: "servers",
            message,
        };
        let text = text.trim();
        let rest = match text.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                return Err(bad(format!(
                    "{text:?}: scheme {scheme:?} is not supported, only http \
                     (use a local TLS proxy for https)"
                )))
            }
            None => text,
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            // `[::1]:7070`
            Some((h, p)) if !h.contains(':') || h.ends_with(']') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| bad(format!("{text:?}: port {p:?} is not a number 1-65535")))?;
                (h, port)
            }
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(format!("{text:?}: no valid host")));
        }
        if port == 0 {
            return Err(bad(format!("{text:?}: port 0")));
        }
        Ok(ServerAddr {
            host: host.to_owned(),
            port,
            prefix: path.trim_end_matches('/').to_owned(),
        })
    }

    /// The `Host` header value.
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.prefix)
    }
}

/// What the heartbeat client needs: who it is, where to report, and how.
///
/// # Examples
///
/// ```
/// use resilience_runtime::heartbeat::{HeartbeatConfig, Protocol};
/// use std::time::Duration;
///
/// let config = HeartbeatConfig::new("shop", "orders", "http://admin-1:7070, http://admin-2:7070")?
///     .token("app-token-0123456789")
///     .protocol(Protocol::Sds)
///     .pull_period(Duration::from_secs(5));
/// assert_eq!(config.servers().len(), 2);
/// # Ok::<(), resilience_runtime::heartbeat::HeartbeatError>(())
/// ```
#[derive(Clone)]
pub struct HeartbeatConfig {
    pub(crate) app_group: String,
    pub(crate) app: String,
    pub(crate) servers: Vec<ServerAddr>,
    pub(crate) protocol: Protocol,
    pub(crate) token: Option<String>,
    pub(crate) instance: String,
    pub(crate) host: String,
    pub(crate) pull_period: Duration,
    pub(crate) upload_offset: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    pub(crate) cache_file: Option<std::path::PathBuf>,
    pub(crate) max_body_bytes: usize,
}

/// The largest body the heartbeat client sends by default: bigger uploads are
/// split into parts ([`HeartbeatConfig::max_body_bytes`]), under resilience-admin's
/// default request limit of 256 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 192 * 1024;

impl fmt::Debug for HeartbeatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeartbeatConfig")
            .field("app_group", &self.app_group)
            .field("app", &self.app)
            .field("servers", &self.servers)
            .field("protocol", &self.protocol)
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("instance", &self.instance)
            .field("host", &self.host)
            .field("pull_period", &self.pull_period)
            .field("upload_offset", &self.upload_offset)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("cache_file", &self.cache_file)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

fn check_name(field: &'static str, value: &str) -> Result<(), HeartbeatError> {
    if value.trim().is_empty() || value.len() > 256 || value.chars().any(char::is_control) {
        Err(HeartbeatError::Config {
            field,
            message: format!(
                "{value:?} must be 1 to 256 bytes, not blank, without control characters"
            ),
        })
    } else {
        Ok(())
    }
}

impl HeartbeatConfig {
    /// A configuration for app `app_group`/`app` reporting to `servers`, a
    /// comma-separated list of addresses tried in order, moving to the next on error.
    ///
    /// Defaults: our JSON protocol, no token, an instance id made of the host name,
    /// the process id and the start time, uploads at second 5 of every wall-clock
    /// 10-s cycle, pulls every 5 s, 1-s connect and I/O timeouts (as SDS).
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] naming the field: a blank app group or app, no
    /// server, or a server address that does not parse.
    pub fn new(app_group: &str, app: &str, servers: &str) -> Result<Self, HeartbeatError> {
        check_name("app_group", app_group)?;
        check_name("app", app)?;
        let servers = servers
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(ServerAddr::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if servers.is_empty() {
            return Err(HeartbeatError::Config {
                field: "servers",
                message: "no server address given".into(),
            });
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| check_name("host", h).is_ok())
            .unwrap_or_else(|| "unknown-host".to_owned());
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Ok(HeartbeatConfig {
            app_group: app_group.to_owned(),
            app: app.to_owned(),
            servers,
            protocol: Protocol::Json,
            token: None,
            instance: format!("{host}-{}-{started}", std::process::id()),
            host,
            pull_period: Duration::from_secs(5),
            upload_offset: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            cache_file: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        })
    }

    /// The app token, sent as `Authorization: Bearer TOKEN` (SDS's admin ignores it).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The wire protocol (default [`Protocol::Json`]).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The instance id reported to the server (unique per process).
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] for a blank id or one with control characters.
    pub fn instance(mut self, id: &str) -> Result<Self, HeartbeatError> {
        check_name("instance", id)?;
        self.instance = id.to_owned();
        Ok(self)
    }

    /// The host name reported (default: the machine's).
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] for a blank name or one with control characters.
    pub fn host(mut self, host: &str) -> Result<Self, HeartbeatError> {
        check_name("host", host)?;
        self.host = host.to_owned();
        Ok(self)
    }

    /// How often policies are pulled (default 5 s, as SDS; at least 10 ms).
    pub fn pull_period(mut self, period: Duration) -> Self {
        self.pull_period = period.max(Duration::from_millis(10));
        self
    }

    /// When in each 10-s cycle the previous cycle is uploaded (default 5 s, as SDS;
    /// taken modulo 10 s).
    pub fn upload_offset(mut self, offset: Duration) -> Self {
        self.upload_offset = Duration::from_millis((offset.as_millis() % 10_000) as u64);
        self
    }

    /// Connect and read/write timeouts of each request (default 1 s each, as SDS).
    pub fn timeouts(mut self, connect: Duration, io: Duration) -> Self {
        self.connect_timeout = connect.max(Duration::from_millis(1));
        self.io_timeout = io.max(Duration::from_millis(1));
        self
    }

    /// Keeps the console's policies in a local file: written atomically after every
    /// pull that applied a new version, and read when the client is made (before
    /// the first pull), so an instance that restarts while the console is
    /// unreachable enforces the console's last policies and says so
    /// ([`HeartbeatStatus::from_cache`](super::HeartbeatStatus::from_cache)). A
    /// cache of another app or one that does not parse is ignored and reported
    /// ([`HeartbeatStatus::cache_error`](super::HeartbeatStatus::cache_error)).
    pub fn cache_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.cache_file = Some(path.into());
        self
    }

    /// The largest body sent (default [`DEFAULT_MAX_BODY_BYTES`], at least 4 KiB;
    /// form-encoded bytes in SDS's protocol): a cycle with more points, or more known
    /// names, than fit is uploaded in parts, each a heartbeat of its own with
    /// `"part": k, "parts": n` and a share of the points (of `pointInfoMap` in SDS's
    /// protocol), so thousands of points never meet the server's body limit. Parts are
    /// sent in order; if one fails on both servers, the rest of the cycle is dropped
    /// with it (counted in `uploads_dropped`), the parts before it stay stored. In
    /// SDS's protocol a cycle that fits is one body without part fields, as SDS sends
    /// it, and a pull whose `pointList` would not fit sends the names that do, in
    /// order, and `pointsCount` (the answer holds every strategy either way).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes.max(4096);
        self
    }

    /// The server addresses, in failover order.
    pub fn servers(&self) -> &[ServerAddr] {
        &self.servers
    }

    /// The instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance
    }
}

/// Milliseconds from `wall_ms` to the next upload: second `offset_ms / 1000` of the
/// next 10-s wall-clock cycle, strictly after `wall_ms` (SDS uploads at :x5).
pub(crate) fn until_next_upload(wall_ms: u64, offset_ms: u64) -> u64 {
    let cycle = crate::stats::CYCLE_MS;
    let into = wall_ms % cycle;
    if into < offset_ms {
        offset_ms - into
    } else {
        cycle - into + offset_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses() {
        let a = ServerAddr::parse("http://admin:7070/base/").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.prefix.as_str()),
            ("admin", 7070, "/base")
        );
        assert_eq!(a.to_string(), "http://admin:7070/base");
        let b = ServerAddr::parse("127.0.0.1:9").unwrap();
        assert_eq!((b.port, b.prefix.as_str()), (9, ""));
        assert_eq!(ServerAddr::parse("http://admin").unwrap().port, 80);
        let v6 = ServerAddr::parse("http://[::1]:7070").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.authority()),
            ("::1", "[::1]:7070".to_owned())
        );
        for bad in ["https://admin:443", "http://:80", "admin:99999", "admin:0"] {
            let e = ServerAddr::parse(bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    HeartbeatError::Config {
                        field: "servers",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn config_checks_names_and_servers() {
        let c = HeartbeatConfig::new("g", "a", " http://x:1 ,http://y:2,").unwrap();
        assert_eq!(c.servers().len(), 2);
        assert!(c.instance_id().contains(&std::process::id().to_string()));
        let e = HeartbeatConfig::new(" ", "a", "x:1").unwrap_err();
        assert!(matches!(
            e,
            HeartbeatError::Config {
                field: "app_group",
                ..
            }
        ));
        let e = HeartbeatConfig::new("g", "a", " , ").unwrap_err();
        assert!(matches!(
            e,
            HeartbeatError::Config {
                field: "servers",
                ..
            }
        ));
        assert!(format!("{:?}", c.clone().token("secret-token")).contains("\"..\""));
        assert!(!format!("{:?}", c.token("secret-token")).contains("secret-token"));
    }

    #[test]
    fn uploads_happen_at_second_five_of_the_next_cycle() {
        assert_eq!(until_next_upload(1_767_225_600_000, 5_000), 5_000);
        assert_eq!(until_next_upload(1_767_225_604_999, 5_000), 1);
        assert_eq!(until_next_upload(1_767_225_605_000, 5_000), 10_000);
        assert_eq!(until_next_upload(1_767_225_609_000, 5_000), 6_000);
        assert_eq!(until_next_upload(1_767_225_609_000, 0), 1_000);
    }
}
