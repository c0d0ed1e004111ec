//! The command line of the `resilience-admin` binary.

use crate::auth::{AppToken, Token};
use crate::server::{AdminConfig, StorageConfig};
use crate::tls::TlsConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The `--help` text.
pub const USAGE: &str = "\
resilience-admin: heartbeats, statistics, versioned policies and a dashboard

USAGE: resilience-admin [OPTIONS]

OPTIONS (each can also come from the environment variable in brackets):
  --bind ADDR                 address to listen on; default 127.0.0.1:7070, loopback
                              only [RESILIENCE_ADMIN_BIND]
  --db PATH                   SQLite database file; default ./resilience-admin.db
                              [RESILIENCE_ADMIN_DB]
  --memory                    keep everything in memory (lost on exit)
  --postgres URL              use PostgreSQL instead of SQLite (build with the
                              `postgres` feature) [RESILIENCE_ADMIN_POSTGRES]
  --admin-token TOKEN         token for policy changes; random and printed if not
                              given [RESILIENCE_ADMIN_TOKEN]
  --read-token TOKEN          if given, reads need it (or the admin token)
                              [RESILIENCE_READ_TOKEN]
  --app-token [GROUP/APP=]TOKEN
                              token for heartbeats and pulls, for every app or one;
                              repeatable; random and printed if none
                              [RESILIENCE_APP_TOKENS, comma-separated]
  --max-body SIZE             request body limit, e.g. 262144 or 256KiB (default)
  --retention DURATION        how long statistics are kept, e.g. 12h, 7d (default);
                              instances, points and apps that send nothing for
                              that long are forgotten (policies are kept)
  --seconds-retention DURATION
                              how long the live view's 1-second figures are kept,
                              e.g. 1h; default 20m
  --max-connections N         connections served at once; a connection beyond them
                              is answered 503 with Retry-After (default 1024)
  --header-timeout SECONDS    a client that has not sent a whole request head this
                              long after connecting (or after its previous answer)
                              is disconnected, e.g. 10 or 10s (default 10s)
  --tls-cert PATH             serve https with this PEM certificate chain (the
                              server's certificate first); needs --tls-key
                              [RESILIENCE_ADMIN_TLS_CERT]
  --tls-key PATH              the PEM private key of --tls-cert (PKCS#8, PKCS#1 or
                              SEC1) [RESILIENCE_ADMIN_TLS_KEY]
  -h, --help                  this text

Tokens are at least 16 characters. Prefer the environment variables for them:
command lines are visible to other users of the machine.
";

/// A parsed command line.
#[derive(Debug)]
pub struct Cli {
    /// The server configuration.
    pub config: AdminConfig,
    /// The admin token was generated (print it).
    pub generated_admin_token: bool,
    /// The app token was generated (print it).
    pub generated_app_token: bool,
    /// `--help` was given.
    pub help: bool,
}

/// Parses the arguments (without the program name), reading defaults from `env`.
///
/// # Errors
///
/// A message naming the bad option.
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Cli, String> {
    let mut bind = env("RESILIENCE_ADMIN_BIND");
    let mut db = env("RESILIENCE_ADMIN_DB");
    let mut postgres = env("RESILIENCE_ADMIN_POSTGRES");
    let mut memory = false;
    let mut admin = env("RESILIENCE_ADMIN_TOKEN");
    let mut read = env("RESILIENCE_READ_TOKEN");
    let mut apps: Vec<String> = Vec::new();
    let mut max_body = None;
    let mut retention = None;
    let mut seconds_retention = None;
    let mut max_connections = None;
    let mut header_timeout = None;
    let mut tls_cert = env("RESILIENCE_ADMIN_TLS_CERT");
    let mut tls_key = env("RESILIENCE_ADMIN_TLS_KEY");
    let mut help = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value ({what})"))
        };
        match name.as_str() {
            "-h" | "--help" => help = true,
            "--bind" => bind = Some(value("an address such as 127.0.0.1:7070")?),
            "--db" => db = Some(value("a file path")?),
            "--memory" => memory = true,
            "--postgres" => postgres = Some(value("a connection string")?),
            "--admin-token" => admin = Some(value("a token")?),
            "--read-token" => read = Some(value("a token")?),
            "--app-token" => apps.push(value("[GROUP/APP=]TOKEN")?),
            "--max-body" => max_body = Some(value("a size")?),
            "--retention" => retention = Some(value("a duration")?),
            "--seconds-retention" => seconds_retention = Some(value("a duration")?),
            "--max-connections" => max_connections = Some(value("a number")?),
            "--header-timeout" => header_timeout = Some(value("seconds")?),
            "--tls-cert" => tls_cert = Some(value("a PEM file")?),
            "--tls-key" => tls_key = Some(value("a PEM file")?),
            other => return Err(format!("unknown option `{other}` (see --help)")),
        }
    }
    if apps.is_empty() {
        if let Some(list) = env("RESILIENCE_APP_TOKENS") {
            apps = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
        }
    }
    let storage = match (memory, postgres, db) {
        (true, Some(_), _) => return Err("--memory and --postgres exclude each other".into()),
        (true, None, _) => StorageConfig::Memory,
        (false, Some(url), _) => StorageConfig::Postgres(url),
        (false, None, db) => StorageConfig::Sqlite(PathBuf::from(
            db.unwrap_or_else(|| "resilience-admin.db".into()),
        )),
    };
    let random = || Token::random().map_err(|e| format!("cannot generate a token: {e}"));
    let generated_admin_token = admin.is_none();
    let admin_token = match admin {
        Some(t) => Token::new(t).map_err(|e| format!("--admin-token: {e}"))?,
        None => random()?,
    };
    let mut config = AdminConfig::builder(storage, admin_token)
        .build()
        .map_err(|e| e.to_string())?;
    if let Some(b) = bind {
        config.bind = b
            .parse::<SocketAddr>()
            .map_err(|e| format!("--bind {b:?}: {e} (expected IP:PORT)"))?;
    }
    if let Some(r) = read {
        config.read_token = Some(Token::new(r).map_err(|e| format!("--read-token: {e}"))?);
    }
    for spec in &apps {
        config
            .app_tokens
            .push(AppToken::parse(spec).map_err(|e| format!("--app-token: {e}"))?);
    }
    let generated_app_token = config.app_tokens.is_empty();
    if generated_app_token {
        config.app_tokens.push(AppToken {
            scope: None,
            token: random()?,
        });
    }
    if let Some(s) = max_body {
        config.max_body_bytes = parse_size(&s).map_err(|e| format!("--max-body: {e}"))?;
    }
    if let Some(d) = retention {
        config.retention = parse_duration(&d).map_err(|e| format!("--retention: {e}"))?;
    }
    if let Some(d) = seconds_retention {
        config.seconds_retention =
            parse_duration(&d).map_err(|e| format!("--seconds-retention: {e}"))?;
    }
    if let Some(n) = max_connections {
        config.max_connections = match n.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(format!("--max-connections: {n:?} is not a number >= 1")),
        };
    }
    if let Some(t) = header_timeout {
        let digits = t.trim().strip_suffix('s').unwrap_or(t.trim());
        config.header_read_timeout = match digits.parse::<u64>() {
            Ok(n) if (1..=3600).contains(&n) => Duration::from_secs(n),
            _ => {
                return Err(format!(
                    "--header-timeout: {t:?} is not a number of seconds in 1..=3600"
                ))
            }
        };
    }
    config.tls = match (tls_cert, tls_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(
            TlsConfig::from_pem_files(cert.as_ref(), key.as_ref())
                .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?,
        ),
        (Some(_), None) => return Err("--tls-cert needs --tls-key (its private key)".into()),
        (None, Some(_)) => return Err("--tls-key needs --tls-cert (its certificate)".into()),
    };
    // Each option was checked above, naming it; this is the fields' own bounds.
    config.check().map_err(|e| e.to_string())?;
    Ok(Cli {
        config,
        generated_admin_token,
        generated_app_token,
        help,
    })
}

/// `262144`, `256KiB`, `1MiB`.
fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 262144 or 256KiB"))?;
    let mult = match unit {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1024,
        "MiB" | "M" | "MB" => 1024 * 1024,
        _ => return Err(format!("unknown unit {unit:?} (B, KiB or MiB)")),
    };
    match n.checked_mul(mult) {
        Some(v) if v >= 1024 => Ok(v),
        Some(_) => Err("must be at least 1KiB".into()),
        None => Err(format!("{s:?} is too large")),
    }
}

/// `90s`, `30m`, `12h`, `7d`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 12h or 7d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?} needs a unit: s, m, h or d")),
    };
    match n.checked_mul(secs) {
        Some(v) if v >= 60 => Ok(Duration::from_secs(v)),
        Some(_) => Err("must be at least one minute".into()),
        None => Err(format!("{s:?} is too long")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn defaults_bind_loopback_and_generate_tokens() {
        let cli = parse(Vec::new(), |_| None).unwrap();
        assert!(cli.config.bind.ip().is_loopback());
        assert!(cli.generated_admin_token && cli.generated_app_token);
        assert_eq!(
            cli.config.storage,
            StorageConfig::Sqlite("resilience-admin.db".into())
        );
    }

    #[test]
    fn options_and_environment() {
        let cli = parse(
            args(&[
                "--bind=0.0.0.0:9000",
                "--memory",
                "--app-token",
                "shop/orders=orders-token-0123456789",
                "--max-body",
                "64KiB",
                "--retention",
                "2h",
                "--seconds-retention",
                "30m",
                "--max-connections",
                "50",
                "--header-timeout=3s",
            ]),
            |k| (k == "RESILIENCE_ADMIN_TOKEN").then(|| "admin-token-0123456789".to_owned()),
        )
        .unwrap();
        assert_eq!(cli.config.bind.port(), 9000);
        assert_eq!(cli.config.storage, StorageConfig::Memory);
        assert_eq!(cli.config.admin_token.expose(), "admin-token-0123456789");
        assert!(!cli.generated_admin_token);
        assert_eq!(cli.config.app_tokens.len(), 1);
        assert_eq!(cli.config.max_body_bytes, 64 * 1024);
        assert_eq!(cli.config.retention, Duration::from_secs(7200));
        assert_eq!(cli.config.seconds_retention, Duration::from_secs(1800));
        assert_eq!(cli.config.max_connections, 50);
        assert_eq!(cli.config.header_read_timeout, Duration::from_secs(3));
    }

    #[test]
    fn mistakes_name_the_option() {
        for (a, word) in [
            (&["--bind", "localhost"][..], "--bind"),
            (&["--retention", "5"][..], "--retention"),
            (&["--seconds-retention", "5x"][..], "--seconds-retention"),
            (&["--max-body", "12 parsecs"][..], "--max-body"),
            (&["--admin-token", "short"][..], "--admin-token"),
            (&["--frobnicate"][..], "--frobnicate"),
            (&["--db"][..], "--db"),
            (&["--max-connections", "0"][..], "--max-connections"),
            (&["--header-timeout", "0"][..], "--header-timeout"),
            (&["--tls-cert", "cert.pem"][..], "--tls-key"),
            (&["--tls-key", "key.pem"][..], "--tls-cert"),
            (
                &["--tls-cert", "/nonexistent/cert.pem", "--tls-key", "k.pem"][..],
                "/nonexistent/cert.pem",
            ),
        ] {
            let e = parse(args(a), |_| None).unwrap_err();
            assert!(e.contains(word), "{a:?}: {e}");
        }
    }
}
