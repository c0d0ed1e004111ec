//! Configuration of the heartbeat client: the app, the servers, the protocol and the
//! timings.

use super::error::HeartbeatError;
#[cfg(feature = "heartbeat-tls")]
use super::tls::{self, CaSource, TlsClient};
use std::fmt;
use std::net::IpAddr;
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

/// One admin server: `http://host:port` or `https://host:port`, with an optional
/// path prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddr {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) prefix: String,
    /// `https`: the connection is TLS.
    pub(crate) tls: bool,
}

impl ServerAddr {
    /// Parses `http://host:port[/prefix]`, `https://host:port[/prefix]`, `host:port`
    /// (plain http) or a URL without a port (80 for http, 443 for https).
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] for another scheme, `https` in a build without the
    /// `heartbeat-tls` feature, a missing host or a bad port.
    pub fn parse(text: &str) -> Result<ServerAddr, HeartbeatError> {
        let bad = |message: String| HeartbeatError::Config {
            field: "servers",
            message,
        };
        let text = text.trim();
        let (tls, rest) = match text.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) if cfg!(feature = "heartbeat-tls") => (true, rest),
            Some(("https", _)) => {
                return Err(bad(format!(
                    "{text:?}: https needs the runtime's `heartbeat-tls` feature, \
                     which this build does not have"
                )))
            }
            Some((scheme, _)) => {
                return Err(bad(format!(
                    "{text:?}: scheme {scheme:?} is not supported, only http and https"
                )))
            }
            None => (false, text),
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
            _ => (authority, if tls { 443 } else { 80 }),
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
            tls,
        })
    }

    /// Whether the server is reached over https.
    pub fn is_https(&self) -> bool {
        self.tls
    }

    /// Whether the host is loopback by its very spelling: an address in 127.0.0.0/8,
    /// `::1` (or 127.x mapped into IPv6), or the name `localhost`. Any other name
    /// counts as not loopback, whatever it resolves to today (and a `localhost` that
    /// resolves elsewhere is refused when connecting).
    pub fn is_loopback(&self) -> bool {
        match self.host.parse::<IpAddr>() {
            Ok(ip) => is_loopback_ip(ip),
            Err(_) => {
                self.host.eq_ignore_ascii_case("localhost")
                    || self.host.eq_ignore_ascii_case("localhost.")
            }
        }
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
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.prefix)
    }
}

/// 127.0.0.0/8, `::1`, and 127.0.0.0/8 mapped into IPv6 (`::ffff:127.0.0.1`).
pub(crate) fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// What the heartbeat client needs: who it is, where to report, and how; build it
/// with [`HeartbeatConfig::builder`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::heartbeat::{HeartbeatConfig, Protocol};
/// use std::time::Duration;
///
/// let config = HeartbeatConfig::builder("shop", "orders", "http://admin-1:7070, http://admin-2:7070")
///     .token("app-token-0123456789")
///     // A private network: the token may travel unencrypted (prefer https).
///     .allow_plain_http(true)
///     .protocol(Protocol::Sds)
///     .pull_period(Duration::from_secs(5))
///     .build()?;
/// assert_eq!(config.servers().len(), 2);
/// # Ok::<(), resilience_runtime::heartbeat::HeartbeatError>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
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
    pub(crate) allow_plain_http: bool,
    /// The TLS set-up, when a server is https or a CA was given.
    #[cfg(feature = "heartbeat-tls")]
    pub(crate) tls: Option<TlsClient>,
}

/// The largest body the heartbeat client sends by default: bigger uploads are
/// split into parts ([`HeartbeatConfigBuilder::max_body_bytes`]), under resilience-admin's
/// default request limit of 256 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 192 * 1024;

impl fmt::Debug for HeartbeatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("HeartbeatConfig");
        f.field("app_group", &self.app_group)
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
            .field("allow_plain_http", &self.allow_plain_http);
        #[cfg(feature = "heartbeat-tls")]
        f.field("tls", &self.tls);
        f.finish()
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
    /// Starts a configuration for app `app_group`/`app` reporting to `servers`, a
    /// comma-separated list of addresses tried in order, moving to the next on error.
    ///
    /// Defaults: our JSON protocol, no token, an instance id made of the host name,
    /// the process id and the start time, uploads at second 5 of every wall-clock
    /// 10-s cycle, pulls every 5 s, 1-s connect and I/O timeouts (as SDS). Nothing is
    /// checked before [`build`](HeartbeatConfigBuilder::build).
    pub fn builder(app_group: &str, app: &str, servers: &str) -> HeartbeatConfigBuilder {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| check_name("host", h).is_ok())
            .unwrap_or_else(|| "unknown-host".to_owned());
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        HeartbeatConfigBuilder {
            config: HeartbeatConfig {
                app_group: app_group.to_owned(),
                app: app.to_owned(),
                servers: Vec::new(),
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
                allow_plain_http: false,
                #[cfg(feature = "heartbeat-tls")]
                tls: None,
            },
            servers: servers.to_owned(),
            #[cfg(feature = "heartbeat-tls")]
            cas: Vec::new(),
        }
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

/// Builds a [`HeartbeatConfig`]; start from [`HeartbeatConfig::builder`]. Each
/// setter is named after the setting it sets; [`build`](Self::build) checks them.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct HeartbeatConfigBuilder {
    // `HeartbeatConfig`'s `Debug` leaves the token out.
    config: HeartbeatConfig,
    /// The comma-separated addresses, parsed by `build`.
    servers: String,
    /// The CAs to trust instead of the built-in roots, read by `build`.
    #[cfg(feature = "heartbeat-tls")]
    cas: Vec<CaSource>,
}

impl HeartbeatConfigBuilder {
    /// The app token, sent as `Authorization: Bearer TOKEN` (SDS's admin ignores it).
    #[must_use = "a setter returns the changed builder"]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.config.token = Some(token.into());
        self
    }

    /// The wire protocol (default [`Protocol::Json`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.config.protocol = protocol;
        self
    }

    /// The instance id reported to the server (unique per process; 1 to 256 bytes,
    /// not blank, without control characters).
    #[must_use = "a setter returns the changed builder"]
    pub fn instance(mut self, instance: &str) -> Self {
        instance.clone_into(&mut self.config.instance);
        self
    }

    /// The host name reported (default: the machine's; 1 to 256 bytes, not blank,
    /// without control characters).
    #[must_use = "a setter returns the changed builder"]
    pub fn host(mut self, host: &str) -> Self {
        host.clone_into(&mut self.config.host);
        self
    }

    /// How often policies are pulled (default 5 s, as SDS; at least 10 ms).
    #[must_use = "a setter returns the changed builder"]
    pub fn pull_period(mut self, pull_period: Duration) -> Self {
        self.config.pull_period = pull_period.max(Duration::from_millis(10));
        self
    }

    /// When in each 10-s cycle the previous cycle is uploaded (default 5 s, as SDS;
    /// taken modulo 10 s).
    #[must_use = "a setter returns the changed builder"]
    pub fn upload_offset(mut self, upload_offset: Duration) -> Self {
        self.config.upload_offset =
            Duration::from_millis((upload_offset.as_millis() % 10_000) as u64);
        self
    }

    /// The connect timeout of each request (default 1 s, as SDS; at least 1 ms).
    #[must_use = "a setter returns the changed builder"]
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.config.connect_timeout = connect_timeout.max(Duration::from_millis(1));
        self
    }

    /// The read and write timeout of each request (default 1 s, as SDS; at least
    /// 1 ms).
    #[must_use = "a setter returns the changed builder"]
    pub fn io_timeout(mut self, io_timeout: Duration) -> Self {
        self.config.io_timeout = io_timeout.max(Duration::from_millis(1));
        self
    }

    /// Keeps the console's policies in a local file: written atomically after every
    /// pull that applied a new version, and read when the client is made (before
    /// the first pull), so an instance that restarts while the console is
    /// unreachable enforces the console's last policies and says so
    /// ([`HeartbeatStatus::from_cache`](super::HeartbeatStatus::from_cache)). A
    /// cache of another app or one that does not parse is ignored and reported
    /// ([`HeartbeatStatus::cache_error`](super::HeartbeatStatus::cache_error)).
    #[must_use = "a setter returns the changed builder"]
    pub fn cache_file(mut self, cache_file: impl Into<std::path::PathBuf>) -> Self {
        self.config.cache_file = Some(cache_file.into());
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
    #[must_use = "a setter returns the changed builder"]
    pub fn max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.config.max_body_bytes = max_body_bytes.max(4096);
        self
    }

    /// Lets the [token](Self::token) travel unencrypted over plain `http://` to a
    /// server that is not loopback (default `false`).
    ///
    /// Without it, [`build`](Self::build) refuses a token with an `http://` server
    /// whose host is not loopback (127.0.0.0/8, `::1` or `localhost`; any other name
    /// counts as not loopback, whatever it resolves to), and a `localhost` that
    /// resolves to another address is refused when connecting. Anyone on the path
    /// could read the token and report or pull as the app. Prefer `https://`
    /// (feature `heartbeat-tls`); set this only on a network you trust, or behind a
    /// proxy that adds TLS on the same host. Without a token, plain http is always
    /// allowed.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::heartbeat::{HeartbeatConfig, HeartbeatError};
    ///
    /// let refused = HeartbeatConfig::builder("shop", "orders", "http://10.0.0.5:7070")
    ///     .token("app-token-0123456789")
    ///     .build()
    ///     .unwrap_err();
    /// assert!(refused.to_string().contains("allow_plain_http"));
    ///
    /// let config = HeartbeatConfig::builder("shop", "orders", "http://10.0.0.5:7070")
    ///     .token("app-token-0123456789")
    ///     .allow_plain_http(true)
    ///     .build()?;
    /// # let _ = config;
    /// # Ok::<(), HeartbeatError>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn allow_plain_http(mut self, allow: bool) -> Self {
        self.config.allow_plain_http = allow;
        self
    }

    /// Trusts the CA certificates of a PEM file for `https://` servers, instead of
    /// the built-in roots (Mozilla's, from `webpki-roots`): a console with a
    /// certificate from a private CA is then trusted, and no public CA can vouch for
    /// it. Each call adds a file; every `BEGIN CERTIFICATE` block in it is a root. The
    /// file is read by [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use resilience_runtime::heartbeat::HeartbeatConfig;
    ///
    /// let config = HeartbeatConfig::builder("shop", "orders", "https://console.internal:7070")
    ///     .token("app-token-0123456789")
    ///     .ca_file("/etc/orders/console-ca.pem")
    ///     .build()?;
    /// # let _ = config;
    /// # Ok::<(), resilience_runtime::heartbeat::HeartbeatError>(())
    /// ```
    #[cfg(feature = "heartbeat-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "heartbeat-tls")))]
    #[must_use = "a setter returns the changed builder"]
    pub fn ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.cas.push(CaSource::File(path.into()));
        self
    }

    /// Trusts the CA certificates of this PEM text, as [`ca_file`](Self::ca_file)
    /// does those of a file (for a CA kept in a secret store or compiled in).
    #[cfg(feature = "heartbeat-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "heartbeat-tls")))]
    #[must_use = "a setter returns the changed builder"]
    pub fn ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.cas.push(CaSource::Pem(pem.as_ref().to_vec()));
        self
    }

    /// Checks the settings and parses the server addresses.
    ///
    /// # Errors
    ///
    /// [`HeartbeatError::Config`] naming the field: a blank app group, app, instance
    /// or host (or one with control characters), no server, a server address that
    /// does not parse, a token with a plain `http://` server that is not loopback
    /// (see [`allow_plain_http`](Self::allow_plain_http)), an `https://` server in a
    /// build without the `heartbeat-tls` feature, or (field `ca`) a CA that cannot
    /// be read.
    pub fn build(self) -> Result<HeartbeatConfig, HeartbeatError> {
        let mut config = self.config;
        check_name("app_group", &config.app_group)?;
        check_name("app", &config.app)?;
        config.servers = self
            .servers
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(ServerAddr::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if config.servers.is_empty() {
            return Err(HeartbeatError::Config {
                field: "servers",
                message: "no server address given".into(),
            });
        }
        check_name("instance", &config.instance)?;
        check_name("host", &config.host)?;
        if config.token.is_some() && !config.allow_plain_http {
            if let Some(server) = config.servers.iter().find(|s| !s.tls && !s.is_loopback()) {
                let https = if cfg!(feature = "heartbeat-tls") {
                    "https://"
                } else {
                    "https:// (the runtime's `heartbeat-tls` feature)"
                };
                return Err(HeartbeatError::Config {
                    field: "servers",
                    message: format!(
                        "{server}: the app token would travel unencrypted over plain http \
                         to a host that is not loopback; use {https}, or set \
                         `allow_plain_http(true)` on a network you trust"
                    ),
                });
            }
        }
        #[cfg(feature = "heartbeat-tls")]
        {
            for server in config.servers.iter().filter(|s| s.tls) {
                tls::server_name(&server.host).map_err(|message| HeartbeatError::Config {
                    field: "servers",
                    message: format!("{server}: {message}"),
                })?;
            }
            if !self.cas.is_empty() || config.servers.iter().any(|s| s.tls) {
                config.tls = Some(tls::client(&self.cas)?);
            }
        }
        Ok(config)
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
        for bad in ["ftp://admin:21", "http://:80", "admin:99999", "admin:0"] {
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
        let c = HeartbeatConfig::builder("g", "a", " http://x:1 ,http://y:2,")
            .build()
            .unwrap();
        assert_eq!(c.servers().len(), 2);
        assert!(c.instance_id().contains(&std::process::id().to_string()));
        let e = HeartbeatConfig::builder(" ", "a", "x:1")
            .build()
            .unwrap_err();
        assert!(matches!(
            e,
            HeartbeatError::Config {
                field: "app_group",
                ..
            }
        ));
        let e = HeartbeatConfig::builder("g", "a", " , ")
            .build()
            .unwrap_err();
        assert!(matches!(
            e,
            HeartbeatError::Config {
                field: "servers",
                ..
            }
        ));
        for field in ["instance", "host"] {
            let b = HeartbeatConfig::builder("g", "a", "x:1");
            let b = if field == "host" {
                b.host("a\nb")
            } else {
                b.instance(" ")
            };
            let e = b.build().unwrap_err();
            assert!(
                matches!(e, HeartbeatError::Config { field: f, .. } if f == field),
                "{e}"
            );
        }
        let b = HeartbeatConfig::builder("g", "a", "127.0.0.1:1").token("secret-token");
        assert!(format!("{b:?}").contains("\"..\""));
        assert!(!format!("{b:?}").contains("secret-token"));
        assert!(!format!("{:?}", b.build().unwrap()).contains("secret-token"));
    }

    #[test]
    fn https_addresses_need_the_tls_feature() {
        let parsed = ServerAddr::parse("https://admin.example/base");
        if cfg!(feature = "heartbeat-tls") {
            let a = parsed.unwrap();
            assert!(a.is_https());
            assert_eq!(a.port, 443);
            assert_eq!(a.to_string(), "https://admin.example:443/base");
        } else {
            let e = parsed.unwrap_err().to_string();
            assert!(e.contains("`heartbeat-tls` feature"), "{e}");
            assert!(e.contains("https://admin.example/base"), "{e}");
        }
        assert!(!ServerAddr::parse("admin:1").unwrap().is_https());
    }

    #[test]
    fn loopback_is_127_slash_8_ipv6_one_and_localhost_by_name() {
        for host in [
            "127.0.0.1:1",
            "http://127.255.0.9:1",
            "[::1]:1",
            "[::ffff:127.0.0.1]:1",
            "localhost:1",
            "LocalHost.:1",
        ] {
            assert!(ServerAddr::parse(host).unwrap().is_loopback(), "{host}");
        }
        for host in [
            "10.0.0.5:1",
            "128.0.0.1:1",
            "[::2]:1",
            "[::ffff:10.0.0.1]:1",
            "0.0.0.0:1",
            "localhost.example:1",
            "my-localhost:1",
            // Resolves to 127.0.0.1 with many resolvers, but only by their say-so.
            "127.0.0.1.nip.io:1",
        ] {
            assert!(!ServerAddr::parse(host).unwrap().is_loopback(), "{host}");
        }
    }

    #[test]
    fn a_token_over_plain_http_needs_loopback_or_the_explicit_option() {
        for protocol in [Protocol::Json, Protocol::Sds] {
            let b = || {
                HeartbeatConfig::builder("g", "a", "http://127.0.0.1:1, http://console:7070/x")
                    .protocol(protocol)
            };
            let e = b().token("app-token-0123456789").build().unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(
                    e,
                    HeartbeatError::Config {
                        field: "servers",
                        ..
                    }
                ),
                "{text}"
            );
            assert!(text.contains("http://console:7070/x"), "{text}");
            assert!(text.contains("allow_plain_http(true)"), "{text}");
            // The explicit override, and no token at all, are fine.
            let c = b()
                .token("app-token-0123456789")
                .allow_plain_http(true)
                .build()
                .unwrap();
            assert!(c.allow_plain_http);
            assert!(format!("{c:?}").contains("allow_plain_http: true"));
            b().build().unwrap();
        }
        HeartbeatConfig::builder("g", "a", "http://localhost:1,[::1]:2")
            .token("app-token-0123456789")
            .build()
            .unwrap();
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
